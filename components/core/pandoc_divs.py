"""Pandoc's fenced divs as Quarto renders them: a callout's title, a tabset's labels, other divs' fences gone."""

from __future__ import annotations

import re
from dataclasses import dataclass

from components.core.markdown_text import HEADING_ATTRIBUTES, closes_fence, opening_fence

#: a div's opening with attributes (`::: {.callout-note}`, `:::{#fig-x layout-ncol=2}`), or with one bare class that
#: only Quarto gives (`::: callout-tip`, `::: panel-tabset`); MyST's `:::{note}` names a directive, not attributes
_OPEN = re.compile(
    r"^[ \t]*:{3,}[ \t]*(?:\{(?P<attributes>[ \t]*(?:[.#]|(?=[^{}\n]*=))[^{}\n]*)\}"
    r"|(?P<word>callout-[\w-]+|panel-tabset))[ \t]*$"
)
_CLOSE = re.compile(r"^[ \t]*:{3,}[ \t]*$")
_CALLOUT = re.compile(r"(?:^|\s)\.?callout-(?P<kind>[\w-]+)")
_TITLE = re.compile(r"""\btitle\s*=\s*(?:"(?P<a>[^"]*)"|'(?P<b>[^']*)')""")
_HEADING = re.compile(r"^(?P<marks>#{1,6})[ \t]+(?P<text>.*?)[ \t]*$")


@dataclass
class _Div:
    """An open div: a callout still waiting for its first line, or a tabset and the level of its tabs' headings."""

    callout: bool = False
    tabset: bool = False
    tab_level: int = 0


def pandoc_divs(lines: list[str]) -> list[str]:
    """
    Quarto's fenced divs, line for line: a callout shows its title (its `title`; else a heading that is its first
    line, shown there as text, the opening showing nothing; else its kind: `::: {.callout-note}` shows "Note"); a
    tabset's tab headings show as labels, not headings; other divs' fences show nothing. Code blocks are left as
    they are.

    :param lines: A markdown page's lines.
    :returns: As many lines.
    """
    out: list[str] = []
    stack: list[_Div] = []
    fence = ""
    for number, line in enumerate(lines):
        if fence:
            fence = "" if closes_fence(line, fence) else fence
            out.append(line)
            continue
        opened = _OPEN.match(line)
        if opened:
            div, shown = _open(opened.group("attributes") or opened.group("word"))
            if div.callout and _HEADING.match(next((x for x in lines[number + 1 :] if x.strip()), "")):
                shown = ""  # the heading is its title, shown in place of its kind
            stack.append(div)
            out.append(shown)
        elif stack and _CLOSE.match(line):
            stack.pop()
            out.append("")
        else:
            out.append(_inside(stack, line) if stack else line)
            fence = opening_fence(line)
    return out


def _open(attributes: str) -> tuple[_Div, str]:
    """A div opened with these attributes, and what its opening line shows."""
    callout = _CALLOUT.search(attributes)
    if "panel-tabset" in attributes:
        return _Div(tabset=True), ""
    if not callout:
        return _Div(), ""
    title = _TITLE.search(attributes)
    if title:
        return _Div(), title.group("a") or title.group("b") or ""
    return _Div(callout=True), callout.group("kind").replace("-", " ").capitalize()


def _inside(stack: list[_Div], line: str) -> str:
    """A line inside the innermost div: a callout's title heading, a tab's label, else the line."""
    div = stack[-1]
    if not line.strip():
        return line
    heading = _HEADING.match(line)
    if div.callout:
        div.callout = False  # only the first line can be its title
        return HEADING_ATTRIBUTES.sub("", heading.group("text")) if heading else line
    if div.tabset and heading:
        level = len(heading.group("marks"))
        div.tab_level = div.tab_level or level
        return HEADING_ATTRIBUTES.sub("", heading.group("text")) if level == div.tab_level else line
    return line
