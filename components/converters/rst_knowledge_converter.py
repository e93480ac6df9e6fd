from __future__ import annotations

import functools
import re
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from haystack import Document, component
from haystack.components.converters.utils import normalize_metadata
from haystack.dataclasses import ByteStream
from haystack.lazy_imports import LazyImport

from components.core.conversion import (
    CODE_LANGUAGES,
    check_max_file_bytes,
    convert_each,
    include_warnings,
    knowledge_root_of,
    read_capped,
    scan_includes,
)
from components.core.frontmatter import (
    MAX_FRONTMATTER_ALIASES,
    MAX_FRONTMATTER_BYTES,
    FrontmatterError,
    split_frontmatter,
)
from components.core.location import moved_line_map
from components.core.markdown_text import closes_fence, opening_fence
from components.core.site_markup import clean_markup
from components.core.sphinx_conf import definitions_in, nearest_configuration, substitution_definitions
from components.core.sphinx_includes import (
    SphinxIncludes,
    directive_options,
    include_part,
    literal_part,
    shows_whole,
)

with LazyImport("Run 'pip install docutils'") as docutils_import:
    from docutils import nodes
    from docutils.core import publish_doctree
    from docutils.parsers.rst import Directive, directives

#: default cap of one file
MAX_FILE_BYTES = 4 * 1024 * 1024
#: how deep a directive docutils does not know may sit inside another one and still have its content read
MAX_NESTING = 8

#: docutils reads the file alone: no configuration file of the machine, no file it names (`include`, `raw`,
#: `csv-table :file:`), no syntax highlighting, every section a section (the first one is not lifted into a title),
#: and its messages kept in the tree, never printed or raised
_SETTINGS = {
    "_disable_config": True,
    "file_insertion_enabled": False,
    "raw_enabled": False,
    "syntax_highlight": "none",
    "doctitle_xform": False,
    "docinfo_xform": False,
    "sectsubtitle_xform": False,
    "report_level": 5,
    "halt_level": 5,
    "exit_status_level": 5,
    "warning_stream": False,
    "input_encoding": "utf-8",
    "pep_references": False,
    "rfc_references": False,
}

#: the fields of a page's first field list that Sphinx reads as its settings, no text of the page
_PAGE_SETTINGS = frozenset({"orphan", "tocdepth", "nocomments", "nosearch", "no-search", "hide-toc", "private"})
#: the directive a docutils error quotes: `.. name:: arguments`
_DIRECTIVE = re.compile(r"^\.\.[ \t]+(?P<name>[\w.+:-]+)[ \t]*::(?P<args>.*)$")
_OPTION = re.compile(r"^:[\w .+-]+:(?:[ \t]|$)")
#: a directive's own line (its argument kept) or an option line, in text kept as it is (past MAX_NESTING)
_MARKUP_LINE = re.compile(r"^\s*(?:\.\.[ \t]+[\w.+:-]+[ \t]*::(?P<args>.*)|:[\w .+-]+:(?:[ \t].*)?)$")
#: an interpreted text role (Sphinx's `:ref:`, `:py:func:`, ...): its text is what a reader sees
_ROLE = re.compile(r"^:(?P<role>[\w.+:-]+):`(?P<body>.*)`$", re.DOTALL)
_ROLE_IN_TEXT = re.compile(r":[\w.+-]+(?::[\w.+-]+)*:`[^`\n]+`")
_TITLED = re.compile(r"^(?P<title>.*?)\s*<(?P<target>[^<>]*)>$", re.DOTALL)
_HEADING_LIKE = re.compile(r"^#{1,6}(?:\s|$)")
_ATX = re.compile(r"^(#{1,6})(?:\s|$)")
#: an include's `:parser:` that reads markdown (MyST's); without one Sphinx reads any file as reStructuredText
_MARKDOWN_PARSER = re.compile(r"myst|markdown|commonmark|recommonmark", re.IGNORECASE)
#: a setext heading's underline, after a line of text
_SETEXT = re.compile(r"^(?:=+|-+)[ \t]*$")
_NAMES_AN_INCLUDE = re.compile(r"^[ \t]*\.\.[ \t]+(?:literal)?include[ \t]*::", re.MULTILINE | re.IGNORECASE)
_SUBSTITUTION = re.compile(r"^\|[^|]+\|_{0,2}$")
#: the roles Sphinx shows in code type (an API object, a file, a command); others (`ref`, `doc`, `term`) as text
_CODE_ROLES = frozenset(
    {"attr", "class", "func", "meth", "mod", "data", "exc", "obj", "const", "member", "macro", "type", "var"}
    | {"envvar", "option", "file", "program", "command", "samp", "makevar", "code", "literal"}
)

