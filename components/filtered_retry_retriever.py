from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import numpy as np
from haystack import Document, component, logging
from milvus_haystack import MilvusEmbeddingRetriever

from components.bm25_index import Bm25ChunkIndex, TermStatistics, tokenize
from components.json_metadata_document_store import JsonMetadataMilvusDocumentStore, json_filter_expression
from components.knowledge_index import CachedKnowledgeIndex
from components.milvus_chunk_store import CollectionSchema, MilvusChunkStore, lexical_text, token_from_env

logger = logging.getLogger(__name__)

MODES = ("haystack", "sdk", "auto")
LEXICAL_SOURCES = ("auto", "milvus", "local")
LEXICAL_NORMALIZATIONS = ("ideal", "best")
NO_EVIDENCE = "filtered_vector_no_evidence"
LOW_QUALITY = "filtered_vector_low_quality"
SEMANTICS = {"L2": "l2_distance", "COSINE": "cosine_similarity", "IP": "inner_product"}


def normalized_similarity(raw: float, metric_type: str) -> float:
    """
    Map a raw Milvus score to one similarity scale in [0, 1], the same for every metric and path.

    For unit vectors, Milvus' L2 value is the squared distance `2 - 2cos`, so `1 - d/4` equals `(1 + cos) / 2`,
    the mapping milvus-haystack uses for COSINE and IP: one threshold means the same thing everywhere.

    :param raw: The raw score.
    :param metric_type: `L2`, `COSINE` or `IP`.
    :returns: The similarity, clipped to [0, 1].
    """
    value = 1 - raw / 4 if metric_type == "L2" else (raw + 1) / 2
    return min(1.0, max(0.0, value))


def raw_from_normalized(similarity: float, metric_type: str) -> float:
    """
    Invert milvus-haystack's score mapping to recover the raw metric value.

    :param similarity: A score mapped by milvus-haystack.
    :param metric_type: `L2`, `COSINE` or `IP`.
    :returns: The raw value.
    """
    return 4 * (1 - similarity) if metric_type == "L2" else 2 * similarity - 1


def similarity_of(doc: Document) -> float:
    """
    Return a candidate's normalized similarity, whatever was added to its score since (BM25 bonus, rule boosts).

    :param doc: A candidate from this retriever, or a reranked one.
    :returns: `meta.similarity`, else the reranker's `meta.base_score`, else the score.
    """
    return float(doc.meta.get("similarity", doc.meta.get("base_score", doc.score or 0.0)))


def evidence_key(meta: dict[str, Any], fallback: str) -> str:
    """
    Return the chunk-level identity of a candidate: `source#chunk_index`.

    :param meta: The chunk metadata.
    :param fallback: Used when the chunk has no source (a collection written by another tool).
    :returns: The key.
    """
    source, index = meta.get("source"), meta.get("chunk_index")
    if source is None:
        return str(fallback)
    return f"{source}#{index}" if index is not None else str(source)


