from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from haystack import Document, component, logging

from components.embedding_backends import E5_SMALL, get_backend, validate_model_name
from components.filtered_retry_retriever import FilteredRetryRetriever, evidence_key

logger = logging.getLogger(__name__)

RETRIEVERS = ("bm25", "dense")


@component
class SidecarRetriever:
    """
    An optional comparison retrieval next to the main one, reported in the trace only.

    It runs another retriever (`bm25`, or plain `dense` with the same or another embedding `model`, on the same or
    another collection) for the same query,
    normalizes its hits into comparable rows (doc id, source, title, breadcrumb, category, rank, preview, score label
    and value) and compares them with the main ranking: overlap, rank shifts, only-in-main and only-in-sidecar. Its
    output goes only to the trace (`retrieval_details.sidecar`); the lookup result is the same whether the sidecar
    is off, on, failing or timing out. Off (the default) it returns at once and connects to nothing; its inputs are
    the query text and the main ranking's evidence keys only, so Haystack has little to copy for it either.

    ### Usage example

    ```python
    from components.sidecar_retriever import SidecarRetriever

    sidecar = SidecarRetriever(enabled=True, retriever="bm25", uri="data/milvus.db")
    sidecar.warm_up()
    report = sidecar.run(query="disk full", main_ranking=["alerts/disk.md#0", "alerts/disk.md#1"])["sidecar"]
    print(report["status"], report["comparison"]["overlap"])
    ```
    """

    def __init__(
        self,
        enabled: bool = False,
        retriever: str = "bm25",
        model: str = E5_SMALL,
        uri: str = "data/milvus.db",
        index_path: str = "data/knowledge_index.json",
        collection_name: str = "knowledge_chunks",
        metric_type: str = "L2",
        top_k: int = 10,
        timeout_ms: int = 2000,
        preview_chars: int = 120,
        token_env_var: str | None = "MILVUS_TOKEN",  # noqa: S107 - a variable name, not a secret
    ) -> None:
        """
        Create the sidecar; nothing connects until `warm_up` (and never while it is off).

        :param enabled: Run the comparison retrieval.
        :param retriever: `bm25` (the main retriever's BM25: in Milvus or in-process) or `dense` (plain embedding
            retrieval, no filter, no BM25).
        :param model: The offline embedding model of `dense` (it must be the one the compared collection was indexed
            with); the query is embedded again, only when the sidecar is on.
        :param uri: Milvus Lite `.db` path or server URI of the compared collection.
        :param index_path: The knowledge index file (active document versions).
        :param collection_name: The compared collection (another one than the main retriever's, if wanted).
        :param metric_type: The collection's metric.
        :param top_k: Rows compared.
        :param timeout_ms: Longest wait for the comparison; after it the status is `timeout`.
        :param preview_chars: Length of each row's content preview.
        :param token_env_var: Environment variable holding a server token.
        :raises ValueError: If a parameter is out of range.
        """
        if retriever not in RETRIEVERS:
            msg = f"retriever={retriever!r} is not supported; use one of {list(RETRIEVERS)}"
            raise ValueError(msg)
        for name, value in (("top_k", top_k), ("timeout_ms", timeout_ms)):
            if value < 1:
                msg = f"{name}={value!r} must be positive"
                raise ValueError(msg)
        validate_model_name(model)
        if preview_chars < 0:
            msg = f"preview_chars={preview_chars!r} must be >= 0"
            raise ValueError(msg)
        self.enabled = enabled
        self.retriever = retriever
        self.model = model
        self.uri = uri
        self.index_path = index_path
        self.collection_name = collection_name
        self.metric_type = metric_type
        self.top_k = top_k
        self.timeout_ms = timeout_ms
        self.preview_chars = preview_chars
        self.token_env_var = token_env_var
        # validates the store parameters now, connects only when used
        self._search = FilteredRetryRetriever(
            uri=uri,
            index_path=index_path,
            collection_name=collection_name,
            metric_type=metric_type,
            mode="sdk",
            top_k=top_k,
            token_env_var=token_env_var,
        )
        self._pool: ThreadPoolExecutor | None = None

    def warm_up(self) -> None:
        """Start the worker thread and connect, only when enabled."""
        if self.enabled and self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sidecar")
            self._search.warm_up()
            if self.retriever == "dense":
                get_backend(self.model)  # load the model now, not inside the first lookup's timeout

    def close(self) -> None:
        """Stop the worker thread and release the connection."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
        self._pool = None
        self._search.close()

    def _retrieve(self, query: str) -> list[Document]:
        if self.retriever == "dense":
            vector = get_backend(self.model).embed_queries([query])[0].tolist()
            out = self._search.run(query_embedding=vector, top_k=self.top_k)
            errors = [a["error"] for a in out["retrieval_trace"]["attempts"] if a["error"]]
            if errors:
                raise RuntimeError("; ".join(errors))
            return list(out["candidates"])
        pairs, _ = self._search.lexical_search(query, top_k=self.top_k)
        rows = {r["id"]: r for r in self._search.chunk_store().get_rows([cid for cid, _ in pairs])}
        docs = [
            Document(id=cid, content=rows[cid]["content"], score=score, meta=rows[cid]["metadata"])
            for cid, score in pairs
            if cid in rows
        ]
        return self._search.drop_superseded(docs)[0]

    def _row(self, rank: int, doc: Document) -> dict[str, Any]:
        meta, content = doc.meta, doc.content or ""
        return {
            "evidence_key": evidence_key(meta, doc.id),
            "doc_id": meta.get("doc_id") or meta.get("source") or doc.id,
            "source": meta.get("source"),
            "title": meta.get("title"),
            "breadcrumb": meta.get("breadcrumb"),
            "category": meta.get("category"),
            "rank": rank,
            "preview": content[: self.preview_chars] + ("…" if len(content) > self.preview_chars else ""),
            "score_label": "bm25" if self.retriever == "bm25" else "normalized similarity",
            "score": round(float(doc.score or 0.0), 4),
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

    def _wait(self, future: Future[list[Document]]) -> tuple[str, list[Document], str | None]:
        try:
            return "ok", future.result(timeout=self.timeout_ms / 1000), None
        except FutureTimeout:
            future.cancel()
            return "timeout", [], f"no answer within {self.timeout_ms} ms"
        except Exception as err:
            return "failed", [], f"{type(err).__name__}: {err}"

    @component.output_types(sidecar=dict[str, Any])
    def run(self, query: str | None = None, main_ranking: list[str] | None = None) -> dict[str, Any]:
        """
        Run the comparison retrieval and compare it with the main ranking.

        :param query: The normalized query.
        :param main_ranking: The main retrieval's evidence keys in rank order (the reranker's `ranking`).
        :returns: `sidecar`: `{enabled, status, retriever, latency_ms, rows, comparison, error}`, where status is
            `off`, `ok`, `skipped` (a rejected query), `failed` or `timeout`.
        """
        if not self.enabled:
            return {"sidecar": {"enabled": False, "status": "off"}}
        report: dict[str, Any] = {"enabled": True, "retriever": self.retriever, "collection": self.collection_name}
        if not (query or "").strip():
            return {"sidecar": {**report, "status": "skipped", "rows": [], "comparison": None, "error": None}}
        self.warm_up()
        assert self._pool is not None
        started = time.perf_counter()
        future = self._pool.submit(self._retrieve, query or "")
        status, docs, error = self._wait(future)
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