#: directives whose content is no text of the page: navigation, API pages generated from code, diagrams, styling
_DROPPED = frozenset(
    {
        "toctree",
        "index",
        "highlight",
        "module",
        "currentmodule",
        "default-domain",
        "tabularcolumns",
        "rst-class",
        "cssclass",
        "sectionauthor",
        "moduleauthor",
        "codeauthor",
        "graphviz",
        "digraph",
        "graph",
        "inheritance-diagram",
        "plot",
        "mermaid",
        "uml",
        "automodule",
        "autoclass",
        "autofunction",
        "automethod",
        "autoattribute",
        "autodata",
        "autoexception",
        "autosummary",
        "autoprogram",
        "program",
        "spelling:word-list",
        "jinja",
        "raw",
        "testsetup",
        "testcleanup",
    }
)
#: directives that hold code: their content becomes a code block in the language of their argument
_CODE = frozenset(
    {"code-block", "sourcecode", "code", "code-cell", "code-tab", "ipython", "jupyter-execute", "productionlist"}
    | {"testcode", "doctest", "testoutput", "prompt"}
)
#: directives whose argument is a build condition: their content is kept, the condition is no text
_CONDITIONS = frozenset({"only", "ifconfig"})
#: what Sphinx writes before a version directive's text
_VERSION_LABEL = {
    "versionadded": "New in version {}.",
    "versionchanged": "Changed in version {}.",
    "deprecated": "Deprecated since version {}.",
    "versionremoved": "Removed in version {}.",
}
#: the domains whose directives describe an API object: their argument is its signature
_OBJECT_DOMAINS = frozenset({"py", "c", "cpp", "js", "rst", "std", "http", "mongodb"})
_OBJECTS = frozenset(
    {
        "function",
        "class",
        "method",
        "attribute",
        "data",
        "exception",
        "decorator",
        "classmethod",
        "staticmethod",
        "property",
        "describe",
        "object",
        "option",
        "envvar",
        "confval",
    }
)


@dataclass
class _Output:
    """Markdown lines, each with the line (0-based) of the file it stands for."""

    lines: list[str] = field(default_factory=list)
    origins: list[int] = field(default_factory=list)
    title: str = ""
    #: the substitution definitions of the site (`rst_prolog`/`rst_epilog`) and of the page, for every text parsed
    definitions: str = ""
    #: what reads the files `include` and `literalinclude` name (shared by the writers of one page)
    includes: SphinxIncludes = field(default_factory=lambda: SphinxIncludes(None, "", 1))

    def add(self, text: str, origin: int) -> None:
        """Add `text`, its lines standing for the file's lines from `origin` on."""
        for number, line in enumerate(text.split("\n")):
            self.lines.append(line)
            self.origins.append(max(origin + number, 0))

    def gap(self) -> None:
        if self.lines and self.lines[-1] != "":
            self.lines.append("")
            self.origins.append(self.origins[-1])

    def last_origin(self) -> int:
        return self.origins[-1] if self.origins else 0


def _role_text(raw: str, code: bool = True) -> str:
    """
    What a reader sees of a role docutils does not know: `:ref:`Install <install>`` shows `Install`,
    `:class:`~requests.Response`` shows `Response` in code type.

    :param code: Show an API object's role as a code span (not in a heading: headings are read as text).
    """
    if _SUBSTITUTION.match(raw):  # a substitution defined elsewhere (Sphinx's conf.py, an image)
        return ""
    found = _ROLE.match(raw)
    if not found:
        return raw
    body = found.group("body")
    if titled := _TITLED.match(body):
        text = titled.group("title") or titled.group("target")
    elif body.startswith("~"):  # `~requests.Response` shows `Response`
        text = body[1:].rsplit(".", 1)[-1]
    else:  # `!` shows the target without linking it; a leading `.` asks Sphinx to find it by its suffix
        text = body.lstrip("!").removeprefix(".")
    if code and found.group("role").rsplit(":", 1)[-1] in _CODE_ROLES:
        return _code_span(text)
    return text


