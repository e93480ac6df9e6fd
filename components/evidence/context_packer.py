from __future__ import annotations

from dataclasses import replace
from typing import Any

from haystack import Document, component

from components.core.frozen import Documents, FrozenDict, FrozenList
from components.core.location import location_of

STRATEGY = "rank_order_truncate_content"
#: the smallest budget: room for a block's header and some of its content
MIN_BUDGET = 200
_ELLIPSIS = " …"


def _header(position: int, doc: Document) -> str:
    meta = doc.meta
    where = location_of(meta)
    parts = [f"[{position}] source: {meta.get('source', '')}" + (f" ({where})" if where else "")]
    if meta.get("title"):
        parts.append(f"title: {meta['title']}")
    if meta.get("breadcrumb"):
        parts.append(f"section: {meta['breadcrumb']}")
    if meta.get("hit_reasons"):
        parts.append(f"why: {', '.join(meta['hit_reasons'])}")
    if meta.get("superseded"):
        parts.append("status: superseded, no successor indexed (may be out of date)")
    if meta.get("stale"):
        parts.append(f"stale: last reviewed {meta.get('reviewed')}")
    return "\n".join(parts) + "\n"


@component
class ContextPacker:
    """
    Packs the final evidence blocks into one compact text for the agent, within a character budget.

    Blocks are packed in rank order, each as a header (source with its lines or pages, title, breadcrumb, hit reasons,
    and whether its page is superseded or stale) followed by its content. Only content is ever truncated: when the
    budget runs short a block's content is cut (marked with `…`) as long as at least `min_content_chars` of it fit;
    otherwise the block is omitted whole, but for the first block, which is always delivered with as much content as
    fits (a lookup that found evidence never returns none for want of room). The summary lists included and omitted
    sources. The blocks passed on are the delivered ones, each with the content the pack holds (`content_truncated` in
    meta when cut): an omitted block is not part of the result, it waits for the next page. A caller's `char_budget` is
    capped at `max_char_budget` and raised to the floor of 200.

    ### Usage example

    ```python
    from components.evidence.context_packer import ContextPacker

    pack = ContextPacker(char_budget=2000).run(documents=blocks)["context_pack"]
    print(pack["usedChars"], pack["omittedSources"])
    ```
    """

    def __init__(
        self,
        char_budget: int = 4000,
        min_content_chars: int = 80,
        separator: str = "\n\n",
        max_char_budget: int = 20000,
    ) -> None:
        """
        Create the packer.

        :param char_budget: Most characters of `packedText`.
        :param max_char_budget: The largest budget a caller may ask for (`max_chars` of a lookup).
        :param min_content_chars: Least content worth including for a truncated block.
        :param separator: Between blocks.
        :raises ValueError: If the budget or the minimum is out of range.
        """
        if char_budget < MIN_BUDGET:
            msg = f"char_budget={char_budget!r} is too small for even one block header; use at least {MIN_BUDGET}"
            raise ValueError(msg)
        if min_content_chars < 1:
            msg = f"min_content_chars={min_content_chars!r} must be positive"
            raise ValueError(msg)
        if max_char_budget < char_budget:
            msg = f"max_char_budget={max_char_budget!r} must be at least char_budget={char_budget!r}"
            raise ValueError(msg)
        self.char_budget = char_budget
        self.max_char_budget = max_char_budget
        self.min_content_chars = min_content_chars
        self.separator = separator

    @component.output_types(context_pack=FrozenDict, documents=FrozenList[Document])
    def run(self, documents: Documents, char_budget: int | None = None) -> dict[str, Any]:
        """
        Pack blocks.

        :param documents: Final evidence blocks in rank order (a list or a `FrozenList`).
        :param char_budget: Overrides the init budget (a caller's `max_chars`), within [200, `max_char_budget`].
        :returns: `context_pack` (`packedText`, `strategy`, `charBudget`, `usedChars`, `includedSources`,
            `omittedSources`, `truncatedSources`) and `documents` (the delivered blocks: omitted ones left out, a
            truncated one's content cut as in the pack), read-only (`FrozenDict`, `FrozenList`).
        """
        budget = min(max(char_budget or self.char_budget, MIN_BUDGET), self.max_char_budget)
        delivered: list[Document] = []
        pieces: list[str] = []
        included: list[str] = []
        omitted: list[str] = []
        truncated: list[str] = []
        used = 0
        for doc in documents:
            source = str(doc.meta.get("evidence_key") or doc.meta.get("source") or doc.id)
            sep = self.separator if pieces else ""
            header = _header(len(included) + 1, doc)
            content = (doc.content or "").strip()
            room = budget - used - len(sep) - len(header)
            if room >= len(content):
                block = header + content
                delivered.append(doc)
            elif room - len(_ELLIPSIS) >= self.min_content_chars or not delivered:
                cut = content[: max(room - len(_ELLIPSIS), 0)].rstrip() + _ELLIPSIS
                block = header + cut
                truncated.append(source)
                delivered.append(replace(doc, content=cut, meta={**doc.meta, "content_truncated": True}))
            else:
                omitted.append(source)
                continue
            pieces.append(sep + block)
            used += len(sep) + len(block)
            included.append(source)
        text = "".join(pieces)
        pack = {
            "packedText": text,
            "strategy": STRATEGY,
            "charBudget": budget,
            "usedChars": len(text),
            "includedSources": included,
            "omittedSources": omitted,
            "truncatedSources": truncated,
        }
        return {"context_pack": FrozenDict(pack), "documents": FrozenList(delivered)}
