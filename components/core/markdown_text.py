"""What several components read off markdown text alike: its fences, its first heading and a heading as words."""

from __future__ import annotations

import re

_FENCE = re.compile(r"^\s*(`{3,}|~{3,})(.*)$")
_HEADING_LINE = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)
_COMMENT = re.compile(r"<!--.*?(?:-->|\Z)", re.DOTALL)
_FENCED = re.compile(r"^\s*(`{3,}|~{3,}).*?(?:^\s*\1|\Z)", re.DOTALL | re.MULTILINE)
#: Docusaurus' ```mdx-code-block fence: what it holds is MDX the site renders, not code to show
MDX_CODE_BLOCK = re.compile(r"^\s*(`{3,}|~{3,})\s*mdx-code-block\s*$")
#: what a heading's line may end with that names its anchor or hides it from the table of contents, never shown: an
#: attribute list (`{#id}`, `{ #id .class }`: MkDocs, Docusaurus), a custom id (`[#id]`: Nextra), Docsify's `:id=x`
#: and `{docsify-ignore}`
HEADING_ATTRIBUTES = re.compile(
    r"(?:[ \t]*(?:\{[ \t]*[#.][\w.-]+(?:[ \t]+[^}\n]*)?\}|\[#[A-Za-z][\w-]*\]|(?<=[ \t]):id=[\w-]+"
    r"|\{docsify-ignore(?:-all)?\}))+[ \t]*$"
)
_CODE_SPAN = re.compile(r"(`+)(.+?)\1")
_HELD_SPAN = re.compile(r"\x00(\d+)\x00")
#: inline markup a heading is rendered without, each with what stays of it
_INLINE_MARKUP = (
    (re.compile(r"!?\[([^\]]*)\]\([^)]*\)"), r"\1"),  # a link or image: its text
    (re.compile(r"\[\^[^\]\s]+\]"), ""),  # a footnote's marker
    (re.compile(r"\[([^\]]+)\]\[[^\]]*\]"), r"\1"),  # a reference link: its text
    (re.compile(r"</?[A-Za-z][\w-]*(?:\s[^<>]*)?/?>"), ""),  # an HTML or component tag
    (re.compile(r"(\*\*|__)(?=\S)(.+?)(?<=\S)\1"), r"\2"),  # strong
    (re.compile(r"(?<![\w*])\*(?=\S)(.+?)(?<=\S)\*(?![\w*])"), r"\1"),  # emphasis (not a snake_case `_`)
    (re.compile(r"\\([\\`*_{}\[\]()#+\-.!<>|~])"), r"\1"),  # a backslash escape
)


def opening_fence(line: str) -> str:
    """
    The marker of a code fence this line opens (```` ``` ````, ```` ```` ````, `~~~`...), '' when it opens none. A
    backtick line that has more backticks after its marker is inline code, not a fence (CommonMark).
    """
    match = _FENCE.match(line)
    if not match or (match.group(1)[0] == "`" and "`" in match.group(2)):
        return ""
    return match.group(1)


def closes_fence(line: str, fence: str) -> bool:
    """
    Whether this line closes the code block `fence` opened: the same character, at least as many, nothing after.
    A block opened with four backticks shows three-backtick fences as its text (docs about markdown do).
    """
    match = _FENCE.match(line)
    if match is None:
        return False
    marker, rest = match.groups()
    return marker[0] == fence[0] and len(marker) >= len(fence) and not rest.strip()


def closes_directive(line: str, fence: str) -> bool:
    """
    Whether this line closes the MyST directive `fence` opened: a code fence's rule, or for a colon fence (`:::`) a
    line of at least as many colons and nothing else.
    """
    if fence[0] == ":":
        stripped = line.strip()
        return len(stripped) >= len(fence) and not stripped.strip(":")
    return closes_fence(line, fence)


#: a quote's markers before a line's text (`> `, `> > `)
_QUOTE = re.compile(r"^[ \t]*(?:>[ \t]?)+")


def unquoted(line: str) -> str:
    """
    :param line: A line of markdown.
    :returns: The line without its quote's markers: a code block inside a quote (`> ```html`) is code as well.
    """
    return _QUOTE.sub("", line) if line.lstrip().startswith(">") else line


def without_code(text: str) -> str:
    """
    Markdown's prose: the text less its fenced code blocks and code spans (where any markup is an example), as a
    reader checks what markup a chunk still shows.

    :param text: Markdown.
    :returns: The text outside code.
    """
    prose: list[str] = []
    fence = ""
    for line in text.split("\n"):
        if fence:
            fence = "" if closes_fence(unquoted(line), fence) else fence
        elif opening_fence(unquoted(line)):
            fence = opening_fence(unquoted(line))
        else:
            prose.append(line)
    return _CODE_SPAN.sub("", "\n".join(prose))


def first_heading(text: str) -> str:
    """
    The first markdown heading outside code blocks and HTML comments, without its attribute list.

    :param text: Markdown.
    :returns: The heading's text, '' when there is none.
    """
    heading = _HEADING_LINE.search(_FENCED.sub("", _COMMENT.sub("", text)))
    return plain_heading(heading.group(1)) if heading else ""


def plain_heading(text: str) -> str:
    """
    A heading's words as a reader sees them: no attribute list, code spans, links, tags, emphasis or escapes
    (`` HMR `hotUpdate` Hook `` -> `HMR hotUpdate Hook`), so that breadcrumbs and titles read as text. A code span's
    content is kept as it is written.

    :param text: A heading's markdown, or a title.
    :returns: Its text, blanks collapsed.
    """
    spans: list[str] = []

    def hold(match: re.Match[str]) -> str:
        spans.append(match.group(2).strip())
        return f"\x00{len(spans) - 1}\x00"

    # the markup around a code span goes too (Zola's `### **`"scale"`**`): the spans wait outside the rules
    plain = _without_inline_markup(_CODE_SPAN.sub(hold, HEADING_ATTRIBUTES.sub("", text)))
    return " ".join(_HELD_SPAN.sub(lambda m: spans[int(m.group(1))], plain).split())


def _without_inline_markup(prose: str) -> str:
    for pattern, kept in _INLINE_MARKUP:
        prose = pattern.sub(kept, prose)
    return prose
