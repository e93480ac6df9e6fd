"""`lookup_knowledge` as an agent tool: a Haystack `PipelineTool` on the lookup pipeline (`pipelines.yaml`).

The agent receives compact JSON: the evidence, the packed context and the few hints it needs to use them. Retrieval
and rerank traces and L0 hints stay in the trace database (`lookup-knowledge trace show <traceId>`).

Errors (an empty or over-long query, the knowledge store unavailable) are raised by the tool function *after* the
pipeline has run, so every call is still recorded in the trace database. An `Agent` (whose
`raise_on_tool_invocation_failure` defaults to False) turns the exception into a tool result message with
`error=True` carrying the reason, and the run goes on; the MCP server (`pipelines.entrypoints.mcp_server`) returns it as
an `isError` tool result.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from haystack import Pipeline, logging
from haystack.tools import PipelineTool

from pipelines.service import KnowledgeService
from pipelines.settings import DEFAULT_LOOKUP_PIPELINE

__all__ = [
    "ERROR_STATUSES",
    "TOOL_DESCRIPTION",
    "TOOL_NAME",
    "TOOL_PARAMETERS",
    "LookupKnowledgeTool",
    "LookupToolError",
    "compact_result",
    "compact_result_json",
    "lookup_knowledge_tool",
    "raise_for_status",
]

logger = logging.getLogger(__name__)

TOOL_NAME = "lookup_knowledge"

TOOL_DESCRIPTION = """\
Look up the knowledge base (runbooks, processes, product FAQs; English and Chinese) and get back evidence, \
not an answer. The result is JSON.

How to use it:
- found=true (evidenceStatus "evidence"): answer only from contextPack.packedText or evidenceBlocks[].content, and \
cite the `source` of every fact you use, with its section (`breadcrumb`), e.g. "(alerts/disk.md, Disk Full \
Runbook > Diagnosis)". Every block cleared the knowledge base's noise ceiling: it is evidence, not a guess. \
relevanceLevel (high/medium/low) says how strong the best evidence is (prefer a high block when blocks disagree); \
a block's `similarity` (0-1) is comparable across lookups, its `score` only within one; completenessHint \
"truncated" means some evidence was cut to fit (see contextPack.omittedSources).
- found=false with evidenceStatus "no_evidence" (or "l1_disabled"): the knowledge base has nothing usable on this. \
That means "no knowledge", never a fact: do not conclude that something is absent, false or impossible; say that \
the knowledge base has no answer, or try again with other words.
- evidenceStatus "already_returned": everything relevant was already returned earlier in this session. Reuse the \
evidence you received before; do not treat this as "no knowledge".
- Bad input (empty or too long query) and failures (knowledge store unavailable) come back as a tool error with the \
reason. Fix the query, or tell the user the lookup failed; an error is never evidence.

Arguments: `query` is the question or its key terms, in the user's language. `session_id` is a stable id for the \
conversation: pass the same value on every call of one conversation so that evidence is not repeated. Every call \
is recorded; `traceId` identifies the record."""

TOOL_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {
            "type": "string",
            "description": "The question or its key terms, in the user's language (1 to 2,000 characters).",
        },
        "session_id": {
            "type": "string",
            "description": (
                "A stable id for this conversation, the same on every call. Evidence already returned in the "
                "session is not returned again (evidenceStatus already_returned)."
            ),
        },
    },
    "required": ["query"],
    "additionalProperties": False,
}


#: Statuses that reach the agent as a tool error instead of a result.
ERROR_STATUSES = ("invalid_query", "error")

_BLOCK_KEYS = ("evidenceKey", "source", "title", "breadcrumb", "content", "similarity", "score", "hitReasons")

_ERROR_ADVICE = {
    "invalid_query": "Call lookup_knowledge again with a non-empty question (at most 2,000 characters).",
    "error": (
        "The knowledge lookup failed; this is not evidence either way. Tell the user the knowledge base is "
        "unavailable, or try again later."
    ),
}


class LookupToolError(RuntimeError):
    """
    A `lookup_knowledge` call that was rejected (`invalid_query`) or failed (`error`); the call is traced.

    :param message: The message the agent reads.
    :param result: The compact result of the call (`evidenceStatus`, `error`, `traceId`, ...).
    """

    def __init__(self, message: str, result: dict[str, Any]) -> None:
        super().__init__(message)
        self.result = result


