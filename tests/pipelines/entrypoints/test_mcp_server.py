"""The MCP server as a real subprocess, over stdio and streamable HTTP, with the `mcp` SDK's own client.

Milvus Lite allows one process per `.db` file: the data is indexed in a separate subprocess before the server starts,
and this process never opens the server's `milvus.db` (it only reads the SQLite trace database).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from components.trace.trace_store import TraceStore
from pipelines.settings import REPO_ROOT, Deployment
from tests.conftest import write_tiny_kb
from tests.pipelines.entrypoints.test_agent_tool import AGENT_DOC, BLOCK_KEYS, COMPACT_KEYS, python_snippet

pytestmark = pytest.mark.integration

STEP_TIMEOUT = 60
#: the server's tools, in the order it lists them
MCP_TOOLS = ["lookup_knowledge", "list_facets", "read_evidence", "read_document"]


def subprocess_env(**extra: str) -> dict[str, str]:
    return {**os.environ, **extra}


def index_in_subprocess(root: Path) -> Path:
    """Index the tiny knowledge base into `root/data` with the CLI in its own process; return the data folder."""
    kb = write_tiny_kb(root / "knowledge")
    data = root / "data"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipelines.entrypoints.cli",
            "index",
            "--knowledge",
            str(kb),
            "--data-dir",
            str(data),
            "--quiet",
        ],
        cwd=REPO_ROOT,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return data


def server_command(data: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "pipelines.entrypoints.cli", "serve", "--data-dir", str(data), *extra]


def trace_rows(data: Path, session_id: str) -> list[Any]:
    return TraceStore(Deployment.resolve(data).trace_db_url).list(session_id=session_id)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def text_of(result: Any) -> str:
    assert len(result.content) == 1 and result.content[0].type == "text"
    return str(result.content[0].text)


async def exercise(session: ClientSession, session_id: str) -> list[int]:
    """
    List the tool, look up, send an empty query, look up again (the server still serves), repeat the first lookup.

    :returns: The trace ids the server reported, in call order.
    """
    listed = await session.list_tools()
    [tool] = [t for t in listed.tools if t.name == "lookup_knowledge"]
    schema = tool.input_schema
    assert {"query", "session_id"} <= set(schema["properties"]) and schema["required"] == ["query"]
    assert schema["properties"]["query"]["type"] == "string"
    assert "never a fact" in (tool.description or "") and "already_returned" in (tool.description or "")

    first = await session.call_tool("lookup_knowledge", {"query": "disk full on the node", "session_id": session_id})
    assert first.is_error is False, text_of(first)
    payload = json.loads(text_of(first))
    assert set(payload) == COMPACT_KEYS and first.structured_content == payload
    assert payload["found"] is True and payload["evidenceStatus"] == "evidence"
    assert all(set(block) == BLOCK_KEYS for block in payload["evidenceBlocks"])
    assert payload["evidenceBlocks"][0]["source"] == "alerts/disk.md"
    assert payload["evidenceBlocks"][0]["citation"].startswith("alerts/disk.md#")
    assert "contextPack" not in payload  # each piece of evidence once
    assert "rerankTrace" not in text_of(first) and "l0Hints" not in text_of(first)

    empty = await session.call_tool("lookup_knowledge", {"query": "  ", "session_id": session_id})
    assert empty.is_error is True
    message = text_of(empty)
    assert "rejected the query (evidenceStatus=invalid_query" in message and "query is empty" in message
    match = re.search(r"traceId=(\d+)\)", message)
    assert match, message

    later = await session.call_tool("lookup_knowledge", {"query": "退款多久到账", "session_id": session_id})
    assert later.is_error is False, text_of(later)
    refund = json.loads(text_of(later))
    assert refund["found"] is True and refund["evidenceBlocks"][0]["source"] == "payments/refund.md"

    again = await session.call_tool("lookup_knowledge", {"query": "disk full on the node", "session_id": session_id})
    repeat = json.loads(text_of(again))
    assert again.is_error is False and repeat["evidenceStatus"] == "already_returned"
    assert repeat["found"] is False and repeat["evidenceBlocks"] == []
    return [payload["traceId"], int(match.group(1)), refund["traceId"], repeat["traceId"]]


async def agent_session(session: ClientSession, session_id: str) -> dict[str, Any]:
    """
    An agent's session on the four tools: facets, a filtered lookup, a read from its citation, a budgeted lookup paged
    with its cursor, a document read.

    :returns: What each step returned (structured content), by step.
    """
    listed = {t.name: t for t in (await session.list_tools()).tools}
    assert set(listed) == {"lookup_knowledge", "list_facets", "read_evidence", "read_document"}
    for tool in listed.values():
        assert tool.annotations is not None and tool.annotations.read_only_hint is True
        assert tool.annotations.idempotent_hint is True and tool.output_schema
    lookup = listed["lookup_knowledge"]
    assert "3 documents on" in (lookup.description or "")  # named from this knowledge base
    filters = lookup.input_schema["$defs"]["Filters"]
    assert {"category", "tags", "source_prefix", "updated_after"} <= set(filters["properties"])
    assert filters["additionalProperties"] is False

    async def call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        result = await session.call_tool(name, {"session_id": session_id, **arguments})
        assert result.is_error is False, text_of(result)
        assert result.structured_content == json.loads(text_of(result))
        return dict(result.structured_content or {})

    facets = await call("list_facets", {})
    assert facets["documents"] == 3 and {c["value"] for c in facets["categories"]} == {
        "alerts",
        "payments",
        "product-faq",
    }
    filtered = await call(
        "lookup_knowledge", {"query": "how long does a refund take", "filters": {"category": "payments"}}
    )
    assert filtered["found"] is True and {b["source"] for b in filtered["evidenceBlocks"]} == {"payments/refund.md"}
    nothing = await call("lookup_knowledge", {"query": "refund", "filters": {"category": "hr"}})
    assert nothing["found"] is False and "alerts (1)" in nothing["message"]
    refused = await session.call_tool("lookup_knowledge", {"query": "refund", "filters": {"colour": "red"}})
    assert refused.is_error is True  # not in the schema: the SDK refuses it
    citation = filtered["evidenceBlocks"][0]["citation"]
    read = await call("read_evidence", {"citation": citation, "before": 1, "after": 1})
    assert read["status"] == "evidence" and [b["citation"] for b in read["blocks"] if b["cited"]] == [citation]
    # its own session: the filtered lookup above already returned the refund page's evidence in this one
    budget = {"query": "退款多久到账", "max_chars": 200, "session_id": f"{session_id}-paged"}
    first = await call("lookup_knowledge", budget)
    assert first["moreAvailable"] is True and first["truncated"] is True
    paged = [b["citation"] for b in first["evidenceBlocks"]]
    cursor = first["cursor"]
    while cursor:
        page = await call("lookup_knowledge", {**budget, "cursor": cursor})
        assert not {b["citation"] for b in page["evidenceBlocks"]} & set(paged)
        paged += [b["citation"] for b in page["evidenceBlocks"]]
        cursor = page["cursor"]
    assert len(paged) >= 2
    document = await call("read_document", {"source": "alerts/disk.md"})
    assert document["status"] == "evidence" and document["sections"]
    bad = await session.call_tool("read_evidence", {"citation": "not a citation", "session_id": session_id})
    assert bad.is_error is True and "<source>#<chunk index>@<version>" in text_of(bad)
    resource = await session.read_resource("knowledge://facets")
    assert json.loads(resource.contents[0].text)["documents"] == 3  # type: ignore[union-attr]
    return {"facets": facets, "filtered": filtered, "read": read, "paged": paged, "document": document}


def assert_traced(data: Path, session_id: str, trace_ids: list[int]) -> None:
    rows = trace_rows(data, session_id)
    assert [(r.id, r.status, r.session_id) for r in reversed(rows)] == [
        (trace_ids[0], "evidence", session_id),
        (trace_ids[1], "invalid_query", session_id),
        (trace_ids[2], "evidence", session_id),
        (trace_ids[3], "already_returned", session_id),
    ]


def stdio_parameters(data: Path) -> StdioServerParameters:
    # the client hands the server only HOME, PATH and a few others: telemetry stays off without being told
    return StdioServerParameters(command=sys.executable, args=server_command(data)[1:], cwd=REPO_ROOT)


class TestStdio:
    def test_tool_listing_calls_errors_and_traces(self, tmp_path):
        data = index_in_subprocess(tmp_path)
        stray: list[Exception] = []

        async def collect(message: Any) -> None:
            if isinstance(message, Exception):  # e.g. a line on stdout that is not a protocol message
                stray.append(message)

        async def scenario() -> list[int]:
            with (tmp_path / "server.stderr").open("w") as errlog, anyio.fail_after(STEP_TIMEOUT):
                async with (
                    stdio_client(stdio_parameters(data), errlog=errlog) as (read, write),
                    ClientSession(read, write, message_handler=collect) as session,
                ):
                    await session.initialize()
                    return await exercise(session, "mcp-stdio")

        trace_ids = asyncio.run(scenario())
        assert stray == []
        assert_traced(data, "mcp-stdio", trace_ids)

    def test_store_down_is_a_tool_error_and_the_server_keeps_serving(self, tmp_path):
        data = tmp_path / "nothing-indexed"

        async def scenario() -> None:
            with (tmp_path / "server.stderr").open("w") as errlog, anyio.fail_after(STEP_TIMEOUT):
                async with (
                    stdio_client(stdio_parameters(data), errlog=errlog) as (read, write),
                    ClientSession(read, write) as session,
                ):
                    await session.initialize()
                    for _ in range(2):
                        failed = await session.call_tool("lookup_knowledge", {"query": "disk", "session_id": "down"})
                        assert failed.is_error is True
                        assert "lookup_knowledge failed (evidenceStatus=error" in text_of(failed)
                        assert "Knowledge retrieval failed" in text_of(failed)
                    assert [t.name for t in (await session.list_tools()).tools] == [
                        "lookup_knowledge",
                        "list_facets",
                        "read_evidence",
                        "read_document",
                    ]

        asyncio.run(scenario())
        assert [(r.status, r.query) for r in trace_rows(data, "down")] == [("error", "disk")] * 2

    def test_only_protocol_messages_on_stdout(self, tmp_path):
        """A raw client: every stdout line of the server, from start-up to exit, is a JSON-RPC message."""
        data = index_in_subprocess(tmp_path)
        init = {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "raw-test", "version": "0"},
            },
        }
        then = [
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {"name": "lookup_knowledge", "arguments": {}},
            },
            {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}},
        ]
        with (tmp_path / "server.stderr").open("w") as errlog:
            proc = subprocess.Popen(
                server_command(data),
                cwd=REPO_ROOT,
                env=subprocess_env(),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=errlog,
                text=True,
            )
            watchdog = threading.Timer(STEP_TIMEOUT, proc.kill)
            watchdog.start()
            try:
                assert proc.stdin is not None and proc.stdout is not None
                proc.stdin.write(json.dumps(init) + "\n")
                proc.stdin.flush()
                lines = [proc.stdout.readline()]  # the first line after start-up (pipeline loading) and initialize
                proc.stdin.write("".join(json.dumps(m) + "\n" for m in then))
                proc.stdin.flush()
                while len(lines) < 3 and lines[-1]:
                    lines.append(proc.stdout.readline())
                proc.stdin.close()
                lines.extend(proc.stdout.readlines())  # until the server exits on end of input
                assert proc.wait(timeout=STEP_TIMEOUT) == 0
            finally:
                watchdog.cancel()
                if proc.poll() is None:
                    proc.kill()
                    proc.wait(timeout=10)
        messages = [json.loads(line) for line in lines if line.strip()]
        assert all(m.get("jsonrpc") == "2.0" for m in messages)
        replies = {m["id"]: m for m in messages if "id" in m}
        assert set(replies) == {0, 1, 2}
        assert replies[0]["result"]["serverInfo"]["name"] == "lookup-knowledge"
        assert replies[1]["result"]["isError"] is True  # no query: refused by the SDK's argument validation
        assert [t["name"] for t in replies[2]["result"]["tools"]] == [
            "lookup_knowledge",
            "list_facets",
            "read_evidence",
            "read_document",
        ]


@pytest.fixture
def http_server(tmp_path) -> Iterator[tuple[str, Path, Path]]:
    """The server over streamable HTTP on a free loopback port (default host); stopped in teardown."""
    data = index_in_subprocess(tmp_path)
    port = free_port()
    stderr_path = tmp_path / "server.stderr"
    with stderr_path.open("w") as errlog, (tmp_path / "server.stdout").open("w") as outlog:
        proc = subprocess.Popen(
            server_command(data, "--transport", "http", "--port", str(port)),
            cwd=REPO_ROOT,
            env=subprocess_env(),
            stdout=outlog,
            stderr=errlog,
        )
        try:
            deadline = time.monotonic() + STEP_TIMEOUT
            while True:
                assert proc.poll() is None, f"server exited: {stderr_path.read_text()}"
                assert time.monotonic() < deadline, f"server not listening: {stderr_path.read_text()}"
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                    break
                except OSError:
                    time.sleep(0.2)
            yield f"http://127.0.0.1:{port}/mcp", data, stderr_path
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


class TestHttp:
    def test_tool_listing_calls_errors_and_traces(self, http_server):
        url, data, stderr_path = http_server

        async def scenario() -> list[int]:
            with anyio.fail_after(STEP_TIMEOUT):
                async with streamable_http_client(url) as (read, write), ClientSession(read, write) as session:
                    await session.initialize()
                    return await exercise(session, "mcp-http")

        trace_ids = asyncio.run(scenario())
        assert_traced(data, "mcp-http", trace_ids)

        async def agent() -> dict[str, Any]:
            with anyio.fail_after(STEP_TIMEOUT):
                async with streamable_http_client(url) as (read, write), ClientSession(read, write) as session:
                    await session.initialize()
                    return await agent_session(session, "mcp-agent")

        steps = asyncio.run(agent())
        tools = [r.tool_name for r in reversed(trace_rows(data, "mcp-agent"))]
        assert tools[:3] == ["list_facets", "lookup_knowledge", "lookup_knowledge"]
        assert {"read_evidence", "read_document"} <= set(tools) and tools.count("lookup_knowledge") == 2
        paged_rows = trace_rows(data, "mcp-agent-paged")
        assert len(paged_rows) >= 2 and {r.tool_name for r in paged_rows} == {"lookup_knowledge"}
        assert steps["read"]["traceId"] in [r.id for r in trace_rows(data, "mcp-agent")]
        port = url.split(":")[2].split("/")[0]
        assert f"Uvicorn running on http://127.0.0.1:{port}" in stderr_path.read_text()  # loopback by default


class TestDocs:
    def test_mcp_client_snippet_runs_as_written(self, tmp_path, monkeypatch, capsys):
        """The doc's client starts `lookup-knowledge serve` (the console script of this environment)."""
        monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
        wired = subprocess.run(["lookup-knowledge", "serve", "--help"], capture_output=True, text=True, check=False)
        assert wired.returncode == 0 and "--transport" in wired.stdout, (
            "`lookup-knowledge serve` is not wired in pipelines/entrypoints/cli.py "
            "(it must call pipelines.entrypoints.mcp_server.serve): " + wired.stderr
        )
        data = index_in_subprocess(tmp_path)
        monkeypatch.chdir(tmp_path)  # the snippet uses --data-dir data
        code = python_snippet(AGENT_DOC, "stdio_client")
        namespace: dict[str, Any] = {"__name__": "__doc_snippet__"}
        exec(compile(code, f"{AGENT_DOC}:mcp", "exec"), namespace)
        evidence = namespace["evidence"]
        assert evidence["found"] is True and evidence["evidenceBlocks"][0]["source"] == "alerts/disk.md"
        assert "alerts/disk.md" in capsys.readouterr().out
        assert [r.status for r in trace_rows(data, "chat-42")] == ["evidence"]

    def test_json_config_parses(self):
        text = AGENT_DOC.read_text(encoding="utf-8")
        [config] = re.findall(r"^```json\n(.*?)^```", text, flags=re.MULTILINE | re.DOTALL)
        server = json.loads(config)["mcpServers"]["lookup-knowledge"]
        assert server["command"].endswith("/lookup-knowledge") and server["args"][0] == "serve"