def _code_span(text: str) -> str:
    ticks = "``" if "`" in text else "`"
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def _inline(node: nodes.Node, code: bool = True) -> str:
    """
    A node's text as one markdown paragraph would hold it: code spans kept, other inline markup removed.

    :param code: Keep code spans (not in a heading, which is read as text).
    """
    if isinstance(node, nodes.Text):
        return str(node)
    if isinstance(node, nodes.literal):
        return _code_span(node.astext()) if code else node.astext()
    if isinstance(node, nodes.problematic):
        return _role_text(node.astext(), code)
    if isinstance(node, nodes.footnote_reference | nodes.citation_reference):
        return f"[{node.astext()}]"
    if isinstance(node, nodes.system_message | nodes.target):
        return ""
    if isinstance(node, nodes.image):  # a linked one is a badge or an icon (`|Docs|_`): its alt is no text
        return "" if isinstance(node.parent, nodes.reference) else str(node.get("alt", ""))
    if isinstance(node, nodes.Element):
        return "".join(_inline(child, code) for child in node.children)
    return node.astext()


def _line_of(node: nodes.Node, default: int) -> int:
    """The node's first line in the file (0-based) as docutils knows it, else `default`."""
    line = getattr(node, "line", None)
    return line - 1 if isinstance(line, int) and line > 0 else default


