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
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from components.core.lookup_result import FilterReport
from pipelines.access import ANONYMOUS, Principal
from pipelines.service import KnowledgeService
from pipelines.settings import DEFAULT_LOOKUP_PIPELINE
from pipelines.tool_contract import (
    TOOL_DESCRIPTION,
    TOOL_NAME,
    TOOL_PARAMETERS,
    tool_parameters,
)

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


#: Statuses that reach the agent as a tool error instead of a result.
ERROR_STATUSES = ("invalid_query", "error")

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


class _Served(BaseModel):
    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True)


class ServedBlock(_Served):
    """One piece of evidence as the agent receives it: sent once, with what it needs to cite and follow it."""

    citation: str = Field(description="Stable id of the block: read_evidence(citation) reads it whole, with context.")
    source: str
    title: str = ""
    breadcrumb: str = Field(default="", description="The section's headings, to cite.")
    location: str = Field(default="", description="Lines (text formats) or pages (PDF) in the file, to cite.")
    content: str
    similarity: float = Field(description="Normalized similarity to the query, 0-1, comparable across lookups.")
    hit_reasons: list[str] = Field(default_factory=list)
    truncated: bool = Field(default=False, description="The content was cut to fit max_chars.")


class ServedTrace(_Served):
    """Why the retrieval retried, if it did."""

    fallback_reason: str | None = None


class ServedResult(_Served):
    """The result of `lookup_knowledge` as an agent receives it: each piece of evidence once."""

    found: bool
    evidence_status: str
    message: str
    evidence_blocks: list[ServedBlock] = Field(default_factory=list)
    relevance_level: str = "none"
    completeness_hint: str = "none"
    truncated: bool = False
    more_available: bool = Field(default=False, description="More evidence passed: call again with `cursor`.")
    cursor: str | None = None
    filters: FilterReport | None = None
    retrieval_trace: ServedTrace = Field(default_factory=ServedTrace)
    trace_id: int | None = None
    trace_error: str | None = None
    error: str | None = None


