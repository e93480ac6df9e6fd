"""A real MCP client this repository did not write (LangChain's `langchain-mcp-adapters`, from PyPI) on two served
knowledge bases at once, as an agent builder connects them: every tool listed and called over streamable HTTP.

The client runs in its own environment (`.venv-clients`, made by `scripts/setup.sh test`: it needs `mcp<2`, the project
`mcp==2.3.0`), so it also shows that a client of the previous SDK generation talks to this server.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from components.core.citation import Citation
from pipelines.entrypoints.mcp_server import AUTH_ENV
from pipelines.settings import REPO_ROOT
from tests.pipelines.entrypoints.test_mcp_server import subprocess_env
from tests.pipelines.entrypoints.test_rest_api import TOKEN, Server, indexed_copy, serve_command, start_server
from tests.postgres_server import free_port

pytestmark = pytest.mark.integration

CLIENT_PYTHON = REPO_ROOT / ".venv-clients" / "bin" / "python"
CLIENT = REPO_ROOT / "tests" / "clients" / "langchain_mcp_client.py"
HR_PAGES = {
    "hr/leave.md": "---\ntitle: Annual Leave\n---\n# Annual Leave\n\nEmployees get 25 days of paid leave a year.\n",
    "hr/expenses.md": "---\ntitle: Travel Expenses\n---\n# Travel Expenses\n\nSubmit receipts within 30 days.\n",
}


def index_hr(root: Path) -> Path:
    """A second knowledge base, of another topic, indexed by the CLI in its own process."""
    for name, text in HR_PAGES.items():
        (root / "knowledge" / name).parent.mkdir(parents=True, exist_ok=True)
        (root / "knowledge" / name).write_text(text, encoding="utf-8")
    command = [sys.executable, "-m", "pipelines.entrypoints.cli", "index", "--knowledge", str(root / "knowledge")]
    done = subprocess.run(
        [*command, "--data-dir", str(root / "data"), "--quiet"],
        cwd=REPO_ROOT,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return root / "data"


@pytest.fixture(scope="module")
def two_servers(tmp_path_factory) -> Iterator[tuple[Server, Server]]:
    """The tiny knowledge base (bearer token set) and an HR one served under its own tool name."""
    started: list[Server] = []
    try:
        tiny = indexed_copy(tmp_path_factory, "client-tiny")
        hr = index_hr(tmp_path_factory.mktemp("client-hr"))
        port = free_port()
        started.append(start_server(serve_command(tiny, port), tiny, port, **{AUTH_ENV: TOKEN}))
        port = free_port()
        started.append(start_server([*serve_command(hr, port), "--tool-name", "lookup_hr"], hr, port))
        for server in started:
            server.wait_listening()
        yield started[0], started[1]
    finally:
        for server in started:
            server.stop()


class TestLangChainMcpAdapters:
    def test_an_agent_session_on_two_knowledge_bases(self, two_servers):
        assert CLIENT_PYTHON.exists(), "the MCP clients' environment is missing: run `bash scripts/setup.sh test`"
        tiny, hr = two_servers
        done = subprocess.run(
            [str(CLIENT_PYTHON), str(CLIENT), f"{tiny.url}/mcp", f"{hr.url}/mcp", TOKEN],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        report = json.loads(done.stdout)
        tools = {server: {t["name"]: t["description"] for t in listed} for server, listed in report["servers"].items()}
        assert set(tools["a"]) == {"lookup_knowledge", "list_facets", "read_evidence", "read_document"}
        assert set(tools["b"]) == {"lookup_hr", "list_facets", "read_evidence", "read_document"}
        # two knowledge bases are two tools an agent tells apart, by name and by what they describe
        assert "3 documents on alerts" in tools["a"]["lookup_knowledge"]
        assert "2 documents on hr" in tools["b"]["lookup_hr"]

        assert report["facets"]["documents"] == 3
        assert report["filtered"]["filters"]["requested"] == {"category": report["facets"]["categories"][0]["value"]}
        lookup = report["lookup"]
        assert lookup["found"] is True and lookup["evidenceBlocks"][0]["source"] == "payments/refund.md"
        pages = report["pages"]
        assert len(pages) >= 2 and pages[0]["moreAvailable"] is True and pages[-1]["cursor"] is None
        paged = [b["citation"] for page in pages for b in page["evidenceBlocks"]]
        assert len(paged) == len(set(paged)) >= 2  # each page the next blocks, none repeated
        cited = lookup["evidenceBlocks"][0]["citation"]
        read = report["read_evidence"]
        assert read["status"] == "evidence" and [b["citation"] for b in read["blocks"] if b["cited"]] == [cited]
        assert Citation.parse(cited).source == read["source"] == report["read_document"]["source"]
        assert report["read_document"]["blocks"]

        rows = tiny.rows()
        assert {r.tool_name for r in rows} >= {"lookup_knowledge", "list_facets", "read_evidence", "read_document"}
        assert hr.rows() == []  # the client listed the HR server's tools and called none
