from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import replace
from typing import Any

from haystack import Document, component, default_from_dict, default_to_dict, logging

from components.core.embedding_backends import E5_SMALL, get_backend, validate_model_name
from components.core.frozen import FrozenList, Strings
from components.core.fusion import lexical_bonus
from components.core.scores import document_key, evidence_key
from components.store.knowledge_collection import (
    DENSE_PATHS,
    LEXICAL_SOURCES,
    KnowledgeCollection,
)
from components.store.knowledge_store import KnowledgeStore, deserialize_store_inplace

logger = logging.getLogger(__name__)

RETRIEVERS = ("bm25", "dense", "hybrid")
#: the `hybrid` comparison's BM25 weight: the shipped `HybridFusionRanker`'s, with its `ideal` normalization
HYBRID_WEIGHT = 0.15
_SCORE_LABELS = {
    "bm25": "bm25",
    "dense": "normalized similarity",
    "hybrid": "normalized similarity + lexical bonus",
}


@component
class SidecarRetriever:
    """
    An optional comparison retrieval next to the main one, reported in the trace only.

    It runs another retrieval for the same query through its own `KnowledgeCollection` (the main one's, or another
    collection or store): `dense` (plain embedding retrieval on the `haystack` or `sdk` path, with the same or
    another embedding `model`), `bm25` (Milvus full-text search or the in-process index), or `hybrid` (dense + BM25
    fused as the shipped `HybridFusionRanker` fuses them, unfiltered, without language balancing, on the chosen path
    — so the framework and SDK paths can be compared on the same retrieval). Its hits become comparable rows (doc id,
    source, title, breadcrumb, category, rank, preview, score label, value, raw score, semantics and path) and are
    compared with the main ranking: overlap, rank shifts, only-in-main and only-in-sidecar. Its output goes only to the
    trace (`retrieval_details.sidecar`); the lookup result is the same whether the sidecar is off, on, failing, hanging
    or timing out. Off (the default) it returns at once and connects to nothing. A comparison still running from an
    earlier lookup makes the next one skip (status `skipped`) instead of waiting behind it.

    ### Usage example

    ```python
    from components.retrievers.sidecar_retriever import SidecarRetriever
    from components.store.knowledge_collection import KnowledgeCollection

    sidecar = SidecarRetriever(KnowledgeCollection(uri="data/milvus.db"), enabled=True, retriever="bm25")
    sidecar.warm_up()
    report = sidecar.run(query="disk full", main_ranking=["alerts/disk.md#0", "alerts/disk.md#1"])["sidecar"]
    print(report["status"], report["comparison"]["overlap"])
    ```
    """

    def __init__(
        self,
        collection: KnowledgeStore | None = None,
        enabled: bool = False,
        retriever: str = "bm25",
        mode: str = "sdk",
        lexical_source: str = "auto",
        model: str = E5_SMALL,
        top_k: int = 10,
        timeout_ms: int = 2000,
        preview_chars: int = 120,
    ) -> None:
        """
        Create the sidecar; nothing connects until `warm_up` (and never while it is off).

        :param collection: The compared collection (default: `KnowledgeCollection()`, the data folder's).
        :param enabled: Run the comparison retrieval.
        :param retriever: `bm25`, `dense` (no filter, no BM25) or `hybrid` (dense + BM25 fused as the shipped
            `HybridFusionRanker` fuses them, no filter).
        :param mode: Dense search path of `dense` and `hybrid`: `haystack` (milvus-haystack) or `sdk` (pymilvus).
        :param lexical_source: Where BM25 runs for `bm25` and `hybrid`: `auto`, `milvus` or `local`.
        :param model: The offline embedding model of `dense` and `hybrid` (the one the compared collection was
            indexed with); the query is embedded again, only when the sidecar is on.
        :param top_k: Rows compared.
        :param timeout_ms: Longest wait for the comparison; after it the status is `timeout`.
        :param preview_chars: Length of each row's content preview.
        :raises ValueError: If a parameter is out of range.
        """
        if retriever not in RETRIEVERS:
            msg = f"retriever={retriever!r} is not supported; use one of {list(RETRIEVERS)}"
            raise ValueError(msg)
        if mode not in DENSE_PATHS:
            msg = f"mode={mode!r} is not a dense search path; use one of {list(DENSE_PATHS)}"
            raise ValueError(msg)
        if lexical_source not in LEXICAL_SOURCES:
            msg = f"lexical_source={lexical_source!r} is not supported; use one of {list(LEXICAL_SOURCES)}"
            raise ValueError(msg)
        for name, value in (("top_k", top_k), ("timeout_ms", timeout_ms)):
            if value < 1:
                msg = f"{name}={value!r} must be positive"
                raise ValueError(msg)
        validate_model_name(model)
        if preview_chars < 0:
            msg = f"preview_chars={preview_chars!r} must be >= 0"
            raise ValueError(msg)
        self.collection: KnowledgeStore = collection if collection is not None else KnowledgeCollection()
        self.enabled = enabled
        self.retriever = retriever
        self.mode = mode
        self.lexical_source = lexical_source
        self.model = model
        self.top_k = top_k
        self.timeout_ms = timeout_ms
        self.preview_chars = preview_chars
        self._pool: ThreadPoolExecutor | None = None
        self._pending: Future[list[Document]] | None = None
        self._init_error: str | None = None
        self._lock = threading.Lock()

    def to_dict(self) -> dict[str, Any]:
        """
        Serialize the sidecar with its collection.

        :returns: The serialized component.
        """
        return default_to_dict(
            self,
            collection=self.collection,
            enabled=self.enabled,
            retriever=self.retriever,
            mode=self.mode,
            lexical_source=self.lexical_source,
            model=self.model,
            top_k=self.top_k,
            timeout_ms=self.timeout_ms,
            preview_chars=self.preview_chars,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SidecarRetriever:
        """
        Deserialize the sidecar and its collection.

        :param data: From `to_dict`.
        :returns: The sidecar.
        """
        params = dict(data.get("init_parameters", {}))
        deserialize_store_inplace(params)
        return default_from_dict(cls, {**data, "init_parameters": params})

    def warm_up(self) -> None:
        """
        Start the worker thread, connect and load the model, only when enabled. Never raises: a failure is kept and
        reported as the status of every comparison until `close`.
        """
        if not self.enabled or self._pool is not None:
            return
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sidecar")
        try:
            self.collection.warm_up()
            if self.retriever != "bm25":
                self.collection.connect(self.mode)
                get_backend(self.model)  # load the model now, not inside the first lookup's timeout
        except Exception as err:
            self._init_error = f"initialization failed: {type(err).__name__}: {err}"
            logger.warning("Sidecar {error}", error=self._init_error)

    def close(self) -> None:
        """Stop the worker thread and release the connection."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
        self._pool = None
        self._pending = None
        self._init_error = None
        self.collection.close()

    def _embed(self, query: str) -> list[float]:
        return get_backend(self.model).embed_queries([query])[0].tolist()

    def _retrieve(self, query: str, hidden: Strings) -> list[Document]:
        searched_under = self.collection.active_versions()  # a re-index may switch versions mid-search
        filters = {"field": "id", "operator": "not in", "value": list(hidden)} if hidden else None
        if self.retriever == "dense":
            docs = self.collection.dense_search(
                self._embed(query), self.top_k * 2, filters=filters, path=self.mode
            )  # twice as deep: room for stale versions
            return self.collection.drop_superseded(docs, searched_under)[0]
        if self.retriever == "hybrid":
            return self._hybrid(query, searched_under, filters)
        pairs, path = self.collection.lexical_search(query, self.top_k, filters=filters, source=self.lexical_source)
        scores = dict(pairs)
        docs = [
            Document(
                id=d.id,
                content=d.content,
                score=scores[d.id],
                meta={**d.meta, "raw_score": scores[d.id], "score_semantics": "bm25", "retrieval_path": path},
            )
            for d in self.collection.fetch([cid for cid, _ in pairs])
        ]
        return self.collection.drop_superseded(docs, searched_under)[0]

    def _hybrid(self, query: str, searched_under: Mapping[str, str], filters: dict[str, Any] | None) -> list[Document]:
        """Dense and BM25 hits fused as the main pipeline fuses them by default (`HYBRID_WEIGHT`), hidden pages left
        out and no other filter."""
        vector = self._embed(query)
        hits = self.collection.dense_search(vector, self.top_k * 2, filters=filters, path=self.mode)  # room for stale
        for doc in hits:
            doc.meta["similarity"] = doc.score
        pairs, _ = self.collection.lexical_search(query, self.top_k, filters=filters, source=self.lexical_source)
        joined = self.collection.with_lexical(hits, pairs, query, vector, source=self.lexical_source)
        active = self.collection.drop_superseded(joined, searched_under)[0]
        fused = []
        for doc in active:
            bonus = lexical_bonus(doc.meta, HYBRID_WEIGHT, "ideal") or 0.0
            fused.append(replace(doc, score=float(doc.meta["similarity"]) + bonus))
        return sorted(fused, key=lambda d: -(d.score or 0.0))

    def _row(self, rank: int, doc: Document) -> dict[str, Any]:
        meta, content = doc.meta, doc.content or ""
        raw = meta.get("raw_score")
        return {
            "evidence_key": evidence_key(meta, doc.id),
            "doc_id": document_key(meta, doc.id),
            "source": meta.get("source"),
            "title": meta.get("title"),
            "breadcrumb": meta.get("breadcrumb"),
            "category": meta.get("category"),
            "rank": rank,
            "preview": content[: self.preview_chars] + ("…" if len(content) > self.preview_chars else ""),
            "score_label": _SCORE_LABELS[self.retriever],
            "score": round(float(doc.score or 0.0), 4),
            "raw_score": round(float(raw), 4) if isinstance(raw, int | float) else None,
            "score_semantics": meta.get("score_semantics"),
            "path": meta.get("retrieval_path"),
        }

    @staticmethod
    def _compare(main_keys: list[str], side_keys: list[str]) -> dict[str, Any]:
        main_rank = {k: i + 1 for i, k in enumerate(main_keys)}
        side_rank = {k: i + 1 for i, k in enumerate(side_keys)}
        shared = [k for k in side_keys if k in main_rank]
        return {
            "main_count": len(main_keys),
            "sidecar_count": len(side_keys),
            "overlap": len(shared),
            "overlap_ratio": round(len(shared) / len(side_keys), 4) if side_keys else 0.0,
            "rank_shifts": [
                {
                    "evidence_key": k,
                    "main_rank": main_rank[k],
                    "sidecar_rank": side_rank[k],
                    "shift": main_rank[k] - side_rank[k],
                }
                for k in shared
            ],
            "only_in_main": [k for k in main_keys if k not in side_rank],
            "only_in_sidecar": [k for k in side_keys if k not in main_rank],
        }

    def _submit(self, query: str, hidden: Strings) -> Future[list[Document]] | None:
        """Start the comparison, or None when the previous one is still running (it must not delay this lookup)."""
        with self._lock:
            if self._pending is not None and not self._pending.done():
                return None
            assert self._pool is not None
            self._pending = self._pool.submit(self._retrieve, query, hidden)
            return self._pending

    def _wait(self, future: Future[list[Document]]) -> tuple[str, list[Document], str | None]:
        try:
            return "ok", future.result(timeout=self.timeout_ms / 1000), None
        except FutureTimeout:
            future.cancel()
            return "timeout", [], f"no answer within {self.timeout_ms} ms"
        except Exception as err:
            return "failed", [], f"{type(err).__name__}: {err}"

    @component.output_types(sidecar=dict[str, Any])
    def run(
        self,
        query: str | None = None,
        main_ranking: list[str] | FrozenList[str] | None = None,
        hidden: Strings | None = None,
    ) -> dict[str, Any]:
        """
        Run the comparison retrieval and compare it with the main ranking.

        :param query: The normalized query.
        :param main_ranking: The main retrieval's evidence keys in rank order (the evidence gate's `ranking`).
        :param hidden: Chunks the comparison may not return either (`DocumentFilterResolver`'s: drafts, pages the
            caller may not read): its rows are recorded in the caller's trace row.
        :returns: `sidecar`: `{enabled, status, retriever, mode, collection, latency_ms, rows, comparison, error}`,
            where status is `off`, `ok`, `skipped` (a rejected query, or the previous comparison still running),
            `failed` (including a failed initialization) or `timeout`.
        """
        if not self.enabled:
            return {"sidecar": {"enabled": False, "status": "off"}}
        report: dict[str, Any] = {
            "enabled": True,
            "retriever": self.retriever,
            "mode": self.mode if self.retriever != "bm25" else None,
            "collection": self.collection.schema.collection_name,
        }
        empty: dict[str, Any] = {"rows": [], "comparison": None}
        if not (query or "").strip():
            return {"sidecar": {**report, **empty, "status": "skipped", "error": None}}
        self.warm_up()
        if self._init_error:
            return {"sidecar": {**report, **empty, "status": "failed", "error": self._init_error}}
        started = time.perf_counter()
        future = self._submit(query or "", hidden or [])
        status, docs, error = (
            ("skipped", [], "the previous comparison is still running") if future is None else self._wait(future)
        )
        if error:
            logger.warning("Sidecar retrieval {status}: {error}", status=status, error=error)
        rows = [self._row(rank, doc) for rank, doc in enumerate(docs[: self.top_k], start=1)]
        main_keys = list(dict.fromkeys(main_ranking or []))[: self.top_k]
        report.update(
            status=status,
            latency_ms=round((time.perf_counter() - started) * 1000, 2),
            rows=rows,
            comparison=self._compare(main_keys, [r["evidence_key"] for r in rows]) if status == "ok" else None,
            error=error,
        )
        return {"sidecar": report}
