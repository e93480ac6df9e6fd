"""Where a chunk lies in its file, as a citation names it: its lines (text formats) or its pages (PDF)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def _span(meta: Mapping[str, Any], first: str, last: str) -> tuple[int, int] | None:
    start, end = meta.get(first), meta.get(last)
    if isinstance(start, int) and isinstance(end, int) and not isinstance(start, bool) and not isinstance(end, bool):
        return start, end
    return None


def lines_of(meta: Mapping[str, Any]) -> list[int] | None:
    """The first and last line of a chunk in its file, or None when its converter gives no lines."""
    span = _span(meta, "line_start", "line_end")
    return list(span) if span else None


def pages_of(meta: Mapping[str, Any]) -> list[int] | None:
    """The first and last page of a chunk, or None for a document without pages."""
    span = _span(meta, "page_start", "page_end")
    return list(span) if span else None


def location_of(meta: Mapping[str, Any]) -> str:
    """
    A chunk's place in its file in words.

    :param meta: The chunk's metadata (`page_start`/`page_end` or `line_start`/`line_end`, as the chunker sets them).
    :returns: `page 3`, `pages 3-4`, `line 7`, `lines 12-30`, or '' when the chunk has neither.
    """
    for span, one, many in ((pages_of(meta), "page", "pages"), (lines_of(meta), "line", "lines")):
        if span:
            return f"{one} {span[0]}" if span[0] == span[1] else f"{many} {span[0]}-{span[1]}"
    return ""
