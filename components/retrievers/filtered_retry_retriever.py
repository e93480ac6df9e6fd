from __future__ import annotations

import statistics as stats
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import numpy as np
from haystack import Document, component, default_from_dict, default_to_dict, logging

from components.core.frozen import FrozenDict, FrozenList
from components.core.query_vector import QueryVector, as_list
from components.core.scores import evidence_key, similarity_of
from components.core.text_matching import script_language
from components.store.collection_statistics import is_multilingual, language_offsets
from components.store.json_metadata_document_store import VECTORS_META_KEY
from components.store.knowledge_collection import (
    LEXICAL_SOURCES,
    CollectionMismatchError,
    KnowledgeCollection,
    deserialize_collection_inplace,
)
from components.store.lexical import tokenize
from components.store.vector_table import VectorTable

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


def _candidate_meta(meta: dict[str, Any], attempt: str, chunk_id: str) -> dict[str, Any]:
    """A kept candidate's meta: its attempt and evidence key added, the vectors read for balancing left out."""
    kept = {key: value for key, value in meta.items() if key != VECTORS_META_KEY}
    return {**kept, "attempt": attempt, "evidence_key": evidence_key(meta, chunk_id)}


def _merge_attempts(*attempts: list[Document]) -> list[Document]:
    """
    Join the candidates of several attempts, once per chunk, best score first.

    A chunk both attempts found keeps its better-scored copy (the earlier attempt's on a tie), and its `attempts`
    meta names every attempt that found it: the gate after the retriever weighs how far the best candidate stands
    out from the next ones and decides on the first few, and a chunk counted twice would stand in for a second
    candidate.

    :param attempts: Each attempt's candidates.
    :returns: The candidates, one per chunk id, by descending score.
    """
    best: dict[str, Document] = {}
    found_by: dict[str, list[str]] = {}
    for docs in attempts:
        for doc in docs:
            found_by.setdefault(doc.id, []).append(str(doc.meta["attempt"]))
            kept = best.get(doc.id)
            if kept is None or (doc.score or 0.0) > (kept.score or 0.0):
                best[doc.id] = doc
    merged = [
        replace(doc, meta={**doc.meta, "attempts": found_by[doc.id]}) if len(found_by[doc.id]) > 1 else doc
        for doc in best.values()
    ]
    return sorted(merged, key=lambda d: -(d.score or 0.0))


MODES = ("haystack", "sdk", "auto")
LEXICAL_NORMALIZATIONS = ("ideal", "best")
NO_EVIDENCE = "filtered_vector_no_evidence"
LOW_QUALITY = "filtered_vector_low_quality"


