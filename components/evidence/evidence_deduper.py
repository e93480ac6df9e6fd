from __future__ import annotations

from dataclasses import replace
from typing import Any

from haystack import Document, component

from components.core.frozen import Documents, FrozenDict, FrozenList
from components.core.scores import document_key
from components.core.versions import named_releases, release_groups, release_order, text_key, version_key


@component
class EvidenceDeduper:
    """
    Removes duplicate evidence by chunk-level `evidence_key`, caps blocks per document, and accounts for every drop.

    Identity is the chunk (`source#chunk_index`), never the source alone: distinct chunks of one document stay
    separate, up to `max_per_document`. Candidates sharing a key collapse into one block that keeps the best score
    and the hit reasons of all of them. With `versions_share_cap`, a page's versions (`0.9.x.md` and `latest.md`,
    `versioned_docs/version-2.0/x.md` and `docs/x.md`: `components.core.versions.version_key`) share that cap, so
    that nine releases of one page do not fill the evidence with the same text. With `order_releases`, the ranks a
    page's releases earned go to them in the order a reader wants them: the release the question names (`v1.3`), the
    current page, `latest`/`stable`, then the newest number first; a release's block whose text another release
    already gave is left out (`same_text_as_release`). At most `max_blocks` blocks are kept, in input (rank) order.

    ### Usage example

    ```python
    from components.evidence.evidence_deduper import EvidenceDeduper

    out = EvidenceDeduper(max_per_document=2).run(documents=reranked, query="How do I upgrade to v2.9?")
    print(out["dedup_summary"]["dropped"])
    ```
    """

    def __init__(
        self,
        max_per_document: int = 2,
        max_blocks: int = 6,
        versions_share_cap: bool = True,
        order_releases: bool = True,
    ) -> None:
        """
        Create the deduper.

        :param max_per_document: Most blocks kept from one document.
        :param max_blocks: Most blocks kept overall.
        :param versions_share_cap: Count the blocks of a page's other versions against its `max_per_document`.
        :param order_releases: Give the ranks a page's releases earned to the named, then the current, then the newest
            release, and leave out a release's block whose text another release's block already holds.
        :raises ValueError: If a bound is not positive.
        """
        if max_per_document < 1 or max_blocks < 1:
            msg = f"max_per_document={max_per_document!r} and max_blocks={max_blocks!r} must be positive"
            raise ValueError(msg)
        self.max_per_document = max_per_document
        self.max_blocks = max_blocks
        self.versions_share_cap = versions_share_cap
        self.order_releases = order_releases

    @component.output_types(documents=FrozenList[Document], dedup_summary=FrozenDict)
    def run(self, documents: Documents, query: str | None = None) -> dict[str, Any]:
        """
        Deduplicate ranked candidates.

        :param documents: Ranked candidates with `evidence_key`, `source` and `hit_reasons` in meta (a list or a
            `FrozenList`).
        :param query: The question, for the releases it names (`order_releases`).
        :returns: `documents` (the kept blocks, copies) and `dedup_summary` (`candidate_count`, `final_count`,
            `dropped`: `{evidence_key, source, reason}` with reason `duplicate_key`, `same_text_as_release`,
            `per_document_cap`, `page_versions_cap` or `max_blocks`), read-only (`FrozenList`, `FrozenDict`): the
            pipeline hands them on without copying.
        """
        merged: dict[str, Document] = {}
        dropped: list[dict[str, Any]] = []
        for doc in documents:
            key = str(doc.meta.get("evidence_key") or doc.id)
            if key in merged:
                kept = merged[key]
                reasons = list(dict.fromkeys([*kept.meta.get("hit_reasons", []), *doc.meta.get("hit_reasons", [])]))
                paths = sorted({str(d.meta["attempt"]) for d in (kept, doc) if d.meta.get("attempt")})
                merged[key] = replace(
                    kept,
                    score=max(kept.score or 0.0, doc.score or 0.0),
                    meta={**kept.meta, "hit_reasons": reasons, "merged_from": paths},
                )
                dropped.append({"evidence_key": key, "source": doc.meta.get("source"), "reason": "duplicate_key"})
            else:
                merged[key] = replace(doc, meta=dict(doc.meta))
        ranked = list(merged.items())
        if self.order_releases:
            ranked = _releases_in_order(ranked, named_releases(query or ""))
        kept_blocks: list[Document] = []
        per_doc: dict[str, int] = {}
        per_page: dict[str, int] = {}
        given: dict[str, str] = {}  # a text key -> the source that gave it
        for key, doc in ranked:
            doc_key = document_key(doc.meta, key)
            page = self._page(doc, doc_key)
            source = str(doc.meta.get("source") or doc_key)
            text = text_key(source, doc.content)
            reason = None
            if self.order_releases and text is not None and given.get(text, source) != source:
                reason = "same_text_as_release"
            elif per_doc.get(doc_key, 0) >= self.max_per_document:
                reason = "per_document_cap"
            elif per_page.get(page, 0) >= self.max_per_document:
                reason = "page_versions_cap"
            elif len(kept_blocks) >= self.max_blocks:
                reason = "max_blocks"
            if reason:
                dropped.append({"evidence_key": key, "source": doc.meta.get("source"), "reason": reason})
                continue
            per_doc[doc_key] = per_doc.get(doc_key, 0) + 1
            per_page[page] = per_page.get(page, 0) + 1
            if text is not None:
                given.setdefault(text, source)
            kept_blocks.append(doc)
        summary = {
            "candidate_count": len(documents),
            "final_count": len(kept_blocks),
            "max_per_document": self.max_per_document,
            "max_blocks": self.max_blocks,
            "dropped": dropped,
        }
        return {"documents": FrozenList(kept_blocks), "dedup_summary": FrozenDict(summary)}

    def _page(self, doc: Document, doc_key: str) -> str:
        """The cap's key of a block: its page's versions together, or its document alone."""
        source = doc.meta.get("source")
        if not self.versions_share_cap or not source:
            return doc_key
        return "versions:" + version_key(str(source))


def _releases_in_order(ranked: list[tuple[str, Document]], named: frozenset[str]) -> list[tuple[str, Document]]:
    """
    The ranks a page's releases earned, given to them in `release_order`.

    The best rank goes to the named release, else the current page, whichever release's chunk earned it; within a
    release, blocks keep their order.

    :param ranked: The merged blocks in rank order, with their evidence keys.
    :param named: The releases the question names.
    :returns: The same blocks, each page's releases in `release_order` at the page's positions.
    """
    ordered = list(ranked)
    for releases in release_groups([doc.meta.get("source") for _, doc in ranked]):
        positions = list(releases)
        preferred = sorted(positions, key=lambda i: (release_order(releases[i], named), i))
        for place, position in zip(positions, preferred, strict=True):
            ordered[place] = ranked[position]
    return ordered
