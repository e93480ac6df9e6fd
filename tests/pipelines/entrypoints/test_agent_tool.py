"""`lookup_knowledge` as a Haystack tool, driven by a real `Agent` with a scripted chat generator (no model)."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest
from haystack import component
from haystack.components.agents import Agent
from haystack.dataclasses import ChatMessage, ChatRole, ToolCall, ToolCallResult
from haystack.tools import PipelineTool
from haystack.tools.errors import ToolInvocationError

from components.trace.trace_store import TraceStore
from pipelines.entrypoints.agent_tool import (
    TOOL_NAME,
    LookupKnowledgeTool,
    LookupToolError,
    compact_result,
    lookup_knowledge_tool,
)
from pipelines.entrypoints.cli import main as cli_main
from pipelines.settings import REPO_ROOT, Deployment
from pipelines.tool_contract import BUILT_IN_FILTER_KEYS
from tests.conftest import write_tiny_kb

pytestmark = pytest.mark.integration

AGENT_DOC = REPO_ROOT / "README.md"

COMPACT_KEYS = {
    "found",
    "evidenceStatus",
    "message",
    "evidenceBlocks",
    "relevanceLevel",
    "completenessHint",
    "truncated",
    "moreAvailable",
    "cursor",
    "filters",
    "retrievalTrace",
    "traceId",
    "traceError",
    "error",
}
BLOCK_KEYS = {
    "citation",
    "source",
    "title",
    "breadcrumb",
    "location",
    "content",
    "similarity",
    "hitReasons",
    "truncated",
}


def python_snippets(path: Path) -> list[str]:
    """
    Return the ```python code fences of a markdown file, in order.

    :param path: The markdown file (README.md).
    :returns: The code of each fence.
    """
    text = path.read_text(encoding="utf-8")
    return [
        m.group(1) for m in re.finditer(r"^```python[^\n]*\n(.*?)^```[ \t]*$", text, flags=re.MULTILINE | re.DOTALL)
    ]


def python_snippet(path: Path, marker: str) -> str:
    """
    Return the one ```python fence of a markdown file that contains `marker`.

    :param path: The markdown file.
    :param marker: Text that identifies the snippet (e.g. `Agent(` or `stdio_client`).
    :returns: The snippet's code.
    """
    found = [code for code in python_snippets(path) if marker in code]
    assert len(found) == 1, f"expected one ```python snippet with {marker!r} in {path}, found {len(found)}"
    return found[0]


def index_tiny_kb(root: Path) -> Path:
    """Index the tiny knowledge base into `root/data` in this process; return the data folder."""
    kb = write_tiny_kb(root / "knowledge")
    data = root / "data"
    assert cli_main(["index", "--knowledge", str(kb), "--data-dir", str(data), "--quiet", "--json"]) == 0
    return data


@component
class ScriptedChatGenerator:
    """A chat generator that replays scripted assistant messages, one per call: no model, no network."""

    def __init__(self, replies: list[ChatMessage]) -> None:
        self.replies = list(replies)
        self.received: list[list[ChatMessage]] = []
        self.offered_tools: list[list[str]] = []

    @component.output_types(replies=list[ChatMessage])
    def run(self, messages: list[ChatMessage], tools: Any = None, **kwargs: Any) -> dict[str, Any]:
        self.received.append(list(messages))
        self.offered_tools.append([tool.name for tool in tools or []])
        assert self.replies, "the agent asked for more replies than were scripted"
        return {"replies": [self.replies.pop(0)]}


def lookup_calls(*arguments: dict[str, Any]) -> ChatMessage:
    """An assistant message calling lookup_knowledge once per argument dict."""
    calls = [ToolCall(tool_name=TOOL_NAME, arguments=args, id=f"call-{i}") for i, args in enumerate(arguments)]
    return ChatMessage.from_assistant(tool_calls=calls)


def tool_results(messages: list[ChatMessage]) -> list[ToolCallResult]:
    return [result for message in messages for result in message.tool_call_results]


def trace_rows(data: Path, session_id: str) -> list[Any]:
    return TraceStore(Deployment.resolve(data).trace_db_url).list(session_id=session_id)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    return index_tiny_kb(tmp_path_factory.mktemp("agent-tool"))


@pytest.fixture(scope="module")
def tool(data_dir) -> LookupKnowledgeTool:
    return lookup_knowledge_tool(data_dir=data_dir)


def run_agent(tool: LookupKnowledgeTool, *replies: ChatMessage) -> tuple[dict[str, Any], ScriptedChatGenerator]:
    generator = ScriptedChatGenerator(list(replies))
    agent = Agent(chat_generator=generator, tools=[tool], raise_on_tool_invocation_failure=False)
    result = agent.run(messages=[ChatMessage.from_user("What do I do when a node's disk is full?")])
    return result, generator


class TestToolDefinition:
    def test_name_parameters_and_description(self, tool):
        assert isinstance(tool, PipelineTool)
        assert tool.name == "lookup_knowledge"
        params = tool.parameters
        assert params["required"] == ["query"]
        assert set(params["properties"]) == {"query", "session_id", "filters", "max_chars", "cursor"}
        assert params["properties"]["query"]["type"] == "string"
        assert params["properties"]["session_id"]["type"] == "string"
        assert params["properties"]["filters"]["additionalProperties"] is False
        assert set(params["properties"]["filters"]["properties"]) == set(BUILT_IN_FILTER_KEYS)
        text = tool.description
        assert text.startswith("Look up the knowledge base of 3 documents on ")  # the tiny knowledge base
        for phrase in (
            "evidenceBlocks[].content",
            "read_evidence(citation)",
            "moreAvailable",
            "`source`",
            "breadcrumb",
            "found=false",
            "no_evidence",
            '"no knowledge", never a fact',
            "already_returned",
            "session_id",
            "tool error",
        ):
            assert phrase in text, phrase
        assert tool.tool_spec == {"name": tool.name, "description": tool.description, "parameters": params}

    def test_pipeline_and_loading_options_are_exclusive(self, tool, data_dir):
        with pytest.raises(ValueError, match="not both"):
            lookup_knowledge_tool(pipeline=tool._pipeline, data_dir=data_dir)

    def test_direct_invocation_raises_a_clear_error_and_compact_result_keeps_only_the_contract(self, tool, data_dir):
        with pytest.raises(ToolInvocationError) as caught:
            tool.invoke(query="\x00 \t", session_id="direct")
        cause = caught.value.__cause__
        assert isinstance(cause, LookupToolError)
        assert cause.result["evidenceStatus"] == "invalid_query" and cause.result["traceId"] is not None
        assert "query is empty after removing control characters" in str(caught.value)
        full = tool.invoke(query="Pro plan API access", session_id="direct")["result"]
        assert {"rerankTrace", "l0Hints", "query", "sessionId"} <= set(full)
        compact = compact_result(full)
        assert set(compact) == COMPACT_KEYS
        assert compact["retrievalTrace"] == {"fallbackReason": full["retrievalTrace"]["fallbackReason"]}
        assert compact["evidenceBlocks"] and all(set(b) == BLOCK_KEYS for b in compact["evidenceBlocks"])
        assert [r.status for r in trace_rows(data_dir, "direct")] == ["evidence", "invalid_query"]


class TestAgent:
    def test_agent_gets_compact_evidence_then_already_returned_and_both_calls_are_traced(self, tool, data_dir):
        session = "agent-session-1"
        call = {"query": "disk full on the node", "session_id": session}
        answer = ChatMessage.from_assistant("Check /var/log first (alerts/disk.md, Diagnosis).")
        result, generator = run_agent(tool, lookup_calls(call), answer)

        assert result["tool_call_counts"] == {TOOL_NAME: 1}
        assert result["last_message"].text == answer.text
        assert generator.offered_tools[0] == [TOOL_NAME]
        [first] = tool_results(result["messages"])
        assert first.error is False and first.origin.arguments == call
        text = first.result
        assert isinstance(text, str)
        payload = json.loads(text)
        assert text == json.dumps(payload, ensure_ascii=False, separators=(",", ":"))  # compact JSON
        assert set(payload) == COMPACT_KEYS
        assert payload["found"] is True and payload["evidenceStatus"] == "evidence"
        assert payload["evidenceBlocks"] and all(set(block) == BLOCK_KEYS for block in payload["evidenceBlocks"])
        assert payload["evidenceBlocks"][0]["source"] == "alerts/disk.md"
        assert payload["evidenceBlocks"][0]["citation"].startswith("alerts/disk.md#")
        assert "packedText" not in text  # each piece of evidence once
        assert payload["retrievalTrace"] == {"fallbackReason": None}
        for internal in ("rerankTrace", "l0Hints", "attempts", "selectedAttempt", "scoreLabel", "boostReasons"):
            assert internal not in text, internal
        # the model's second turn received exactly this tool result
        assert generator.received[1][-1].tool_call_result is not None
        assert generator.received[1][-1].tool_call_result.result == text

        again, _ = run_agent(tool, lookup_calls(call), ChatMessage.from_assistant("As I said before."))
        [second] = tool_results(again["messages"])
        repeat = json.loads(second.result)  # type: ignore[arg-type]
        assert second.error is False
        assert repeat["found"] is False and repeat["evidenceStatus"] == "already_returned"
        assert repeat["evidenceBlocks"] == [] and repeat["cursor"] is None

        rows = trace_rows(data_dir, session)
        assert [(r.status, r.session_id, r.query) for r in rows] == [
            ("already_returned", session, "disk full on the node"),
            ("evidence", session, "disk full on the node"),
        ]
        assert [r.id for r in rows] == [repeat["traceId"], payload["traceId"]]

    def test_bad_input_reaches_the_agent_as_tool_errors_and_is_traced(self, tool, data_dir):
        session = "agent-bad-input"
        result, generator = run_agent(
            tool,
            lookup_calls(
                {"query": "   ", "session_id": session},
                {"session_id": session},  # no query at all
                {"query": 42, "session_id": session},  # not a string
            ),
            ChatMessage.from_assistant("I need a question to look up."),
        )
        assert result["last_message"].text == "I need a question to look up."
        results = tool_results(result["messages"])
        assert [r.error for r in results] == [True, True, True]
        reasons = ["query is empty", "query is empty", "query must be a string, got int"]
        for r, reason in zip(results, reasons, strict=True):
            assert isinstance(r.result, str)
            assert "lookup_knowledge rejected the query (evidenceStatus=invalid_query" in r.result
            assert reason in r.result and "non-empty question" in r.result
        assert len(generator.received[1]) == 5  # user, assistant with three calls, three tool results
        rows = trace_rows(data_dir, session)
        assert sorted((r.status, r.found, r.error) for r in rows) == sorted(
            ("invalid_query", False, reason) for reason in reasons
        )
        reported = sorted(int(m) for r in results for m in re.findall(r"traceId=(\d+)\)", str(r.result)))
        assert reported == sorted(r.id for r in rows)

    def test_store_down_reaches_the_agent_as_a_tool_error_and_is_traced(self, tmp_path):
        empty = tmp_path / "nothing-indexed"
        broken = lookup_knowledge_tool(data_dir=empty)
        result, _ = run_agent(
            broken,
            lookup_calls({"query": "disk full", "session_id": "agent-down"}),
            ChatMessage.from_assistant("The knowledge base is unavailable right now."),
        )
        [failed] = tool_results(result["messages"])
        assert failed.error is True and isinstance(failed.result, str)
        assert "lookup_knowledge failed (evidenceStatus=error" in failed.result
        assert "Knowledge retrieval failed" in failed.result and "not evidence" in failed.result
        [row] = trace_rows(empty, "agent-down")
        assert row.status == "error" and row.query == "disk full"

    def test_async_agent_run_uses_the_same_contract(self, tool, data_dir):
        session = "agent-async"
        generator = ScriptedChatGenerator(
            [
                lookup_calls({"query": "退款多久到账", "session_id": session}, {"query": "", "session_id": session}),
                ChatMessage.from_assistant("七个工作日内原路退回 (payments/refund.md)。"),
            ]
        )
        agent = Agent(chat_generator=generator, tools=[tool])
        result = asyncio.run(agent.run_async(messages=[ChatMessage.from_user("退款多久到账？")]))
        ok, bad = tool_results(result["messages"])
        assert ok.error is False and bad.error is True
        payload = json.loads(ok.result)  # type: ignore[arg-type]
        assert payload["found"] is True and payload["evidenceBlocks"][0]["source"] == "payments/refund.md"
        assert "退款" in ok.result  # non-ASCII kept readable
        assert sorted(r.status for r in trace_rows(data_dir, session)) == ["evidence", "invalid_query"]


class TestDocs:
    def test_agent_snippet_runs_as_written(self, tmp_path, monkeypatch):
        data = index_tiny_kb(tmp_path)
        monkeypatch.chdir(tmp_path)  # the snippet uses data_dir="data"
        code = python_snippet(AGENT_DOC, "Agent(")
        generator = ScriptedChatGenerator(
            [
                lookup_calls({"query": "disk full on a node", "session_id": "chat-42"}),
                ChatMessage.from_assistant("Find the largest folders with du (alerts/disk.md, Diagnosis)."),
            ]
        )
        namespace: dict[str, Any] = {"chat_generator": generator, "__name__": "__doc_snippet__"}
        exec(compile(code, f"{AGENT_DOC}:agent", "exec"), namespace)

        result = namespace["result"]
        assert result["last_message"].text.startswith("Find the largest folders")
        system = generator.received[0][0]
        assert system.is_from(ChatRole.SYSTEM) and "session_id 'chat-42'" in (system.text or "")
        [call] = tool_results(result["messages"])
        payload = json.loads(call.result)  # type: ignore[arg-type]
        assert payload["found"] is True and payload["evidenceBlocks"][0]["source"] == "alerts/disk.md"
        assert [r.status for r in trace_rows(data, "chat-42")] == ["evidence"]

    def test_snippet_extraction_takes_the_file_as_a_parameter(self, tmp_path):
        doc = tmp_path / "README.md"
        doc.write_text("# x\n\n```python\nprint(1)\n```\n\n```json\n{}\n```\n\n```python\nx = 2\n```\n")
        assert python_snippets(doc) == ["print(1)\n", "x = 2\n"]
        snippets = python_snippets(AGENT_DOC)
        assert sum("Agent(" in s for s in snippets) == 1 and sum("stdio_client" in s for s in snippets) == 1