class _Writer:
    """Walks a docutils tree and writes markdown: sections as headings, code as fenced blocks, tables as tables."""

    def __init__(self, out: _Output, source: list[str], offset: int = 0, depth: int = 0, nesting: int = 0) -> None:
        self.out = out
        self.source = source  # the parsed text's lines
        self.offset = offset  # the file line of the parsed text's first line (a directive's content)
        self.depth = depth  # the section level of the parsed text
        self.nesting = nesting

    def origin(self, node: nodes.Node) -> int:
        default = self.out.last_origin()
        line = _line_of(node, -1)
        return self.offset + line if line >= 0 else default

    def verbatim_origin(self, node: nodes.Element) -> int:
        """
        Where a block kept verbatim starts: docutils gives a `code` directive's block the line after its end, so its
        first line is looked up in the text, the nearest to the line docutils gives.
        """
        reported = _line_of(node, -1)
        first = next((line.strip() for line in node.astext().split("\n") if line.strip()), "")
        if reported < 0 or not first:
            return self.origin(node)
        span = len(node.astext().split("\n")) + 4
        found = [
            number
            for number in range(max(reported - span, 0), min(reported + 2, len(self.source)))
            if self.source[number].strip() == first
        ]
        line = min(found, key=lambda number: abs(number - reported)) if found else reported
        return self.offset + line

    def blocks(self, parent: nodes.Element) -> None:
        for child in parent.children:
            self.block(child)

    def block(self, node: nodes.Node) -> None:
        if isinstance(node, nodes.section):
            self.section(node)
        elif isinstance(node, nodes.literal_block | nodes.doctest_block | nodes.math_block):
            self.code(node.astext(), _language(node), self.verbatim_origin(node))
        elif isinstance(node, nodes.bullet_list | nodes.enumerated_list):
            self.list_items(node)
        elif isinstance(node, nodes.definition_list | nodes.field_list | nodes.option_list):
            self.labelled(node)
        elif isinstance(node, nodes.table):
            self.table(node)
        elif isinstance(node, nodes.line_block):
            self.out.gap()
            for line in node.findall(nodes.line):
                self.out.add(_inline(line), self.origin(line))
        elif isinstance(node, nodes.system_message):
            self.message(node)
        elif isinstance(node, nodes.footnote | nodes.citation):
            self.note(node)
        elif isinstance(
            node,
            nodes.comment
            | nodes.target
            | nodes.substitution_definition
            | nodes.pending
            | nodes.raw
            | nodes.image
            | nodes.transition
            | nodes.docinfo
            | nodes.meta
            | nodes.decoration,
        ):
            return
        elif isinstance(node, nodes.TextElement):  # paragraphs; an admonition's, a topic's or a table's title
            self.paragraph(node)
        elif isinstance(node, nodes.Element):  # admonitions, topics, sidebars, figures, containers, block quotes
            self.blocks(node)

    def section(self, node: nodes.section) -> None:
        inner = _Writer(self.out, self.source, self.offset, self.depth + 1, self.nesting)
        for child in node.children:
            if isinstance(child, nodes.title):
                inner.heading(child, self.depth + 1)
            else:
                inner.block(child)

    def heading(self, node: nodes.title, level: int) -> None:
        text = " ".join(_inline(node, code=False).split())
        if not text:
            return
        self.out.title = self.out.title or text
        self.out.gap()
        # docutils gives a title the line of its underline
        self.out.add("#" * min(max(level, 1), 6) + " " + text, self.origin(node) - 1)
        self.out.gap()

    def paragraph(self, node: nodes.Element) -> None:
        lines = (line.strip() for line in _inline(node).strip("\n").split("\n"))
        # a prose line that starts with `#` is no heading: `The number\n# of retries`
        text = "\n".join("\\" + line if _HEADING_LIKE.match(line) else line for line in lines)
        if text.strip():
            self.out.gap()
            self.out.add(text, self.origin(node))

    def note(self, node: nodes.Element) -> None:
        """A footnote or a citation: its label in brackets before its text, as its references show it."""
        label = next((child.astext() for child in node.children if isinstance(child, nodes.label)), "")
        text = " ".join(
            " ".join(_inline(child).split()) for child in node.children if isinstance(child, nodes.paragraph)
        )
        if text:
            self.out.gap()
            self.out.add(f"[{label}] {text}" if label else text, self.origin(node))

    def code(self, text: str, language: str, origin: int) -> None:
        text = text.rstrip("\n")
        if not text.strip():
            return
        fence = "```"
        while fence in text:
            fence += "`"
        self.out.gap()
        self.out.add(fence + language, max(origin - 1, 0))
        self.out.add(text, origin)
        self.out.add(fence, self.out.last_origin() + 1)

    def list_items(self, node: nodes.Element) -> None:
        numbered = isinstance(node, nodes.enumerated_list)
        start = node.get("start", 1) if numbered else 1
        for number, item in enumerate(node.children, start=start if isinstance(start, int) else 1):
            if not isinstance(item, nodes.list_item):
                continue
            self.item(item, f"{number}. " if numbered else "- ")

    def item(self, item: nodes.Element, marker: str) -> None:
        """A list item: its first line after the marker, the rest indented under it."""
        part = _Output(definitions=self.out.definitions, includes=self.out.includes)
        _Writer(part, self.source, self.offset, self.depth, self.nesting).blocks(item)
        while part.lines and not part.lines[0].strip():
            part.lines.pop(0)
            part.origins.pop(0)
        if not part.lines:
            return
        if not self.out.lines or self.out.lines[-1].strip() == "" or not _is_item(self.out.lines[-1]):
            self.out.gap()
        pad = " " * len(marker)
        for index, (line, origin) in enumerate(zip(part.lines, part.origins, strict=True)):
            self.out.add((marker if index == 0 else pad) + line if line else "", origin)

    def labelled(self, node: nodes.Element) -> None:
        """Definition, field and option lists: a label line, then its text."""
        for entry in node.children:
            if not isinstance(entry, nodes.Element) or not entry.children:
                continue
            label, *body = entry.children
            text = " ".join(_inline(label).split())
            if isinstance(entry, nodes.field) and text.lower() in _PAGE_SETTINGS:
                continue
            classifiers = [part for part in body if isinstance(part, nodes.classifier)]
            if classifiers:  # numpydoc's `x : int`
                text = " : ".join([text, *(" ".join(_inline(part).split()) for part in classifiers)])
                body = [part for part in body if not isinstance(part, nodes.classifier)]
            if isinstance(label, nodes.option_group):
                text = ", ".join(_inline(option).strip() for option in label.children)
            self.out.gap()
            self.out.add(text + (":" if isinstance(entry, nodes.field) else ""), self.origin(entry))
            for part in body:
                if not isinstance(part, nodes.Element):
                    continue
                before = len(self.out.lines)
                self.blocks(part)
                # the text right under its label, as a reader sees it
                if len(self.out.lines) > before and self.out.lines[before] == "":
                    del self.out.lines[before]
                    del self.out.origins[before]

    def table(self, node: nodes.table) -> None:
        rows: list[tuple[list[str], int]] = []
        table_origin = self.origin(node)
        for group in node.findall(nodes.tgroup):
            below: dict[int, tuple[int, str]] = {}  # a column -> rows a cell above still spans, and its text
            for part in group.children:
                for row in part.children if isinstance(part, nodes.thead | nodes.tbody) else []:
                    cells = _row_cells(row, below)
                    paragraph = row.next_node(nodes.paragraph)
                    rows.append((cells, self.origin(paragraph) if paragraph is not None else table_origin))
            break  # a table has one group
        rows = [(cells, origin) for cells, origin in rows if any(cells)]
        if not rows:
            return
        width = max(len(cells) for cells, _ in rows)
        self.out.gap()
        for index, (cells, origin) in enumerate(rows):
            padded = cells + [""] * (width - len(cells))
            self.out.add("| " + " | ".join(padded) + " |", origin)
            if index == 0:
                # a table without a header row gets its first row as header, as the DOCX converter does
                self.out.add("|" + "---|" * width, origin)

    def message(self, node: nodes.system_message) -> None:
        """A directive docutils does not know (Sphinx's, an extension's) or whose options it refuses: read it."""
        quoted = next(iter(node.findall(nodes.literal_block)), None)
        if quoted is None:
            return
        lines = quoted.astext().split("\n")
        found = _DIRECTIVE.match(lines[0])
        if not found:
            return
        line = node.get("line")
        first = (line - 1) if isinstance(line, int) and line > 0 else self.out.last_origin()
        self.directive(found.group("name"), found.group("args").strip(), lines[1:], self.offset + first)

    def directive(self, name: str, args: str, lines: list[str], first: int) -> None:
        domain, _, short = name.rpartition(":")
        short = short.lower()
        if name.lower() in _DROPPED or short in _DROPPED:
            return
        if short in ("include", "literalinclude"):
            self.include(short, args, lines, first)
            return
        start = 1
        if short in _OBJECTS or domain.lower() in _OBJECT_DOMAINS:
            # more signatures, one a line, before the options (`get(url)` then `post(url)`; `f(a, \` then `b)`)
            while start - 1 < len(lines) and lines[start - 1].strip() and not _OPTION.match(lines[start - 1].strip()):
                more = lines[start - 1].strip()
                args = args[:-1].rstrip() + " " + more if args.endswith("\\") else f"{args}\n{more}"
                start += 1
        while start - 1 < len(lines) and _OPTION.match(lines[start - 1].strip()):
            start += 1
        content = textwrap.dedent("\n".join(lines[start - 1 :]))
        if short in _CODE:
            language = args.split(maxsplit=1)[0] if args else ""
            self.code(content.strip("\n"), language, first + start + _leading_blank(content))
            return
        if short in _VERSION_LABEL:
            version, _, rest = args.partition(" ")
            self.out.gap()
            self.out.add(" ".join([_VERSION_LABEL[short].format(version), rest]).strip(), first)
        elif short in _CONDITIONS:  # `.. only:: html`: its text is the page's, its condition is not
            pass
        elif args and (short in _OBJECTS or domain.lower() in _OBJECT_DOMAINS):
            self.out.gap()
            self.out.add("\n".join(_code_span(signature) for signature in args.split("\n")), first)
        elif args:  # a tab's or a card's label, a dropdown's title
            self.out.gap()
            self.out.add(args, first)
        if content.strip():
            self.nested(content, first + start)

    def include(self, kind: str, target: str, lines: list[str], first: int) -> None:
        """
        An `include` or a `literalinclude`: the file's text (the part its options name) where the directive stands,
        every line of it standing for the directive's line; a file that cannot be read is noted, not shown.
        """
        includes = self.out.includes
        options = directive_options(lines)
        loaded = includes.read(target)
        if loaded is None:
            return
        path, name, text = loaded
        try:
            part = literal_part(text, options) if kind == "literalinclude" else include_part(text, options)
        except ValueError as err:  # an option names what the file does not hold: its edit may mend that
            includes.included.remove(name)
            includes.watched.append(name)
            includes.note(f"{target} ({err})")
            return
        start = len(self.out.lines)
        if kind == "literalinclude" or "literal" in options or "code" in options:
            language = options.get("language") or options.get("code") or CODE_LANGUAGES.get(path.suffix.lower(), "")
            if "caption" in options:  # an empty caption is the file's name, as Sphinx shows it
                self.out.gap()
                self.out.add(options["caption"] or path.name, first)
            self.code(part, language, first)
            shown = True
        elif _MARKDOWN_PARSER.search(options.get("parser", "")):
            shown = self.markdown(part, target)
        else:
            shown = self.included_rst(part, name, target)
        if not shown:  # noted with why: what it wrote goes, the file stays a page of its own, its mending counts
            del self.out.lines[start:], self.out.origins[start:]
            includes.included.remove(name)
            includes.watched.append(name)
            return
        if shows_whole(kind, options):
            includes.whole.append(name)
        self.out.origins[start:] = [first] * (len(self.out.lines) - start)

    def included_rst(self, text: str, name: str, target: str) -> bool:
        """An included reStructuredText file, in place; False (noted) when docutils or the writer cannot read it."""
        includes = self.out.includes
        try:
            with includes.reading(name):
                tree = _parse(text, self.out.definitions)
                _Writer(self.out, text.split("\n"), 0, self.depth, self.nesting + 1).blocks(tree)
        except Exception as err:  # docutils' errors, and Python's on hostile input (deep nesting)
            includes.note(f"{target} (not readable reStructuredText: {type(err).__name__})")
            return False
        return True

    def markdown(self, text: str, target: str) -> bool:
        """
        An included markdown file (a README read by MyST): its body without site markup, its headings (setext ones as
        `#` headings) under the including section.
        """
        try:
            _, body, _ = split_frontmatter(text, MAX_FRONTMATTER_BYTES, MAX_FRONTMATTER_ALIASES)
        except FrontmatterError as err:
            self.out.includes.note(f"{target} ({err})")
            return False
        fence = ""
        lines: list[str] = []
        for line in clean_markup(body).split("\n"):
            if fence:
                fence = "" if closes_fence(line, fence) else fence
            elif opening_fence(line):
                fence = opening_fence(line)
            elif _SETEXT.match(line) and lines and lines[-1].strip() and not _ATX.match(lines[-1]):
                lines[-1] = "#" * min((1 if line.startswith("=") else 2) + self.depth, 6) + " " + lines[-1].strip()
                continue
            elif heading := _ATX.match(line):
                lines.append("#" * min(len(heading.group(1)) + self.depth, 6) + line[len(heading.group(1)) :])
                continue
            lines.append(line)
        self.out.gap()
        self.out.add("\n".join(lines).strip("\n"), self.out.last_origin())
        return True

    def nested(self, content: str, offset: int) -> None:
        if self.nesting >= MAX_NESTING:
            self.out.gap()
            kept = [_MARKUP_LINE.sub(lambda m: m.group("args") or "", line).strip() for line in content.split("\n")]
            self.out.add(re.sub(r"\n{3,}", "\n\n", "\n".join(kept)).strip("\n"), offset)
            return
        tree = _parse(content, self.out.definitions)
        _Writer(self.out, content.split("\n"), offset, self.depth, self.nesting + 1).blocks(tree)


