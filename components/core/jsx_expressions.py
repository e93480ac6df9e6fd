"""MDX's JavaScript in markdown: export statements and JSX-valued attributes, told apart by their brackets."""

from __future__ import annotations

import html
import re

#: an MDX export statement's start; where it ends, its brackets tell (`export const X = () => {` ... `};`)
_EXPORT = re.compile(r"^export\s+(?:const|default|(?:async\s+)?function|let|var|class)\b", re.MULTILINE)
#: where a statement whose brackets do not close runs to, as MDX reads it: the next blank line
_TO_BLANK_LINE = re.compile(r"(?:[^\n]|\n(?![ \t]*\n))*")
#: a markdown heading, which no JavaScript line is: after a blank line, the page goes on
_HEADING = re.compile(r"#{1,6}[ \t]")
#: a component attribute whose value is an expression: `icon={<svg>...</svg>}`, `title={<>Add <code>x</code></>}`
_EXPRESSION_ATTRIBUTE = re.compile(r"(?<=\s)(?P<name>[A-Za-z][\w-]*)=\{")
_TAG = re.compile(r"<[^<>]*>")
_STRING_LITERAL = re.compile(r"\s*([\"'`])((?:(?!\1).)*)\1\s*", re.DOTALL)
_SPACE = re.compile(r"\s+")
_OPENING = {"(": ")", "[": "]", "{": "}"}
_CLOSING = frozenset(_OPENING.values())
#: the farthest a statement or an attribute value is followed (characters), and the most a text's scans read in all:
#: a page of unclosed brackets costs one bounded pass, not one per opening
_MAX_SCAN = 20_000
_SCAN_BUDGET = 2_000_000


class _Budget:
    """The characters the bracket scans of one text may still read."""

    def __init__(self) -> None:
        self.left = _SCAN_BUDGET


def _balanced_end(text: str, start: int, budget: _Budget) -> int | None:
    """
    The end of the bracketed expression opening at `text[start]`: just after the bracket that closes it.

    :returns: The index, or None when it does not close within `_MAX_SCAN` characters (or the budget is spent).
    """
    limit = min(len(text), start + _MAX_SCAN, start + budget.left)
    depth = 0
    for index in range(start, limit):
        char = text[index]
        if char in _OPENING:
            depth += 1
        elif char in _CLOSING:
            depth -= 1
            if depth == 0:
                budget.left -= index + 1 - start
                return index + 1
    budget.left -= limit - start
    return None


def _depth_after(line: str, depth: int, template: bool) -> tuple[int, bool]:
    """
    The bracket depth after a line of JavaScript, its strings and comments skipped (`":-("` opens nothing); whether a
    template literal is still open. A `'` or `"` string ends with its line (JSX text's "don't" cannot run on); a
    negative depth is returned as soon as it happens.
    """
    index, length = 0, len(line)
    while index < length:
        char = line[index]
        if template or char == "`":
            close = line.find("`", index + (0 if template else 1))
            if close < 0:
                return depth, True
            template, index = False, close + 1
            continue
        if char in "'\"":
            close = line.find(char, index + 1)
            index = length if close < 0 else close + 1
            continue
        if line.startswith("//", index):
            break
        if char in _OPENING:
            depth += 1
        elif char in _CLOSING:
            depth -= 1
            if depth < 0:
                return depth, False
        index += 1
    return depth, template


def _statement_end(text: str, start: int, budget: _Budget) -> int:
    """
    Where the export statement at `start` ends: at the end of the line on which its brackets close (a line ending
    in `=>` or `=` goes on), else -- brackets that do not close, close more than they opened, or a heading after a
    blank line while they are open -- at the next blank line, as MDX reads an export it cannot parse.
    """
    depth, template = 0, False
    limit = min(len(text), start + _MAX_SCAN, start + budget.left)
    index = start
    while index < limit:
        end = text.find("\n", index, limit)
        end = limit if end < 0 else end
        line = text[index:end]
        if not line.strip() and depth > 0 and _HEADING.match(text, end + 1):
            break
        depth, template = _depth_after(line, depth, template)
        if depth < 0:
            break
        if depth == 0 and not template and not line.rstrip().endswith(("=>", "=")):
            budget.left -= end - start
            return end
        index = end + 1
    budget.left -= min(index, limit) - start
    found = _TO_BLANK_LINE.match(text, start)
    return found.end() if found else start


def _line_breaks(text: str) -> str:
    return "\n" * text.count("\n")


def without_mdx_exports(text: str) -> str:
    """
    MDX prose without its export statements, each as many line breaks as it spanned.

    A statement runs to the line on which its brackets close, blank lines inside it included (a component defined
    on the page: `export const Counter = () => {`, its body, `};`); one whose brackets do not close runs to the next
    blank line.

    :param text: Markdown prose (no code blocks).
    :returns: The text, its line count unchanged.
    """
    if "export" not in text:
        return text
    budget = _Budget()
    parts: list[str] = []
    done = 0
    for found in _EXPORT.finditer(text):
        if found.start() < done:
            continue
        end = _statement_end(text, found.start(), budget)
        parts += [text[done : found.start()], _line_breaks(text[found.start() : end])]
        done = end
    return "".join([*parts, text[done:]])


def _words(expression: str) -> str:
    """
    What a JSX value shows as words: its text without tags or expressions (`{<>Add <code>x</code></>}`: `Add x`), a
    string literal's text (`{\n  "Long title"\n}`: `Long title`).
    """
    literal = _STRING_LITERAL.fullmatch(expression[1:-1])
    if literal:
        return _SPACE.sub(" ", literal.group(2)).strip().replace('"', "'")
    words = _TAG.sub(" ", expression[1:-1])
    words = html.unescape(re.sub(r"[{}`]", " ", words))
    return _SPACE.sub(" ", words).strip().replace('"', "'")


def _in_component(text: str, position: int, floor: int, inside: bool) -> bool:
    """
    Whether `position` is inside a component's opening tag (`<Card ... |`: no `>` since its `<Name`), looking back no
    further than `floor`; `inside` says whether `floor` itself is (just after a value rewritten in such a tag).
    """
    floor = max(floor, position - _MAX_SCAN)
    opening = text.rfind("<", floor, position)
    if opening < 0:
        return inside and ">" not in text[floor:position]
    return text[opening + 1 : opening + 2].isupper() and ">" not in text[opening:position]


def jsx_attribute_values_as_words(text: str) -> str:
    """
    A component's attributes whose values are JSX (`icon={<svg ...>}`, `title={<>Add <code>x</code></>}`) or run over
    several lines (a template literal of code, a configuration object) written as the words they show (`icon=""`,
    `title="Add x"`), the value's line breaks after it, so that the tag pass reads the component as one tag (a
    quote or a `#` line in the value neither ends it nor makes a heading) and keeps its title.

    :param text: Markdown prose (no code blocks).
    :returns: The text, its line count unchanged.
    """
    if "={" not in text:
        return text
    budget = _Budget()
    parts: list[str] = []
    done = 0
    inside = False  # whether `done` is inside a component's opening tag
    for found in _EXPRESSION_ATTRIBUTE.finditer(text):
        if found.start() < done:
            continue
        brace = found.end() - 1
        if not _in_component(text, brace, done, inside):
            continue
        end = _balanced_end(text, brace, budget)
        if end is None or not ("<" in text[brace:end] or "\n" in text[brace:end]):
            continue
        expression = text[brace:end]
        parts += [text[done:brace], f'"{_words(expression)}"', _line_breaks(expression)]
        done, inside = end, True
    return "".join([*parts, text[done:]])
