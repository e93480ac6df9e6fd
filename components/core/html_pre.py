"""HTML code blocks written into markdown (`<pre><code class="lang-yaml">`), as the fenced blocks they show."""

from __future__ import annotations

import bisect
import html
import re

from components.core.html_table import INSERTED

#: a block's opening: `<pre>` at the start of its line (GitBook writes every code block with a title or highlighted
#: lines so), optionally with its `<code>`; the code starts right after it
PRE_OPEN = re.compile(r"^(?P<indent>[ \t]*)<pre\b[^<>]*>(?:<code\b[^<>]*>)?", re.IGNORECASE)
#: its closing, ending its line: the code ends right before it
_PRE_CLOSE = re.compile(r"(?:</code\s*>)?</pre\s*>[ \t]*$", re.IGNORECASE)
_CLOSING_MENTION = re.compile(r"</pre\b", re.IGNORECASE)
_LANGUAGE = re.compile(r"""\bclass\s*=\s*["'][^"']*?\b(?:lang|language)-(?P<language>[\w+#.-]+)""", re.IGNORECASE)
#: the tags inside a highlighted block (`<strong>`, `<mark>`, `<span class="...">`): how it looks, not its code
_TAG = re.compile(r"<[^<>\n]*>")
_BACKTICKS = re.compile(r"`+")


def closing_lines(lines: list[str]) -> list[int]:
    """The lines (0-based) that mention a `</pre` closing tag, for `fenced_pre_block` to look ahead in."""
    return [number for number, line in enumerate(lines) if "</" in line and _CLOSING_MENTION.search(line)]


def _code(line: str) -> str:
    return html.unescape(_TAG.sub("", line))


def fenced_pre_block(lines: list[str], start: int, closings: list[int]) -> tuple[list[str], int] | None:
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
    at = bisect.bisect_left(closings, start)
    if at == len(closings):
        return None
    end = closings[at]
    last = lines[end] if end != start else lines[start][opening.end() :]
    closing = _PRE_CLOSE.search(last)
    if closing is None or _CLOSING_MENTION.search(last, 0, closing.start()):
        return None
    first_code = lines[start][opening.end() :]
    body = [first_code, *lines[start + 1 : end + 1]] if end != start else [first_code]
    body[-1] = body[-1][: closing.start()] if end != start else first_code[: closing.start()]
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