@component
class FilteredRetryRetriever:
    """
    L1 retrieval from Milvus: a category-filtered attempt when L0 found one category, an unfiltered retry when needed.

    With a `category_filter`, the filtered attempt is used when its top normalized similarity reaches
    `reference_threshold`; when it finds nothing usable it is retried without a filter (`fallback_reason`
    `filtered_vector_no_evidence`), and when its top similarity is below the threshold likewise
    (`filtered_vector_low_quality`). Without a filter a single unfiltered attempt runs. Candidates below
    `evidence_threshold` are not usable evidence, and chunks of a superseded document version are never returned.

    `mode` picks the path: `haystack` (milvus-haystack's `MilvusEmbeddingRetriever`), `sdk` (pymilvus
    `MilvusClient`), or `auto` (haystack first, sdk when it fails, the reason recorded). Every candidate carries its
    raw score, what it means (`l2_distance`, `cosine_similarity`, `inner_product`), its path, and a normalized
    similarity in [0, 1] as `Document.score`, on the same scale for both paths.

    With `lexical_weight` > 0, retrieval is hybrid: BM25 runs inside Milvus on the collection's full-text field
    (`lexical_source` `milvus`, or `auto` when the collection has one) or in-process over the collection's chunks
    (`local`, or `auto` on a Milvus without full-text search), and each attempt records which one ran.

    ### Usage example

    ```python
    from components.filtered_retry_retriever import FilteredRetryRetriever

    retriever = FilteredRetryRetriever(uri="data/milvus.db", index_path="data/knowledge_index.json")
    retriever.warm_up()
    out = retriever.run(query_embedding=vector, category_filter="alerts")
    print(out["retrieval_trace"]["fallback_reason"])
    ```
    """

    def __init__(
        self,
        uri: str = "data/milvus.db",
        index_path: str = "data/knowledge_index.json",
        collection_name: str = "knowledge_chunks",
        metric_type: str = "L2",
        id_field: str = "id",
        content_field: str = "content",
        vector_field: str = "vector",
        metadata_field: str = "metadata",
        category_key: str = "category",
        mode: str = "auto",
        top_k: int = 10,
        search_depth: int | None = None,
        reference_threshold: float = 0.9,
        evidence_threshold: float = 0.0,
        lexical_weight: float = 0.0,
        lexical_source: str = "auto",
        lexical_normalization: str = "ideal",
        enabled: bool = True,
        token_env_var: str | None = "MILVUS_TOKEN",  # noqa: S107 - a variable name, not a secret
    ) -> None:
        """
        Create the retriever; it connects in `warm_up` (or on first use).

        :param uri: Milvus Lite `.db` path or server URI.
        :param index_path: The knowledge index file (active document versions).
        :param collection_name: The collection.
        :param metric_type: The collection's metric: `L2`, `COSINE` or `IP`.
        :param id_field: Primary key field.
        :param content_field: Text field.
        :param vector_field: Vector field.
        :param metadata_field: JSON metadata field.
        :param category_key: Metadata key the category filter applies to.
        :param mode: `haystack`, `sdk` or `auto`.
        :param top_k: Candidates per attempt.
        :param search_depth: Dense and BM25 hits each attempt fuses before it keeps the best `top_k` (default and
            at least `top_k`): a deeper fusion finds chunks that rank just outside `top_k` on either side, while the
            components after the retriever still handle only `top_k` candidates.
        :param reference_threshold: Lowest top similarity at which a filtered attempt is good enough.
        :param evidence_threshold: Lowest similarity of a usable candidate.
        :param lexical_weight: Weight of BM25 in hybrid retrieval (0 turns it off): each candidate's score is its
            normalized similarity plus `lexical_weight * bm25 / norm` (see `lexical_normalization`); chunks found
            only by BM25 join the candidates with their similarity computed from their stored vectors.
        :param lexical_source: Where BM25 runs: `milvus` (the collection's BM25 full-text field), `local`
            (in-process over the collection's chunks, read once per index change) or `auto` (milvus when the
            collection has the field, local otherwise).
        :param lexical_normalization: What BM25 is divided by: `ideal`, the largest score the query's terms can
            reach in this collection (sum of their IDF times k1 + 1, from term statistics read once per index
            change), so the bonus says how much of the query a chunk matches; or `best`, the best hit's score, so
            the best lexical hit always gets the full `lexical_weight`.
        :param enabled: With False, L1 does not run and the trace says so.
        :param token_env_var: Environment variable holding a server token.
        :raises ValueError: If a parameter is out of range.
        """
        if mode not in MODES:
            msg = f"mode={mode!r} is not supported; use one of {list(MODES)}"
            raise ValueError(msg)
        if top_k < 1:
            msg = f"top_k={top_k!r} must be positive; use e.g. 10"
            raise ValueError(msg)
        if search_depth is not None and search_depth < 1:
            msg = f"search_depth={search_depth!r} must be positive, or null to search as deep as top_k"
            raise ValueError(msg)
        if lexical_source not in LEXICAL_SOURCES:
            msg = f"lexical_source={lexical_source!r} is not supported; use one of {list(LEXICAL_SOURCES)}"
            raise ValueError(msg)
        if lexical_normalization not in LEXICAL_NORMALIZATIONS:
            msg = (
                f"lexical_normalization={lexical_normalization!r} is not supported; "
                f"use one of {list(LEXICAL_NORMALIZATIONS)}"
            )
            raise ValueError(msg)
        if lexical_weight < 0:
            msg = f"lexical_weight={lexical_weight!r} must be >= 0 (0 turns hybrid retrieval off)"
            raise ValueError(msg)
        for name, value in (("reference_threshold", reference_threshold), ("evidence_threshold", evidence_threshold)):
            if not 0.0 <= value <= 1.0:
                msg = f"{name}={value!r} must be a normalized similarity in [0, 1]"
                raise ValueError(msg)
        self.uri = uri
        self.index_path = index_path
        self.collection_name = collection_name
        self.metric_type = metric_type
        self.id_field = id_field
        self.content_field = content_field
        self.vector_field = vector_field
        self.metadata_field = metadata_field
        self.category_key = category_key
        self.mode = mode
        self.top_k = top_k
        self.search_depth = search_depth
        self.reference_threshold = reference_threshold
        self.evidence_threshold = evidence_threshold
        self.lexical_weight = lexical_weight
        self.lexical_source = lexical_source
        self.lexical_normalization = lexical_normalization
        self.enabled = enabled
        self.token_env_var = token_env_var
        self._schema = CollectionSchema.from_attributes(self)
        self._schema.json_key(category_key)
        self._sdk: MilvusChunkStore | None = None
        self._haystack: MilvusEmbeddingRetriever | None = None
        self._versions = CachedKnowledgeIndex(index_path)
        self._lexical: tuple[int, Bm25ChunkIndex, dict[str, dict[str, Any]]] | None = None
        self._full_text: tuple[int, str] | None = None
        self._term_stats: tuple[int, TermStatistics] | None = None

    def warm_up(self) -> None:
        """Connect the configured path(s). Failures surface per attempt in the trace, never here."""
        if not self.enabled:
            return
        try:
            if self.mode in ("haystack", "auto"):
                self._haystack_retriever()
            if self.mode == "sdk":
                self.chunk_store().load()
            if self.lexical_weight > 0 and not self._sparse_field():
                self._lexical_index()
            if self.lexical_weight > 0 and self.lexical_normalization == "ideal":
                self._term_statistics()
        except Exception as err:
            logger.warning("Milvus is not reachable yet: {error}", error=err)

    def close(self) -> None:
        """Release the connections."""
        if self._sdk is not None:
            self._sdk.close()
        self._sdk = None
        self._haystack = None
        self._lexical = None
        self._full_text = None
        self._term_stats = None

    def chunk_store(self) -> MilvusChunkStore:
        """
        The pymilvus view of the collection this retriever reads (the `sdk` path), connected on first use.

        :returns: The chunk store.
        """
        if self._sdk is None:
            self._sdk = MilvusChunkStore(self.uri, self._schema, token_from_env(self.token_env_var))
        return self._sdk

    def _haystack_retriever(self) -> MilvusEmbeddingRetriever:
        if self._haystack is None:
            connection: dict[str, Any] = {"uri": self.uri}
            token = token_from_env(self.token_env_var)
            if token:
                connection["token"] = token
            store = JsonMetadataMilvusDocumentStore(
                metadata_field=self.metadata_field,
                connection_args=connection,
                collection_name=self.collection_name,
                primary_field=self.id_field,
                text_field=self.content_field,
                vector_field=self.vector_field,
                index_params={"metric_type": self.metric_type, "index_type": "AUTOINDEX", "params": {}},
                consistency_level="Strong",
            )
            if not store._collection_exists:
                msg = f"collection {self.collection_name!r} does not exist; run `lookup-knowledge index` first"
                raise LookupError(msg)
            # no init filters: the retriever's `filters or self.filters` must never re-apply an old filter
            self._haystack = MilvusEmbeddingRetriever(document_store=store, filters=None, top_k=self.top_k)
        return self._haystack

    def _filters(self, category: str) -> dict[str, Any] | None:
        return {"field": f"meta.{self.category_key}", "operator": "==", "value": category} if category else None

    def _search_haystack(self, vector: list[float], category: str, limit: int) -> list[Document]:
        docs = self._haystack_retriever().run(query_embedding=vector, filters=self._filters(category), top_k=limit)
        semantics = SEMANTICS[self.metric_type]
        out = []
        for doc in docs["documents"]:
            similarity = float(doc.score or 0.0)
            meta = {
                **doc.meta,
                "raw_score": raw_from_normalized(similarity, self.metric_type),
                "score_semantics": semantics,
                "retrieval_path": "haystack",
            }
            out.append(replace(doc, meta=meta, score=min(1.0, max(0.0, similarity))))
        return out

    def _search_sdk(self, vector: list[float], category: str, limit: int) -> list[Document]:
        expr = json_filter_expression(self._filters(category), self._schema)
        hits = self.chunk_store().search(vector, top_k=limit, expr=expr)
        semantics = SEMANTICS[self.metric_type]
        return [
            Document(
                id=hit["id"],
                content=hit["content"],
                score=normalized_similarity(hit["distance"], self.metric_type),
                meta={
                    **hit["metadata"],
                    "raw_score": hit["distance"],
                    "score_semantics": semantics,
                    "retrieval_path": "sdk",
                },
            )
            for hit in hits
        ]

    def _search(self, vector: list[float], category: str, limit: int, attempt: dict[str, Any]) -> list[Document]:
        if self.mode == "sdk":
            return self._search_sdk(vector, category, limit)
        if self.mode == "haystack":
            return self._search_haystack(vector, category, limit)
        try:
            return self._search_haystack(vector, category, limit)
        except Exception as err:
            attempt["fallback"] = {"from": "haystack", "to": "sdk", "reason": f"{type(err).__name__}: {err}"}
            logger.warning("haystack path failed, using the sdk path: {error}", error=err)
            return self._search_sdk(vector, category, limit)

    def _lexical_index(self) -> tuple[Bm25ChunkIndex, dict[str, dict[str, Any]]]:
        """BM25 over the collection's chunks, rebuilt whenever the knowledge index file changes."""
        signature = self._versions.signature()
        if self._lexical is None or self._lexical[0] != signature:
            rows = self.chunk_store().scan_metadata(keys=(self.category_key,), with_content=True)
            index = Bm25ChunkIndex([r["id"] for r in rows], [r["content"] for r in rows])
            self._lexical = (signature, index, {r["id"]: r for r in rows})
        return self._lexical[1], self._lexical[2]

    def _term_statistics(self) -> TermStatistics:
        """BM25 term statistics of the collection's chunks, read again whenever the knowledge index file changes."""
        signature = self._versions.signature()
        if self._lexical is not None and self._lexical[0] == signature:
            return self._lexical[1].statistics  # the in-process index already counted them
        if self._term_stats is None or self._term_stats[0] != signature:
            rows = self.chunk_store().scan_metadata(keys=(), with_content=True)
            self._term_stats = (signature, TermStatistics(tokenize(r["content"]) for r in rows))
        return self._term_stats[1]

    def _lexical_norm(self, query: str, pairs: list[tuple[str, float]]) -> float:
        if self.lexical_normalization == "best":
            return pairs[0][1]
        return self._term_statistics().ideal_score(tokenize(query))

    def _similarities(self, vector: list[float], rows: list[dict[str, Any]]) -> list[float]:
        if not rows:
            return []
        query = np.asarray(vector, dtype=np.float32)
        stored = np.asarray([r["vector"] for r in rows], dtype=np.float32)
        raw = ((stored - query) ** 2).sum(axis=1) if self.metric_type == "L2" else stored @ query
        return [float(x) for x in raw]

    def _sparse_field(self) -> str:
        """The collection's BM25 output field, or `""` when BM25 runs in-process."""
        if self.lexical_source == "local":
            return ""
        signature = self._versions.signature()  # a re-index may have re-created the collection
        if self._full_text is None or self._full_text[0] != signature:
            fields = self.chunk_store().full_text_fields()
            self._full_text = (signature, fields[1] if fields else "")
        if not self._full_text[1] and self.lexical_source == "milvus":
            msg = (
                f"collection {self.collection_name!r} has no BM25 full-text field; re-index it "
                "(`lookup-knowledge index --rebuild`) on Milvus 2.5+ or Milvus Lite, or set lexical_source to auto "
                "or local"
            )
            raise LookupError(msg)
        return self._full_text[1]

    def lexical_search(self, query: str, category: str = "", top_k: int = 10) -> tuple[list[tuple[str, float]], str]:
        """
        BM25 search, inside Milvus or in-process (see `lexical_source`).

        :param query: The query text.
        :param category: Only chunks of this category, or `""` for all.
        :param top_k: Most hits.
        :returns: `(chunk_id, bm25_score)` pairs, best first, and the path that ran (`milvus` or `local`).
        :raises LookupError: If `lexical_source` is `milvus` and the collection has no full-text field.
        """
        sparse_field = self._sparse_field()
        if sparse_field:
            terms = lexical_text(query)
            if not terms:
                return [], "milvus"
            expr = json_filter_expression(self._filters(category), self._schema)
            return self.chunk_store().full_text_search(terms, sparse_field, top_k=top_k, expr=expr), "milvus"
        index, rows = self._lexical_index()
        pairs = index.search(query, top_k=top_k * 5 if category else top_k)
        if category:
            pairs = [(cid, s) for cid, s in pairs if rows[cid].get(self.category_key) == category][:top_k]
        return pairs, "local"

    def _with_lexical(
        self, hits: list[Document], vector: list[float], query: str, category: str, limit: int, attempt: dict
    ) -> list[Document]:
        pairs, attempt["lexical_path"] = self.lexical_search(query, category, limit)
        if not pairs:
            return hits
        norm = self._lexical_norm(query, pairs)
        bonus = {cid: self.lexical_weight * score / norm for cid, score in pairs}
        known = {d.id for d in hits}
        fetched = self.chunk_store().get_rows([cid for cid in bonus if cid not in known])
        semantics = SEMANTICS[self.metric_type]
        for row, raw in zip(fetched, self._similarities(vector, fetched), strict=True):
            similarity = normalized_similarity(raw, self.metric_type)
            meta = {
                **row["metadata"],
                "raw_score": raw,
                "score_semantics": semantics,
                "retrieval_path": "bm25",
                "similarity": similarity,
            }
            hits.append(Document(id=row["id"], content=row["content"], score=similarity, meta=meta))
        fused = [
            replace(
                d,
                score=(d.score or 0.0) + bonus.get(d.id, 0.0),
                meta={**d.meta, "lexical_score": round(bonus.get(d.id, 0.0), 4)},
            )
            for d in hits
        ]
        return sorted(fused, key=lambda d: -(d.score or 0.0))

    def drop_superseded(self, docs: list[Document]) -> tuple[list[Document], int]:
        """
        Keep only chunks of the active document versions (and rows without a version, written by other tools).

        :param docs: Retrieved chunks with `source` and `doc_version` in their meta.
        :returns: The kept chunks and how many were dropped.
        """
        index, _ = self._versions.get()
        if not index.documents:
            return docs, 0
        active = index.active_versions()
        kept = [
            d
            for d in docs
            if not d.meta.get("doc_version") or active.get(d.meta.get("source", "")) == d.meta["doc_version"]
        ]
        return kept, len(docs) - len(kept)

    def _attempt(
        self, name: str, vector: list[float], query: str, category: str, top_k: int
    ) -> tuple[list[Document], dict]:
        attempt: dict[str, Any] = {
            "name": name,
            "filter": {self.category_key: category} if category else None,
            "mode": self.mode,
            "path": None,
            "raw_hits": 0,
            "stale_dropped": 0,
            "below_threshold_dropped": 0,
            "candidate_count": 0,
            "top_score": None,
            "lexical_path": None,
            "latency_ms": 0.0,
            "error": None,
        }
        started = time.perf_counter()
        docs: list[Document] = []
        depth = max(self.search_depth or top_k, top_k)
        try:
            hits = self._search(vector, category, depth * 2, attempt)  # headroom for superseded versions
            hits = [replace(d, meta={**d.meta, "similarity": d.score}) for d in hits]
            if self.lexical_weight > 0 and query:
                hits = self._with_lexical(hits, vector, query, category, depth, attempt)
            attempt["raw_hits"] = len(hits)
            active, attempt["stale_dropped"] = self.drop_superseded(hits)
            usable = [d for d in active if similarity_of(d) >= self.evidence_threshold]
            attempt["below_threshold_dropped"] = len(active) - len(usable)
            docs = [
                replace(d, meta={**d.meta, "attempt": name, "evidence_key": evidence_key(d.meta, d.id)})
                for d in usable[:top_k]
            ]
            attempt["path"] = docs[0].meta["retrieval_path"] if docs else ("sdk" if "fallback" in attempt else None)
        except Exception as err:
            attempt["error"] = f"{type(err).__name__}: {err}"
            logger.warning("L1 attempt {attempt} failed: {error}", attempt=name, error=err)
        attempt["latency_ms"] = round((time.perf_counter() - started) * 1000, 2)
        attempt["candidate_count"] = len(docs)
        attempt["top_score"] = round(max(similarity_of(d) for d in docs), 4) if docs else None
        return docs, attempt

    @component.output_types(candidates=list[Document], retrieval_trace=dict[str, Any])
    def run(
        self,
        query_embedding: list[float],
        query: str | None = None,
        category_filter: str | None = None,
        top_k: int | None = None,
    ) -> dict[str, Any]:
        """
        Retrieve L1 candidates.

        :param query_embedding: The query vector; empty (a rejected query) gives no candidates and no attempt.
        :param query: The query text, for the BM25 half of hybrid retrieval.
        :param category_filter: The L0 category, or empty for none.
        :param top_k: Overrides the init `top_k`.
        :returns: `candidates` (Documents with `score` = normalized similarity and `raw_score`,
            `score_semantics`, `retrieval_path`, `attempt`, `evidence_key` in meta) and `retrieval_trace`
            (`attempts`, `selected_attempt`, `fallback_reason`, `reference_threshold`, `l1_enabled`, `mode`).
        """
        top_k = top_k or self.top_k
        trace: dict[str, Any] = {
            "l1_enabled": self.enabled,
            "mode": self.mode,
            "reference_threshold": self.reference_threshold,
            "evidence_threshold": self.evidence_threshold,
            "attempts": [],
            "selected_attempt": None,
            "fallback_reason": None,
        }
        if not self.enabled or not query_embedding:
            return {"candidates": [], "retrieval_trace": trace}
        category = (category_filter or "").strip()
        docs: list[Document] = []
        if category:
            docs, attempt = self._attempt("filtered", query_embedding, query or "", category, top_k)
            trace["attempts"].append(attempt)
            if not docs:
                trace["fallback_reason"] = NO_EVIDENCE
            elif attempt["top_score"] < self.reference_threshold:
                trace["fallback_reason"] = LOW_QUALITY
            else:
                trace["selected_attempt"] = "filtered"
        if trace["selected_attempt"] is None:
            filtered = docs
            docs, attempt = self._attempt("unfiltered", query_embedding, query or "", "", top_k)
            trace["attempts"].append(attempt)
            trace["selected_attempt"] = "unfiltered"
            if filtered:  # low-quality filtered candidates still compete; dedup merges chunks found by both
                docs = sorted(docs + filtered, key=lambda d: -(d.score or 0.0))
        return {"candidates": docs, "retrieval_trace": trace}
