from __future__ import annotations

import statistics as stats
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
from haystack import Document, component, default_from_dict, default_to_dict, logging

from components.core.frozen import Documents, FrozenList
from components.core.query_vector import QueryVector, as_list
from components.core.text_matching import script_language
from components.core.translations import translation_key
from components.store.collection_statistics import is_multilingual, language_offsets
from components.store.knowledge_collection import KnowledgeCollection
from components.store.knowledge_store import KnowledgeStore, deserialize_store_inplace

logger = logging.getLogger(__name__)

#: how far above its translation's best chunk a page's best chunk in the query's language is lifted
_TWIN_MARGIN = 0.0001


def _lift_query_language_twins(documents: list[Document], query_language: str) -> list[Document]:
    """
    The candidates with the best chunk of each page in the query's language lifted just above the best chunk of its
    translations in another language (pages whose sources differ only by a language folder: `translation_key`), its
    `twin_lift` and `translation_of` in meta; the others unchanged.
    """
    best: dict[tuple[str, bool], Document] = {}
    for doc in documents:
        if not doc.meta.get("source"):
            continue
        slot = (translation_key(str(doc.meta.get("source") or "")), doc.meta.get("language") == query_language)
        if slot not in best or (doc.score or 0.0) > (best[slot].score or 0.0):
            best[slot] = doc
    lifted: dict[str, Document] = {}
    for (key, own), doc in best.items():
        other = best.get((key, False))
        if not own or other is None or other.meta.get("source") == doc.meta.get("source"):
            continue
        target = (other.score or 0.0) + _TWIN_MARGIN
        if (doc.score or 0.0) < target:
            lift = target - (doc.score or 0.0)
            meta = {**doc.meta, "twin_lift": round(lift, 4), "translation_of": other.meta.get("source")}
            lifted[doc.id] = replace(doc, score=target, meta=meta)
    return [lifted.get(doc.id, doc) for doc in documents]


def _by_attempt(documents: Sequence[Document]) -> dict[str, list[Document]]:
    """The candidates grouped by the retrieval attempt that found them (each attempt is balanced on its own)."""
    groups: dict[str, list[Document]] = {}
    for doc in documents:
        groups.setdefault(str(doc.meta.get("attempt") or ""), []).append(doc)
    return groups