def compact_result(result: dict[str, Any]) -> dict[str, Any]:
    """
    Reduce a `LookupResult` JSON dict to what an agent needs, each piece of evidence once (`ServedResult`).

    Kept: `found`, `evidenceStatus`, `message`, `evidenceBlocks` (citation, source, title, breadcrumb, location,
    content, similarity, hit reasons, truncated), `relevanceLevel`, `completenessHint`, `truncated`,
    `moreAvailable`, `cursor`, `filters`, `retrievalTrace.fallbackReason`, `traceId`, `traceError`, `error`. Dropped:
    the context pack's text (the blocks' content again, with headers), rank scores, the retrieval attempts, the
    rerank trace, the evidence decision, the L0 hints, the echoed query and session (all of it stays in the trace
    database).

    :param result: The camelCase `LookupResult` JSON (the lookup pipeline's `recorder.result`).
    :returns: The compact dict (JSON-serializable, camelCase).
    """
    blocks = [
        {name: block[to_camel(name)] for name in ServedBlock.model_fields if block.get(to_camel(name)) is not None}
        for block in (result.get("evidenceBlocks") or [])
    ]
    served = ServedResult(
        found=bool(result.get("found")),
        evidence_status=str(result.get("evidenceStatus")),
        message=result.get("message", ""),
        evidence_blocks=[ServedBlock.model_validate(b) for b in blocks],
        relevance_level=result.get("relevanceLevel", "none"),
        completeness_hint=result.get("completenessHint", "none"),
        truncated=bool(result.get("truncated")),
        more_available=bool(result.get("moreAvailable")),
        cursor=result.get("cursor"),
        filters=result.get("filters"),
        retrieval_trace=ServedTrace(fallback_reason=(result.get("retrievalTrace") or {}).get("fallbackReason")),
        trace_id=result.get("traceId"),
        trace_error=result.get("traceError"),
        error=result.get("error"),
    )
    return served.model_dump(mode="json", by_alias=True)


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

    The pipeline runs first, so every call (rejected ones included) is recorded; then a rejected or failed lookup raises
    `LookupToolError`, which an `Agent` turns into an error tool result. A missing `query` runs as an empty one
    (rejected and recorded), a non-string `session_id` is used as its string form, `filters`, `max_chars` and `cursor`
    go to the service as given (a wrong one is rejected and recorded), unexpected arguments are ignored (and logged).
    Its name is the pipeline's (`recorder.tool_name`) and its description, unless given, the pipeline's
    `metadata.tool_description` or one built from the knowledge base (its categories, languages and filter keys). Calls
    go through the `KnowledgeService`: the `Agent` may run tool calls in parallel threads, and they run in parallel, but
    for calls of one session, which run one after another.

    ### Usage example

    ```python
    from pipelines.entrypoints.agent_tool import LookupKnowledgeTool
    from pipelines import load_pipeline

    tool = LookupKnowledgeTool(KnowledgeService.load(data_dir="data"))
    print(tool.lookup("disk full on a node", session_id="chat-42")["evidenceBlocks"][0]["content"])
    ```
    """

    def __init__(
        self,
        service: KnowledgeService | Pipeline,
        *,
        name: str | None = None,
        description: str | None = None,
        input_mapping: dict[str, list[str]] | None = None,
        output_mapping: dict[str, str] | None = None,
        parameters: dict[str, Any] | None = None,
        outputs_to_string: dict[str, Any] | None = None,
        inputs_from_state: dict[str, str] | None = None,
        outputs_to_state: dict[str, dict[str, Any]] | None = None,
        principal: Principal | None = None,
    ) -> None:
        """
        Wrap the service of a loaded lookup pipeline.

        :param service: The service (`KnowledgeService.load`), or a lookup pipeline (`pipelines.load_pipeline`) to
            wrap in one.
        :param name: Tool name (default: the service's, `recorder.tool_name` in the YAML).
        :param description: Tool description (default: the service's, the evidence-first contract naming the
            knowledge base).
        :param input_mapping: Tool argument → pipeline input sockets (default: `query` to the `QueryTransformer`'s
            `query` and the `TraceRecorder`'s `raw_query`, `session_id` to the `QueryTransformer`, whatever their
            node names).
        :param output_mapping: Pipeline output → tool output (default: the `TraceRecorder`'s `result` as `result`).
        :param parameters: JSON schema of the arguments (default: `query` required; `session_id`, `filters` with the
            knowledge base's filter keys, `max_chars` and `cursor` optional).
        :param outputs_to_string: How the result becomes the agent's string (default: `compact_result_json`).
        :param inputs_from_state: See `PipelineTool`.
        :param outputs_to_state: See `PipelineTool`.
        :param principal: Whom the agent's calls are made for (`pipelines.access`; default `ANONYMOUS`: public pages
            only). It is fixed here, never taken from a tool call's arguments: a model cannot choose whom it reads as.
        """
        self.service = service if isinstance(service, KnowledgeService) else KnowledgeService(service)
        self.principal = principal or ANONYMOUS
        default_inputs, default_outputs = self.service.tool_sockets()
        super().__init__(
            self.service.pipeline,
            name=name or self.service.tool_name,
            description=description or self.service.tool_description(),
            input_mapping=input_mapping or default_inputs,
            output_mapping=output_mapping or default_outputs,
            parameters=parameters or tool_parameters(self.service.filter_keys()),
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
        options = {key: kwargs.pop(key) for key in ("filters", "max_chars", "cursor") if key in kwargs}
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
        output = {"result": self.lookup_result(query, session_id=session_id, **options)}
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

    def lookup_result(
        self, query: Any, session_id: str | None = None, principal: Principal | None = None, **options: Any
    ) -> dict[str, Any]:
        """
        One call through the service: the full `LookupResult`, never raising.

        :param query: The query (a non-string is rejected by the query transformer, and recorded).
        :param session_id: The caller's session.
        :param principal: Whom the call is for (default: the tool's `principal`).
        :param options: `filters`, `max_chars`, `cursor` (`KnowledgeService.lookup`).
        :returns: The camelCase `LookupResult` JSON (with `traceId`); the call is recorded.
        """
        # the service's `lookup`, not PipelineTool's own call: a component that raises is recorded as `error` too
        return self.service.lookup(query, session_id=session_id, principal=principal or self.principal, **options)

    def lookup(
        self, query: str, session_id: str | None = None, principal: Principal | None = None, **options: Any
    ) -> dict[str, Any]:
        """
        One call outside an agent (the MCP server uses this): the compact result, or `LookupToolError`.

        :param query: The query.
        :param session_id: The caller's session.
        :param principal: Whom the call is for (the server's identified caller; default: the tool's `principal`).
        :param options: `filters`, `max_chars`, `cursor`; None values are left out.
        :returns: The compact result (`compact_result`).
        :raises LookupToolError: For `invalid_query` and `error` results (the call is recorded).
        """
        self.warm_up()
        given = {key: value for key, value in options.items() if value is not None}
        result = self.lookup_result(query, session_id=session_id, principal=principal, **given)
        raise_for_status(result)
        return compact_result(result)


def lookup_knowledge_tool(
    path: str | Path = DEFAULT_LOOKUP_PIPELINE,
    *,
    data_dir: str | Path | None = None,
    milvus_uri: str | None = None,
    trace_db_url: str | None = None,
    component_params: dict[str, dict[str, Any]] | None = None,
    pipeline: Pipeline | None = None,
    name: str | None = None,
    description: str | None = None,
    principal: Principal | None = None,
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
    :param name: The tool's name (default: the pipeline's `recorder.tool_name`, `lookup_knowledge` as shipped); the
        trace rows carry it too.
    :param description: The tool's description (default: the pipeline's `metadata.tool_description`, else the
        evidence-first contract naming the knowledge base).
    :param principal: Whom the agent's calls are made for (default `ANONYMOUS`: public pages only).
    :returns: The tool (arguments `query`, and optional `session_id`, `filters`, `max_chars`, `cursor`).
    :raises ValueError: If `pipeline` is given together with loading options, or the name is not a tool name.
    """
    if pipeline is not None:
        if any(option is not None for option in (data_dir, milvus_uri, trace_db_url, component_params)):
            msg = "pass either pipeline=... or the options to load one (data_dir, milvus_uri, ...), not both"
            raise ValueError(msg)
        service = KnowledgeService(pipeline)
    else:
        service = KnowledgeService.load(
            path, data_dir=data_dir, milvus_uri=milvus_uri, trace_db_url=trace_db_url, component_params=component_params
        )
    if name is not None:
        service.name_tool(name)
    return LookupKnowledgeTool(service, description=description, principal=principal)
