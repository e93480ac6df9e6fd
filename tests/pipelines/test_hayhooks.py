"""The hayhooks wrapper (`hayhooks/lookup_knowledge/pipeline_wrapper.py`) behind a real `hayhooks run` server."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from pipelines.settings import DATA_DIR_ENV, REPO_ROOT
from tests.pipelines.entrypoints.test_rest_api import STEP_TIMEOUT, Server, indexed_copy, start_server
from tests.postgres_server import free_port

pytestmark = pytest.mark.integration

HAYHOOKS_DIR = REPO_ROOT / "hayhooks"


@pytest.fixture(scope="module")
def hayhooks_server(tmp_path_factory) -> Iterator[Server]:
    """`hayhooks run` on a free loopback port with the repository's `hayhooks/` folder, until it lists the pipeline."""
    data = indexed_copy(tmp_path_factory, "hayhooks")
    port = free_port()
    command = [
        str(Path(sys.executable).parent / "hayhooks"),
        "run",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--pipelines-dir",
        str(HAYHOOKS_DIR),
    ]
    off = {
        "HAYSTACK_TELEMETRY_ENABLED": "False",
        "HAYHOOKS_TRACING_ENABLED": "false",
        "HAYHOOKS_TRACING_INCLUDE_HAYSTACK_SPANS": "false",
    }
    server = start_server(command, data, port, **{DATA_DIR_ENV: str(data)}, **off)
    try:
        server.wait_listening()
        deadline = time.monotonic() + STEP_TIMEOUT
        while "lookup_knowledge" not in httpx.get(f"{server.url}/status", timeout=5).json().get("pipelines", []):
            assert time.monotonic() < deadline, server.log.read_text()[-3000:]
            assert server.proc.poll() is None, server.log.read_text()[-3000:]
            time.sleep(0.3)
        yield server
    finally:
        server.stop()


class TestHayhooks:
    def test_run_answers_the_lookup_and_records_each_call(self, hayhooks_server):
        server = hayhooks_server
        with httpx.Client(base_url=server.url, timeout=STEP_TIMEOUT) as client:
            first = client.post("/lookup_knowledge/run", json={"query": "disk full on the node", "session_id": "hh-1"})
            assert first.status_code == 200, first.text
            result = first.json()["result"]
            assert result["found"] is True and result["evidenceStatus"] == "evidence"
            assert result["evidenceBlocks"][0]["source"] == "alerts/disk.md"
            assert "source: alerts/disk.md" in result["contextPack"]["packedText"]  # the full result keeps the pack
            assert result["evidenceBlocks"][0]["citation"].startswith("alerts/disk.md#")
            again = client.post("/lookup_knowledge/run", json={"query": "disk full on the node", "session_id": "hh-1"})
            assert again.json()["result"]["evidenceStatus"] == "already_returned"  # the session memory works
            empty = client.post("/lookup_knowledge/run", json={"query": " ", "session_id": "hh-1"})
            assert empty.status_code == 200 and empty.json()["result"]["evidenceStatus"] == "invalid_query"
            malformed = client.post("/lookup_knowledge/run", json={"session_id": "hh-1"})
            assert malformed.status_code == 422  # hayhooks' request model: query is required
            schema = client.get("/openapi.json").json()["components"]["schemas"]["lookup_knowledgeRunRequest"]
            assert schema["required"] == ["query"]
            assert set(schema["properties"]) == {"query", "session_id", "filters", "max_chars", "cursor"}
            filtered = client.post(
                "/lookup_knowledge/run",
                json={
                    "query": "退款多久到账",
                    "session_id": "hh-1",
                    "filters": {"category": "payments"},
                    "max_chars": 200,
                },
            ).json()["result"]
            assert filtered["found"] is True and {b["source"] for b in filtered["evidenceBlocks"]} == {
                "payments/refund.md"
            }
            assert filtered["moreAvailable"] is True
            page = client.post(
                "/lookup_knowledge/run", json={"query": "", "cursor": filtered["cursor"], "max_chars": 200}
            ).json()["result"]
            assert page["found"] is True
            assert not {b["evidenceKey"] for b in page["evidenceBlocks"]} & {
                b["evidenceKey"] for b in filtered["evidenceBlocks"]
            }
        ids = [r.json()["result"]["traceId"] for r in (first, again, empty)]
        assert [(r.id, r.status) for r in reversed(server.rows(session_id="hh-1"))][:3] == list(
            zip(ids, ["evidence", "already_returned", "invalid_query"], strict=True)
        )
        assert "Pipeline 'lookup_knowledge' successfully added" in server.log.read_text()
