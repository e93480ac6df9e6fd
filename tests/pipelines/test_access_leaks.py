"""The leak hunt: restricted pages each carry a marker no other page has, and for every principal and every output
channel (lookups, packed text, hints, messages, facets, reads, filter reports, error bodies, Dify records, trace rows,
the command line, the server's log) the marker of a page it may not read never appears, while the pages it may read
are found as an operator, who reads every page, finds them.

The knowledge base is made here from real public documentation (the Apache APISIX and Hugo pages under
`tests/fixtures/real_docs`, English and Chinese), with `access` added to some pages, and pages of our own that are
restricted, superseded by a restricted page, a draft, and stale. It is served by the real server (`serve --transport
http`, sidecar on, so its comparison rows reach the trace too) and queried over MCP and REST as each principal (its
token), anonymously, and through the command line (`--as`).
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from components.core.citation import Citation
from components.store.knowledge_index import KnowledgeIndex
from pipelines.access import Principals
from pipelines.settings import REPO_ROOT, Deployment
from tests.pipelines.entrypoints.test_mcp_server import subprocess_env
from tests.pipelines.entrypoints.test_rest_api import Server, serve_command, start_server
from tests.postgres_server import free_port

pytestmark = pytest.mark.integration

STEP_TIMEOUT = 120
REAL_DOCS = REPO_ROOT / "tests" / "fixtures" / "real_docs"


@dataclass(frozen=True)
class Restricted:
    """A page some principals may not read: its source, groups, and the marker only it holds."""

    source: str
    groups: tuple[str, ...]
    marker: str
    query: str


#: real pages made restricted (the marker written into their text) and pages of our own
RESTRICTED = [
    Restricted("apisix/zh/cors.md", ("security",), "机密标记甲七三", "APISIX 的 CORS 插件如何配置跨域"),
    Restricted("apisix/en/echo.md", ("gateway",), "LEAKMARK-ECHO-4410", "what does the APISIX echo plugin do"),
    Restricted("hugo/installation/windows.md", ("windows",), "LEAKMARK-WIN-2290", "install Hugo on Windows"),
    Restricted("treasury/zeta-payroll.md", ("finance",), "LEAKMARK-PAY-5521", "when does the zeta payroll run"),
    Restricted("ops/backup-v2.md", ("finance",), "LEAKMARK-BKP2-6617", "how long are nightly backups kept"),
]
#: the title, keyword and category of the payroll page are markers too: hints and facets must not name them
PAYROLL_NAMES = ("LEAKTITLE-ZP81", "leakkey-zp81", "leakcat-zp81")
DRAFT_MARKER = "LEAKMARK-DRAFT-3301"
GROUPS = {"alice": ["security", "finance"], "bob": ["gateway"], "carol": [], "ops": ["*"]}
PUBLIC_QUERIES = {
    "hugo/installation/linux.md": "install Hugo on Linux",
    "apisix/en/installation-guide.md": "how do I install Apache APISIX",
}

PAYROLL = """---
title: Zeta payroll LEAKTITLE-ZP81
category: leakcat-zp81
keywords: [leakkey-zp81]
access: [finance]
---
# Zeta payroll LEAKTITLE-ZP81

The zeta payroll runs on the 25th of every month; approvals close on the 20th. LEAKMARK-PAY-5521 Late approvals
move the payment of that employee to the next run.
"""
BACKUP_V1 = """---
title: Nightly backups
status: superseded
superseded_by: ops/backup-v2.md
---
# Nightly backups

Nightly backups of the database are kept for 14 days and then deleted.
"""
BACKUP_V2 = """---
title: Nightly backups (2026)
access: [finance]
---
# Nightly backups (2026)

Nightly backups of the database are kept for 30 days and then deleted. LEAKMARK-BKP2-6617
"""
DRAFT = f"""---
title: Disaster recovery draft
status: draft
---
# Disaster recovery draft

When the primary region fails, promote the replica in the second region. {DRAFT_MARKER}
"""
STALE = """---
title: On-call handover
reviewed_at: 2019-03-01
---
# On-call handover