def _row_cells(row: nodes.Element, below: dict[int, tuple[int, str]]) -> list[str]:
    """
    A table row's cells, a merged cell's text repeated in every cell it spans (as the Word converter does).

    :param below: Per column, the rows a cell above still spans and its text; updated for the rows below.
    """
    cells: list[str] = []

    def spanned() -> None:
        while len(cells) in below:
            left, text = below.pop(len(cells))
            if left > 1:
                below[len(cells)] = (left - 1, text)
            cells.append(text)

    for entry in row.children:
        spanned()
        text = " ".join(_inline(entry).split()).replace("|", "\\|")
        for _ in range(1 + int(entry.get("morecols", 0))):
            if entry.get("morerows"):
                below[len(cells)] = (int(entry["morerows"]), text)
            cells.append(text)
    spanned()
    return cells


def _has_text(markdown: str) -> bool:
    """Whether the markdown holds a line that is no heading (a page of headings alone is no evidence of anything)."""
    return any(line.strip() and not line.startswith("#") for line in markdown.split("\n"))


def _headings_only(markdown: str, includes: list[str] | None) -> str:
    reason = "no text besides its headings" if markdown.strip() else "no text"
    return f"{reason} (an include not shown: {'; '.join(includes)})" if includes else reason


def _leading_blank(text: str) -> int:
    return len(text) - len(text.lstrip("\n"))


