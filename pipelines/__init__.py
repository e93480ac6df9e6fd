"""Public entry points: load the lookup pipeline, run `lookup_knowledge`, and build it as an agent tool."""

from __future__ import annotations

import components  # noqa: F401 - first: it switches Haystack's telemetry off before Haystack is imported

# isort: split

from pathlib import Path
from typing import TYPE_CHECKING, Any

from haystack import Pipeline

from components.query_transformer import QueryTransformer
from components.trace_recorder import TraceRecorder
from pipelines.loading import load_pipeline_file, node_of_type
from pipelines.settings import DEFAULT_LOOKUP_PIPELINE, Deployment

if TYPE_CHECKING:
    from pipelines.agent_tool import lookup_knowledge_tool

__all__ = ["load_pipeline", "lookup", "lookup_inputs", "lookup_knowledge_tool"]


def load_pipeline(
    path: str | Path = DEFAULT_LOOKUP_PIPELINE,
    *,
    data_dir: str | Path | None = None,
    milvus_uri: str | None = None,
    trace_db_url: str | None = None,
    component_params: dict[str, dict[str, Any]] | None = None,
) -> Pipeline:
    """
    Load the lookup pipeline (`pipelines.yaml`) through the deserialization allowlist, warmed up and ready to run.

    :param path: The pipeline YAML.
    :param data_dir: Data folder (else `LOOKUP_KNOWLEDGE_DATA_DIR`, else `./data`).
    :param milvus_uri: Milvus URI (else `MILVUS_URI`, else Milvus Lite in the data folder).
    :param trace_db_url: Trace database URL (else `TRACE_DB_URL`, else SQLite in the data folder).
    :param component_params: `{component: {init_param: value}}` overrides; a dict for a nested object's parameter
        (such as the retriever's `collection`) changes that object's parameters.
    :returns: The pipeline.
    """
    deployment = Deployment.resolve(data_dir, milvus_uri, trace_db_url)
    pipeline = load_pipeline_file(path, deployment, component_params)
    pipeline.warm_up()
    return pipeline


def lookup_inputs(pipeline: Pipeline, query: Any, session_id: str | None = None) -> dict[str, dict[str, Any]]:
    """
    The `Pipeline.run` inputs of one lookup, addressed to the pipeline's own node names.

    :param pipeline: A lookup pipeline.
    :param query: The agent's query (a non-string is rejected by the query transformer, and recorded).
    :param session_id: Optional session.
    :returns: The inputs.
    :raises ValueError: If the pipeline lacks a `QueryTransformer` or a `TraceRecorder`.
    """
    transformer, _ = node_of_type(pipeline, QueryTransformer)
    recorder, _ = node_of_type(pipeline, TraceRecorder)
    return {
        transformer: {"query": query, "session_id": session_id},
        recorder: {"raw_query": query if isinstance(query, str) else repr(query)},
    }


def lookup(pipeline: Pipeline, query: str, session_id: str | None = None) -> dict[str, Any]:
    """
    Run one `lookup_knowledge` call through a loaded pipeline.

    :param pipeline: From `load_pipeline`.
    :param query: The agent's query.
    :param session_id: Optional session; evidence already returned in it is not returned again.
    :returns: The camelCase `LookupResult` JSON (with `traceId`).
    """
    recorder, _ = node_of_type(pipeline, TraceRecorder)
    return pipeline.run(lookup_inputs(pipeline, query, session_id))[recorder]["result"]


def __getattr__(name: str) -> Any:
    # the agent tool pulls in Haystack's tool machinery; load it only when someone asks for it
    if name == "lookup_knowledge_tool":
        from pipelines.agent_tool import lookup_knowledge_tool

        return lookup_knowledge_tool
    msg = f"module {__name__!r} has no attribute {name!r}"
    raise AttributeError(msg)