At the end of a shift the on-call engineer writes a handover note listing open incidents and pending alerts.
"""


def _restrict(text: str, groups: tuple[str, ...], marker: str) -> str:
    """A real page with `access` added to its front matter and the marker as a sentence of its first section."""
    front, body = re.match(r"(---\n.*?\n---\n)(.*)", text, re.S).groups()  # type: ignore[union-attr]
    front = front.replace("---\n", f"---\naccess: [{', '.join(groups)}]\n", 1)
    # after the licence comment (whose `#` lines are no headings), before the page's first section
    after_comment = body.find("-->") + len("-->") if "-->" in body else 0
    heading = re.compile(r"^#{1,3} .+$", re.M).search(body, after_comment)
    at = heading.end() if heading else after_comment
    paragraph = f"{marker} 这一段只属于受限页面。 This paragraph belongs to the restricted page."
    return f"{front}{body[:at]}\n\n{paragraph}\n{body[at:]}"


def build_knowledge(root: Path) -> Path:
    kb = root / "knowledge"
    apisix = REAL_DOCS / "apisix" / "docs"
    copies = {
        "apisix/zh/cors.md": apisix / "zh/latest/plugins/cors.md",
        "apisix/zh/echo.md": apisix / "zh/latest/plugins/echo.md",
        "apisix/en/echo.md": apisix / "en/latest/plugins/echo.md",
        "apisix/en/installation-guide.md": apisix / "en/latest/installation-guide.md",
    }
    for target, source in copies.items():
        (kb / target).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, kb / target)
    shutil.copytree(REAL_DOCS / "hugo" / "content", kb / "hugo")
    for page in RESTRICTED[:3]:
        path = kb / page.source
        path.write_text(_restrict(path.read_text(encoding="utf-8"), page.groups, page.marker), encoding="utf-8")
    for name, text in {
        "treasury/zeta-payroll.md": PAYROLL,
        "ops/backup-v1.md": BACKUP_V1,
        "ops/backup-v2.md": BACKUP_V2,
        "ops/dr-draft.md": DRAFT,
        "ops/handover.md": STALE,
    }.items():
        (kb / name).parent.mkdir(parents=True, exist_ok=True)
        (kb / name).write_text(text, encoding="utf-8")
    return kb


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pipelines.entrypoints.cli", *args],
        cwd=REPO_ROOT,
        env=subprocess_env(**(env or {})),
        capture_output=True,
        text=True,
        timeout=STEP_TIMEOUT,
        check=False,
    )


@dataclass
class Deployed:
    server: Server
    data: Path
    principals: Path
    tokens: dict[str, str]
    index: KnowledgeIndex


@pytest.fixture(scope="module")
def deployed(tmp_path_factory) -> Iterator[Deployed]:
    root = tmp_path_factory.mktemp("access-leaks")
    kb = build_knowledge(root)
    data = root / "data"
    done = cli("index", "--knowledge", str(kb), "--data-dir", str(data), "--quiet")
    assert done.returncode == 0, done.stderr
    registry = Principals(root / "principals.yaml")
    tokens = {name: registry.add(name, groups, operator=name == "ops") for name, groups in GROUPS.items()}
    port = free_port()
    command = [*serve_command(data, port), "--principals", str(registry.path), "--set", "sidecar.enabled=true"]
    server = start_server(command, data, port)
    try:
        server.wait_listening()
        yield Deployed(server, data, registry.path, tokens, KnowledgeIndex.load(Deployment.resolve(data).index_path))
    finally:
        server.stop()


def may_read(who: str | None, page: Restricted) -> bool:
    groups = GROUPS.get(who or "", [])
    return "*" in groups or any(g in groups for g in page.groups)


def forbidden(who: str | None, names: bool = True) -> list[str]:
    """
    What the caller may not see, compared case-sensitively: the markers of the pages it may not read (and the draft's,
    for everyone: drafts are not evidence unless asked for), and with `names` their sources and the payroll page's
    title, keyword and category. Probes name them in another case (filters and search ignore case), so that what a
    caller sent and is echoed back (its query, its filters) is never mistaken for a leak.
    """
    markers = [p.marker for p in RESTRICTED if not may_read(who, p)] + [DRAFT_MARKER]
    if names:
        markers += [p.source for p in RESTRICTED if not may_read(who, p)]
        markers += list(PAYROLL_NAMES) if not may_read(who, RESTRICTED[3]) else []
    return markers


def leaks(text: str, who: str | None, names: bool = True) -> list[str]:
    return [m for m in forbidden(who, names) if m in text]


def probe(text: str) -> str:
    """A marker or name as a caller asks for it: another case (a Chinese marker: its first four characters)."""
    return text[:4] if not text.isascii() else text.swapcase()


def citation_of(index: KnowledgeIndex, source: str) -> str:
    doc = index.by_source()[source]
    return str(Citation.of(doc.source, 0, doc.doc_version))


def queries() -> list[tuple[str, dict[str, Any]]]:
    """What every caller asks: each restricted page by its topic, by its marker, by filters naming it."""
    asked: list[tuple[str, dict[str, Any]]] = []
    for page in RESTRICTED:
        asked += [(page.query, {}), (probe(page.marker), {})]
        asked += [(page.query, {"filters": {"source": probe(page.source)}})]
    title, keyword, category = PAYROLL_NAMES
    asked += [
        ("zeta payroll", {"filters": {"category": probe(category)}}),
        ("payroll", {"filters": {"access": "FINANCE"}}),
        ("payroll", {"filters": {"tags": probe(keyword)}}),
        (f"{probe(title)} runbook", {}),
        ("disaster recovery promote the replica", {}),
        ("on-call handover note", {}),
        *[(q, {}) for q in PUBLIC_QUERIES.values()],
    ]
    return asked


def mcp_session_calls(url: str, token: str | None, index: KnowledgeIndex) -> list[tuple[str, Any]]:
    """Every MCP tool call a caller makes, with what it got back (the structured content, or the error text)."""

    async def scenario() -> list[tuple[str, Any]]:
        headers = {"Authorization": f"Bearer {token}"} if token else None
        got: list[tuple[str, Any]] = []
        with anyio.fail_after(STEP_TIMEOUT * 3):
            async with (
                create_mcp_http_client(headers=headers) as client,
                streamable_http_client(f"{url}/mcp", http_client=client) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                tools = await session.list_tools()
                got.append(("tools", [t.model_dump() for t in tools.tools]))
                got.append(("resource", (await session.read_resource("knowledge://facets")).model_dump()))
                calls: list[tuple[str, dict[str, Any]]] = [("list_facets", {})]
                calls += [("lookup_knowledge", {"query": q, **extra}) for q, extra in queries()]
                calls += [("lookup_knowledge", {"query": "payroll", "filters": {"salary": "x"}})]
                for page in RESTRICTED:
                    calls += [
                        ("read_document", {"source": page.source}),
                        ("read_evidence", {"citation": citation_of(index, page.source), "after": 2}),
                    ]
                for name, arguments in calls:
                    result = await session.call_tool(name, arguments)
                    got.append((name, result.structured_content if not result.is_error else result.content[0].text))
        return got

    return asyncio.run(scenario())


def rest_calls(url: str, token: str | None, index: KnowledgeIndex) -> list[tuple[str, Any]]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    got: list[tuple[str, Any]] = []
    with httpx.Client(base_url=url, timeout=STEP_TIMEOUT, headers=headers) as client:
        got.append(("facets", client.get("/facets").json()))
        for query, extra in queries():
            got.append(("lookup", client.post("/lookup", json={"query": query, **extra}).json()))
        got.append(("bad filter", client.post("/lookup", json={"query": "x", "filters": {"salary": "1"}}).json()))
        for page in RESTRICTED:
            got.append(("read_document", client.post("/read_document", json={"source": page.source}).json()))
            cited = {"citation": citation_of(index, page.source)}
            got.append(("read_evidence", client.post("/read_evidence", json=cited).json()))
            dify = {
                "knowledge_id": "lookup-knowledge",
                "query": page.query,
                "retrieval_setting": {"top_k": 5, "score_threshold": 0.0},
                "metadata_condition": {
                    "logical_operator": "and",
                    "conditions": [{"name": ["document_name"], "comparison_operator": "is", "value": page.source}],
                },
            }
            got.append(("retrieval", client.post("/retrieval", json=dify).json()))
            unfiltered = {key: value for key, value in dify.items() if key != "metadata_condition"}
            got.append(("retrieval", client.post("/retrieval", json=unfiltered).json()))
    return got


CALLERS: list[str | None] = ["alice", "bob", "carol", "ops", None]


@pytest.fixture(scope="module")
def answers(deployed) -> dict[str | None, list[tuple[str, Any]]]:
    """Every caller's MCP and REST answers (asked once, read by the tests below)."""
    url = deployed.server.url
    return {
        who: [
            *mcp_session_calls(url, deployed.tokens[who] if who else None, deployed.index),
            *rest_calls(url, deployed.tokens[who] if who else None, deployed.index),
        ]
        for who in CALLERS
    }