def _is_item(line: str) -> bool:
    return bool(re.match(r"^\s*(?:- |\d+\. )", line)) or line.startswith(" ")


def _language(node: nodes.Element) -> str:
    if node.get("language"):
        return str(node["language"])
    classes = [c for c in node.get("classes", []) if c != "code"]
    return classes[0] if classes else ""


def _without_roles(definitions: str) -> str:
    """Substitution definitions whose roles (`:ref:` in Django's `rst_epilog`) are replaced by what a reader sees."""
    return _ROLE_IN_TEXT.sub(lambda match: _role_text(match.group(0), code=False), definitions)


def _site_definitions(conf: Path) -> str:
    """A site's `rst_prolog`/`rst_epilog` substitution definitions, parsed once per version of its `conf.py`."""
    try:
        stat = conf.stat()
    except OSError:
        return ""
    return _cached_definitions(str(conf), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=16)
def _cached_definitions(conf: str, mtime_ns: int, size: int) -> str:
    return substitution_definitions(Path(conf))


@functools.cache
def _register_include() -> None:
    """
    Put a refusing `include` in docutils' place: the converter reads included files itself, and docutils' own
    directive imports the module its `:parser:` option names while checking the option, file insertion off or not.
    """

    class RefusedInclude(Directive):
        optional_arguments = 1
        final_argument_whitespace = True
        has_content = True

        def run(self) -> list[nodes.Node]:
            # the error's literal copy of the directive is what the writer reads (`_Writer.message`)
            raise self.warning("include is read by the converter")

    directives.register_directive("include", RefusedInclude)