def compact_result(result: dict[str, Any]) -> dict[str, Any]:
    """
    Reduce a `LookupResult` JSON dict to what an agent needs.

    Kept: `found`, `evidenceStatus`, `message`, `evidenceBlocks` (key, source, title, breadcrumb, content,
    similarity, score, hit reasons), `contextPack` (packed text, included and omitted sources), `relevanceLevel`,
    `completenessHint`, `retrievalTrace.fallbackReason`, `traceId`, `traceError`, `error`. Dropped: the retrieval
    attempts, the rerank trace, the evidence decision, the L0 hints, score labels, the echoed query and session (all
    of it stays in the trace database).

    :param result: The camelCase `LookupResult` JSON (the lookup pipeline's `recorder.result`).
    :returns: The compact dict (JSON-serializable).
    """
    pack = result.get("contextPack") or {}
    trace = result.get("retrievalTrace") or {}
    blocks = result.get("evidenceBlocks") or []
    return {
        "found": bool(result.get("found")),
        "evidenceStatus": result.get("evidenceStatus"),
        "message": result.get("message", ""),
        "evidenceBlocks": [{key: block.get(key) for key in _BLOCK_KEYS} for block in blocks],
        "contextPack": {
            "packedText": pack.get("packedText", ""),
            "includedSources": list(pack.get("includedSources") or []),
            "omittedSources": list(pack.get("omittedSources") or []),
        },
        "relevanceLevel": result.get("relevanceLevel", "none"),
        "completenessHint": result.get("completenessHint", "none"),
        "retrievalTrace": {"fallbackReason": trace.get("fallbackReason")},
        "traceId": result.get("traceId"),
        "traceError": result.get("traceError"),
        "error": result.get("error"),
    }


def compact_result_json(result: dict[str, Any]) -> str:
    """
    The string an agent receives: `compact_result` as compact JSON (no indentation, non-ASCII kept).

    :param result: The camelCase `LookupResult` JSON.
    :returns: The JSON text.
    """
    return json.dumps(compact_result(result), ensure_ascii=False, separators=(",", ":"))


def raise_for_status(result: dict[str, Any]) -> dict[str, Any]:
    """
    Raise for a rejected or failed lookup; return the result otherwise.

    :param result: A `LookupResult` JSON dict, full or compact.
    :returns: `result`, when its `evidenceStatus` is not `invalid_query` or `error`.
    :raises LookupToolError: With a message naming the status, the reason, the trace id and what to do next.
    """
    status = result.get("evidenceStatus")
    if status not in ERROR_STATUSES:
        return result
    what = "rejected the query" if status == "invalid_query" else "failed"
    reason = result.get("error") or result.get("message") or "no reason given"
    message = (
        f"{TOOL_NAME} {what} (evidenceStatus={status}, traceId={result.get('traceId')}): {reason}. "
        f"{_ERROR_ADVICE[str(status)]}"
    )
    raise LookupToolError(message, compact_result(result))


