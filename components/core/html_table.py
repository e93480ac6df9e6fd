"""HTML tables written into markdown, rewritten as the markdown tables the chunker keeps whole row by row."""

from __future__ import annotations

import html
import re

from lxml import etree
from lxml import html as lxml_html

#: a table runs from its opening tag to the next closing one (a nested table ends it early: its rows still read);
#: the two are searched for apart, so that a page of unclosed `<table`s costs one pass, not one per opening
_TABLE_OPEN = re.compile(r"<table\b", re.IGNORECASE)
_TABLE_CLOSE = re.compile(r"</table\s*>", re.IGNORECASE)
_SPACE = re.compile(r"\s+")
#: the largest `rowspan`/`colspan` taken as written: a page cannot make a table of millions of cells
_MAX_SPAN = 50
#: the most cells a table is rewritten with (spans included); a larger one is left to the tag pass, keeping its words
_MAX_CELLS = 100_000
#: the placeholders the cleaner puts where inline code was (NUL-delimited, which lxml refuses): swapped while parsing
_PLACEHOLDER = "\x00"
_PARSE_SAFE = "\ue000"
_ROW_START = re.compile(r"<tr\b", re.IGNORECASE)
_ROW_END = re.compile(r"</tr\s*>", re.IGNORECASE)
#: a table line's tag (`\x02<delta>\x02`) and a line the table no longer needs: control characters, which a page's
#: own text cannot hold here (`take_table_lines`' caller removes them first)
TABLE_TAG = "\x02"
PADDING = "\x01"
#: a line that takes no line's place: it stands for the same source line as the line before it (a code block's fence
#: that `html_pre` adds where the code shares its line with a tag)
INSERTED = "\x03"
_TAGGED = re.compile(r"\x02(-?\d+)\x02")


class _TableTooLargeError(Exception):
    """A table of more cells than `_MAX_CELLS`."""


def _span(cell: etree._Element, name: str) -> int:
    try:
        return max(1, min(_MAX_SPAN, int(cell.get(name, "1"))))
    except ValueError:
        return 1


def _cell_text(cell: etree._Element) -> str:
    """The cell's words on one line, its pipes escaped, `<`, `>` and `&` as references (later passes read them)."""
    for br in cell.iter("br"):
        br.tail = " " + (br.tail or "")
    text = _SPACE.sub(" ", " ".join(cell.itertext())).strip()
    return html.escape(text, quote=False).replace("|", "\\|")


def _rows(table: etree._Element) -> tuple[list[tuple[int, list[str]]], bool]:
    """
    The table's rows of cell texts, each with its place among the table's `<tr>` elements, a `rowspan` cell repeated
    in the rows it spans (so that every row is whole), and whether its first row is a header. Columns a GitBook table
    marks `data-hidden` (card covers, link targets) go, and so do rows without words.
    """
    rows: list[list[str]] = []
    cells_made = 0
    hidden: set[int] = set()
    pending: dict[int, tuple[str, int]] = {}  # column -> (text, rows still to fill) of a rowspan above
    header = False
    for number, tr in enumerate(table.iter("tr")):
        row: list[str] = []
        column = 0
        cells = [c for c in tr if isinstance(c.tag, str) and c.tag.lower() in ("td", "th")]
        queue = iter(cells)
        cell = next(queue, None)
        while cell is not None or column in pending:
            if cell is None or column in pending:  # a cell is None only where a rowspan fills the column
                text, left = pending.pop(column)
                row.append(text)
                if left > 1:
                    pending[column] = (text, left - 1)
                column += 1
                continue
            down, across = _span(cell, "rowspan"), _span(cell, "colspan")
            cells_made += down * across
            if cells_made > _MAX_CELLS:
                raise _TableTooLargeError
            text = _cell_text(cell)
            if number == 0 and cell.get("data-hidden") is not None:
                hidden.add(column)
            for offset in range(across):
                row.append(text if offset == 0 else "")
                if down > 1:
                    pending[column] = (text if offset == 0 else "", down - 1)
                column += 1
            cell = next(queue, None)
        if number == 0:
            header = bool(cells) and all(c.tag.lower() == "th" for c in cells)
        rows.append(row)
    rows = [[text for column, text in enumerate(row) if column not in hidden] for row in rows]
    kept = [(number, row) for number, row in enumerate(rows) if any(row) or (header and number == 0)]
    return kept, header