def found_sources(answer: Any) -> set[str]:
    blocks = answer.get("evidenceBlocks") if isinstance(answer, dict) else None
    return {b["source"] for b in blocks or []}


class TestLeakHunt:
    def test_no_marker_of_an_unreadable_page_in_any_answer(self, answers):
        for who, got in answers.items():
            for channel, answer in got:
                text = json.dumps(answer, ensure_ascii=False)
                # a read names the source it was asked for: only what the page holds would be a leak there
                found = leaks(text, who, names=not channel.startswith("read_"))
                assert not found, f"{who or 'anonymous'} saw {found} in {channel}: {text[:600]}"

    def test_a_page_the_caller_may_not_read_is_not_found_when_read(self, answers):
        for who, got in answers.items():
            reads = [a for channel, a in got if channel.startswith("read_")]
            pages = [p for p in RESTRICTED for _ in range(2)] * 2  # document and evidence; MCP, then REST
            assert len(reads) == len(pages)
            for page, answer in zip(pages, reads, strict=True):
                body = answer if isinstance(answer, dict) else {}
                assert (body.get("status") == "evidence") is may_read(who, page), f"{who} read {page.source}: {answer}"

    def test_the_caller_s_own_restricted_pages_are_found(self, answers):
        # the channels are real: were the markers never returned to anyone, the hunt above would prove nothing
        for who in ("alice", "bob", "ops"):
            for channel in ("lookup_knowledge", "lookup"):  # MCP's tool, REST's route: each identifies its caller
                seen = json.dumps([a for c, a in answers[who] if c == channel], ensure_ascii=False)
                for page in RESTRICTED:
                    if may_read(who, page):
                        assert page.marker in seen, f"{who} never got {page.source} from {channel}"

    def test_each_caller_finds_what_the_operator_finds_of_the_pages_it_may_read(self, answers):
        """Recall on its own pages is unchanged: every readable page the operator finds for a query, it finds."""
        lookups = {
            who: [a for channel, a in got if channel == "lookup" and isinstance(a, dict)]
            for who, got in answers.items()
        }
        readable = {p.source: p for p in RESTRICTED}
        for who in CALLERS:
            for mine, operator in zip(lookups[who], lookups["ops"], strict=True):
                expected = {s for s in found_sources(operator) if s not in readable or may_read(who, readable[s])}
                assert expected <= found_sources(mine), (
                    f"{who}: {mine['query']!r} lost {expected - found_sources(mine)}"
                )
        public_found = [found_sources(a) for a in lookups[None]]
        assert any("hugo/installation/linux.md" in s for s in public_found)

    def test_a_superseded_page_gives_way_only_to_a_successor_the_caller_may_read(self, answers):
        def backup(who: str | None) -> dict[str, Any]:
            return next(
                a for channel, a in answers[who] if channel == "lookup" and a.get("query") == RESTRICTED[4].query
            )

        alice, carol = backup("alice"), backup("carol")
        assert found_sources(alice) == {"ops/backup-v2.md"} or "ops/backup-v2.md" in found_sources(alice)
        assert "ops/backup-v1.md" not in found_sources(alice)
        assert "ops/backup-v1.md" in found_sources(carol)  # kept, marked: its successor is not carol's to read
        block = next(b for b in carol["evidenceBlocks"] if b["source"] == "ops/backup-v1.md")
        assert block["superseded"] is True and "backup-v2" not in json.dumps(carol)
        for who in CALLERS:  # the page last reviewed in 2019 is evidence, flagged stale, for everyone
            handover = next(a for c, a in answers[who] if c == "lookup" and a.get("query") == "on-call handover note")
            stale = [b for b in handover["evidenceBlocks"] if b["source"] == "ops/handover.md"]
            assert stale and stale[0]["stale"] is True, who

    def test_facets_count_only_what_the_caller_may_read(self, answers):
        def facets(who: str | None) -> dict[str, Any]:
            return next(a for channel, a in answers[who] if channel == "facets")

        assert facets("ops")["documents"] - facets("carol")["documents"] == len(RESTRICTED)
        assert facets("alice")["documents"] - facets("carol")["documents"] == 3
        assert facets("carol") == facets(None)

    def test_an_unknown_token_is_refused_not_served_anonymously(self, deployed):
        with httpx.Client(base_url=deployed.server.url, timeout=STEP_TIMEOUT) as client:
            refused = client.post("/lookup", json={"query": "x"}, headers={"Authorization": "Bearer not-a-token"})
            dify = client.post(
                "/retrieval",
                json={"knowledge_id": "lookup-knowledge", "query": "x", "retrieval_setting": {"top_k": 1}},
                headers={"Authorization": "Bearer not-a-token"},
            )
        assert refused.status_code == 401 and dify.status_code == 403 and dify.json()["error_code"] == 1002

    def test_trace_rows_record_the_principal_and_hold_nothing_it_may_not_read(self, deployed, answers):
        rows = deployed.server.rows()
        assert {r.principal for r in rows} == {"alice", "bob", "carol", "ops", None}
        for row in rows:
            text = json.dumps(row.model_dump(mode="json"), ensure_ascii=False)
            found = leaks(text, row.principal, names=not row.tool_name.startswith("read_"))
            assert not found, f"row {row.id} of {row.principal}: {found}"
        sidecar = [r for r in rows if (r.retrieval_details.get("sidecar") or {}).get("status") == "ok"]
        assert sidecar, "the sidecar's comparison rows are part of the hunt"

    def test_the_server_log_holds_no_marker(self, deployed, answers):
        log = deployed.server.log.read_text(encoding="utf-8", errors="replace")
        markers = [p.marker for p in RESTRICTED] + [*PAYROLL_NAMES, DRAFT_MARKER]
        assert "Bearer" not in log or all(t not in log for t in deployed.tokens.values())
        assert [m for m in markers if m in log] == []  # the callers' probes, in another case, may be logged

    def test_the_command_line_answers_and_traces_as_the_principal_it_runs_as(self, deployed, answers):
        env = {"LOOKUP_KNOWLEDGE_PRINCIPALS": str(deployed.principals)}
        data = str(deployed.data)
        for who in ("bob", "anonymous", "alice"):
            done = cli("ask", probe(RESTRICTED[3].marker), "--data-dir", data, "--as", who, "--json", env=env)
            assert done.returncode == 0, done.stderr
            text = done.stdout + done.stderr
            assert not leaks(text, None if who == "anonymous" else who), f"ask --as {who}: {text[:600]}"
            assert (RESTRICTED[3].marker in json.dumps(json.loads(done.stdout)["evidenceBlocks"])) is (who == "alice")
        listed = cli("trace", "list", "--json", "--limit", "500", "--data-dir", data, "--as", "bob", env=env)
        assert listed.returncode == 0, listed.stderr
        rows = json.loads(listed.stdout)
        assert rows and {r["principal"] for r in rows} == {"bob"}
        for row in rows:  # a read's row names the source it was asked for
            assert not leaks(json.dumps(row, ensure_ascii=False), "bob", names=not row["tool_name"].startswith("read_"))
        alices = next(r for r in deployed.server.rows() if r.principal == "alice")
        other = cli("trace", "show", str(alices.id), "--data-dir", data, "--as", "bob", env=env)
        assert other.returncode == 2 and f"no tool_invocation row with id {alices.id}" in other.stderr
        operator = cli("trace", "show", str(alices.id), "--json", "--data-dir", data, "--as", "ops", env=env)
        assert operator.returncode == 0 and json.loads(operator.stdout)["principal"] == "alice"

    def test_stdio_serves_as_the_principal_the_operator_names(self, deployed, answers):
        from mcp import StdioServerParameters
        from mcp.client.stdio import stdio_client

        async def ask(*extra: str) -> dict[str, Any]:
            command = ["-m", "pipelines.entrypoints.cli", "serve", "--data-dir", str(deployed.data), *extra]
            parameters = StdioServerParameters(command=sys.executable, args=command, cwd=REPO_ROOT)
            with (deployed.data.parent / "stdio.log").open("a") as errlog, anyio.fail_after(STEP_TIMEOUT):
                async with (
                    stdio_client(parameters, errlog=errlog) as (read, write),
                    ClientSession(read, write) as session,
                ):
                    await session.initialize()
                    result = await session.call_tool("lookup_knowledge", {"query": RESTRICTED[3].query})
                    return dict(result.structured_content or {})

        principals = ("--principals", str(deployed.principals))
        alice = asyncio.run(ask(*principals, "--as", "alice"))
        anonymous = asyncio.run(ask(*principals))
        assert RESTRICTED[3].marker in json.dumps(alice) and not leaks(json.dumps(anonymous), None)
        refused = cli("serve", "--transport", "http", *principals, "--as", "alice", "--data-dir", str(deployed.data))
        assert refused.returncode == 2 and "--as is for stdio" in refused.stderr
