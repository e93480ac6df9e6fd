from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from haystack import Document, component, default_from_dict, default_to_dict, logging

from components.core.frozen import FrozenDict, FrozenList, Strings
from components.core.query_vector import QueryVector, as_list
from components.core.scores import USABLE_KEY, evidence_key, similarity_of
from components.core.versions import text_key
from components.store.knowledge_collection import (
    LEXICAL_SOURCES,
    CollectionMismatchError,
    KnowledgeCollection,
)
from components.store.knowledge_store import KnowledgeStore, deserialize_store_inplace
from components.store.lexical import tokenize

logger = logging.getLogger(__name__)

#: BM25 searches in flight at once, beside as many dense ones (lookups from more threads wait for a free one)
LEXICAL_WORKERS = 8


@contextmanager
def _stage(attempt: dict[str, Any], name: str) -> Iterator[None]:
    """Add the time spent in the block to the attempt's `stage_ms[name]` (what a slow attempt spent it on)."""
    started = time.perf_counter()
    try:
        yield
    finally:
        spent = (time.perf_counter() - started) * 1000
        attempt["stage_ms"][name] = round(attempt["stage_ms"].get(name, 0.0) + spent, 2)


def _candidate_meta(doc: Document, attempt: str, usable: bool) -> dict[str, Any]:
    """
    A candidate's meta: its attempt, evidence and text keys, and whether its similarity makes it usable evidence.

    :param doc: The chunk as the search returned it.
    :param attempt: The attempt that found it.
    :param usable: Whether its similarity makes it usable evidence.
    :returns: The meta (a new dict).
    """
    meta = doc.meta
    return {
        **meta,
        "attempt": attempt,
        "evidence_key": evidence_key(meta, doc.id),
        "text_key": text_key(meta.get("source"), doc.content),
        USABLE_KEY: usable,
    }


MODES = ("haystack", "sdk", "auto")
#: the attempt that applies the caller's filter alone (there is no unfiltered attempt then)
EXPLICIT = "explicit"


def _matches_nothing(filters: Mapping[str, Any]) -> bool:
    return filters.get("field") == "id" and filters.get("operator") == "in" and not filters.get("value")


def _explicit_summary(filters: Mapping[str, Any] | None) -> str:
    """The caller's filter as the trace shows it: a category, or how many chunks (not every id)."""
    if not filters:
        return ""
    if filters.get("field") == "id":
        return f"{len(filters.get('value') or [])} chunks"
    value = filters.get("value")
    return ", ".join(map(str, value)) if isinstance(value, list) else str(value)


def _empty_attempt(name: str, mode: str) -> dict[str, Any]:
    return {"name": name, "mode": mode, "raw_hits": 0, "candidate_count": 0, "latency_ms": 0.0}


NO_EVIDENCE = "filtered_vector_no_evidence"
LOW_QUALITY = "filtered_vector_low_quality"


