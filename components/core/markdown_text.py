"""What several components read off markdown text alike: its fences and its first heading."""

from __future__ import annotations

import re

#: a line opening or closing a fenced code block (its marker in group 1)
FENCE = re.compile(r"^\s*(```|~~~)")
_HEADING_LINE = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)
_COMMENT = re.compile(r"<!--.*?(?:-->|\Z)", re.DOTALL)
_FENCED = re.compile(r"^\s*(```|~~~).*?(?:^\s*\1|\Z)", re.DOTALL | re.MULTILINE)


def first_heading(text: str) -> str:
    """
    The first markdown heading outside code blocks and HTML comments.

    :param text: Markdown.
    :returns: The heading's text, '' when there is none.
    """
    heading = _HEADING_LINE.search(_FENCED.sub("", _COMMENT.sub("", text)))
    return heading.group(1) if heading else ""
