"""Public entry points: load the lookup pipeline and run `lookup_knowledge`."""

from __future__ import annotations

import os

# Haystack reads this when it is first imported; no network at run time (telemetry would try to phone home)
os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")

from pathlib import Path
from typing import Any

from haystack import Pipeline

from pipelines.loading import load_pipeline_file
from pipelines.settings import DEFAULT_LOOKUP_PIPELINE, Deployment

__all__ = ["load_pipeline", "lookup"]


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
    :param component_params: `{component: {init_param: value}}` overrides.
    :returns: The pipeline.
    """
    deployment = Deployment.resolve(data_dir, milvus_uri, trace_db_url)
    pipeline = load_pipeline_file(path, deployment, component_params)
    pipeline.warm_up()
    return pipeline


def lookup(pipeline: Pipeline, query: str, session_id: str | None = None) -> dict[str, Any]:
    """
    Run one `lookup_knowledge` call through a loaded pipeline.

    :param pipeline: From `load_pipeline`.
    :param query: The agent's query.
    :param session_id: Optional session; evidence already returned in it is not returned again.
    :returns: The camelCase `LookupResult` JSON (with `traceId`).
    """
    out = pipeline.run(
        {
            "query_transformer": {"query": query, "session_id": session_id},
            "recorder": {"raw_query": query if isinstance(query, str) else repr(query)},
        }
    )
    return out["recorder"]["result"]
