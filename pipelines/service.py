"""The one service every entry point calls: the command line, the MCP server, the REST routes, hayhooks, the Agent tool.

A `KnowledgeService` holds one loaded lookup pipeline and answers `lookup_knowledge` calls on it, with its health
and what it has indexed. Entry points import this module, never a pipeline node or a store: what a call does is the
same whichever way it comes in. Calls run concurrently; only the calls of one session (by its normalized id) are
serialized, so that two of them never both return the same evidence.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Literal

from haystack import Pipeline
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from components.query.query_transformer import QueryTransformer
from components.store.knowledge_collection import KnowledgeCollection
from components.store.knowledge_index import CachedKnowledgeIndex, IndexedDocument
from components.trace.trace_recorder import TraceRecorder
from pipelines.api import load_pipeline, lookup
from pipelines.entrypoints.dify_knowledge import DEFAULT_KNOWLEDGE_ID
from pipelines.loading import node_of_type
from pipelines.settings import DEFAULT_LOOKUP_PIPELINE, Deployment

__all__ = ["Health", "KnowledgeService"]


class Health(BaseModel):
    """The body of `GET /health` (camelCase keys, as in the `LookupResult`)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)

    status: Literal["ok", "unavailable", "error"] = Field(
        description="ok; unavailable: the store did not answer or nothing is indexed; error: the check itself failed."
    )
    store_reachable: bool
    collection: str
    collection_exists: bool
    index_version: int = Field(description="The knowledge index file's signature (0: nothing indexed).")
    documents: int = Field(description="Documents in the knowledge index.")
    chunks: int | None = Field(description="Rows in the collection (null when the store did not answer).")
    error: str | None = None


def _one_line(err: Exception) -> str:
    """An exception as one line (pydantic's and others' messages span several), at most 300 characters."""
    return " ".join(f"{type(err).__name__}: {err}".split())[:300]


