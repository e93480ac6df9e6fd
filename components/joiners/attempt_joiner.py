from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from haystack import Document, component

from components.core.frozen import Documents, FrozenList, Record
from components.core.scores import USABLE_KEY


def _attempt_order(documents: Sequence[Document], retrieval_trace: Mapping[str, Any] | None) -> list[str]:
    """The attempts, the selected one first, then the others in the order the retriever ran them."""
    ran = [str(a.get("name")) for a in (retrieval_trace or {}).get("attempts", [])]
    seen = list(dict.fromkeys([*ran, *(str(d.meta.get("attempt") or "") for d in documents)]))
    selected = str((retrieval_trace or {}).get("selected_attempt") or "")
    return sorted(seen, key=lambda name: name != selected)  # stable: the rest keep their order


@component
class AttemptJoiner:
    """
    Joins the candidates of the retrieval attempts into one ranked list, once per chunk.

    The retriever hands on every candidate of every attempt it ran (a filtered attempt and the unfiltered retry), each
    with its `attempt` and whether its similarity makes it `usable` evidence, and the rankers after it score them. This
    joiner drops the candidates that are not usable, keeps the best `top_k` of each attempt by rank score, and joins
    the attempts: a chunk both attempts found is one candidate, its better-scored copy (the selected attempt's on a
    tie), and its `attempts` meta names every attempt that found it. The gate after it weighs how far the best
    candidate stands out from the next ones, and a chunk counted twice would stand in for a second candidate.

    ### Usage example

    ```python
    from components.joiners.attempt_joiner import AttemptJoiner

    joined = AttemptJoiner(top_k=60).run(documents=ranked, retrieval_trace=trace)["documents"]
    print([(d.meta["attempt"], d.meta.get("attempts")) for d in joined[:3]])
    ```
    """

    def __init__(self, top_k: int = 60) -> None:
        """
        Create the joiner.

        :param top_k: Candidates kept of each attempt.
        :raises ValueError: If `top_k` is not positive.
        """
        if top_k < 1:
            msg = f"top_k={top_k!r} must be positive; use e.g. 60"
            raise ValueError(msg)
        self.top_k = top_k

    @component.output_types(documents=list[Document])
    def run(
        self, documents: Documents, retrieval_trace: Record | None = None, top_k: int | None = None
    ) -> dict[str, Any]:
        """
        Join the attempts' candidates.

        :param documents: Ranked candidates (`score` the rank score, `meta.attempt`, `meta.usable`; a candidate
            without `usable` counts as usable); not modified.
        :param retrieval_trace: The retriever's trace: its `selected_attempt` wins ties between copies of a chunk.
        :param top_k: Overrides the init `top_k`.
        :returns: `documents`: the usable candidates, once per chunk, by descending score (a read-only sequence);
            `usable` is left out of their meta, and a chunk several attempts found has `attempts` in its meta.
        """
        top_k = top_k or self.top_k
        by_attempt: dict[str, list[Document]] = {}
        for doc in sorted(documents, key=lambda d: -(d.score or 0.0)):  # stable: equal scores keep their order
            if doc.meta.get(USABLE_KEY, True):
                by_attempt.setdefault(str(doc.meta.get("attempt") or ""), []).append(doc)
        best: dict[str, Document] = {}
        found_by: dict[str, list[str]] = {}
        for attempt in _attempt_order(documents, retrieval_trace):
            for doc in by_attempt.get(attempt, [])[:top_k]:
                found_by.setdefault(doc.id, []).append(str(doc.meta.get("attempt") or ""))
                kept = best.get(doc.id)
                if kept is None or (doc.score or 0.0) > (kept.score or 0.0):
                    best[doc.id] = doc
        joined = []
        for doc in best.values():
            meta = {k: v for k, v in doc.meta.items() if k != USABLE_KEY}
            if len(found_by[doc.id]) > 1:
                meta["attempts"] = found_by[doc.id]
            joined.append(replace(doc, meta=meta))
        joined.sort(key=lambda d: -(d.score or 0.0))
        return {"documents": FrozenList(joined)}
