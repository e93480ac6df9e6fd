from __future__ import annotations

from dataclasses import replace
from typing import Any

from haystack import Document, component

from components.core.frozen import Documents, FrozenDict, FrozenList, Record
from components.core.scores import boost_reasons
from components.core.text_matching import mentions
from components.core.versions import named_releases, release_groups, release_order

# Every signal ships at 0: measured on gitlab_handbook and stard, hint boosts only reordered for the worse
# (docs/decisions.md). A matched hint is still a hit reason, so blocks stay explained; raise a weight to reorder.
DEFAULT_WEIGHTS = {
    "keyword": 0.0,
    "title": 0.0,
    "entity": 0.0,
    "domain": 0.0,
    "l0_document": 0.0,
    "consensus_domain": 0.0,
}


def _attempts(doc: Document) -> list[str]:
    """The retrieval attempts that found the candidate, the one whose score it carries first."""
    return list(dict.fromkeys([str(doc.meta.get("attempt") or "vector"), *doc.meta.get("attempts", [])]))


@component
class RuleReranker:
    """
    Reranks L1 candidates with deterministic rule signals from the L0 hints, and explains every boost.

    The final score is the candidate's normalized similarity plus weighted boosts (capped at `max_boost`):
    a matched keyword found in the chunk's keywords or text (`keyword`), a matched title equal to the chunk's title
    (`title`), a matched entity in its entities or text (`entity`), its category among the hint domains
    (`domain`), its document among the L0-matched documents (`l0_document`), its category being the one the top
    `consensus_top_n` candidates agree on (`consensus_domain`, votes weighted 1/rank, at least
    `consensus_min_share` of them; off unless weighted). The hit reasons of a candidate are first the retrieval
    attempts that found it (`l1_filtered`, `l1_unfiltered`; its `attempt` and `attempts` meta), then each boost (a
    signal weighted 0 still shows up there, explaining without reordering); the hint itself never becomes
    evidence. Ties break on base score, then source and chunk index, so the order is deterministic.

    With `lift_named_releases`, a question that names a release (`v1.3`, `2.9.0`) lifts that release of a page to the
    best score any release of the page earned (signal `release`): the question asks for that release's text, and
    releases of one page differ in score by their length, not by their answer.

    ### Usage example

    ```python
    from components.rankers.rule_reranker import RuleReranker

    out = RuleReranker(weights={"keyword": 0.02, "title": 0.03}).run(documents=candidates, hints=hints)
    print(out["rerank_trace"]["candidates"][0]["boost_reasons"])
    ```
    """

    def __init__(
        self,
        weights: dict[str, float] | None = None,
        max_boost: float = 0.06,
        trace_top_n: int = 5,
        consensus_top_n: int = 10,
        consensus_min_share: float = 0.6,
        lift_named_releases: bool = True,
    ) -> None:
        """
        Create the reranker.

        :param weights: Boost per signal (`keyword`, `title`, `entity`, `domain`, `l0_document`,
            `consensus_domain`); unknown names are rejected, missing ones are 0.
        :param max_boost: Cap of the summed boosts of one candidate.
        :param trace_top_n: How many top candidates the rerank trace details.
        :param consensus_top_n: Candidates that vote for the consensus category (signal `consensus_domain`).
        :param consensus_min_share: Share of the rank-weighted votes a category needs to be the consensus.
        :param lift_named_releases: Lift the release of a page that the question names to the best score of the page's
            releases.
        :raises ValueError: For an unknown signal, a negative weight or bound.
        """
        weights = dict(weights or {})
        unknown = set(weights) - set(DEFAULT_WEIGHTS)
        if unknown:
            msg = f"weights has unknown signals {sorted(unknown)}; use {sorted(DEFAULT_WEIGHTS)}"
            raise ValueError(msg)
        if any(w < 0 for w in weights.values()) or max_boost < 0 or trace_top_n < 0:
            msg = f"weights={weights!r}, max_boost={max_boost!r} and trace_top_n={trace_top_n!r} must be >= 0"
            raise ValueError(msg)
        if consensus_top_n < 1 or not 0 < consensus_min_share <= 1:
            msg = (
                f"consensus_top_n={consensus_top_n!r} must be >= 1 and consensus_min_share={consensus_min_share!r} "
                "in (0, 1]"
            )
            raise ValueError(msg)
        self.weights = {**DEFAULT_WEIGHTS, **weights}
        self.max_boost = max_boost
        self.trace_top_n = trace_top_n
        self.consensus_top_n = consensus_top_n
        self.consensus_min_share = consensus_min_share
        self.lift_named_releases = lift_named_releases

    def _consensus(self, documents: Documents) -> str:
        """The category most of the top candidates agree on (votes weighted 1/rank), or ""."""
        votes: dict[str, float] = {}
        for rank, doc in enumerate(documents[: self.consensus_top_n], start=1):
            category = str(doc.meta.get("category") or "")
            votes[category] = votes.get(category, 0.0) + 1.0 / rank
        if not votes:
            return ""
        category, best = max(votes.items(), key=lambda item: (item[1], item[0]))
        return category if category and best / sum(votes.values()) >= self.consensus_min_share else ""

    def _boosts(self, doc: Document, hints: Record, consensus: str = "") -> list[dict[str, Any]]:
        meta, text = doc.meta, doc.content or ""
        boosts: list[dict[str, Any]] = []

        def add(signal: str, value: str) -> None:
            # a zero-weight match moves nothing but still explains the block
            boosts.append({"signal": signal, "value": value, "weight": self.weights[signal]})

        chunk_keywords = {str(k).casefold() for k in meta.get("keywords") or []}
        for keyword in hints.get("matched_keywords", []):
            if keyword.casefold() in chunk_keywords or mentions(text, keyword):
                add("keyword", keyword)
        title = str(meta.get("title") or "").casefold()
        for matched in hints.get("matched_titles", []):
            if matched.casefold() == title:
                add("title", matched)
        chunk_entities = {str(e).casefold() for e in meta.get("entities") or []}
        for entity in hints.get("entities", []):
            if entity.casefold() in chunk_entities or mentions(text, entity):
                add("entity", entity)
        if meta.get("category") and meta["category"] in hints.get("domains", []):
            add("domain", str(meta["category"]))
        if meta.get("doc_id") and meta["doc_id"] in hints.get("matched_doc_ids", []):
            add("l0_document", str(meta["doc_id"]))
        if consensus and meta.get("category") == consensus:
            add("consensus_domain", consensus)
        return boosts

    @component.output_types(documents=list[Document], rerank_trace=FrozenDict)
    def run(self, documents: Documents, hints: Record | None = None, query: str | None = None) -> dict[str, Any]:
        """
        Rerank candidates.

        :param documents: L1 candidates (`score` = normalized similarity; a list or a `FrozenList`); they are not
            modified.
        :param hints: L0 hint data; without hints the order is the similarity order.
        :param query: The question, for the releases it names (`lift_named_releases`).
        :returns: `documents` (reranked copies, a read-only sequence; meta gains `base_score`, `boosts` and
            `hit_reasons`, `score` is the final score) and `rerank_trace` (a `FrozenDict`: `weights`, `max_boost`,
            `candidates`: the top `trace_top_n` candidates with rank, source, evidence key, base score, final score,
            boost reasons). The pipeline hands both on without copying them.
        """
        hints = hints or {}
        consensus = self._consensus(documents) if self.weights["consensus_domain"] > 0 else ""
        scored = []
        for doc in documents:
            boosts = self._boosts(doc, hints, consensus)
            base = float(doc.score or 0.0)
            final = base + min(self.max_boost, sum(b["weight"] for b in boosts))
            reasons = [f"l1_{path}" for path in _attempts(doc)] + [f"{b['signal']}:{b['value']}" for b in boosts]
            meta = {**doc.meta, "base_score": base, "boosts": boosts, "hit_reasons": reasons}
            scored.append(replace(doc, score=final, meta=meta))
        if self.lift_named_releases and query:
            scored = _lift_named_releases(scored, named_releases(query))
        scored.sort(
            key=lambda d: (
                -(d.score or 0.0),
                -d.meta["base_score"],
                str(d.meta.get("source")),
                d.meta.get("chunk_index") or 0,
            )
        )
        candidates = [
            {
                "rank": rank,
                "source": d.meta.get("source"),
                "evidence_key": d.meta.get("evidence_key"),
                "base_score": round(d.meta["base_score"], 4),
                "final_score": round(d.score or 0.0, 4),
                "boost_reasons": boost_reasons(d.meta),
            }
            for rank, d in enumerate(scored[: self.trace_top_n], start=1)
        ]
        trace = {"weights": dict(self.weights), "max_boost": self.max_boost, "candidates": candidates}
        return {"documents": FrozenList(scored), "rerank_trace": FrozenDict(trace)}


def _lift_named_releases(scored: list[Document], named: frozenset[str]) -> list[Document]:
    """
    Each page's release that the question names, lifted to the best score of the page's releases.

    :param scored: The reranked candidates (copies, with `boosts` and `hit_reasons`).
    :param named: The releases the question names.
    :returns: The candidates, the named releases' chunks with the lift added (boost signal `release`).
    """
    if not named:
        return scored
    lifted = list(scored)
    for releases in release_groups([doc.meta.get("source") for doc in scored]):
        asked = [i for i, release in releases.items() if release_order(release, named)[0] == 0]
        if not asked:
            continue
        lift = max(scored[i].score or 0.0 for i in releases) - max(scored[i].score or 0.0 for i in asked)
        if lift <= 0:
            continue
        for i in asked:
            doc = scored[i]
            boost = {"signal": "release", "value": str(releases[i]), "weight": round(lift, 4)}
            meta = {**doc.meta, "boosts": [*doc.meta["boosts"], boost]}
            meta["hit_reasons"] = [*meta["hit_reasons"], f"release:{releases[i]}"]
            lifted[i] = replace(doc, score=(doc.score or 0.0) + lift, meta=meta)
    return lifted
