from __future__ import annotations

from typing import Any

from haystack import Document, component

from components.core.frozen import Documents, FrozenDict, FrozenList
from components.core.location import location_of

STRATEGY = "rank_order_truncate_content"
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
    return "\n".join(parts) + "\n"


@component
class ContextPacker:
    """
    Packs the final evidence blocks into one compact text for the agent, within a character budget.

    Blocks are packed in rank order, each as a header (source with its lines or pages, title, breadcrumb, hit reasons)
    followed by its content. Only content is ever truncated: when the budget runs short a block's content is cut
    (marked with `…`) as long as at least `min_content_chars` of it fit; otherwise the block is omitted whole. The
    summary lists included and omitted sources.

    ### Usage example

    ```python
    from components.evidence.context_packer import ContextPacker

    pack = ContextPacker(char_budget=2000).run(documents=blocks)["context_pack"]
    print(pack["usedChars"], pack["omittedSources"])
    ```
    """

    def __init__(self, char_budget: int = 4000, min_content_chars: int = 80, separator: str = "\n\n") -> None:
        """
        Create the packer.

        :param char_budget: Most characters of `packedText`.
        :param min_content_chars: Least content worth including for a truncated block.
        :param separator: Between blocks.
        :raises ValueError: If the budget or the minimum is out of range.
        """
        if char_budget < 200:
            msg = f"char_budget={char_budget!r} is too small for even one block header; use at least 200"
            raise ValueError(msg)
        if min_content_chars < 1:
            msg = f"min_content_chars={min_content_chars!r} must be positive"
            raise ValueError(msg)
        self.char_budget = char_budget
        self.min_content_chars = min_content_chars
        self.separator = separator

    @component.output_types(context_pack=FrozenDict, documents=FrozenList[Document])
    def run(self, documents: Documents, char_budget: int | None = None) -> dict[str, Any]:
        """
        Pack blocks.

        :param documents: Final evidence blocks in rank order (a list or a `FrozenList`).
        :param char_budget: Overrides the init budget.
        :returns: `context_pack` (`packedText`, `strategy`, `charBudget`, `usedChars`, `includedSources`,
            `omittedSources`, `truncatedSources`) and `documents` (the blocks, unchanged), read-only (`FrozenDict`,
            `FrozenList`): the pipeline hands them on without copying.
        """
        budget = char_budget or self.char_budget
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
            elif room - len(_ELLIPSIS) >= self.min_content_chars:
                block = header + content[: room - len(_ELLIPSIS)].rstrip() + _ELLIPSIS
                truncated.append(source)
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
        return {"context_pack": FrozenDict(pack), "documents": FrozenList(documents)}
