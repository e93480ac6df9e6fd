"""HTML code blocks written into markdown (`<pre><code class="lang-yaml">`), as the fenced blocks they show."""

from __future__ import annotations

import bisect
import html
import re
from dataclasses import dataclass

from components.core.html_table import INSERTED

#: a block's opening: `<pre>` at the start of its line (GitBook writes every code block with a title or highlighted
#: lines so), optionally with its `<code>`; the code starts right after it
PRE_OPEN = re.compile(r"^(?P<indent>[ \t]*)<pre\b[^<>]*>(?:<code\b[^<>]*>)?", re.IGNORECASE)
#: its closing, ending its line: the code ends right before it
_PRE_CLOSE = re.compile(r"(?:</code\s*>)?</pre\s*>[ \t]*$", re.IGNORECASE)
_CLOSING_MENTION = re.compile(r"</pre\b", re.IGNORECASE)
_LANGUAGE = re.compile(r"""\bclass\s*=\s*["'][^"']*?\b(?:lang|language)-(?P<language>[\w+#.-]+)""", re.IGNORECASE)
#: the tags inside a highlighted block (`<strong>`, `<mark>`, `<span class="...">`): how it looks, not its code
#: (a name after `<`: `sort < in.txt > out.txt` holds none)
_TAG = re.compile(r"</?[A-Za-z][\w:.-]*(?:\s[^<>\n]*)?/?>")
_BACKTICKS = re.compile(r"`+")


@dataclass(frozen=True)
class Closings:
    """The lines that mention a `</pre` closing tag, and those of them where it closes a block (`closing_lines`)."""

    lines: list[int]
    closing: dict[int, int]  #: line -> where its closing tag starts, for lines whose first `</pre` ends the line


def closing_lines(lines: list[str]) -> Closings:
    """Where `fenced_pre_block` may end a block: each line that mentions `</pre` is read once."""
    mentions: list[int] = []
    closing: dict[int, int] = {}
    for number, line in enumerate(lines):
        if "</" not in line or not (first := _CLOSING_MENTION.search(line)):
            continue
        mentions.append(number)
        found = _PRE_CLOSE.search(line, max(0, first.start() - 16))  # `</code>` may stand before it
        if found and not _CLOSING_MENTION.search(line, 0, found.start()):
            closing[number] = found.start()
    return Closings(mentions, closing)


def _code(line: str) -> str:
    return html.unescape(_TAG.sub("", line))


def fenced_pre_block(lines: list[str], start: int, closings: Closings) -> tuple[list[str], int] | None:
    """
    The `<pre>` block opening on `lines[start]` as a fenced code block.

    The block's tags go (a highlighted line's `<strong>` included) and its character references become characters.
    Its fence lines are new lines where the code shares a line with a tag: those are marked `INSERTED` (each stands
    for the same line of the source as the line before it), every other line takes the place of one source line.

    :param lines: The text's lines.
    :param start: A line that `PRE_OPEN` matches.
    :param closings: `closing_lines(lines)`.
    :returns: The block's lines and the line after it, or None when the next `</pre` is not a closing tag that ends its
        line (the lines are then left to the tag pass).
    """
    opening = PRE_OPEN.match(lines[start])
    if opening is None:
        return None
    at = bisect.bisect_left(closings.lines, start)
    if at == len(closings.lines) or closings.lines[at] not in closings.closing:
        return None
    end = closings.lines[at]
    closing_at = closings.closing[end]
    first_code = lines[start][opening.end() :]
    if end == start and closing_at < opening.end():
        return None
    body = [first_code, *lines[start + 1 : end + 1]] if end != start else [first_code]
    body[-1] = body[-1][:closing_at] if end != start else lines[start][opening.end() : closing_at]
    code = [_code(line) for line in body]
    language = _LANGUAGE.search(opening.group(0))
    ticks = "`" * max(3, 1 + max((len(run) for text in code for run in _BACKTICKS.findall(text)), default=0))
    fence = opening.group("indent") + ticks
    opened = fence + (language.group("language") if language else "")
    out = [opened]
    if code[0].strip():
        out.append(INSERTED + code[0])
    out += code[1:-1] if len(code) > 1 else []
    if len(code) > 1 and code[-1].strip():
        out += [code[-1], INSERTED + fence]
    elif len(code) > 1:
        out.append(fence)
    else:
        out.append(INSERTED + fence)
    return out, end + 1
