"""Several knowledge bases in one server (`serve --knowledge NAME=DIR`): a lookup tool each, reads and facets by name,
REST's `knowledge`, Dify's `knowledge_id` — through the real server."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from pipelines.catalog import parse_knowledge
from tests.pipelines.entrypoints.test_real_clients import index_hr
from tests.pipelines.entrypoints.test_rest_api import Server, indexed_copy, serve_command, start_server
from tests.postgres_server import free_port

pytestmark = pytest.mark.integration

STEP_TIMEOUT = 90


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[Server]:
    tiny = indexed_copy(tmp_path_factory, "several-tiny")
    hr = index_hr(tmp_path_factory.mktemp("several-hr"))
    port = free_port()
    command = [*serve_command(tiny, port), "--knowledge", f"ops={tiny}", "--knowledge", f"hr={hr}"]
    started = start_server(command, tiny, port)
    try:
        started.wait_listening()
        yield started
    finally:
        started.stop()


def structured(result: Any) -> dict[str, Any]:
    assert result.is_error is False, result.content[0].text
    return dict(result.structured_content or {})


class TestSeveralKnowledgeBases:
    def test_mcp_has_a_lookup_tool_per_knowledge_base_and_reads_by_name(self, server):
        async def scenario() -> dict[str, Any]:
            with anyio.fail_after(STEP_TIMEOUT):
                async with (
                    streamable_http_client(f"{server.url}/mcp") as (read, write),
                    ClientSession(read, write) as session,
                ):
                    await session.initialize()
                    tools = {t.name: t for t in (await session.list_tools()).tools}
                    ops = structured(await session.call_tool("lookup_ops", {"query": "退款多久到账"}))
                    hr = structured(await session.call_tool("lookup_hr", {"query": "how many days of paid leave"}))
                    every = structured(await session.call_tool("list_facets", {}))
                    one = structured(await session.call_tool("list_facets", {"knowledge": "hr"}))
                    citation = hr["evidenceBlocks"][0]["citation"]
                    read = structured(
                        await session.call_tool("read_evidence", {"citation": citation, "knowledge": "hr"})
                    )
                    unnamed = await session.call_tool("read_evidence", {"citation": citation})
                    wrong = await session.call_tool("read_document", {"source": "hr/leave.md", "knowledge": "ops"})
                    return {
                        "tools": tools,
                        "ops": ops,
                        "hr": hr,
                        "every": every,
                        "one": one,
                        "read": read,
                        "unnamed": unnamed,
                        "wrong": wrong,
                    }

        got = asyncio.run(scenario())
        tools = got["tools"]
        assert set(tools) == {"lookup_ops", "lookup_hr", "list_facets", "read_evidence", "read_document"}
        assert "3 documents on" in (tools["lookup_ops"].description or "")
        assert "2 documents on hr" in (tools["lookup_hr"].description or "")
        knowledge = tools["read_evidence"].input_schema["properties"]["knowledge"]
        assert knowledge["enum"] == ["ops", "hr"] and "knowledge" in tools["read_evidence"].input_schema["required"]
        assert got["ops"]["evidenceBlocks"][0]["source"] == "payments/refund.md"  # each tool its own base
        assert got["hr"]["evidenceBlocks"][0]["source"] == "hr/leave.md"
        assert [f["knowledge"] for f in got["every"]["knowledgeBases"]] == ["ops", "hr"]
        assert [f["documents"] for f in got["every"]["knowledgeBases"]] == [3, 2]
        assert [f["knowledge"] for f in got["one"]["knowledgeBases"]] == ["hr"]
        assert got["read"]["source"] == "hr/leave.md" and got["read"]["blocks"]
        assert got["unnamed"].is_error is True  # which base: the schema requires it
        wrong = structured(got["wrong"])  # asked in the other base: no such document there
        assert wrong["status"] == "not_found" and wrong["found"] is False

    def test_rest_and_dify_choose_the_knowledge_base_by_name(self, server):
        with httpx.Client(base_url=server.url, timeout=STEP_TIMEOUT) as client:
            hr = client.post("/lookup", json={"query": "how many days of paid leave", "knowledge": "hr"}).json()
            assert hr["found"] is True and hr["evidenceBlocks"][0]["source"] == "hr/leave.md"
            unnamed = client.post("/lookup", json={"query": "how many days of paid leave"})
            assert unnamed.status_code == 404 and "one of ops, hr" in unnamed.json()["detail"]
            unknown = client.post("/lookup", json={"query": "leave", "knowledge": "finance"})
            assert unknown.status_code == 404
            facets = client.get("/facets").json()
            assert [f["knowledge"] for f in facets["knowledgeBases"]] == ["ops", "hr"]
            assert client.get("/facets", params={"knowledge": "ops"}).json()["documents"] == 3
            body = {
                "knowledge_id": "hr",
                "query": "travel expense receipts",
                "retrieval_setting": {"top_k": None, "score_threshold": 0.0},
            }
            records = client.post("/retrieval", json=body).json()["records"]
            assert records and {r["metadata"]["source"] for r in records} <= {"hr/leave.md", "hr/expenses.md"}
            missing = client.post("/retrieval", json={**body, "knowledge_id": "lookup-knowledge"})
            assert missing.status_code == 404 and missing.json()["error_code"] == 2001
            health = client.get("/health")
            assert health.status_code == 200 and set(health.json()["knowledgeBases"]) == {"ops", "hr"}
        # each knowledge base records its calls in its own trace database: the ops base's has none of hr's
        ops_tools = {r.tool_name for r in server.rows()}
        assert "lookup_ops" in ops_tools and "lookup_hr" not in ops_tools


class TestParseKnowledge:
    @pytest.mark.parametrize("spec", ["hr", "=data", "h r=data", "hr=", "x" * 41 + "=data"])
    def test_a_spec_that_is_no_name_and_folder_is_refused(self, spec):
        with pytest.raises(ValueError, match="must be NAME=DATA_DIR"):
            parse_knowledge(spec)

    def test_name_and_folder(self):
        assert parse_knowledge("hr-kb=/srv/kb/hr=1") == ("hr-kb", "/srv/kb/hr=1")
