"""Hostile inputs, each through the real server or process (issue 33).

`lookup-knowledge serve --transport http` runs once for the module, with a bearer token, on a copy of the tiny
knowledge base indexed once per session (`tests.pipelines.entrypoints.test_rest_api.indexed_copy`); the stdio server,
`ask` and `index` run as their own processes. Each test checks what a user sees (status, one line, the answer) and what
is recorded (trace rows).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from components.trace.trace_store import TraceStore
from pipelines.entrypoints.mcp_server import AUTH_ENV
from pipelines.settings import MILVUS_URI_ENV, REPO_ROOT, Deployment
from tests.conftest import write_tiny_kb
from tests.pipelines.entrypoints.test_mcp_server import server_command
from tests.pipelines.entrypoints.test_rest_api import (
    BEARER,
    DEPLOYMENT_ENV,
    STEP_TIMEOUT,
    TOKEN,
    Server,
    indexed_copy,
    retrieval_body,
    serve_command,
    start_server,
)
from tests.postgres_server import free_port

pytestmark = pytest.mark.integration

JSON = {"content-type": "application/json"}
#: a body nested 30,000 arrays deep: 60 KB, under the 64 KiB body limit
DEEP = b"[" * 30_000 + b"]" * 30_000


def closed_port() -> int:
    """A loopback port nobody listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without its deployment (data folder, stores, token), plus `extra`."""
    return {**{k: v for k, v in os.environ.items() if k not in DEPLOYMENT_ENV}, **extra}


def run_cli(*args: str, timeout: float = STEP_TIMEOUT, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pipelines.entrypoints.cli", *args],
        cwd=REPO_ROOT,
        env=clean_env(**env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[Server]:
    """The HTTP server (MCP and REST) with a bearer token, on its own copy of the indexed tiny knowledge base."""
    data = indexed_copy(tmp_path_factory, "hostile-http")
    port = free_port()
    started = start_server(serve_command(data, port), data, port, **{AUTH_ENV: TOKEN})
    try:
        started.wait_listening()
        yield started
    finally:
        started.stop()


@pytest.fixture
def client(server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, headers=BEARER, timeout=STEP_TIMEOUT) as test_client:
        yield test_client


class TestDeepJson:
    def test_a_body_nested_30000_deep_is_a_400_in_one_line_and_never_reaches_the_pipeline(self, server, client):
        rows = len(server.rows())
        inside = b'{"query": "disk", "session_id": ' + DEEP + b"}"
        for body in (DEEP, inside):
            lookup = client.post("/lookup", content=body, headers=JSON)
            assert lookup.status_code == 400, lookup.text
            assert lookup.text.count("\n") == 0 and lookup.json()["error"] == "bad_request"
            assert "nested deeper than 32 levels" in lookup.json()["detail"]
            retrieval = client.post("/retrieval", content=body, headers=JSON)
            assert retrieval.status_code == 400, retrieval.text
            assert retrieval.json()["error_code"] == 4001 and "nested deeper than 32" in retrieval.json()["error_msg"]
        assert len(server.rows()) == rows  # refused before the lookup: nothing recorded
        assert client.post("/lookup", json={"query": "disk full"}).status_code == 200  # and the server serves on


class TestLoneSurrogates:
    def test_a_lone_surrogate_in_a_session_id_is_answered_and_recorded_once_per_call(self, server, client):
        body = b'{"query": "disk full on the node", "session_id": "hostile-\\ud800"}'  # JSON's escape, as sent
        stored = "hostile-\\ud800"  # its escape as text: what is looked up, answered and recorded
        first = client.post("/lookup", content=body, headers=JSON)
        assert first.status_code == 200, first.text
        assert first.json()["evidenceStatus"] == "evidence" and first.json()["sessionId"] == stored
        again = client.post("/lookup", content=body, headers=JSON)
        assert again.status_code == 200 and again.json()["evidenceStatus"] == "already_returned"  # one session
        rows = server.rows(session_id=stored)
        assert [(r.id, r.status) for r in reversed(rows)] == [
            (first.json()["traceId"], "evidence"),
            (again.json()["traceId"], "already_returned"),
        ]

    def test_a_lone_surrogate_in_a_retrieval_query_is_answered_and_recorded_once(self, server, client):
        body = json.dumps(retrieval_body("node disk full")).replace("node disk", "node \\udcff disk").encode()
        response = client.post("/retrieval", content=body, headers=JSON)
        assert response.status_code == 200, response.text
        assert response.json()["records"][0]["metadata"]["source"] == "alerts/disk.md"
        assert [r.status for r in server.rows_of("node \\udcff disk full")] == ["evidence"]


class TestTokens:
    @pytest.mark.parametrize(
        ("token", "reason"),
        [
            ("   ", "is blank"),
            (" padded-token-value ", "whitespace at its start or end"),
            ("tökén-value", "not printable ASCII"),
        ],
    )
    def test_a_token_no_request_could_send_is_refused_at_start_up_in_one_line(self, tmp_path, token, reason):
        started = time.monotonic()
        done = run_cli(
            *serve_command(tmp_path / "data", free_port())[3:],
            timeout=30,  # refused before anything loads; unrefused, it would serve until killed
            **{AUTH_ENV: token, MILVUS_URI_ENV: f"http://127.0.0.1:{closed_port()}"},
        )
        assert done.returncode == 2, done.stderr
        [line] = done.stderr.splitlines()
        assert line.startswith(f"lookup-knowledge: {AUTH_ENV}") and reason in line
        assert not token.strip() or token.strip() not in line  # never shown
        assert time.monotonic() - started < 20

    @pytest.mark.parametrize(
        ("authorization", "accepted"),
        [
            (f"Bearer {TOKEN}".encode(), True),
            (f"bearer {TOKEN}".encode(), True),  # the scheme is case-insensitive (RFC 9110)
            (f"Bearer  {TOKEN}".encode(), True),
            (f"Bearer {TOKEN}x".encode(), False),
            (f"Bearer {TOKEN[:-1]}".encode(), False),
            (TOKEN.encode(), False),
            (f"Basic {TOKEN}".encode(), False),
            ("Bearer tökén".encode(), False),  # bytes that are no ASCII, sent as UTF-8
            ("Bearer tökén".encode("latin-1"), False),
        ],
    )
    def test_every_route_and_mcp_compare_the_token_alike(self, server, authorization, accepted):
        headers = {"authorization": authorization}
        initialize = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            },
        }
        with httpx.Client(base_url=server.url, headers=headers, timeout=STEP_TIMEOUT) as client:
            answers = {
                "/lookup": client.post("/lookup", json={"query": "disk full"}).status_code,
                "/retrieval": client.post("/retrieval", json=retrieval_body("disk full")).status_code,
                "/health": client.get("/health").status_code,
                "/openapi.json": client.get("/openapi.json").status_code,
                "/mcp": client.post(
                    "/mcp", json=initialize, headers={"accept": "application/json, text/event-stream"}
                ).status_code,
            }
        refused = {"/retrieval": 403}  # Dify's 1001/1002; 401 everywhere else
        expected = {path: 200 if accepted else refused.get(path, 401) for path in answers}
        assert answers == expected


def _alias_bomb(path: Path) -> Path:
    lines = ['lol0: &lol0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"lol{i}: &lol{i} [{', '.join([f'*lol{i - 1}'] * 10)}]" for i in range(1, 10)]  # 10^10 nodes
    path.write_text(
        "\n".join(lines)
        + "\ncomponents:\n  transformer:\n    type: components.query.query_transformer.QueryTransformer\n"
        + "    init_parameters: {max_query_chars: *lol9}\nconnections: []\n",
        encoding="utf-8",
    )
    return path


class TestPipelineAliasBomb:
    def test_an_indexing_pipeline_of_nested_aliases_is_refused_before_the_data_folder_is_touched(self, tmp_path):
        bomb = _alias_bomb(tmp_path / "bomb.yaml")
        data = tmp_path / "data"
        done = run_cli(
            "index",
            "--knowledge",
            str(write_tiny_kb(tmp_path / "kb")),
            "--data-dir",
            str(data),
            "--pipeline",
            str(bomb),
            timeout=30,
        )
        assert done.returncode == 2, done.stderr[-2000:]
        [line] = done.stderr.splitlines()
        assert line.startswith(f"lookup-knowledge: {bomb} expands to more than")
        assert not data.exists()  # no Milvus Lite file made, no host started for it

    def test_nested_aliases_in_a_pipeline_file_are_refused_in_one_line_within_seconds(self, tmp_path):
        bomb = _alias_bomb(tmp_path / "bomb.yaml")
        started = time.monotonic()
        done = run_cli(
            "ask",
            "disk full",
            "--pipeline",
            str(bomb),
            "--data-dir",
            str(tmp_path / "data"),
            timeout=30,  # unrefused, building it takes hours
            **{MILVUS_URI_ENV: f"http://127.0.0.1:{closed_port()}"},
        )
        elapsed = time.monotonic() - started
        assert done.returncode == 2, done.stderr[-2000:]
        [line] = done.stderr.splitlines()
        assert line.startswith(f"lookup-knowledge: {bomb} expands to more than") and "aliases" in line
        assert elapsed < 15  # the interpreter and its imports; the check itself takes milliseconds


class TestMaskedPasswords:
    def test_index_and_ask_never_print_a_password_given_as_a_url_parameter(self, tmp_path_factory):
        data = indexed_copy(tmp_path_factory, "hostile-masked")
        knowledge = tmp_path_factory.getbasetemp() / "indexed-tiny-kb" / "knowledge"
        secrets = ("Qu3ry-Passw0rd", "Ssl-Passw0rd")
        url = f"postgresql+psycopg://lk@127.0.0.1:{closed_port()}/traces?password={secrets[0]}&sslpassword={secrets[1]}"
        indexed = run_cli("index", "--knowledge", str(knowledge), "--data-dir", str(data), "--quiet", TRACE_DB_URL=url)
        assert indexed.returncode == 0, indexed.stderr[-2000:]
        assert "lookup traces in postgresql+psycopg://lk@127.0.0.1" in indexed.stdout
        asked = run_cli("ask", "disk full", "--data-dir", str(data), TRACE_DB_URL=url)
        assert asked.returncode == 0, asked.stderr[-2000:]
        assert "Trace database postgresql+psycopg://lk@127.0.0.1" in asked.stderr  # the database is down: said so
        for output in (indexed.stdout, indexed.stderr, asked.stdout, asked.stderr):
            assert not any(secret in output for secret in secrets), output
        for output in (indexed.stdout, asked.stderr):
            assert "password=***" in output and "sslpassword=***" in output
        spooled = (data / "trace_spool.jsonl").read_text(encoding="utf-8")  # the row waits for the database
        assert spooled and not any(secret in spooled for secret in secrets)


def _call(request_id: int, arguments: dict[str, Any]) -> str:
    message = {"name": "lookup_knowledge", "arguments": arguments}
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": message})


class TestMcpStdio:
    def test_every_stdio_message_gets_an_answer(self, tmp_path_factory):
        """A raw client sends lone surrogates, invalid UTF-8, non-JSON and too deep JSON: each gets an answer."""
        data = indexed_copy(tmp_path_factory, "hostile-stdio")
        initialize = {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "raw", "version": "0"},
            },
        }
        # json.dumps escapes a lone surrogate as JSON's `\ud800`: these are the bytes a client sends
        hostile = [
            json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}).encode(),
            _call(1, {"query": "disk full on the node", "session_id": "stdio-\ud800"}).encode(),
            _call(2, {"query": "\udcff退款多久到账", "session_id": "stdio-plain"}).encode(),
            _call(3, {"query": "subscription plans", "session_id": "stdio-plain"}).encode().replace(b"plans", b"\xff"),
            b"this is not JSON",
            b'{"jsonrpc": "2.0", "id": 4, "method": "tools/list", "params": {"x": ' + b"[" * 300 + b"]" * 300 + b"}}",
            b'{"jsonrpc": "2.0", "id": 5, "method": 5}',
            json.dumps({"jsonrpc": "2.0", "id": 6, "method": "tools/list", "params": {}}).encode(),
        ]
        answers = len(hostile) - 1  # every message but the notification
        with (data.parent / "server.stderr").open("wb") as errlog:
            proc = subprocess.Popen(
                server_command(data),
                cwd=REPO_ROOT,
                env=clean_env(),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=errlog,
            )
            watchdog = threading.Timer(STEP_TIMEOUT, proc.kill)  # an unanswered message must not hang the suite
            watchdog.start()
            try:
                assert proc.stdin is not None and proc.stdout is not None
                proc.stdin.write(json.dumps(initialize).encode() + b"\n")
                proc.stdin.flush()
                lines = [proc.stdout.readline()]  # after start-up and initialize
                proc.stdin.write(b"".join(line + b"\n" for line in hostile))
                proc.stdin.flush()
                while len(lines) < 1 + answers and lines[-1]:  # at the end of its input the server stops serving
                    lines.append(proc.stdout.readline())
                proc.stdin.close()
                lines.extend(proc.stdout.readlines())
                assert proc.wait(timeout=STEP_TIMEOUT) == 0
            finally:
                watchdog.cancel()
                if proc.poll() is None:
                    proc.kill()
                    proc.wait(timeout=10)
        messages = [json.loads(line) for line in lines if line.strip()]
        replies = {m["id"]: m for m in messages if m.get("id") is not None}
        unmatched = sorted(m["error"]["code"] for m in messages if m.get("id", "") is None)
        assert sorted(replies) == [0, 1, 2, 3, 6], messages
        assert unmatched == [-32700, -32700, -32600], messages  # not JSON, nested too deep, not JSON-RPC
        for request_id in (1, 2, 3):
            assert replies[request_id]["result"]["isError"] is False, replies[request_id]
        first = json.loads(replies[1]["result"]["content"][0]["text"])
        assert first["evidenceStatus"] == "evidence" and first["evidenceBlocks"][0]["source"] == "alerts/disk.md"
        refund = json.loads(replies[2]["result"]["content"][0]["text"])
        assert refund["evidenceBlocks"][0]["source"] == "payments/refund.md"
        assert [t["name"] for t in replies[6]["result"]["tools"]] == [
            "lookup_knowledge",
            "list_facets",
            "read_evidence",
            "read_document",
        ]
        store = TraceStore(Deployment.resolve(data).trace_db_url)
        assert [r.id for r in store.list(session_id="stdio-\\ud800")] == [first["traceId"]]
        assert len(store.list(session_id="stdio-plain")) == 2  # one row per call


class TestHealth:
    def test_health_is_a_503_with_the_reason_when_the_index_file_is_corrupt(self, server, client):
        index_file = server.data / "knowledge_index.json"
        original = index_file.read_bytes()
        try:
            index_file.write_bytes(b"\x00garbage{not json")  # after indexing, behind the server's back
            response = client.get("/health")
            assert response.status_code == 503, response.text
            health = response.json()
            assert health["status"] == "error" and "\n" not in response.text
            assert f"knowledge index {index_file} cannot be read" in health["error"]
            assert "lookup-knowledge index" in health["error"]
        finally:
            index_file.write_bytes(original)
        healed = client.get("/health")
        assert healed.status_code == 200 and healed.json()["status"] == "ok"  # no restart needed
