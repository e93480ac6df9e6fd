"""The one service every entry point calls: the command line, the MCP server, the REST routes, hayhooks, the Agent tool.

A `KnowledgeService` holds one loaded lookup pipeline and answers `lookup_knowledge` calls on it, with its health
and what it has indexed. Entry points import this module, never a pipeline node or a store: what a call does is the
same whichever way it comes in. Calls run concurrently; only the calls of one session (by its normalized id) are
serialized, so that two of them never both return the same evidence.
"""

from __future__ import annotations

import re
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from haystack import Document, Pipeline, logging
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from components.core.access import reader_groups
from components.core.cursor import Cursor
from components.query.document_filter_resolver import DocumentFilterResolver
from components.query.query_transformer import QueryTransformer
from components.store.knowledge_collection import KnowledgeCollection
from components.store.knowledge_index import CachedKnowledgeIndex, IndexedDocument, KnowledgeIndex
from components.trace.trace_recorder import TraceRecorder
from pipelines.access import ANONYMOUS, Principal
from pipelines.api import load_pipeline, lookup
from pipelines.entrypoints.dify_knowledge import DEFAULT_KNOWLEDGE_ID
from pipelines.knowledge_reads import DocumentRead, EvidenceRead, facets_of, read_document, read_evidence
from pipelines.loading import node_of_type
from pipelines.settings import DEFAULT_LOOKUP_PIPELINE, Deployment
from pipelines.tool_contract import tool_description

__all__ = ["Health", "KnowledgeService"]

logger = logging.getLogger(__name__)

#: a tool name MCP clients accept
TOOL_NAME_PATTERN = re.compile(r"[A-Za-z0-9_-]{1,64}")
#: categories a default tool description names (the most common first)
DESCRIBED_CATEGORIES = 8


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