@component
class FilteredRetryRetriever:
    """
    L1 retrieval from the knowledge store: a category-filtered attempt when L0 found one category, an unfiltered retry
    when needed.

    With a `category_filter`, the filtered attempt is used when its top normalized similarity reaches
    `reference_threshold`; when it finds nothing usable it is retried without a filter (`fallback_reason`
    `filtered_vector_no_evidence`), and when its top similarity is below the threshold likewise
    (`filtered_vector_low_quality`), the low-quality candidates competing in the retry. Without a filter a single
    unfiltered attempt runs. The caller's explicit `filters` are strict: every attempt applies them, and the retry
    drops only L0's category (attempt `explicit`). Chunks of a superseded document version are never returned.

    The retriever holds the attempt policy and reads the store; it does not rank. Each attempt searches the dense
    vectors (`mode`: `haystack`, milvus-haystack's `MilvusEmbeddingRetriever`; `sdk`, pymilvus; `auto`, haystack first
    and sdk when it fails, the reason recorded) and, with `lexical`, BM25 beside it (inside Milvus on the collection's
    full-text field or in-process, `lexical_source`); chunks only BM25 found join with their similarity computed from
    their stored vectors. Every candidate carries its raw score, what it means (`l2_distance`, `cosine_similarity`,
    `inner_product`), its path, its normalized similarity in [0, 1] (`score` and `meta.similarity`, one scale for
    both paths), its BM25 facts (`bm25`, `lexical_ideal`, `lexical_best`, `lexical_coverage`) where BM25 found
    something, its `attempt`, and `usable`: whether its similarity reaches `evidence_threshold`. The rankers after it
    order the candidates (fusion, language balance) and the joiner keeps the usable ones.

    ### Usage example

    ```python
    from components.retrievers.filtered_retry_retriever import FilteredRetryRetriever
    from components.store.knowledge_collection import KnowledgeCollection

    retriever = FilteredRetryRetriever(KnowledgeCollection(uri="data/milvus.db"))
    retriever.warm_up()
    out = retriever.run(query_embedding=vector, query="disk full", category_filter="alerts")
    print(out["retrieval_trace"]["fallback_reason"], len(out["candidates"]))
    ```
    """

    def __init__(
        self,
        collection: KnowledgeStore | None = None,
        mode: str = "auto",
        top_k: int = 60,
        reference_threshold: float = 0.94,
        evidence_threshold: float = 0.88,
        lexical: bool = True,
        lexical_source: str = "auto",
        category_key: str = "category",
        enabled: bool = True,
    ) -> None:
        """
        Create the retriever; it connects in `warm_up` (or on first use).

        :param collection: The collection read (default: `KnowledgeCollection()`, the data folder's).
        :param mode: `haystack`, `sdk` or `auto`.
        :param top_k: How deep each attempt searches: BM25 hits, and twice as many dense hits (room for chunks of
            superseded versions, which are dropped).
        :param reference_threshold: Lowest top similarity at which a filtered attempt is good enough.
        :param evidence_threshold: Lowest similarity of a usable candidate.
        :param lexical: Run BM25 beside the dense search (its scores rank and vouch for candidates after the
            retriever: `HybridFusionRanker`, `EvidenceGate`).
        :param lexical_source: Where BM25 runs: `milvus` (the collection's BM25 full-text field), `local`
            (in-process: the BM25 index `index` writes beside the index file, memory-mapped, else one built from the
            collection's chunks once per index change) or `auto` (local with that file, else milvus when the
            collection has the field, else local).
        :param category_key: Metadata key the category filter applies to.
        :param enabled: With False, L1 does not run and the trace says so.
        :raises ValueError: If a parameter is out of range.
        """
        if mode not in MODES:
            msg = f"mode={mode!r} is not supported; use one of {list(MODES)}"
            raise ValueError(msg)
        if top_k < 1:
            msg = f"top_k={top_k!r} must be positive; use e.g. 60"
            raise ValueError(msg)
        if lexical_source not in LEXICAL_SOURCES:
            msg = f"lexical_source={lexical_source!r} is not supported; use one of {list(LEXICAL_SOURCES)}"
            raise ValueError(msg)
        for name, value in (("reference_threshold", reference_threshold), ("evidence_threshold", evidence_threshold)):
            if not 0.0 <= value <= 1.0:
                msg = f"{name}={value!r} must be a normalized similarity in [0, 1]"
                raise ValueError(msg)
        self.collection: KnowledgeStore = collection if collection is not None else KnowledgeCollection()
        self.collection.schema.json_key(category_key)  # validates the key
        self.mode = mode
        self.top_k = top_k
        self.reference_threshold = reference_threshold
        self.evidence_threshold = evidence_threshold
        self.lexical = lexical
        self.lexical_source = lexical_source
        self.category_key = category_key
        self.enabled = enabled
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()

    def to_dict(self) -> dict[str, Any]:
        """
        Serialize the retriever with its collection.

        :returns: The serialized component.
        """
        return default_to_dict(
            self,
            collection=self.collection,
            mode=self.mode,
            top_k=self.top_k,
            reference_threshold=self.reference_threshold,
            evidence_threshold=self.evidence_threshold,
            lexical=self.lexical,
            lexical_source=self.lexical_source,
            category_key=self.category_key,
            enabled=self.enabled,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FilteredRetryRetriever:
        """
        Deserialize the retriever and its collection.

        :param data: From `to_dict`.
        :returns: The retriever.
        """
        params = dict(data.get("init_parameters", {}))
        deserialize_store_inplace(params)
        return default_from_dict(cls, {**data, "init_parameters": params})

    def warm_up(self) -> None:
        """
        Connect the configured path(s) and read what the first lookup would otherwise wait for.

        An unreachable or empty store is not an error here (it surfaces per attempt in the trace); a collection
        that does not match the configuration is.

        :raises CollectionMismatchError: If the collection's metric, dimension or fields differ from the
            configuration.
        """
        if not self.enabled:
            return
        try:
            self.collection.warm_up()
            self.collection.connect("sdk" if self.mode == "sdk" else "haystack")
            if self.lexical:
                self.collection.prepare_lexical(self.lexical_source, statistics=True)
        except CollectionMismatchError:
            raise
        except Exception as err:
            logger.warning("The knowledge store is not ready yet: {error}", error=err)

    def close(self) -> None:
        """Release the connections and the BM25 search threads."""
        with self._pool_lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)
        self.collection.close()

    def _workers(self) -> ThreadPoolExecutor:
        """Threads that run an attempt's BM25 search while the dense search runs (started on first use)."""
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=LEXICAL_WORKERS, thread_name_prefix="lexical-search")
            return self._pool

    def _filters(
        self, category: str, explicit: Mapping[str, Any] | None, hidden: Strings | None = None
    ) -> dict[str, Any] | None:
        """The attempt's store filter: L0's category, the caller's explicit filter, the hidden pages left out (AND)."""
        parts: list[dict[str, Any]] = []
        parts += [{"field": f"meta.{self.category_key}", "operator": "==", "value": category}] if category else []
        parts += [dict(explicit)] if explicit else []
        parts += [{"field": "id", "operator": "not in", "value": list(hidden)}] if hidden else []
        if len(parts) > 1:
            return {"operator": "AND", "conditions": parts}
        return parts[0] if parts else None

    def _search(self, vector: list[float], filters: dict[str, Any] | None, limit: int, attempt: dict) -> list[Document]:
        if self.mode != "auto":
            return self.collection.dense_search(vector, limit, filters, path=self.mode)
        try:
            return self.collection.dense_search(vector, limit, filters, path="haystack")
        except LookupError:  # the collection does not exist: not on the sdk path either
            raise
        except Exception as err:
            attempt["fallback"] = {"from": "haystack", "to": "sdk", "reason": f"{type(err).__name__}: {err}"}
            logger.warning("haystack path failed, using the sdk path: {error}", error=err)
            return self.collection.dense_search(vector, limit, filters, path="sdk")

    def _lexical(
        self, query: str, filters: dict[str, Any] | None, limit: int
    ) -> tuple[list[tuple[str, float]], str, float]:
        """The attempt's BM25 search (run beside the dense one): its hits, the path that ran, its milliseconds."""
        started = time.perf_counter()
        pairs, path = self.collection.lexical_search(query, limit, filters, source=self.lexical_source)
        return pairs, path, round((time.perf_counter() - started) * 1000, 2)

    def _query_terms(self, query: str) -> dict[str, int] | None:
        """How many distinct BM25 terms the query has, and how many of them occur in the collection at all."""
        if not self.lexical or not query:
            return None
        try:
            statistics = self.collection.term_statistics(self.lexical_source)
        except Exception:  # the attempts record why the store is unreadable
            return None
        terms = set(tokenize(query))
        return {"terms": len(terms), "known": sum(1 for term in terms if statistics.df.get(term, 0) > 0)}

    def _calibration(self) -> dict[str, Any] | None:
        """What the collection's index run counted: noise ceilings and languages (None when it counted nothing)."""
        try:
            statistics = self.collection.statistics()
        except Exception:  # an unreadable index file shows in the attempts; the trace only lacks calibration
            return None
        if statistics is None:
            return None
        return {
            "noise_similarity": statistics.noise_similarity,
            "noise_probes": statistics.noise_probes,
            "language_chunks": statistics.language_chunks,
        }

    def _attempt(
        self,
        name: str,
        vector: list[float],
        query: str,
        category: str,
        top_k: int,
        explicit: Mapping[str, Any] | None = None,
        explicit_summary: str = "",
        hidden: Strings | None = None,
    ) -> tuple[list[Document], dict]:
        """One attempt: its candidates (usable or not, each flagged) and its trace."""
        shown = {self.category_key: category} if category else {}
        if explicit:
            shown["explicit"] = explicit_summary
        if hidden:
            shown["hidden"] = f"{len(hidden)} chunks"
        filters = self._filters(category, explicit, hidden)
        attempt: dict[str, Any] = {
            "name": name,
            "filter": shown or None,
            "mode": self.mode,
            "path": None,
            "raw_hits": 0,
            "stale_dropped": 0,
            "below_threshold_dropped": 0,
            "candidate_count": 0,
            "top_score": None,
            "lexical_path": None,
            "latency_ms": 0.0,
            "stage_ms": {},
            "error": None,
        }
        started = time.perf_counter()
        docs: list[Document] = []
        usable: list[Document] = []
        try:
            searched_under = self.collection.active_versions()  # a re-index may switch versions mid-search
            lexical = self._workers().submit(self._lexical, query, filters, top_k) if self.lexical and query else None
            with _stage(attempt, "dense"):
                hits = self._search(vector, filters, top_k * 2, attempt)  # room for superseded versions
            # the hits are this attempt's own: their meta is completed in place, and each kept one copied once
            for d in hits:
                d.meta["similarity"] = d.score
            if lexical is not None:
                with _stage(attempt, "lexical_wait"):
                    pairs, attempt["lexical_path"], attempt["stage_ms"]["lexical"] = lexical.result()
                with _stage(attempt, "lexical_fetch"):
                    hits = self.collection.with_lexical(hits, pairs, query, vector, source=self.lexical_source)
            attempt["raw_hits"] = len(hits)
            active, attempt["stale_dropped"] = self.collection.drop_superseded(hits, searched_under)
            usable = [d for d in active if similarity_of(d) >= self.evidence_threshold]
            attempt["below_threshold_dropped"] = len(active) - len(usable)
            kept = {id(d) for d in usable}
            docs = [replace(d, meta=_candidate_meta(d, name, id(d) in kept)) for d in active]
            attempt["path"] = usable[0].meta["retrieval_path"] if usable else ("sdk" if "fallback" in attempt else None)
        except Exception as err:
            attempt["error"] = f"{type(err).__name__}: {err}"
            logger.warning("L1 attempt {attempt} failed: {error}", attempt=name, error=err)
            docs, usable = [], []
        attempt["latency_ms"] = round((time.perf_counter() - started) * 1000, 2)
        attempt["candidate_count"] = len(usable)
        attempt["top_score"] = round(max(similarity_of(d) for d in usable), 4) if usable else None
        return docs, attempt

    def _model_mismatch(self, query_embedding: list[float] | QueryVector, embedding_meta: Mapping | None) -> str | None:
        """Why the query's vector cannot be compared with the collection's (another model), in one line, or None."""
        model = query_embedding.model if isinstance(query_embedding, QueryVector) else ""
        model = model or str((embedding_meta or {}).get("model") or "")
        try:
            statistics = self.collection.statistics()
        except Exception:  # an unreadable index file shows in the attempts
            return None
        indexed = statistics.embedding_model if statistics is not None else ""
        if not model or not indexed or model == indexed:
            return None
        return (
            f"the collection was indexed with the embedding model {indexed!r} and this query was embedded with "
            f"{model!r}: their vectors cannot be compared; give pipelines.yaml's embedder the indexing pipeline's "
            "model, or index again with this one"
        )

    @component.output_types(candidates=list[Document], retrieval_trace=FrozenDict)
    def run(
        self,
        query_embedding: list[float] | QueryVector,
        query: str | None = None,
        category_filter: str | None = None,
        top_k: int | None = None,
        embedding_meta: dict[str, Any] | None = None,
        filters: dict[str, Any] | None = None,
        hidden: Strings | None = None,
    ) -> dict[str, Any]:
        """
        Retrieve L1 candidates.

        :param query_embedding: The query vector (a list, or an embedder's `QueryVector`, which the pipeline passes
            on without copying it); empty (a rejected query) gives no candidates and no attempt.
        :param query: The query text, for BM25.
        :param category_filter: The L0 category, or empty for none.
        :param top_k: Overrides the init `top_k` (how deep each attempt searches).
        :param embedding_meta: The query embedder's `meta` (any Haystack text embedder's: its `model`), when the
            query vector is a plain list: a query embedded with another model than the collection's is refused (an
            attempt with that error, no candidates), never compared.
        :param filters: The caller's explicit store filter (Haystack filters; `DocumentFilterResolver`): strict,
            every attempt applies it (with L0's category on the first, when L0 found one), none runs without it; a
            filter on an empty list of ids matches nothing and searches nothing.
        :param hidden: Chunks no attempt may return (pages that are not evidence: drafts, archived, not valid yet).
        :returns: `candidates` (a read-only sequence of Documents, every attempt's, in the order found: `score` =
            normalized similarity, and `similarity`, `raw_score`, `score_semantics`, `retrieval_path`, `attempt`,
            `evidence_key`, `usable` and the BM25 facts in meta; the pipeline hands it on without copying it) and
            `retrieval_trace` (a read-only `FrozenDict`: `attempts` (`candidate_count`: the usable candidates the
            attempt found; `top_score`: the best similarity among them), `selected_attempt`, `fallback_reason`,
            `reference_threshold`, `l1_enabled`, `mode`, and `calibration`: the collection's noise ceilings and
            languages as `index` counted them, or None; `query_terms`: the query's distinct BM25 terms and how many
            the collection knows, None without BM25).
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
            return {"candidates": FrozenList(), "retrieval_trace": FrozenDict(trace)}
        mismatch = self._model_mismatch(query_embedding, embedding_meta)
        if mismatch is not None:
            trace["attempts"].append({"name": "unfiltered", "mode": self.mode, "error": mismatch})
            return {"candidates": FrozenList(), "retrieval_trace": FrozenDict(trace)}
        vector = as_list(query_embedding)
        trace["calibration"] = self._calibration()
        trace["query_terms"] = self._query_terms(query or "")
        category = (category_filter or "").strip()
        explicit = dict(filters) if filters else None
        shown = _explicit_summary(explicit)
        if explicit is not None and _matches_nothing(explicit):
            trace["attempts"].append({**_empty_attempt(EXPLICIT, self.mode), "filter": {"explicit": shown}})
            trace["selected_attempt"] = EXPLICIT
            return {"candidates": FrozenList(), "retrieval_trace": FrozenDict(trace)}
        docs: list[Document] = []
        if category:
            docs, attempt = self._attempt("filtered", vector, query or "", category, top_k, explicit, shown, hidden)
            trace["attempts"].append(attempt)
            if not attempt["candidate_count"]:
                trace["fallback_reason"] = NO_EVIDENCE
            elif attempt["top_score"] < self.reference_threshold:
                trace["fallback_reason"] = LOW_QUALITY
            else:
                trace["selected_attempt"] = "filtered"
        if trace["selected_attempt"] is None:
            filtered = docs  # low-quality filtered candidates still compete
            # the retry drops L0's category, never the caller's filter
            name = EXPLICIT if explicit else "unfiltered"
            docs, attempt = self._attempt(name, vector, query or "", "", top_k, explicit, shown, hidden)
            trace["attempts"].append(attempt)
            trace["selected_attempt"] = name
            docs = [*docs, *filtered]
        return {"candidates": FrozenList(docs), "retrieval_trace": FrozenDict(trace)}
