"""Load the lookup pipeline and run `lookup_knowledge` calls through it (imported as `from pipelines import ...`)."""

from __future__ import annotations

import components  # noqa: F401 - first: it switches Haystack's telemetry off before Haystack is imported

# isort: split

import contextlib
import threading
import time
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from haystack import Pipeline, tracing

from components.evidence.context_packer import ContextPacker
from components.evidence.session_evidence_filter import SessionEvidenceFilter
from components.query.document_filter_resolver import DocumentFilterResolver
from components.query.l0_hint_provider import L0HintProvider
from components.query.query_transformer import QueryTransformer
from components.trace.session_key import normalize_session_id
from components.trace.trace_recorder import TraceRecorder
from pipelines.access import ANONYMOUS, Principal
from pipelines.loading import load_pipeline_file, node_of_type
from pipelines.settings import DEFAULT_LOOKUP_PIPELINE, Deployment
from pipelines.spans import enable_spans_from_env
from pipelines.startup import resume_collection

__all__ = ["load_pipeline", "lookup", "lookup_inputs", "lookup_with_details"]


def load_pipeline(
    path: str | Path = DEFAULT_LOOKUP_PIPELINE,
    *,
    data_dir: str | Path | None = None,
    milvus_uri: str | None = None,
    trace_db_url: str | None = None,
    component_params: dict[str, dict[str, Any]] | None = None,
    warm_up: bool = True,
) -> Pipeline:
    """
    Load the lookup pipeline (`pipelines.yaml`) through the deserialization allowlist, warmed up and ready to run.

    :param path: The pipeline YAML.
    :param data_dir: Data folder (else `LOOKUP_KNOWLEDGE_DATA_DIR`, else `./data`).
    :param milvus_uri: Milvus URI (else `MILVUS_URI`, else Milvus Lite in the data folder).
    :param trace_db_url: Trace database URL (else `TRACE_DB_URL`, else SQLite in the data folder).
    :param component_params: `{component: {init_param: value}}` overrides; a dict for a nested object's parameter
        (such as the retriever's `collection`) changes that object's parameters.
    :param warm_up: Warm the components up now (connect, open the index). With False, a component that cannot warm
        up (an unreadable knowledge index, a store that is down) is not raised here: the first `lookup` warms up,
        and records the failure as its answer.
    :returns: The pipeline (spans of its lookups go to OpenTelemetry when `LOOKUP_KNOWLEDGE_SPANS=1`).
    :raises ValueError: If the file is not a pipeline, or a parameter is invalid.
    """
    enable_spans_from_env()
    deployment = Deployment.resolve(data_dir, milvus_uri, trace_db_url)
    pipeline = load_pipeline_file(path, deployment, component_params)
    if warm_up:
        pipeline.warm_up()
    else:
        with contextlib.suppress(Exception):  # what fails is raised again by the first run, which records it
            pipeline.warm_up()
    resume_collection()  # paused by the command line while it started (`pipelines.startup`)
    return pipeline


def _add_input(
    inputs: dict[str, dict[str, Any]], pipeline: Pipeline, cls: type, socket: str, value: Any, argument: str
) -> None:
    """Address an optional argument to the one node of a type; an argument the pipeline has no node for is refused."""
    if value is None:
        return
    try:
        name, _ = node_of_type(pipeline, cls)
    except ValueError as err:
        msg = f"this lookup pipeline cannot take `{argument}`: {err}"
        raise ValueError(msg) from None
    inputs.setdefault(name, {})[socket] = value


def _add_caller(inputs: dict[str, dict[str, Any]], pipeline: Pipeline, principal: Principal) -> None:
    """Address who is calling to the nodes that act on it, those of them the pipeline has (the service refuses a
    pipeline without a `DocumentFilterResolver` on a knowledge base with restricted pages)."""
    for cls, socket, value in (
        (DocumentFilterResolver, "groups", list(principal.groups)),
        (L0HintProvider, "groups", list(principal.groups)),
        (SessionEvidenceFilter, "principal", principal.name),
        (TraceRecorder, "principal", principal.name),
    ):
        try:
            name, _ = node_of_type(pipeline, cls)
        except ValueError:  # no such node (a trimmed pipeline): nothing of this to act on
            continue
        inputs.setdefault(name, {})[socket] = value