def _paged(
    query: Any, filters: dict[str, Any] | None, cursor: Any
) -> tuple[Any, dict[str, Any] | None, list[str] | None]:
    """The query, filters and evidence keys to hold back of a call: its own, or its cursor's next page."""
    if cursor is None or cursor == "":
        return query, filters, None
    page = Cursor.decode(cursor)
    given = " ".join(query.split()) if isinstance(query, str) else query
    if given not in (None, "", page.query):
        msg = f"this cursor continues the lookup of {page.query[:200]!r}, not {str(given)[:200]!r}: pass the same query"
        raise ValueError(msg)
    if filters and dict(filters) != page.filters:
        msg = "this cursor continues a lookup with other filters: pass the cursor alone (it carries them)"
        raise ValueError(msg)
    return page.query, page.filters or None, list(page.delivered)


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
        self._recorder_node, self._recorder = node_of_type(pipeline, TraceRecorder)
        self.tool_name = self._recorder.tool_name
        self._enforced = any(isinstance(node, DocumentFilterResolver) for _, node in pipeline.walk())
        #: the knowledge base's name (its collection's, unless a server serving several names it)
        self.name = ""
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

    def lookup(
        self,
        query: Any,
        session_id: str | None = None,
        *,
        filters: dict[str, Any] | None = None,
        max_chars: Any = None,
        cursor: Any = None,
        principal: Principal | None = None,
    ) -> dict[str, Any]:
        """
        One `lookup_knowledge` call (blocking; recorded; never raising).

        :param query: The query (a non-string is rejected by the query transformer, and recorded). With a `cursor`
            it may be left empty (the cursor's query is used); a different query is refused.
        :param session_id: The caller's session: evidence already returned in it is not returned again.
        :param filters: Explicit filters (`category`, `tags`, `source_prefix`, `updated_after`, declared fields):
            strict; filters that match nothing say so and name the values that exist.
        :param max_chars: The evidence's character budget (capped by configuration).
        :param cursor: A result's `cursor`: the next blocks of that lookup (its query and filters), none repeated.
        :param principal: Who is calling (default `ANONYMOUS`: public pages only): only pages it may read are
            searched, hinted at, remembered or named.
        :returns: The camelCase `LookupResult` JSON, with its `traceId`.
        """
        started_at = time.time()
        caller = principal or ANONYMOUS
        try:
            query, filters, exclude = _paged(query, filters, cursor)
            if max_chars is not None and (isinstance(max_chars, bool) or not isinstance(max_chars, int)):
                msg = f"max_chars must be a whole number of characters, not {max_chars!r}"
                raise ValueError(msg)
            self._check_enforced()
        except ValueError as err:
            return self._recorder.record_rejection(
                query, session_id, str(err), started_at=started_at, principal=caller.name
            )
        return lookup(
            self.pipeline,
            query,
            session_id=session_id,
            filters=filters,
            max_chars=max_chars,
            exclude=exclude,
            principal=caller,
        )

    def _check_enforced(self) -> None:
        """Refuse to look up restricted pages with a pipeline that has no node enforcing access (fail closed)."""
        if self._enforced:
            return
        try:
            index = self._current()
        except Exception:  # a damaged index: the lookup itself fails and records why
            return
        if index.restricted:
            msg = (
                "this knowledge base has pages restricted by `access`, and this lookup pipeline has no "
                "DocumentFilterResolver to enforce it: add the node (see pipelines.yaml)"
            )
            raise ValueError(msg)

    def facets(self, session_id: str | None = None, principal: Principal | None = None) -> dict[str, Any]:
        """
        `list_facets`: what a caller may filter on (with document counts and sample values) and what is indexed.

        :param session_id: The caller's session (recorded with the call).
        :param principal: Who is calling (default `ANONYMOUS`): the facets count only the pages it may read.
        :returns: The `Facets` JSON (camelCase).
        """
        started_at = time.time()
        caller = principal or ANONYMOUS
        with self._index_lock:
            index, _ = self._index.get()
            version = self._index.signature()
        written = self._index.path.stat().st_mtime if version else None
        visible = index.readable_by(reader_groups(caller.groups))
        facets = facets_of(visible, self.name or self.collection_name, version, written, complete=visible is index)
        body = facets.model_dump(by_alias=True)
        details = {"documents": body["documents"], "index_version": version}
        self._record(
            "list_facets",
            "",
            session_id,
            "evidence" if body["documents"] else "not_found",
            details,
            found=bool(body["documents"]),
            started_at=started_at,
            principal=caller,
        )
        return body

    def read_evidence(
        self,
        citation: Any,
        before: Any = 1,
        after: Any = 1,
        max_chars: Any = None,
        session_id: str | None = None,
        principal: Principal | None = None,
    ) -> dict[str, Any]:
        """
        `read_evidence`: the chunk a citation names, with its neighbours (recorded; never raising).

        :param citation: A block's `citation`.
        :param before: Neighbouring chunks before it (default 1).
        :param after: Neighbouring chunks after it (default 1).
        :param max_chars: The read's character budget.
        :param session_id: The caller's session.
        :param principal: Who is calling (default `ANONYMOUS`): a page it may not read is `not_found`, as a page that
            does not exist is.
        :returns: The `EvidenceRead` JSON: `invalid_request` for a citation that is none, `not_found` for a document
            no longer indexed, `changed` when the document changed since the citation was returned.
        """
        request = f"{citation} (before {before}, after {after})"
        return self._read(
            "read_evidence",
            request,
            session_id,
            EvidenceRead,
            lambda index: read_evidence(index, self._fetch, citation, before, after, max_chars),
            principal or ANONYMOUS,
        )

    def read_document(
        self,
        source: Any,
        section: Any = None,
        max_chars: Any = None,
        session_id: str | None = None,
        principal: Principal | None = None,
    ) -> dict[str, Any]:
        """
        `read_document`: a document, or one section of it, in order (recorded; never raising).

        :param source: The document's source (a block's `source`).
        :param section: A heading path or heading; None for the whole document.
        :param max_chars: The read's character budget.
        :param session_id: The caller's session.
        :param principal: Who is calling (default `ANONYMOUS`): a page it may not read is `not_found`.
        :returns: The `DocumentRead` JSON (with the document's `sections`).
        """
        request = f"{source}" + (f" > {section}" if section else "")
        return self._read(
            "read_document",
            request,
            session_id,
            DocumentRead,
            lambda index: read_document(index, self._fetch, source, section, max_chars),
            principal or ANONYMOUS,
        )

    def _fetch(self, ids: list[str]) -> list[Document]:
        with self._probe_lock:
            return self._probe.fetch(ids)

    def _read(
        self,
        tool: str,
        request: str,
        session_id: str | None,
        model: type[EvidenceRead] | type[DocumentRead],
        read: Callable[[KnowledgeIndex], EvidenceRead | DocumentRead],
        caller: Principal,
    ) -> dict[str, Any]:
        started_at = time.time()
        try:
            # the pages the caller may not read are not in its index: reading one is `not_found`, as a page that does
            # not exist is (nothing tells it the page is there)
            index = self._current().readable_by(reader_groups(caller.groups))
        except Exception as err:  # a damaged index file is the server's failure, not the caller's request
            logger.warning("{tool} failed: {error}", tool=tool, error=_one_line(err))
            out = model(found=False, status="error", message=f"The read failed: {_one_line(err)}")
        else:
            try:
                out = read(index)
            except ValueError as err:
                out = model(found=False, status="invalid_request", message=str(err))
            except Exception as err:  # the store did not answer: an error result, recorded, never a dead server
                logger.warning("{tool} failed: {error}", tool=tool, error=_one_line(err))
                out = model(found=False, status="error", message=f"The read failed: {_one_line(err)}")
        details = {
            "read": {
                "status": out.status,
                "source": out.source,
                "citations": [b.citation for b in out.blocks],
                "chars": sum(len(b.content) for b in out.blocks),
                "truncated": out.truncated,
            }
        }
        error = out.message if out.status in ("invalid_request", "error") else None
        trace_id, trace_error = self._record(
            tool,
            request,
            session_id,
            out.status,
            details,
            found=out.found,
            error=error,
            started_at=started_at,
            principal=caller,
        )
        return out.model_copy(update={"trace_id": trace_id, "trace_error": trace_error}).model_dump(by_alias=True)

    def _record(
        self,
        tool: str,
        request: str,
        session_id: str | None,
        status: str,
        details: dict[str, Any],
        *,
        found: bool,
        error: str | None = None,
        started_at: float | None = None,
        principal: Principal = ANONYMOUS,
    ) -> tuple[int | None, str | None]:
        return self._recorder.record_call(
            tool,
            request,
            session_id,
            status,
            details,
            found=found,
            error=error,
            started_at=started_at,
            principal=principal.name,
        )

    def name_tool(self, name: str) -> None:
        """
        Serve the lookup under another tool name (`serve --tool-name`): the tool and its trace rows carry it.

        :param name: 1 to 64 letters, digits, `_` or `-` (what MCP clients accept as a tool name).
        :raises ValueError: If the name is not one.
        """
        if not isinstance(name, str) or not TOOL_NAME_PATTERN.fullmatch(name):
            msg = f"tool name {name!r} must be 1 to 64 letters, digits, '_' or '-', e.g. lookup_payments_kb"
            raise ValueError(msg)
        self._recorder.tool_name = name
        self.tool_name = name

    def filter_keys(self) -> list[str]:
        """
        :returns: The keys `filters` accepts on this knowledge base (built-in and declared filterable fields).
        """
        return DocumentFilterResolver.filterable_keys(self._current())

    def tool_description(self) -> str:
        """
        The tool's description: the pipeline's `metadata.tool_description` when set, else the evidence-first contract
        naming this knowledge base (its size, main categories and languages), so that two served knowledge bases are
        two tools an agent tells apart.

        :returns: The description.
        """
        configured = (self.pipeline.metadata or {}).get("tool_description")
        if isinstance(configured, str) and configured.strip():
            return configured.strip()
        # one description for every caller of the tool: what an anonymous caller may read
        whole = self._current()
        index = whole.readable_by(reader_groups(ANONYMOUS.groups))
        categories = Counter(d.category for d in index.documents if d.category)
        scope = "the knowledge base"
        if index.documents:
            top = ", ".join(name for name, _ in categories.most_common(DESCRIBED_CATEGORIES))
            more = ", …" if len(categories) > DESCRIBED_CATEGORIES else ""
            scope = f"the knowledge base of {len(index.documents)} documents" + (f" on {top}{more}" if top else "")
        # chunks per language are counted over the whole collection: named only when the caller reads all of it
        languages = whole.statistics.language_chunks if whole.statistics is not None and index is whole else {}
        ordered = sorted(languages, key=lambda code: -languages[code])
        return tool_description(scope, DocumentFilterResolver.filterable_keys(index), ordered)

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
        return {DEFAULT_KNOWLEDGE_ID, self.collection_name, *([self.name] if self.name else [])}

    def documents(self, principal: Principal | None = None) -> dict[str, IndexedDocument]:
        """
        :param principal: Who is asking (default `ANONYMOUS`): only the documents it may read.
        :returns: The indexed documents by source (read again after a re-index).
        """
        return self._current().readable_by(reader_groups((principal or ANONYMOUS).groups)).by_source()

    def _current(self) -> KnowledgeIndex:
        """The knowledge index as last written (read again after a re-index)."""
        with self._index_lock:
            return self._index.get()[0]

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