@component
class FilteredRetryRetriever:
    """
    L1 retrieval from Milvus: a category-filtered attempt when L0 found one category, an unfiltered retry when needed.

    With a `category_filter`, the filtered attempt is used when its top normalized similarity reaches
    `reference_threshold`; when it finds nothing usable it is retried without a filter (`fallback_reason`
    `filtered_vector_no_evidence`), and when its top similarity is below the threshold likewise
    (`filtered_vector_low_quality`), the low-quality candidates competing in the retry once per chunk. Without a
    filter a single unfiltered attempt runs. Candidates below `evidence_threshold` are not usable evidence, and
    chunks of a superseded document version are never returned.

    The retriever holds the attempt policy only; reading the collection is `KnowledgeCollection`'s. `mode` picks
    the dense path: `haystack` (milvus-haystack's `MilvusEmbeddingRetriever`), `sdk` (pymilvus `MilvusClient`), or
    `auto` (haystack first, sdk when it fails, the reason recorded). Every candidate carries its raw score, what it
    means (`l2_distance`, `cosine_similarity`, `inner_product`), its path, and a normalized similarity in [0, 1] as
    `Document.score`, on the same scale for both paths.

    With `lexical_weight` > 0, retrieval is hybrid: each candidate's score is its similarity plus `lexical_weight`
    times its BM25 score divided by a norm (`lexical_normalization`); BM25 runs inside Milvus on the collection's
    full-text field or in-process (`lexical_source`), and each attempt records which one ran.

    ### Usage example

    ```python
    from components.retrievers.filtered_retry_retriever import FilteredRetryRetriever
    from components.store.knowledge_collection import KnowledgeCollection, deserialize_collection_inplace

    retriever = FilteredRetryRetriever(KnowledgeCollection(uri="data/milvus.db"))
    retriever.warm_up()
    out = retriever.run(query_embedding=vector, query="disk full", category_filter="alerts")
    print(out["retrieval_trace"]["fallback_reason"])
    ```
    """

    def __init__(
        self,
        collection: KnowledgeCollection | None = None,
        mode: str = "auto",
        top_k: int = 60,
        search_depth: int | None = None,
        reference_threshold: float = 0.94,
        evidence_threshold: float = 0.88,
        lexical_weight: float = 0.15,
        lexical_source: str = "auto",
        lexical_normalization: str = "ideal",
        language_balance: float = 0.75,
        crosslingual_weight: float = 0.1,
        category_key: str = "category",
        enabled: bool = True,
    ) -> None:
        """
        Create the retriever; it connects in `warm_up` (or on first use).

        :param collection: The collection read (default: `KnowledgeCollection()`, the data folder's).
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
            (in-process: the BM25 index `index` writes beside the index file, memory-mapped, else one built from the
            collection's chunks once per index change) or `auto` (local with that file, else milvus when the
            collection has the field, else local).
        :param lexical_normalization: What BM25 is divided by: `ideal`, the largest score the query's terms can
            reach in this collection (sum of their IDF times k1 + 1, from term statistics read once per index
            change), so the bonus says how much of the query a chunk matches; or `best`, the best hit's score, so
            the best lexical hit always gets the full `lexical_weight`.
        :param language_balance: How much of the embedder's same-language bias is taken out of the ranking, 0 (none)
            to 1 (all), on a collection of more than one language: query and chunk are both centered on their
            language's centroid (counted by `index`) before their similarity ranks the chunk, so an answer in the
            other language is not outranked by same-language near-misses. A no-op on a collection of one language.
            The candidate's `similarity` itself is never changed; the rank score loses the `language_offset`.
        :param crosslingual_weight: On a collection of more than one language with cross-lingual vectors, a
            candidate in another language than the query gains `crosslingual_weight` times how far its
            cross-lingual similarity (use-multilingual-v3, a model aligned across languages, from the
            `crosslingual_embedding` input) lies above the median of the same-language candidates' (it loses when
            below). Same-language candidates keep their order; 0 turns it off.
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
        if crosslingual_weight < 0:
            msg = f"crosslingual_weight={crosslingual_weight!r} must be >= 0 (0 turns it off)"
            raise ValueError(msg)
        if not 0.0 <= language_balance <= 1.0:
            msg = f"language_balance={language_balance!r} must be in [0, 1] (0 turns it off)"
            raise ValueError(msg)
        for name, value in (("reference_threshold", reference_threshold), ("evidence_threshold", evidence_threshold)):
            if not 0.0 <= value <= 1.0:
                msg = f"{name}={value!r} must be a normalized similarity in [0, 1]"
                raise ValueError(msg)
        self.collection = collection if collection is not None else KnowledgeCollection()
        self.collection.schema.json_key(category_key)  # validates the key
        self.mode = mode
        self.top_k = top_k
        self.search_depth = search_depth
        self.reference_threshold = reference_threshold
        self.evidence_threshold = evidence_threshold
        self.lexical_weight = lexical_weight
        self.lexical_source = lexical_source
        self.lexical_normalization = lexical_normalization
        self.language_balance = language_balance
        self.crosslingual_weight = crosslingual_weight
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
            search_depth=self.search_depth,
            reference_threshold=self.reference_threshold,
            evidence_threshold=self.evidence_threshold,
            lexical_weight=self.lexical_weight,
            lexical_source=self.lexical_source,
            lexical_normalization=self.lexical_normalization,
            language_balance=self.language_balance,
            crosslingual_weight=self.crosslingual_weight,
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
        deserialize_collection_inplace(params)
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
            # opens the vector table too (once per index version), so the first lookup does not wait for it
            self.collection.connect("sdk" if self.mode == "sdk" else "haystack", self._vector_fields(True)[0])
            if self.lexical_weight > 0:
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

    def _filters(self, category: str) -> dict[str, Any] | None:
        return {"field": f"meta.{self.category_key}", "operator": "==", "value": category} if category else None

    def _vector_fields(self, crosslingual_query: bool) -> tuple[tuple[str, ...], VectorTable | None]:
        """
        The vector fields language balancing reads (none where it does not apply), and the table holding them.

        With the index run's vector table the search returns no vectors and balancing reads the table; without
        one (None), the search returns them.
        """
        if (self.language_balance == 0 and self.crosslingual_weight == 0) or not is_multilingual(
            self.collection.statistics()
        ):
            return (), None
        fields = tuple(
            self.collection.vector_fields(
                dense=self.language_balance > 0, crosslingual=self.crosslingual_weight > 0 and crosslingual_query
            )
        )
        table = self.collection.vector_table() if fields else None
        return fields, table if table is not None and set(fields) <= set(table.fields) else None

    def _search(
        self, vector: list[float], category: str, limit: int, attempt: dict[str, Any], fields: tuple[str, ...]
    ) -> list[Document]:
        filters = self._filters(category)
        if self.mode != "auto":
            return self.collection.dense_search(vector, limit, filters, path=self.mode, vector_fields=fields)
        try:
            return self.collection.dense_search(vector, limit, filters, path="haystack", vector_fields=fields)
        except LookupError:  # the collection does not exist: not on the sdk path either
            raise
        except Exception as err:
            attempt["fallback"] = {"from": "haystack", "to": "sdk", "reason": f"{type(err).__name__}: {err}"}
            logger.warning("haystack path failed, using the sdk path: {error}", error=err)
            return self.collection.dense_search(vector, limit, filters, path="sdk", vector_fields=fields)

    def _lexical(self, query: str, category: str, limit: int) -> tuple[list[tuple[str, float]], str, float]:
        """The attempt's BM25 search (run beside the dense one): its hits, the path that ran, its milliseconds."""
        started = time.perf_counter()
        pairs, path = self.collection.lexical_search(query, limit, self._filters(category), source=self.lexical_source)
        return pairs, path, round((time.perf_counter() - started) * 1000, 2)

    def _with_lexical(
        self,
        hits: list[Document],
        scores: dict[str, float],
        vector: list[float],
        query: str,
        lexical: Future,
        attempt: dict,
        fields: tuple[str, ...],
    ) -> list[Document]:
        with _stage(attempt, "lexical_wait"):
            pairs, attempt["lexical_path"], attempt["stage_ms"]["lexical"] = lexical.result()
        if not pairs:
            return hits
        # coverage: how much of the query's lexical weight a chunk matches, BM25 over the largest score the query's
        # terms can reach here; the bonus divides by that (ideal) or by the best hit's score (best)
        ideal = self.collection.term_statistics(self.lexical_source).ideal_score(tokenize(query))
        norm = ideal if self.lexical_normalization == "ideal" else pairs[0][1]
        bm25_scores = dict(pairs)
        with _stage(attempt, "lexical_fetch"):
            lexical_only = self.collection.fetch_scored(
                [cid for cid in bm25_scores if cid not in scores], vector, vector_fields=fields
            )
        for doc in lexical_only:
            doc.meta.update(retrieval_path="bm25", similarity=doc.score)
            scores[doc.id] = doc.score or 0.0
        hits = hits + lexical_only
        for d in hits:
            bm25 = bm25_scores.get(d.id, 0.0)
            bonus = self.lexical_weight * bm25 / norm
            d.meta.update(lexical_score=round(bonus, 4), lexical_coverage=round(min(1.0, bm25 / ideal), 4))
            scores[d.id] += bonus
        return sorted(hits, key=lambda d: -scores[d.id])

    def _balance_languages(
        self,
        hits: list[Document],
        scores: dict[str, float],
        vector: list[float],
        query: str,
        crosslingual: list[float],
        attempt: dict,
        fields: tuple[str, ...],
        table: VectorTable | None,
    ) -> list[Document]:
        statistics = self.collection.statistics()
        if (self.language_balance == 0 and self.crosslingual_weight == 0) or not is_multilingual(statistics):
            return hits
        languages = {d.id: script_language(d.content or "") for d in hits}
        query_language = script_language(query)
        offsets: dict[str, float] = {}
        schema = self.collection.schema
        vectors, crosslingual_vectors = (
            self._candidate_vectors(hits, field, table) if field in fields else {}
            for field in (schema.vector_field, schema.crosslingual_field)
        )
        if self.language_balance > 0:
            offsets = language_offsets(vector, query_language, vectors, languages, statistics, self.language_balance)
        similarities, bonuses = self._crosslingual_bonuses(
            crosslingual_vectors, languages, query_language, crosslingual, attempt
        )
        for doc in hits:
            offset, bonus = offsets.get(doc.id, 0.0), bonuses.get(doc.id, 0.0)
            doc.meta.update(language=languages[doc.id], language_offset=round(offset, 4))
            if doc.id in similarities:
                doc.meta.update(
                    crosslingual_similarity=round(similarities[doc.id], 4), crosslingual_bonus=round(bonus, 4)
                )
            scores[doc.id] = scores[doc.id] - offset + bonus
        return sorted(hits, key=lambda d: -scores[d.id])

    def _candidate_vectors(
        self, hits: list[Document], field: str, table: VectorTable | None
    ) -> dict[str, Sequence[float] | np.ndarray]:
        """One vector field of the hits: from the index run's table (Milvus for any it lacks), else their meta."""
        if table is None:
            return {d.id: d.meta[VECTORS_META_KEY][field] for d in hits if field in d.meta.get(VECTORS_META_KEY, {})}
        ids = [d.id for d in hits]
        found: dict[str, Sequence[float] | np.ndarray] = {**table.vectors(ids, field)}
        missing = [i for i in ids if i not in found]  # written after the table (an index run under way)
        if missing:
            found.update(self.collection.store.get_vectors(missing, [field])[field])
        return found

    def _crosslingual_bonuses(
        self,
        vectors: dict[str, Sequence[float] | np.ndarray],
        languages: dict[str, str],
        query_language: str,
        crosslingual: list[float],
        attempt: dict,
    ) -> tuple[dict[str, float], dict[str, float]]:
        """
        Cross-lingual similarity of every candidate, and the bonus of those in another language than the query.

        The same-language candidates' median is the reference: e5 ranks those well, so an other-language candidate
        moves up only as far as the aligned model finds it closer to the query than a typical same-language one.
        """
        if self.crosslingual_weight == 0 or not crosslingual:
            return {}, {}
        if not vectors:
            attempt["crosslingual"] = {"status": "no_vectors"}
            return {}, {}
        query = np.asarray(crosslingual, dtype=np.float32)
        query /= np.linalg.norm(query) or 1.0
        ids = list(vectors)
        matrix = np.asarray([vectors[i] for i in ids], dtype=np.float32)
        norms = np.linalg.norm(matrix, axis=1)
        similarities = dict(zip(ids, (matrix @ query / np.where(norms > 0, norms, 1.0)).tolist(), strict=True))
        same = [similarities[i] for i in ids if languages.get(i) == query_language]
        reference = stats.median(same or list(similarities.values()))
        bonuses = {
            i: self.crosslingual_weight * (similarity - reference)
            for i, similarity in similarities.items()
            if languages.get(i) != query_language
        }
        attempt["crosslingual"] = {"status": "applied", "reference": round(reference, 4), "adjusted": len(bonuses)}
        return similarities, bonuses

    def _query_terms(self, query: str) -> dict[str, int] | None:
        """How many distinct BM25 terms the query has, and how many of them occur in the collection at all."""
        if self.lexical_weight == 0 or not query:
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
        self, name: str, vector: list[float], query: str, category: str, top_k: int, crosslingual: list[float]
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
            "crosslingual": None,
            "vectors": None,
            "latency_ms": 0.0,
            "stage_ms": {},
            "error": None,
        }
        started = time.perf_counter()
        docs: list[Document] = []
        depth = max(self.search_depth or top_k, top_k)
        try:
            fields, table = self._vector_fields(bool(crosslingual))
            attempt["vectors"] = ("table" if table is not None else "search") if fields else None
            searched_fields = () if table is not None else fields
            searched_under = self.collection.active_versions()  # a re-index may switch versions mid-search
            lexical = (
                self._workers().submit(self._lexical, query, category, depth)
                if self.lexical_weight > 0 and query
                else None
            )
            with _stage(attempt, "dense"):
                # headroom for superseded versions; the vectors language balancing needs come in the same request
                hits = self._search(vector, category, depth * 2, attempt, searched_fields)
            # the hits are this attempt's own: their meta is completed in place and their rank score kept apart,
            # so that each kept candidate is copied once, at the end (Document.score is the final rank score)
            scores = {d.id: d.score or 0.0 for d in hits}
            for d in hits:
                d.meta["similarity"] = d.score
            if lexical is not None:
                hits = self._with_lexical(hits, scores, vector, query, lexical, attempt, searched_fields)
            with _stage(attempt, "balance"):
                hits = self._balance_languages(hits, scores, vector, query, crosslingual, attempt, fields, table)
            attempt["raw_hits"] = len(hits)
            active, attempt["stale_dropped"] = self.collection.drop_superseded(hits, searched_under)
            usable = [d for d in active if similarity_of(d) >= self.evidence_threshold]
            attempt["below_threshold_dropped"] = len(active) - len(usable)
            docs = [replace(d, score=scores[d.id], meta=_candidate_meta(d.meta, name, d.id)) for d in usable[:top_k]]
            attempt["path"] = docs[0].meta["retrieval_path"] if docs else ("sdk" if "fallback" in attempt else None)
        except Exception as err:
            attempt["error"] = f"{type(err).__name__}: {err}"
            logger.warning("L1 attempt {attempt} failed: {error}", attempt=name, error=err)
        attempt["latency_ms"] = round((time.perf_counter() - started) * 1000, 2)
        attempt["candidate_count"] = len(docs)
        attempt["top_score"] = round(max(similarity_of(d) for d in docs), 4) if docs else None
        return docs, attempt

    @component.output_types(candidates=FrozenList[Document], retrieval_trace=FrozenDict)
    def run(
        self,
        query_embedding: list[float] | QueryVector,
        query: str | None = None,
        category_filter: str | None = None,
        top_k: int | None = None,
        crosslingual_embedding: list[float] | QueryVector | None = None,
    ) -> dict[str, Any]:
        """
        Retrieve L1 candidates.

        :param query_embedding: The query vector (a list, or an embedder's `QueryVector`, which the pipeline passes
            on without copying it); empty (a rejected query) gives no candidates and no attempt.
        :param query: The query text, for the BM25 half of hybrid retrieval.
        :param category_filter: The L0 category, or empty for none.
        :param top_k: Overrides the init `top_k`.
        :param crosslingual_embedding: The query's cross-lingual vector (use-multilingual-v3), for
            `crosslingual_weight`; without it candidates rank without the cross-lingual bonus.
        :returns: `candidates` (a read-only `FrozenList` of Documents with `score` = normalized similarity and
            `raw_score`, `score_semantics`, `retrieval_path`, `attempt`, `evidence_key` in meta: the pipeline hands
            it on without copying it) and `retrieval_trace` (a read-only `FrozenDict`:
            `attempts`, `selected_attempt`, `fallback_reason`, `reference_threshold`, `l1_enabled`, `mode`, and
            `calibration`: the collection's noise ceilings and languages as `index` counted them, or None;
            `query_terms`: the query's distinct BM25 terms and how many the collection knows, None without BM25).
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
        vector, crosslingual = as_list(query_embedding), as_list(crosslingual_embedding)
        trace["calibration"] = self._calibration()
        trace["query_terms"] = self._query_terms(query or "")
        category = (category_filter or "").strip()
        docs: list[Document] = []
        if category:
            docs, attempt = self._attempt("filtered", vector, query or "", category, top_k, crosslingual)
            trace["attempts"].append(attempt)
            if not docs:
                trace["fallback_reason"] = NO_EVIDENCE
            elif attempt["top_score"] < self.reference_threshold:
                trace["fallback_reason"] = LOW_QUALITY
            else:
                trace["selected_attempt"] = "filtered"
        if trace["selected_attempt"] is None:
            filtered = docs
            docs, attempt = self._attempt("unfiltered", vector, query or "", "", top_k, crosslingual)
            trace["attempts"].append(attempt)
            trace["selected_attempt"] = "unfiltered"
            if filtered:  # low-quality filtered candidates still compete
                docs = _merge_attempts(docs, filtered)
        return {"candidates": FrozenList(docs), "retrieval_trace": FrozenDict(trace)}