def lookup_inputs(
    pipeline: Pipeline,
    query: Any,
    session_id: str | None = None,
    *,
    filters: Mapping[str, Any] | None = None,
    max_chars: int | None = None,
    exclude: list[str] | None = None,
    principal: Principal | None = None,
) -> dict[str, dict[str, Any]]:
    """
    The `Pipeline.run` inputs of one lookup, addressed to the pipeline's own node names.

    :param pipeline: A lookup pipeline.
    :param query: The agent's query (a non-string is rejected by the query transformer, and recorded).
    :param session_id: Optional session.
    :param filters: The caller's explicit filters, for the `DocumentFilterResolver`.
    :param max_chars: The caller's character budget, for the `ContextPacker`.
    :param exclude: Evidence and text keys earlier pages delivered (a cursor's), for the `SessionEvidenceFilter`.
    :param principal: Who is calling (default `ANONYMOUS`: public pages only): its groups for the
        `DocumentFilterResolver` and the `L0HintProvider`, its name for the `SessionEvidenceFilter` and the recorder.
    :returns: The inputs.
    :raises ValueError: If the pipeline lacks a `QueryTransformer` or a `TraceRecorder`, or the node an optional
        argument goes to.
    """
    transformer, _ = node_of_type(pipeline, QueryTransformer)
    recorder, _ = node_of_type(pipeline, TraceRecorder)
    inputs: dict[str, dict[str, Any]] = {
        transformer: {"query": query, "session_id": session_id},
        recorder: {"raw_query": query if isinstance(query, str) else repr(query)},
    }
    _add_input(inputs, pipeline, DocumentFilterResolver, "filters", dict(filters) if filters else None, "filters")
    _add_input(inputs, pipeline, ContextPacker, "char_budget", max_chars, "max_chars")
    _add_input(inputs, pipeline, SessionEvidenceFilter, "exclude", list(exclude) if exclude else None, "cursor")
    _add_caller(inputs, pipeline, principal or ANONYMOUS)
    return inputs


#: striped locks: lookups of one session are serialized (read session memory, answer, record), a bounded set of
#: locks for any number of sessions
_SESSION_LOCKS = [threading.Lock() for _ in range(64)]


def _session_lock(session_id: str | None) -> contextlib.AbstractContextManager[Any]:
    # the session the components see (" s1" and "s1" are one session, so they take one lock)
    session = normalize_session_id(session_id) if isinstance(session_id, str) else ""
    if not session:
        return contextlib.nullcontext()
    return _SESSION_LOCKS[zlib.crc32(session.encode("utf-8", "surrogatepass")) % len(_SESSION_LOCKS)]


def lookup(
    pipeline: Pipeline,
    query: Any,
    session_id: str | None = None,
    *,
    filters: Mapping[str, Any] | None = None,
    max_chars: int | None = None,
    exclude: list[str] | None = None,
    principal: Principal | None = None,
) -> dict[str, Any]:
    """
    Run one `lookup_knowledge` call through a loaded pipeline; every call leaves exactly one trace row.

    Lookups of one session run one at a time (in this process), so two concurrent calls of a session never both
    return the same evidence; other sessions run in parallel. A component that raises (a corrupt knowledge index
    inside L0, a broken store) does not escape: the recorder records the call as `error`, naming the component, and
    that result is returned. With spans on (`pipelines.spans`), the call is one `lookup_knowledge` span around the
    pipeline's, tagged with the trace row id.

    :param pipeline: From `load_pipeline`.
    :param query: The agent's query (a non-string is rejected by the query transformer, and recorded).
    :param session_id: Optional session; evidence already returned in it is not returned again.
    :param filters: Explicit filters (`category`, `tags`, `source_prefix`, `updated_after`, declared fields): strict.
    :param max_chars: The character budget of the evidence (capped by the packer's `max_char_budget`).
    :param exclude: Evidence and text keys not to return again (what a cursor's earlier pages delivered).
    :param principal: Who is calling (default `ANONYMOUS`: public pages only; `pipelines.access`).
    :returns: The camelCase `LookupResult` JSON (with `traceId`).
    """
    return lookup_with_details(
        pipeline, query, session_id, filters=filters, max_chars=max_chars, exclude=exclude, principal=principal
    )[0]


def lookup_with_details(
    pipeline: Pipeline,
    query: Any,
    session_id: str | None = None,
    *,
    filters: Mapping[str, Any] | None = None,
    max_chars: int | None = None,
    exclude: list[str] | None = None,
    principal: Principal | None = None,
) -> tuple[dict[str, Any], Mapping[str, Any]]:
    """
    `lookup`, also returning what the trace row records about the call (for measuring it: `eval`).

    :param pipeline: From `load_pipeline`.
    :param query: The agent's query.
    :param session_id: Optional session.
    :param filters: As for `lookup`.
    :param max_chars: As for `lookup`.
    :param exclude: As for `lookup`.
    :param principal: As for `lookup`.
    :returns: The `LookupResult` JSON, and the snake_case `retrieval_details` recorded with it (L0 hints, the
        retrieval trace, the `ranking` the evidence gate judged, the sidecar's report, ...).
    """
    name, recorder = node_of_type(pipeline, TraceRecorder)
    started_at = time.time()
    with (
        _session_lock(session_id),
        tracing.tracer.trace("lookup_knowledge", tags={"lookup_knowledge.tool": recorder.tool_name}) as span,
    ):
        try:
            inputs = lookup_inputs(
                pipeline,
                query,
                session_id,
                filters=filters,
                max_chars=max_chars,
                exclude=exclude,
                principal=principal,
            )
            out = pipeline.run(inputs)[name]
            result, details = out["result"], out["details"]
        except Exception as err:  # the pipeline stopped before its recorder: the call is still recorded, once
            who = (principal or ANONYMOUS).name
            result = recorder.record_failure(query, session_id, err, started_at=started_at, principal=who)
            details = {"retrieval_layer": "none", "error": result.get("error")}
        span.set_tags(
            {"lookup_knowledge.trace_id": result.get("traceId"), "lookup_knowledge.status": result["evidenceStatus"]}
        )
    return result, details