def _as_markdown(
    rows: list[tuple[int, list[str]]], header: bool, lines: int, room: tuple[int, int] | None, ends: list[int] | None
) -> list[str]:
    """
    The rows as a markdown table when the table has its lines to itself (`room`: the blank lines it needs before and
    after it, as the chunker reads only a paragraph of rows as a table) and they hold it; else as many lines as the
    table had, its rows' cells separated by ` | ` and the rows that do not fit joined to the last line with `; `.

    A table's line is tagged with the line of the source it stands for (`ends`: the line each `<tr>` ends on; a row
    stands for its last line, the header for the table's first), and the lines it no longer needs are `PADDING`, so
    that `take_table_lines` can drop them and tell every line where it was.
    """
    width = max(len(row) for _, row in rows)
    padded = [(number, row + [""] * (width - len(row))) for number, row in rows]
    head, body = (padded[0][1], padded[1:]) if header else ([""] * width, padded)
    table = [
        "| " + " | ".join(head) + " |",
        "|" + "---|" * width,
        *("| " + " | ".join(row) + " |" for _, row in body),
    ]
    if room is not None and len(table) + sum(room) <= lines:
        if ends is None:
            return [""] * room[0] + table
        stands_for = [0, ends[padded[0][0]] if header else 0, *(ends[number] for number, _ in body)]
        pairs = enumerate(zip(table, stands_for, strict=True))
        tagged = [_tag(line, source - (room[0] + at)) for at, (line, source) in pairs]
        after = [_tag("", lines - 1 - (room[0] + len(table)))] * room[1]
        return [*[""] * room[0], *tagged, *after, *[PADDING] * (lines - room[0] - len(table) - room[1])]
    flat = [" | ".join(cell for cell in row if cell) for _, row in padded if any(row)]
    return [*flat[: lines - 1], "; ".join(flat[lines - 1 :])]


def _tag(line: str, delta: int) -> str:
    """A line that stands for the source line `delta` lines from where it is."""
    return f"{TABLE_TAG}{delta}{TABLE_TAG}{line}"


def _row_ends(source: str, rows: int) -> list[int] | None:
    """The line (from the table's first) each `<tr>` of the table ends on; None when they cannot be told apart."""
    starts = [m.start() for m in _ROW_START.finditer(source)]
    if len(starts) != rows:
        return None
    ends: list[int] = []
    line, counted = 0, 0
    for number, start in enumerate(starts):
        following = starts[number + 1] if number + 1 < len(starts) else len(source)
        closing = _ROW_END.search(source, start, following)
        end = closing.start() if closing else following - 1
        line, counted = line + source.count("\n", counted, end), end
        ends.append(line)
    return ends


def _room(text: str, first: int, last: int) -> tuple[int, int] | None:
    """
    The blank lines the table `text[first:last]` needs before and after it to be a paragraph of its own (none where the
    lines beside it are blank), or None when text shares its first or last line.
    """
    start = text.rfind("\n", 0, first) + 1
    end = text.find("\n", last)
    end = len(text) if end < 0 else end
    if text[start:first].strip() or text[last:end].strip():
        return None
    previous = text[text.rfind("\n", 0, max(start - 1, 0)) + 1 : max(start - 1, 0)] if start else ""
    following_end = text.find("\n", end + 1)
    following = text[end + 1 : following_end if following_end >= 0 else len(text)] if end < len(text) else ""
    return int(bool(previous.strip())), int(bool(following.strip()))


