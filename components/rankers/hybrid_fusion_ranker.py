from __future__ import annotations

from dataclasses import replace
from typing import Any

from haystack import Document, component

from components.core.frozen import Documents, FrozenList
from components.core.fusion import lexical_bonus, validate_normalization


@component
class HybridFusionRanker:
    """
    Fuses each candidate's dense similarity and BM25 score into one rank score.

    A candidate's `score` becomes its normalized similarity (`meta.similarity`, which stays as it is) plus
    `lexical_weight` times its BM25 score divided by a norm: with `lexical_normalization` `ideal`, the largest score
    the query's terms can reach in the collection, so the bonus says how much of the query the chunk matches; with
    `best`, the best BM25 score of the retrieval attempt that found it, so the best lexical hit gets the whole
    weight. The retriever puts both norms and the raw score in each candidate's meta (`bm25`, `lexical_ideal`,
    `lexical_best`); a candidate without them (BM25 off, or nothing found by it) keeps its similarity. The bonus is
    recorded as `meta.lexical_score`, and the candidates come out by descending score (ties keep their order).

    ### Usage example

    ```python
    from components.rankers.hybrid_fusion_ranker import HybridFusionRanker

    ranked = HybridFusionRanker(lexical_weight=0.15).run(documents=candidates)["documents"]
    print(ranked[0].score, ranked[0].meta["similarity"], ranked[0].meta.get("lexical_score"))
    ```
    """

    def __init__(self, lexical_weight: float = 0.15, lexical_normalization: str = "ideal") -> None:
        """
        Create the ranker.

        :param lexical_weight: Weight of BM25 in the rank score (0 ranks by similarity alone).
        :param lexical_normalization: `ideal` or `best` (see the class description).
        :raises ValueError: If `lexical_weight` is negative or the normalization is unknown.
        """
        if lexical_weight < 0:
            msg = f"lexical_weight={lexical_weight!r} must be >= 0 (0 ranks by similarity alone)"
            raise ValueError(msg)
        validate_normalization(lexical_normalization)
        self.lexical_weight = lexical_weight
        self.lexical_normalization = lexical_normalization

    @component.output_types(documents=list[Document])
    def run(self, documents: Documents, lexical_weight: float | None = None) -> dict[str, Any]:
        """
        Score and sort the candidates.

        :param documents: Retrieved candidates (`meta.similarity`; BM25 facts where BM25 ran); not modified.
        :param lexical_weight: Overrides the init weight for this run.
        :returns: `documents`: copies with `score` = similarity + BM25 bonus and `meta.lexical_score`, best first (a
            read-only sequence the pipeline hands on without copying it).
        """
        weight = self.lexical_weight if lexical_weight is None else lexical_weight
        fused = []
        for doc in documents:
            similarity = float(doc.meta.get("similarity", doc.score or 0.0))
            bonus = lexical_bonus(doc.meta, weight, self.lexical_normalization)
            if bonus is None:
                fused.append(doc if doc.score == similarity else replace(doc, score=similarity))
                continue
            fused.append(replace(doc, score=similarity + bonus, meta={**doc.meta, "lexical_score": round(bonus, 4)}))
        fused.sort(key=lambda d: -(d.score or 0.0))
        return {"documents": FrozenList(fused)}