class KnowledgeService:
    """
    `lookup_knowledge` on one loaded lookup pipeline, for every entry point.

    Lookups are `pipelines.lookup` calls: each leaves exactly one trace row, runs concurrently with the others, and
    waits only for the calls of its own session. Health is read on a connection of its own to the same collection,
    so it neither waits for nor disturbs a lookup.

    ### Usage example

    ```python
    from pipelines.service import KnowledgeService

    service = KnowledgeService.load(data_dir="data")
    print(service.lookup("disk full on a node", session_id="chat-42")["evidenceStatus"], service.health()["status"])
    ```
    """

    def __init__(self, pipeline: Pipeline, deployment: Deployment | None = None) -> None:
        """
        :param pipeline: A lookup pipeline (`pipelines.load_pipeline`).
        :param deployment: Where the pipeline's knowledge lies (default: `Deployment.resolve()`, the environment's or
            `./data`): health and what is indexed are read from its knowledge store, on a connection of their own.
        :raises ValueError: If the pipeline has no (or more than one) `QueryTransformer` or `TraceRecorder`, the
            nodes that make it a lookup pipeline.
        """
        self.pipeline = pipeline
        self._query_node, _ = node_of_type(pipeline, QueryTransformer)
        self._recorder_node, recorder = node_of_type(pipeline, TraceRecorder)
        self.tool_name = recorder.tool_name
        deployment = deployment or Deployment.resolve()
        self._probe = KnowledgeCollection(uri=deployment.milvus_uri, index_path=str(deployment.index_path))
        self._probe_lock = threading.Lock()
        self._index = CachedKnowledgeIndex(deployment.index_path)
        self._index_lock = threading.Lock()

    @classmethod
    def load(
        cls,
        path: str | Path = DEFAULT_LOOKUP_PIPELINE,
        *,
        data_dir: str | Path | None = None,
        milvus_uri: str | None = None,
        trace_db_url: str | None = None,
        component_params: dict[str, dict[str, Any]] | None = None,
        warm_up: bool = True,
    ) -> KnowledgeService:
        """
        Load the lookup pipeline and wrap it (`pipelines.load_pipeline` takes the same arguments).

        :param path: The pipeline YAML.
        :param data_dir: Data folder.
        :param milvus_uri: Milvus URI.
        :param trace_db_url: Trace database URL.
        :param component_params: Init parameter overrides per component.
        :param warm_up: Warm up now (False: a component that cannot is not raised; the first lookup records it).
        :returns: The service.
        :raises ValueError: If the file is not a lookup pipeline, or a parameter is invalid.
        """
        pipeline = load_pipeline(
            path,
            data_dir=data_dir,
            milvus_uri=milvus_uri,
            trace_db_url=trace_db_url,
            component_params=component_params,
            warm_up=warm_up,
        )
        return cls(pipeline, Deployment.resolve(data_dir, milvus_uri, trace_db_url))

    def lookup(self, query: Any, session_id: str | None = None) -> dict[str, Any]:
        """
        One `lookup_knowledge` call (blocking; recorded; never raising).

        :param query: The query (a non-string is rejected by the query transformer, and recorded).
        :param session_id: The caller's session: evidence already returned in it is not returned again.
        :returns: The camelCase `LookupResult` JSON, with its `traceId`.
        """
        return lookup(self.pipeline, query, session_id=session_id)

    def tool_sockets(self) -> tuple[dict[str, list[str]], dict[str, str]]:
        """
        Where a `PipelineTool` on this pipeline puts its arguments and finds its result, whatever the nodes are named.

        :returns: The input mapping (`query` to the query transformer and the recorder's `raw_query`, `session_id`
            to the query transformer) and the output mapping (the recorder's `result` as `result`).
        """
        inputs = {
            "query": [f"{self._query_node}.query", f"{self._recorder_node}.raw_query"],
            "session_id": [f"{self._query_node}.session_id"],
        }
        return inputs, {f"{self._recorder_node}.result": "result"}

    def warm_up(self) -> None:
        """Warm the pipeline up (idempotent): connect, open the index, load the models."""
        self.pipeline.warm_up()

    @property
    def collection_name(self) -> str:
        """The collection lookups read (after a rebuild, the new one)."""
        return self._probe.schema.collection_name

    def knowledge_ids(self) -> set[str]:
        """
        :returns: The `knowledge_id` values Dify may send: `lookup-knowledge` and the collection's name.
        """
        return {DEFAULT_KNOWLEDGE_ID, self.collection_name}

    def documents(self) -> dict[str, IndexedDocument]:
        """
        :returns: The indexed documents by source (read again after a re-index).
        """
        with self._index_lock:
            return self._index.get()[0].by_source()

    def _indexed(self) -> tuple[int, int, str | None]:
        """The knowledge index file's documents and signature, or why it cannot be read (health never raises)."""
        with self._index_lock:
            try:
                version = self._index.signature()
                documents = len(self._index.get()[0].documents)
            except Exception as err:  # a corrupt or unreadable file, whatever its reader raises
                reason = f"knowledge index {self._index.path} cannot be read ({_one_line(err)})"
                return 0, 0, f"{reason}; `lookup-knowledge index` writes it again"
        return documents, version, None

    def health(self) -> dict[str, Any]:
        """
        Read the knowledge index file, and ask the store whether the collection is there and how many rows it has
        (blocking; never raises).

        :returns: The `Health` body as a dict: `status` `ok`; `unavailable` (the store did not answer, or the
            collection does not exist); or `error` (the knowledge index file cannot be read; then the store is not
            asked, since the file names the collection), with the reason in `error`.
        """
        documents, version, index_error = self._indexed()
        reachable, exists, chunks, error = False, False, None, index_error
        with self._probe_lock:
            if index_error is None:
                try:
                    exists = self._probe.exists()
                    chunks = self._probe.count() if exists else 0
                    reachable = True
                except Exception as err:  # whatever the client raises: the store did not answer
                    error = _one_line(err)
            name = self._probe.schema.collection_name
        if reachable and not exists:
            error = f"collection {name!r} does not exist; run `lookup-knowledge index` first"
        status: Literal["ok", "unavailable", "error"] = "ok" if reachable and exists else "unavailable"
        if index_error is not None:
            status = "error"
        return Health(
            status=status,
            store_reachable=reachable,
            collection=name,
            collection_exists=exists,
            index_version=version,
            documents=documents,
            chunks=chunks,
            error=error,
        ).model_dump(by_alias=True)

    def close(self) -> None:
        """Release the health probe's connection (the pipeline's components keep theirs)."""
        self._probe.close()
