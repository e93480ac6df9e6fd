"""What the tests of real public documentation share: where the fixtures are, and the markup no chunk may carry."""

from __future__ import annotations

from pathlib import Path

from components.core.markdown_text import without_code

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "real_docs"

#: markup no chunk may carry outside code: comments, MDX/JSX, shortcodes, Liquid, admonition markers, front matter
RESIDUE = [
    r"<!--",
    r"-->",
    r"\{\{[<%]",
    r"[>%]\}\}",
    r"\{%",
    r"%\}",
    r"^import \w+ from",
    r"</?Tabs\b",
    r"</?TabItem\b",
    r"^:::",
    r"^\s*(?:!!!|\?\?\?\+?) ",
    r"^\+\+\+$",
    r"\{\{ ?site\.",
    r"^\[[^\]]+\]: \S+$",
    r"<head>|<link ",
    r"^\s*/{3,}(?:\s*[\w-]+)?(?:\s*\|.*)?$",
    r"\{\*|\*\}",
    r"<dfn\b",
    r"\{ ?#[\w-]+ ?\}",
    r"\{\{#(?:include|rustdoc_include|playground|title)\b",
    r"^\s*(?:`{3,}|:{3,})\{[\w:.-]+\}",
    r"^\([\w./:-]+\)=\s*$",
    r"\{(?:ref|doc|term|octicon|py:class)\}",
    r"</?(?:pre|strong|svg|path)\b",
    r"^export (?:const|default|function)\b",
    r"\b(?:viewBox|className|useState)\b",
    r"\{:[^}\n]*\}",  # kramdown's attribute lists, a code span's language
    r"^[!?]> ",  # Docsify's callouts
    r"\[![A-Za-z]+\]",  # an alert's marker
    r"\]\(\S+ ['\"]:",  # Docsify's link options
    r"^\s*@tab\b|^\s*code-tabs\b|\[\[toc\]\]",  # VuePress' tabs and table of contents
    r"[\])`]\{[.#][\w-]|\{\{\{<",  # Pandoc's attributes, Quarto's escaped shortcodes
]


def prose(text: str) -> str:
    """A chunk's text without its code (code may show any markup: it is an example)."""
    return without_code(text)