class LookupKnowledgeTool(PipelineTool):
    """
    The `lookup_knowledge` tool: Haystack's `PipelineTool` on the lookup pipeline, with the evidence-first contract.

    The pipeline runs first, so every call (rejected ones included) is recorded; then a rejected or failed lookup
    raises `LookupToolError`, which an `Agent` turns into an error tool result. A missing `query` runs as an empty
    one (rejected and recorded), a non-string `session_id` is used as its string form, unexpected arguments are
    ignored (and logged). Calls go through the `KnowledgeService`: the `Agent` may run tool calls in parallel
    threads, and they run in parallel, but for calls of one session, which run one after another.

    ### Usage example

    ```python
    from pipelines.entrypoints.agent_tool import LookupKnowledgeTool
    from pipelines import load_pipeline

    tool = LookupKnowledgeTool(KnowledgeService.load(data_dir="data"))
    print(tool.lookup("disk full on a node", session_id="chat-42")["contextPack"]["packedText"])
    ```
    """

    def __init__(
        self,
        service: KnowledgeService | Pipeline,
        *,
        name: str = TOOL_NAME,
        description: str = TOOL_DESCRIPTION,
        input_mapping: dict[str, list[str]] | None = None,
        output_mapping: dict[str, str] | None = None,
        parameters: dict[str, Any] | None = None,
        outputs_to_string: dict[str, Any] | None = None,
        inputs_from_state: dict[str, str] | None = None,
        outputs_to_state: dict[str, dict[str, Any]] | None = None,
    ) -> None:
        """
        Wrap the service of a loaded lookup pipeline.

        :param service: The service (`KnowledgeService.load`), or a lookup pipeline (`pipelines.load_pipeline`) to
            wrap in one.
        :param name: Tool name.
        :param description: Tool description (the evidence-first contract by default).
        :param input_mapping: Tool argument → pipeline input sockets (default: `query` to the `QueryTransformer`'s
            `query` and the `TraceRecorder`'s `raw_query`, `session_id` to the `QueryTransformer`, whatever their
            node names).
        :param output_mapping: Pipeline output → tool output (default: the `TraceRecorder`'s `result` as `result`).
        :param parameters: JSON schema of the arguments (default: `query` required, `session_id` optional).
        :param outputs_to_string: How the result becomes the agent's string (default: `compact_result_json`).
        :param inputs_from_state: See `PipelineTool`.
        :param outputs_to_state: See `PipelineTool`.
        """
        self.service = service if isinstance(service, KnowledgeService) else KnowledgeService(service)
        default_inputs, default_outputs = self.service.tool_sockets()
        super().__init__(
            self.service.pipeline,
            name=name,
            description=description,
            input_mapping=input_mapping or default_inputs,
            output_mapping=output_mapping or default_outputs,
            parameters=parameters or TOOL_PARAMETERS,
            outputs_to_string=outputs_to_string or {"source": "result", "handler": compact_result_json},
            inputs_from_state=inputs_from_state,
            outputs_to_state=outputs_to_state,
        )
        self.function = self._invoke
        self.async_function = self._invoke_async

    def _invoke(self, **kwargs: Any) -> dict[str, Any]:
        """
        The tool function: run the pipeline (the call is recorded), then raise for a rejected or failed lookup.

        :param kwargs: The tool call's arguments (`query`, `session_id`).
        :returns: `{"result": <LookupResult JSON>}`.
        :raises LookupToolError: For `invalid_query` and `error` results.
        """
        query = kwargs.pop("query", None)
        session_id = kwargs.pop("session_id", None)
        if kwargs:
            logger.warning(
                "{tool} ignores unexpected arguments {names}; it takes query and session_id",
                tool=self.name,
                names=sorted(kwargs),
            )
        if query is None:
            query = ""
        if session_id is not None and not isinstance(session_id, str):
            session_id = str(session_id)
        output = {"result": self.lookup_result(query, session_id=session_id)}
        raise_for_status(output["result"])
        return output

    async def _invoke_async(self, **kwargs: Any) -> dict[str, Any]:
        """
        The async tool function (`Agent.run_async`): `_invoke` in a worker thread.

        :param kwargs: The tool call's arguments.
        :returns: `{"result": <LookupResult JSON>}`.
        :raises LookupToolError: For `invalid_query` and `error` results.
        """
        return await asyncio.to_thread(self._invoke, **kwargs)

    @property
    def pipeline(self) -> Pipeline:
        """The lookup pipeline this tool runs (read it, e.g. for its collection; run it only through the tool)."""
        return self._pipeline

    def lookup_result(self, query: Any, session_id: str | None = None) -> dict[str, Any]:
        """
        One call through the service: the full `LookupResult`, never raising.

        :param query: The query (a non-string is rejected by the query transformer, and recorded).
        :param session_id: The caller's session.
        :returns: The camelCase `LookupResult` JSON (with `traceId`); the call is recorded.
        """
        # the service's `lookup`, not PipelineTool's own call: a component that raises is recorded as `error` too
        return self.service.lookup(query, session_id=session_id)

    def lookup(self, query: str, session_id: str | None = None) -> dict[str, Any]:
        """
        One call outside an agent (the MCP server uses this): the compact result, or `LookupToolError`.

        :param query: The query.
        :param session_id: The caller's session.
        :returns: The compact result (`compact_result`).
        :raises LookupToolError: For `invalid_query` and `error` results (the call is recorded).
        """
        self.warm_up()
        return compact_result(self._invoke(query=query, session_id=session_id)["result"])


def lookup_knowledge_tool(
    path: str | Path = DEFAULT_LOOKUP_PIPELINE,
    *,
    data_dir: str | Path | None = None,
    milvus_uri: str | None = None,
    trace_db_url: str | None = None,
    component_params: dict[str, dict[str, Any]] | None = None,
    pipeline: Pipeline | None = None,
) -> LookupKnowledgeTool:
    """
    Build the `lookup_knowledge` tool for a Haystack `Agent`.

    ```python
    from haystack.components.agents import Agent
    from pipelines.entrypoints.agent_tool import lookup_knowledge_tool

    agent = Agent(chat_generator=chat_generator, tools=[lookup_knowledge_tool(data_dir="data")])
    ```

    :param path: The lookup pipeline YAML (default `pipelines.yaml`).
    :param data_dir: Data folder (else `LOOKUP_KNOWLEDGE_DATA_DIR`, else `./data`).
    :param milvus_uri: Milvus URI (else `MILVUS_URI`, else Milvus Lite in the data folder).
    :param trace_db_url: Trace database URL (else `TRACE_DB_URL`, else SQLite in the data folder).
    :param component_params: `{component: {init_param: value}}` overrides.
    :param pipeline: An already loaded lookup pipeline to wrap instead of loading `path`.
    :returns: The tool (named `lookup_knowledge`, arguments `query` and optional `session_id`).
    :raises ValueError: If `pipeline` is given together with loading options.
    """
    if pipeline is not None:
        if any(option is not None for option in (data_dir, milvus_uri, trace_db_url, component_params)):
            msg = "pass either pipeline=... or the options to load one (data_dir, milvus_uri, ...), not both"
            raise ValueError(msg)
        return LookupKnowledgeTool(pipeline)
    return LookupKnowledgeTool(
        KnowledgeService.load(
            path, data_dir=data_dir, milvus_uri=milvus_uri, trace_db_url=trace_db_url, component_params=component_params
        )
    )