def _parse(text: str, definitions: str = "") -> nodes.document:
    """The docutils tree of a text, the substitution definitions in force appended (after its last line)."""
    _register_include()
    if definitions:
        text = f"{text}\n\n{definitions}\n"
    return publish_doctree(text, source_path="<rst>", settings_overrides=_SETTINGS)


def rst_to_markdown(
    text: str, includes: SphinxIncludes | None = None, site_definitions: str = ""
) -> tuple[str, str, list[list[int]], list[str]]:
    """
    Turn reStructuredText into markdown with docutils: sections into headings, code into fenced blocks, tables into
    tables, roles into their text; directives docutils does not know (Sphinx's) keep their text, navigation and API
    pages generated from code (`toctree`, `automodule`, ...) go; `include` and `literalinclude` show the file they name
    when `includes` can read it.

    :param text: The file's text.
    :param includes: What reads included files (it records which it read); None reads none.
    :param site_definitions: Substitution definitions every page of the site has (Sphinx's `rst_prolog` and
        `rst_epilog`); a page's own definitions are used too inside the directives parsed apart (a tab's content).
    :returns: The markdown, its title (the first section's, '' for none), its line map (`[[markdown_line,
        file_line, 1], ...]`, as `components.core.location.file_line` reads it; an included file's lines stand for the
        directive's line) and the includes not shown, each with why.
    :raises ValueError: If docutils cannot read the text.
    """
    # docutils counts lines as `splitlines` does after this; a file's other separators are too rare to map
    text = text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")
    source = text.split("\n")
    site = _without_roles(site_definitions)
    own = definitions_in(text)
    out = _Output(definitions="\n\n".join([*(_without_roles(d) for d in own), *([site] if site else [])]))
    if includes is not None:
        out.includes = includes
    # a page's definition holding a role docutils does not know is refused: given again without it, it holds
    mended = [_without_roles(d) for d in own if _ROLE_IN_TEXT.search(d)]
    try:
        _Writer(out, source).blocks(_parse(text, "\n\n".join([*mended, *([site] if site else [])])))
    except Exception as err:  # docutils raises its own errors, and Python's on hostile input (deep nesting)
        msg = f"not readable reStructuredText ({type(err).__name__}: {err})"
        raise ValueError(msg) from err
    while out.lines and not out.lines[-1].strip():
        out.lines.pop()
        out.origins.pop()
    last = max(len(text.splitlines()) - 1, 0)  # a final line break starts no line
    origins = [min(origin, last) for origin in out.origins]  # a closing fence after the file's last line
    return "\n".join(out.lines), out.title, moved_line_map([[0, 1, 1]], origins), out.includes.unresolved


