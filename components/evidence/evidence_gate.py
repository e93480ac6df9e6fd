from __future__ import annotations

from dataclasses import replace
from typing import Any

from haystack import Document, component

from components.core.frozen import Documents, FrozenDict, FrozenList, Record
from components.core.scores import document_key, similarity_of
from components.core.text_matching import script_language
from components.core.versions import page_key

NOISE_LEVELS = ("p50", "p90", "p95", "max")


def _coverage(doc: Document) -> float:
    return float(doc.meta.get("lexical_coverage", 0.0))


@component
class EvidenceGate:
    """
    Decides which candidates are evidence, so that `found` means the knowledge base holds an answer.

    Every collection has a noise ceiling: the similarity its best chunk reaches for queries that mean nothing, in
    the query's script (counted by `lookup-knowledge index` from seeded probes and handed on in the retrieval
    trace). A candidate is evidence when

    - its similarity clears the ceiling by `dense_margin` (the embedding alone vouches for it: basis `dense`) — by
      `unfamiliar_dense_margin` when less than `familiar_share` of the query's terms occur anywhere in the
      collection (words the knowledge base has never seen, as in gibberish, need the stronger evidence) — and
      the best similarity stands at least `min_standout` above the `standout_rank`-th best (an answer stands out
      from the rest; a topic the knowledge base only borders on lifts many chunks alike; not checked with fewer
      candidates), or
    - it matches at least `lexical_coverage` of the query's lexical weight (BM25 over the largest score the query's
      terms can reach), the query has at least `min_lexical_terms` distinct terms, and its similarity is at most
      `lexical_margin` below the ceiling (words and meaning agree: basis `dense+lexical`).

    The lookup has evidence (`found`) only when one of the first `decision_depth` candidates, by rank or by
    similarity, is evidence (by similarity as well: a cross-lingual bonus may rank an answer in the other language
    first, whose similarity under the embedder is lower than a same-language chunk's).
    Then the blocks are the candidates, in rank order, whose rank score is within `max_gap` of the first one's (a
    block far below the best is not evidence) and whose similarity is no more than `lexical_margin` below the
    ceiling; their `evidence_basis` says which rule each met (`rank` for a block that ranks with the best without
    meeting either on its own, as an answer in the other language may). Rejected candidates are listed in the trace
    with the reason (`below_noise`, `far_below_best`, `no_evidence_on_top`). How far the first block's document
    leads the next document (the rank score of its first block over the best one of any other document's
    candidates) sets `relevance`: `high` from `high_lead`, `medium` from `medium_lead`, else `low`; of the signals
    measured, this lead predicts best whether the first block's document is the answer. The page's own copies
    (`lead_skips_copies`: its translations, whose sources differ only by a language folder, and its versions, which
    differ only by a release) are not the next document: they say the same, and would put every answer of a
    bilingual or versioned site at `low`. How each default was tuned,
    and on which set: docs/decisions.md.

    ### Usage example

    ```python
    from components.evidence.evidence_gate import EvidenceGate

    out = EvidenceGate().run(documents=reranked, query="disk full", retrieval_trace=trace)
    print(out["evidence_trace"]["found"], out["evidence_trace"]["relevance"])
    ```
    """

    def __init__(
        self,
        dense_margin: float = 0.005,
        unfamiliar_dense_margin: float = 0.0075,
        familiar_share: float = 0.3,
        min_standout: float = 0.004,
        standout_rank: int = 10,
        lexical_coverage: float = 0.2,
        lexical_margin: float = 0.04,
        min_lexical_terms: int = 2,
        decision_depth: int = 5,
        max_gap: float = 0.02,
        noise_level: str = "p95",
        uncalibrated_noise: float = 0.935,
        high_lead: float = 0.02,
        medium_lead: float = 0.006,
        trace_rejected: int = 10,
        lead_skips_copies: bool = True,
    ) -> None:
        """
        Create the gate.

        :param dense_margin: How far above the noise ceiling a similarity must be to count on its own.
        :param unfamiliar_dense_margin: The same for a query the collection's vocabulary barely knows (and when the
            retrieval trace does not say, because BM25 is off).
        :param familiar_share: Least share of the query's distinct terms that must occur in the collection for the
            query to count as familiar.
        :param min_standout: Least lead of the best similarity over the `standout_rank`-th best for the dense basis.
        :param standout_rank: Which candidate (by similarity) the best one must stand out from.
        :param lexical_coverage: Least share of the query's lexical weight a candidate must match to count with a
            similarity below `ceiling + dense_margin`.
        :param lexical_margin: How far below the ceiling the similarity of such a candidate may be.
        :param min_lexical_terms: Fewest distinct query terms for the lexical basis (one common word, as in "what
            about the one after?", matches everything).
        :param decision_depth: How many of the top candidates, by rank and by similarity, may carry the decision.
        :param max_gap: Largest gap between an evidence block's rank score and the first block's.
        :param noise_level: Which statistic of the noise probes is the ceiling: `p50`, `p90`, `p95` or `max`.
        :param uncalibrated_noise: The ceiling for a collection without statistics (indexed by another tool, or
            before they were counted); the trace then says `calibrated: false`.
        :param high_lead: Lead of the first block's document over the next document from which relevance is `high`.
        :param medium_lead: The lead from which relevance is `medium` (below: `low`).
        :param trace_rejected: How many rejected candidates the trace lists.
        :param lead_skips_copies: Measure the lead over the next document that is not a translation or a version of
            the first block's page (`components.core.versions.page_key`); False: over the next document.
        :raises ValueError: If a parameter is out of range.
        """
        if noise_level not in NOISE_LEVELS:
            msg = f"noise_level={noise_level!r} is not supported; use one of {list(NOISE_LEVELS)}"
            raise ValueError(msg)
        shares = (("lexical_coverage", lexical_coverage), ("uncalibrated_noise", uncalibrated_noise))
        for name, value in (*shares, ("familiar_share", familiar_share)):
            if not 0.0 <= value <= 1.0:
                msg = f"{name}={value!r} must be in [0, 1]"
                raise ValueError(msg)
        bounds = (("lexical_margin", lexical_margin), ("max_gap", max_gap), ("medium_lead", medium_lead))
        for name, value in (*bounds, ("min_lexical_terms", min_lexical_terms), ("trace_rejected", trace_rejected)):
            if value < 0:
                msg = f"{name}={value!r} must be >= 0"
                raise ValueError(msg)
        for name, value in (("decision_depth", decision_depth), ("standout_rank", standout_rank)):
            if value < 1:
                msg = f"{name}={value!r} must be at least 1"
                raise ValueError(msg)
        if min_standout < 0:
            msg = f"min_standout={min_standout!r} must be >= 0"
            raise ValueError(msg)
        if medium_lead > high_lead:
            msg = f"medium_lead={medium_lead!r} must not exceed high_lead={high_lead!r}"
            raise ValueError(msg)
        self.dense_margin = dense_margin
        self.unfamiliar_dense_margin = unfamiliar_dense_margin
        self.familiar_share = familiar_share
        self.min_standout = min_standout
        self.standout_rank = standout_rank
        self.lexical_coverage = lexical_coverage
        self.lexical_margin = lexical_margin
        self.min_lexical_terms = min_lexical_terms
        self.decision_depth = decision_depth
        self.max_gap = max_gap
        self.noise_level = noise_level
        self.uncalibrated_noise = uncalibrated_noise
        self.high_lead = high_lead
        self.medium_lead = medium_lead
        self.lead_skips_copies = lead_skips_copies
        self.trace_rejected = trace_rejected

    def _ceiling(self, query: str, retrieval_trace: Record) -> tuple[float, bool]:
        noise = (retrieval_trace.get("calibration") or {}).get("noise_similarity") or {}
        levels = noise.get(script_language(query))
        if levels is None and noise:  # a query in a script no probe had: the strictest ceiling
            levels = max(noise.values(), key=lambda values: values.get(self.noise_level, 0.0))
        if levels and self.noise_level in levels:
            return float(levels[self.noise_level]), True
        return self.uncalibrated_noise, False

    def _dense_margin(self, terms: dict[str, int]) -> float:
        familiar = terms.get("terms", 0) > 0 and terms.get("known", 0) >= self.familiar_share * terms["terms"]
        return self.dense_margin if familiar else self.unfamiliar_dense_margin

    def _standout(self, documents: Documents) -> float | None:
        """The best similarity's lead over the `standout_rank`-th; None with fewer candidates (none to lead)."""
        similarities = sorted((similarity_of(d) for d in documents), reverse=True)
        if len(similarities) < self.standout_rank:
            return None
        return similarities[0] - similarities[self.standout_rank - 1]

    def _basis(self, doc: Document, ceiling: float, margin: float, stands_out: bool, lexical_ok: bool) -> str | None:
        similarity = similarity_of(doc)
        if similarity >= ceiling + margin and stands_out:
            return "dense"
        if lexical_ok and _coverage(doc) >= self.lexical_coverage and similarity >= ceiling - self.lexical_margin:
            return "dense+lexical"
        return None

    def _deciders(self, documents: Documents) -> set[int]:
        """The positions of the first `decision_depth` candidates by rank and of the first by similarity."""
        by_similarity = sorted(range(len(documents)), key=lambda i: -similarity_of(documents[i]))
        return {*range(min(len(documents), self.decision_depth)), *by_similarity[: self.decision_depth]}

    def _relevance(self, lead: float) -> str:
        if lead >= self.high_lead:
            return "high"
        return "medium" if lead >= self.medium_lead else "low"

    def _lead(self, first: Document, documents: Documents) -> tuple[float, str | None]:
        """How far the first block's rank score is above the best candidate of another document, and that document."""
        document = document_key(first.meta, first.id)
        page = page_key(str(first.meta.get("source") or "")) if self.lead_skips_copies else None

        def other(doc: Document) -> bool:
            if document_key(doc.meta, doc.id) == document:
                return False
            return not page or page_key(str(doc.meta.get("source") or "")) != page

        runner_up = next((d for d in documents if other(d)), None)
        if runner_up is None:  # one document among the candidates leads by its whole score
            return first.score or 0.0, None
        return (first.score or 0.0) - (runner_up.score or 0.0), document_key(runner_up.meta, runner_up.id)

    @staticmethod
    def _rejection(doc: Document, reason: str) -> dict[str, Any]:
        return {
            "evidence_key": doc.meta.get("evidence_key"),
            "source": doc.meta.get("source"),
            "similarity": round(similarity_of(doc), 4),
            "lexical_coverage": round(_coverage(doc), 4),
            "reason": reason,
        }

    @component.output_types(documents=list[Document], evidence_trace=FrozenDict, ranking=FrozenList[str])
    def run(
        self, documents: Documents, query: str | None = None, retrieval_trace: Record | None = None
    ) -> dict[str, Any]:
        """
        Keep the candidates that are evidence.

        :param documents: Ranked candidates (`meta.similarity`, `meta.lexical_coverage`; a list or a `FrozenList`);
            they are not modified.
        :param query: The normalized query (its script picks the noise ceiling).
        :param retrieval_trace: The retriever's trace: its `calibration` holds the collection's noise ceilings, its
            `query_terms` how many distinct terms the query has and how many the collection knows.
        :returns: `documents` (the evidence in rank order, copies whose meta gains `evidence_basis` and
            `noise_margin`, as a read-only `FrozenList`) and `evidence_trace` (a `FrozenDict`: `found`, `candidates`,
            `noise_ceiling`, `calibrated`, `rule`, `best`, `lead`, `runner_up`, `relevance`, `evidence_count`,
            `rejected`); and `ranking`, the evidence keys of every candidate judged, in rank order (what the trace
            records, and what the sidecar compares with); the pipeline hands the three on without copying them.
        """
        query, retrieval_trace = query or "", retrieval_trace or {}
        ceiling, calibrated = self._ceiling(query, retrieval_trace)
        terms = retrieval_trace.get("query_terms") or {}
        margin = self._dense_margin(terms)
        lexical_ok = terms.get("terms", 0) >= self.min_lexical_terms
        standout = self._standout(documents)
        stands_out = standout is None or standout >= self.min_standout
        bases = [self._basis(doc, ceiling, margin, stands_out, lexical_ok) for doc in documents]
        deciders = [(documents[i], bases[i]) for i in sorted(self._deciders(documents)) if bases[i]]
        found = bool(deciders)
        top_score = max((d.score or 0.0 for d in documents), default=0.0)
        evidence: list[Document] = []
        rejected: list[dict[str, Any]] = []
        for doc, basis in zip(documents, bases, strict=True):
            similarity = similarity_of(doc)
            if not found:
                rejected.append(self._rejection(doc, "no_evidence_on_top" if basis else "below_noise"))
            elif basis is None and similarity < ceiling - self.lexical_margin:
                rejected.append(self._rejection(doc, "below_noise"))
            elif (doc.score or 0.0) < top_score - self.max_gap:
                rejected.append(self._rejection(doc, "far_below_best"))
            else:
                meta = {**doc.meta, "evidence_basis": basis or "rank", "noise_margin": round(similarity - ceiling, 4)}
                evidence.append(replace(doc, meta=meta))
        trace: dict[str, Any] = {
            "found": bool(evidence),
            "candidates": len(documents),
            "noise_ceiling": round(ceiling, 4),
            "noise_level": self.noise_level,
            "calibrated": calibrated,
            "rule": {
                "dense_margin": margin,
                "standout": None if standout is None else round(standout, 4),
                "min_standout": self.min_standout,
                "lexical_coverage": self.lexical_coverage,
                "lexical_margin": self.lexical_margin,
                "lexical_basis_allowed": lexical_ok,
                "decision_depth": self.decision_depth,
                "max_gap": self.max_gap,
            },
            "best": None,
            "lead": None,
            "runner_up": None,
            "relevance": "none",
            "evidence_count": len(evidence),
            "rejected": rejected[: self.trace_rejected],
        }
        if evidence:
            # what vouches for the evidence: its best block that met a rule, else the candidate that decided
            carriers = [(d, d.meta["evidence_basis"]) for d in evidence if d.meta["evidence_basis"] != "rank"]
            top, top_basis = max(carriers or deciders, key=lambda pair: similarity_of(pair[0]))
            margin = similarity_of(top) - ceiling
            lead, runner_up = self._lead(evidence[0], documents)
            trace.update(
                best={
                    "evidence_key": top.meta.get("evidence_key"),
                    "similarity": round(similarity_of(top), 4),
                    "noise_margin": round(margin, 4),
                    "basis": top_basis,
                },
                lead=round(lead, 4),
                runner_up=runner_up,
                relevance=self._relevance(lead),
            )
        ranking = FrozenList(str(d.meta.get("evidence_key") or d.id) for d in documents)
        return {"documents": FrozenList(evidence), "evidence_trace": FrozenDict(trace), "ranking": ranking}
