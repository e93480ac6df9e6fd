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


def file_line(line_map: list[list[int]], line: int) -> int:
    """
    A document line's line in the file, by the converter's map.

    :param line_map: Segments `[[document_line, file_line, step], ...]` (step 1: the lines follow each other in the
        file; step 0: every line of the segment stands for one line of the file).
    :param line: A document line (0-based).
    :returns: Its line in the file (1-based).
    """
    segment = max((s for s in line_map if s[0] <= line), key=lambda s: s[0], default=[0, 1, 1])
    return int(segment[1]) + int(segment[2]) * (line - int(segment[0]))


def moved_line_map(line_map: list[list[int]], origins: list[int]) -> list[list[int]]:
    """
    The map of a document whose lines moved: its line `i` now stands for its former line `origins[i]`.

    :param line_map: The document's map before (as `file_line` reads it).
    :param origins: For each line now, the line (0-based) it was.
    :returns: The map after, its runs of lines that follow each other in the file in one segment each (step 1), and
        its runs of lines that all stand for one line (an included file's, at its directive) in one each (step 0).
    """
    segments: list[list[int]] = []
    for number, origin in enumerate(origins):
        line = file_line(line_map, origin)
        if segments:
            start, start_line, step = segments[-1]
            if step == 1 and start_line + (number - start) == line:
                continue
            if start_line == line and (step == 0 or start == number - 1):
                segments[-1][2] = 0
                continue
        segments.append([number, line, 1])
    return segments