@component
class RstKnowledgeConverter:
    """
    Converts reStructuredText files (Sphinx and docutils documentation) into markdown Documents.

    docutils parses the file; its sections become markdown headings (the breadcrumbs of the chunks), literal and code
    blocks fenced code, tables markdown tables, lists items, admonitions their text. A role shows what a reader sees
    (`:ref:`Install <install>`` is `Install`, `:class:`~a.Response`` is `Response`). Sphinx's directives, which
    docutils does not know, keep their text (a tab's label, a function's signature, `versionchanged`'s "Changed in
    version 2.0."); `toctree`, `index`, `automodule` and other navigation or generated pages go. An `include` shows
    the file it names (its reStructuredText read as the page's, a markdown README as markdown, with `:literal:` or
    `:code:` as code) and a `literalinclude` shows it as code, the part their options name, when it lies under the
    knowledge root (paths as Sphinx reads them: relative to the page, or from the site's source folder for `/...`);
    the files read are listed in `included_files`, those that cannot be read in `warnings`. docutils itself reads no
    file (`raw :file:`, `csv-table :file:`), and no configuration file of the machine. `line_map` says which line of
    the file each markdown line stands for (an included file's lines: the directive's), so chunks keep their line
    range in the file.

    ### Usage example

    ```python
    from components.converters.rst_knowledge_converter import RstKnowledgeConverter

    result = RstKnowledgeConverter().run(sources=["knowledge/docs/quickstart.rst"])
    print(result["documents"][0].meta["title"], result["failures"])
    ```
    """

    def __init__(self, max_file_bytes: int = MAX_FILE_BYTES) -> None:
        """
        Create the converter.

        :param max_file_bytes: Largest file converted (a larger one is reported as failed).
        :raises ValueError: If the cap is not positive.
        """
        check_max_file_bytes(max_file_bytes)
        docutils_import.check()
        self.max_file_bytes = max_file_bytes

    def included_files(self, sources: list[Path], meta: list[dict[str, Any]]) -> dict[str, list[str]]:
        """
        What each page shows whole of other files (its includes' includes too; not a file of which an option names a
        part), without the documents: a page that names no include is not parsed.

        :param sources: File paths.
        :param meta: One dict per source, with its `source` (the path relative to the knowledge root).
        :returns: For each file that could be read, its source and the sources it shows whole (none for a file that
            cannot be converted: the run reports it).
        """
        return scan_includes(
            sources,
            meta,
            self.max_file_bytes,
            lambda text: bool(_NAMES_AN_INCLUDE.search(text)),
            lambda path, info: self._converted(path, info)[1].whole,
        )

    def _convert(self, source: str | Path | ByteStream, meta: dict[str, Any]) -> Document:
        return self._converted(source, meta)[0]

    def _converted(self, source: str | Path | ByteStream, meta: dict[str, Any]) -> tuple[Document, SphinxIncludes]:
        """One file's Document and what read its includes; raises `ValueError` or `OSError` for a bad file."""
        stream = read_capped(source, self.max_file_bytes)
        merged = {**stream.meta, **meta}
        try:
            text = stream.data.decode("utf-8-sig")
        except UnicodeDecodeError as err:
            msg = f"not UTF-8 text ({err.reason} at byte {err.start})"
            raise ValueError(msg) from None
        name = str(merged.get("source") or Path(str(merged.get("file_path") or "")).name)
        root = knowledge_root_of(source, name)
        includes = SphinxIncludes(root, name, self.max_file_bytes)
        conf = nearest_configuration(root / name, root) if root else None
        definitions = _site_definitions(conf.path) if conf and conf.path else ""
        if definitions and conf and conf.source:  # read like an include: its edit indexes the page again
            includes.included.append(conf.source)
        markdown, title, line_map, unresolved = rst_to_markdown(text, includes, definitions)
        if unresolved:
            merged["unresolved_includes"] = unresolved
        if includes.included:
            merged["included_files"] = sorted(set(includes.included))
        if watched := sorted(set(includes.watched) - set(includes.included)):
            merged["watched_files"] = watched
        if title and not merged.get("title"):
            merged["title"] = title
        merged["markup"] = "rst"
        merged["line_map"] = line_map
        return Document(content=markdown, meta=merged), includes

    @component.output_types(
        documents=list[Document],
        failures=list[dict[str, str]],
        warnings=list[dict[str, str]],
        skipped=list[dict[str, str]],
    )
    def run(
        self, sources: list[str | Path | ByteStream], meta: dict[str, Any] | list[dict[str, Any]] | None = None
    ) -> dict[str, Any]:
        """
        Convert the given files.

        :param sources: File paths or `ByteStream`s.
        :param meta: Metadata for every source (one dict), or one dict per source.
        :returns: `documents`: one Document per converted file; `failures`: `{"source", "reason"}` per file that
            could not be converted; `warnings`: `{"source", "reason"}` per include whose file could not be shown;
            `skipped`: `{"source", "reason"}` per file with no text besides its headings (a page that only includes
            another file, or a Sphinx index of other pages), never indexed.
        """
        converted, failures = convert_each(sources, normalize_metadata(meta, len(sources)), self._convert)
        documents = [doc for doc in converted if _has_text(doc.content or "")]
        skipped = [
            {
                "source": str(doc.meta.get("source", "")),
                "reason": _headings_only(doc.content or "", doc.meta.get("unresolved_includes")),
            }
            for doc in converted
            if not _has_text(doc.content or "")
        ]
        warnings = include_warnings(documents, "include not resolved")
        return {"documents": documents, "failures": failures, "warnings": warnings, "skipped": skipped}