def _rewrite(text: str, first: int, last: int) -> str:
    """The table `text[first:last]` rewritten (or as it was, for the tag pass to keep its words)."""
    source = text[first:last]
    lines = source.count("\n") + 1
    try:
        table = lxml_html.fragment_fromstring(source.replace(_PLACEHOLDER, _PARSE_SAFE))
        rows, header = _rows(table)
    except (etree.ParserError, ValueError, _TableTooLargeError):
        return source
    if not any(any(row) for _, row in rows):
        return "\n" * (lines - 1)
    if len(rows) * max(len(row) for _, row in rows) > _MAX_CELLS:  # every row is padded to the widest
        return source
    ends = _row_ends(source, sum(1 for _ in table.iter("tr")))
    out = _as_markdown(rows, header, lines, _room(text, first, last), ends)
    return ("\n".join(out) + "\n" * (lines - len(out))).replace(_PARSE_SAFE, _PLACEHOLDER)


def html_tables_as_markdown(text: str) -> str:
    """
    Rewrite the HTML tables in markdown prose as markdown tables, keeping the text's line count.

    A row becomes a line of ` | `-separated cells under the header row (or an empty header) and its rule, tagged with
    the line it stands for; the lines the table took beyond those are `PADDING`, so that every later line stays where
    it was (`take_table_lines` then drops them) and the chunker splits the table only between rows. A table written
    on fewer lines than it has rows (GitBook writes each on one) keeps its lines: its cells are separated by ` | ` and
    its rows by line breaks as far as they go, then by `; `.

    :param text: Markdown prose (no code blocks).
    :returns: The text with its tables rewritten.
    """
    if "<table" not in text.lower():
        return text
    parts: list[str] = []
    done = 0
    while (opening := _TABLE_OPEN.search(text, done)) and (closing := _TABLE_CLOSE.search(text, opening.end())):
        parts += [text[done : opening.start()], _rewrite(text, opening.start(), closing.end())]
        done = closing.end()
    return "".join([*parts, text[done:]])


def take_table_lines(text: str) -> tuple[str, list[int] | None]:
    """
    Drop the lines rewritten tables no longer need and tell where every line left was.

    :param text: Text whose tables `html_tables_as_markdown` rewrote (with every other line where it was), and
        maybe lines marked `INSERTED`.
    :returns: The text, and for each of its lines the line (0-based) of the input it stands for (an inserted line
        the one the line before it stands for); None when no line was marked (the text is then unchanged).
    """
    if PADDING not in text and TABLE_TAG not in text and INSERTED not in text:
        return text, None
    kept: list[str] = []
    origins: list[int] = []
    inserted = 0
    origin = 0
    for number, line in enumerate(text.split("\n")):
        if line.startswith(INSERTED):
            kept.append(line[1:])
            origins.append(origin)
            inserted += 1
            continue
        tagged = _TAGGED.match(line)
        origin = number - inserted + (int(tagged.group(1)) if tagged else 0)
        if line == PADDING:
            continue
        kept.append(line[tagged.end() :] if tagged else line)
        origins.append(origin)
    return "\n".join(kept), origins


def untag_table_lines(text: str) -> str:
    """
    The text with the lines rewritten tables no longer need left blank and their tags gone: every line where it was,
    but for the lines marked `INSERTED`, which are kept (unmarked) after the line they follow.

    :param text: Text whose tables `html_tables_as_markdown` rewrote.
    :returns: The text.
    """
    if PADDING not in text and TABLE_TAG not in text and INSERTED not in text:
        return text
    return "\n".join("" if line == PADDING else _untagged(line) for line in text.split("\n"))


def _untagged(line: str) -> str:
    if line.startswith(INSERTED):
        return line[1:]
    tagged = _TAGGED.match(line)
    return line[tagged.end() :] if tagged else line