@component
class LanguageBalanceRanker:
    """
    Ranks answers written in another language than the query's on equal terms with same-language ones.

    An embedder ranks chunks in the query's own language higher, whatever they say. On a collection of more than
    one language (its statistics, counted by `lookup-knowledge index`, say so), two adjustments take that bias out of
    each candidate's rank score, never out of its `similarity`:

    - `language_balance` (0 off, 1 full): query and chunk are both centered on their language's centroid before
      their similarity ranks the chunk; the difference is the candidate's `language_offset`, subtracted.
    - `crosslingual_weight` (0 off): a candidate in another language gains that weight times how far its similarity
      under a model aligned across languages (the query's `crosslingual_embedding` against the chunk's stored
      cross-lingual vector) lies above the median of the same-language candidates' (`crosslingual_bonus`; it loses
      when below). Same-language candidates keep their order.

    Each retrieval attempt's candidates are balanced on their own (the median is the attempt's). The vectors are the
    store's: the index run's vector table, the store itself for any the table lacks. On a collection of one language,
    or with both weights 0, the candidates pass unchanged. Candidates come out by descending rank score.

    ### Usage example

    ```python
    from components.rankers.language_balance_ranker import LanguageBalanceRanker
    from components.store.knowledge_collection import KnowledgeCollection

    ranker = LanguageBalanceRanker(KnowledgeCollection(uri="data/milvus.db"))
    ranked = ranker.run(documents=fused, query="reset my password", query_embedding=vector)["documents"]
    print([(d.meta.get("language"), d.meta.get("language_offset")) for d in ranked[:3]])
    ```
    """

    def __init__(
        self,
        collection: KnowledgeStore | None = None,
        language_balance: float = 0.75,
        crosslingual_weight: float = 0.1,
        prefer_query_language: bool = True,
    ) -> None:
        """
        Create the ranker; it reads the collection's statistics and vectors on first use.

        :param collection: The collection the candidates come from (default: `KnowledgeCollection()`, the data
            folder's).
        :param language_balance: How much of the embedder's same-language bias is taken out, 0 (none) to 1 (all).
        :param crosslingual_weight: Weight of the cross-lingual bonus (0 turns it off).
        :param prefer_query_language: Rank a page in the query's language just above its own translation (a site's
            `zh/` page above its `en/` twin for a Chinese question): balancing makes the two near ties.
        :raises ValueError: If a weight is out of range.
        """
        if not 0.0 <= language_balance <= 1.0:
            msg = f"language_balance={language_balance!r} must be in [0, 1] (0 turns it off)"
            raise ValueError(msg)
        if crosslingual_weight < 0:
            msg = f"crosslingual_weight={crosslingual_weight!r} must be >= 0 (0 turns it off)"
            raise ValueError(msg)
        self.collection: KnowledgeStore = collection if collection is not None else KnowledgeCollection()
        self.language_balance = language_balance
        self.crosslingual_weight = crosslingual_weight
        self.prefer_query_language = prefer_query_language

    def to_dict(self) -> dict[str, Any]:
        """
        Serialize the ranker with its collection.

        :returns: The serialized component.
        """
        return default_to_dict(
            self,
            collection=self.collection,
            language_balance=self.language_balance,
            crosslingual_weight=self.crosslingual_weight,
            prefer_query_language=self.prefer_query_language,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LanguageBalanceRanker:
        """
        Deserialize the ranker and its collection.

        :param data: From `to_dict`.
        :returns: The ranker.
        """
        params = dict(data.get("init_parameters", {}))
        deserialize_store_inplace(params)
        return default_from_dict(cls, {**data, "init_parameters": params})

    def warm_up(self) -> None:
        """Open the collection's statistics and vector table now rather than in the first lookup (never raises)."""
        if self.language_balance == 0 and self.crosslingual_weight == 0:
            return
        try:
            self.collection.warm_up()
            if is_multilingual(self.collection.statistics()):
                self.collection.candidate_vectors([], self._fields(True))  # opens the index run's vector table
        except Exception as err:  # an unreadable store shows in the retriever's attempts
            logger.warning("The knowledge store is not ready yet: {error}", error=err)

    def close(self) -> None:
        """Release the collection."""
        self.collection.close()

    def _fields(self, crosslingual_query: bool) -> tuple[str, str]:
        """The dense and cross-lingual vector fields to read ("" for one not needed or not in the collection)."""
        wanted = self.collection.vector_fields(
            dense=self.language_balance > 0, crosslingual=self.crosslingual_weight > 0 and crosslingual_query
        )
        schema = self.collection.schema
        return (
            schema.vector_field if schema.vector_field in wanted else "",
            schema.crosslingual_field if schema.crosslingual_field in wanted else "",
        )

    def _crosslingual(
        self,
        vectors: dict[str, Sequence[float] | np.ndarray],
        languages: dict[str, str],
        query_language: str,
        query: list[float],
    ) -> tuple[dict[str, float], dict[str, float], float | None]:
        """
        Cross-lingual similarity of an attempt's candidates, the bonus of those in another language than the query,
        and the reference: the same-language candidates' median (e5 ranks those well, so an other-language candidate
        moves up only as far as the aligned model finds it closer than a typical same-language one).
        """
        if not vectors:
            return {}, {}, None
        unit = np.asarray(query, dtype=np.float32)
        unit /= np.linalg.norm(unit) or 1.0
        ids = list(vectors)
        matrix = np.asarray([vectors[i] for i in ids], dtype=np.float32)
        norms = np.linalg.norm(matrix, axis=1)
        similarities = dict(zip(ids, (matrix @ unit / np.where(norms > 0, norms, 1.0)).tolist(), strict=True))
        same = [similarities[i] for i in ids if languages.get(i) == query_language]
        reference = stats.median(same or list(similarities.values()))
        bonuses = {
            i: self.crosslingual_weight * (similarity - reference)
            for i, similarity in similarities.items()
            if languages.get(i) != query_language
        }
        return similarities, bonuses, reference

    def _balance(
        self,
        group: list[Document],
        query: str,
        vector: list[float],
        crosslingual: list[float],
        fields: tuple[str, str],
    ) -> list[Document]:
        """One attempt's candidates with their offsets and bonuses, as copies."""
        ids = [d.id for d in group]
        dense_field, crosslingual_field = fields
        vectors = self.collection.candidate_vectors(ids, [f for f in fields if f])
        languages = {d.id: script_language(d.content or "") for d in group}
        query_language = script_language(query)
        offsets = (
            language_offsets(
                vector,
                query_language,
                vectors.get(dense_field, {}),
                languages,
                self.collection.statistics(),
                self.language_balance,
            )
            if dense_field
            else {}
        )
        similarities, bonuses, reference = (
            self._crosslingual(vectors.get(crosslingual_field, {}), languages, query_language, crosslingual)
            if crosslingual_field
            else ({}, {}, None)
        )
        balanced = []
        for doc in group:
            offset, bonus = offsets.get(doc.id, 0.0), bonuses.get(doc.id, 0.0)
            meta = {**doc.meta, "language": languages[doc.id], "language_offset": round(offset, 4)}
            if doc.id in similarities:
                meta.update(
                    crosslingual_similarity=round(similarities[doc.id], 4),
                    crosslingual_bonus=round(bonus, 4),
                    crosslingual_reference=round(reference or 0.0, 4),
                )
            balanced.append(replace(doc, score=(doc.score or 0.0) - offset + bonus, meta=meta))
        return _lift_query_language_twins(balanced, query_language) if self.prefer_query_language else balanced

    @component.output_types(documents=list[Document])
    def run(
        self,
        documents: Documents,
        query: str | None = None,
        query_embedding: list[float] | QueryVector | None = None,
        crosslingual_embedding: list[float] | QueryVector | None = None,
    ) -> dict[str, Any]:
        """
        Balance the candidates' rank scores across languages.

        :param documents: Ranked candidates (their `score` is the rank score so far; `meta.attempt` groups them);
            not modified.
        :param query: The query text (its script is its language).
        :param query_embedding: The query vector of the collection's embedder, for `language_balance`.
        :param crosslingual_embedding: The query's cross-lingual vector, for `crosslingual_weight`; without it no
            candidate gets a cross-lingual bonus.
        :returns: `documents`: copies with the adjusted `score` and `language`, `language_offset` (and, with the
            bonus, `crosslingual_similarity`, `crosslingual_bonus`, `crosslingual_reference`) in meta, best first;
            the candidates as they came when balancing does not apply, or when the store fails meanwhile (logged).
        """
        vector, crosslingual = as_list(query_embedding), as_list(crosslingual_embedding)
        if not documents or (self.language_balance == 0 and self.crosslingual_weight == 0):
            return {"documents": FrozenList(documents)}
        if not is_multilingual(self.collection.statistics()):
            return {"documents": FrozenList(documents)}
        try:
            fields = self._fields(bool(crosslingual))
            if not vector:
                fields = ("", fields[1])
            balanced = {
                doc.id + "\x00" + attempt: doc
                for attempt, group in _by_attempt(documents).items()
                for doc in self._balance(group, query or "", vector, crosslingual, fields)
            }
        except Exception as err:  # the store went away after the retriever read it: rank without balancing
            logger.warning("Language balancing skipped, the knowledge store failed: {error}", error=err)
            return {"documents": FrozenList(documents)}
        ordered = [balanced[d.id + "\x00" + str(d.meta.get("attempt") or "")] for d in documents]
        ordered.sort(key=lambda d: -(d.score or 0.0))
        return {"documents": FrozenList(ordered)}
