"""
The files a reStructuredText page's `include` and `literalinclude` directives name, read only under the knowledge root.

Paths follow Sphinx: relative to the page's folder (an included file's own includes too, as Sphinx resolves them
against the document it builds), or, starting with `/`, to the site's source folder (the nearest folder above the
page holding a `conf.py`, else the knowledge root). The part an option names follows docutils for `include`
(`start-line`/`end-line` slice lines, `start-after`/`end-before` cut at text) and Sphinx for `literalinclude` (its
filters in Sphinx's order: `pyobject`, `start-after`/`start-at`, `end-before`/`end-at`, `lines`, `dedent`,
`prepend`/`append`).
"""

from __future__ import annotations

import ast
import os
import re
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from components.core.conversion import MAX_INCLUDE_DEPTH, is_hidden

#: most include directives one page may name (each is a file read and parsed, an empty one too)
MAX_INCLUDES = 256
_OPTION_VALUE = re.compile(r"^:(?P<name>[\w .+-]+):(?:[ \t]+(?P<value>.*))?$")
#: the options of an `include` that show only part of the file
_INCLUDE_PARTS = frozenset({"start-line", "end-line", "start-after", "end-before"})
#: the options of a `literalinclude` that show only part of the file
_LITERAL_PARTS = frozenset({"lines", "start-after", "start-at", "end-before", "end-at", "pyobject"})


def directive_options(lines: list[str]) -> dict[str, str]:
    """
    A directive's options: the `:name: value` lines that follow its first line, up to the first other line.

    :param lines: The directive's lines after its first one.
    :returns: Each option's name and value ('' for a flag).
    """
    options: dict[str, str] = {}
    indent = -1
    last = ""
    for line in lines:
        found = _OPTION_VALUE.match(line.strip())
        if found:
            last = found.group("name").strip().lower()
            options[last] = (found.group("value") or "").strip()
            indent = len(line) - len(line.lstrip())
        elif last and line.strip() and len(line) - len(line.lstrip()) > indent:  # a value continued
            options[last] = f"{options[last]} {line.strip()}".strip()
        else:
            break
    return options


def shows_whole(kind: str, options: dict[str, str]) -> bool:
    """Whether an include shows its whole file (a page that does is where that file's text is indexed)."""
    parts = _LITERAL_PARTS if kind == "literalinclude" else _INCLUDE_PARTS
    return not parts.intersection(options)


def include_part(text: str, options: dict[str, str]) -> str:
    """
    The part of a file an `include` shows, as docutils cuts it.

    :param text: The file's text.
    :param options: The directive's options.
    :returns: The lines `start-line:end-line` (a Python slice), after the first `start-after` text and before the
        first `end-before` text that follows it.
    :raises ValueError: If a line option is no number, or a text to cut at is not in the file.
    """
    lines = text.splitlines(keepends=True)
    text = "".join(lines[_number(options, "start-line") : _number(options, "end-line")])
    if after := options.get("start-after"):
        if after not in text:
            raise ValueError(f"start-after text {after!r} not found")
        text = text.split(after, 1)[1]
    if before := options.get("end-before"):
        if before not in text:
            raise ValueError(f"end-before text {before!r} not found")
        text = text.split(before, 1)[0]
    return text


def literal_part(text: str, options: dict[str, str]) -> str:
    """
    The part of a file a `literalinclude` shows, as Sphinx cuts it.

    :param text: The file's text.
    :param options: The directive's options.
    :returns: The lines `pyobject` names, then those from the first line holding `start-after` (after it) or
        `start-at` (from it) to the next holding `end-before` (before it; not on the first line) or `end-at` (with
        it), then those `lines` names (`1,3,5-7`, `5-`, `-3`); `dedent` applied; `prepend` and `append` added.
    :raises ValueError: If an option names what the file does not hold, or `start-after` and `start-at` are both given.
    """
    lines = text.split("\n")
    if name := options.get("pyobject"):
        lines = _pyobject(text, name)
    lines = _cut_lines(lines, options)
    if "lines" in options:
        lines = _numbered_lines(lines, options["lines"])
    if "dedent" in options:
        amount = options["dedent"]
        if amount and not amount.isdigit():
            raise ValueError(f"dedent {amount!r} is no number")
        lines = textwrap.dedent("\n".join(lines)).split("\n") if not amount else [ln[int(amount) :] for ln in lines]
    prepend, append = options.get("prepend"), options.get("append")
    return "\n".join([*([prepend] if prepend else []), *lines, *([append] if append else [])])


def _number(options: dict[str, str], name: str) -> int | None:
    value = options.get(name)
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{name} {value!r} is no number") from None


def _numbered_lines(lines: list[str], spec: str) -> list[str]:
    chosen: list[str] = []
    for piece in (p.strip() for p in spec.split(",")):
        first, dash, last = piece.partition("-")
        first = first or ("1" if dash else "")  # `-3`: from the first line
        if not first.isdigit() or (last and not last.isdigit()):
            raise ValueError(f"lines {spec!r} is no list of line numbers")
        end = (int(last) if last else len(lines)) if dash else int(first)
        chosen.extend(lines[int(first) - 1 : end])
    if not chosen:
        raise ValueError(f"lines {spec!r} holds no line of the file")
    return chosen


def _cut_lines(lines: list[str], options: dict[str, str]) -> list[str]:
    if "start-after" in options and "start-at" in options:
        raise ValueError("start-after and start-at cannot be used together")
    if "end-before" in options and "end-at" in options:
        raise ValueError("end-before and end-at cannot be used together")
    for name, inclusive in (("start-after", False), ("start-at", True)):
        if marker := options.get(name):
            at = next((n for n, line in enumerate(lines) if marker in line), None)
            if at is None:
                raise ValueError(f"{name} text {marker!r} not found")
            lines = lines[at if inclusive else at + 1 :]
    for name, inclusive in (("end-before", False), ("end-at", True)):
        if marker := options.get(name):
            # as Sphinx: `end-before` on the first line left (the start line itself) does not end the part
            at = next((n for n, line in enumerate(lines) if marker in line and (inclusive or n > 0)), None)
            if at is None:
                raise ValueError(f"{name} text {marker!r} not found")
            lines = lines[: at + 1 if inclusive else at]
    return lines


def _pyobject(text: str, name: str) -> list[str]:
    """The lines of a Python class, function or method (`Class.method`), its decorators with it."""
    try:
        body: list[ast.stmt] = ast.parse(text).body
    except (SyntaxError, ValueError) as err:
        raise ValueError(f"pyobject {name!r}: the file is no Python ({err})") from None
    found: ast.stmt | None = None
    for part in name.split("."):
        found = next(
            (
                node
                for node in body
                if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.name == part
            ),
            None,
        )
        if found is None:
            raise ValueError(f"pyobject {name!r} not found")
        body = found.body  # type: ignore[attr-defined]
    assert found is not None and found.end_lineno is not None
    decorators = getattr(found, "decorator_list", [])
    first = min([found.lineno, *(d.lineno for d in decorators)])
    return text.split("\n")[first - 1 : found.end_lineno]


def sphinx_source_folder(root: Path, page: Path) -> Path:
    """The folder a `/` path of a page starts from: the nearest above it holding a `conf.py`, else the root."""
    folder = page.parent
    while folder.is_relative_to(root):
        if (folder / "conf.py").is_file():
            return folder
        if folder == root:
            break
        folder = folder.parent
    return root


class SphinxIncludes:
    """
    Reads the files one page's directives include, under the knowledge root and within its caps; notes the others.

    :param root: The knowledge root (None: nothing can be read, every include is noted).
    :param source: The page's path relative to the root.
    :param max_bytes: Largest file read, and most bytes all of the page's includes may add together.
    """

    def __init__(self, root: Path | None, source: str, max_bytes: int) -> None:
        self.root = root
        self.source = source
        self.max_bytes = max_bytes
        self.budget = max_bytes
        self.unresolved: list[str] = []
        self.included: list[str] = []
        #: the files shown whole somewhere (not only a part an option names)
        self.whole: list[str] = []
        #: the files an include names under the root that could not be read (not there yet, not UTF-8): their
        #: creation or mending indexes the page again
        self.watched: list[str] = []
        self.attempts = 0
        #: the files being read, the page first: none of them may be included again (a cycle)
        self.chain = [source]

    def note(self, what: str) -> None:
        """Note an include that is not shown, with why."""
        self.unresolved.append(what)

    @contextmanager
    def reading(self, name: str) -> Iterator[None]:
        """While an included file's text is written (the chain of files being read: no file includes itself)."""
        self.chain.append(name)
        try:
            yield
        finally:
            self.chain.pop()

    def read(self, target: str) -> tuple[Path, str, str] | None:
        """
        The file an include names, read.

        :param target: The path the directive names (relative to the page's folder, or to the site's source folder).
        :returns: The file's path, its source (relative to the root) and its text; None (noted) when it lies outside
            the root or in a hidden folder, is not there, includes itself, lies too deep, is over a cap or is no UTF-8
            text.
        """
        if self.root is None:
            self.note(f"{target} (no knowledge root to resolve it against)")
            return None
        if target.startswith("<") and target.endswith(">"):
            self.note(f"{target} (a docutils standard file)")
            return None
        self.attempts += 1
        if self.attempts > MAX_INCLUDES:
            self.note(f"{target} (over the {MAX_INCLUDES} includes a page may name)")
            return None
        root = self.root
        page = root / self.source
        base = sphinx_source_folder(root, page) if target.startswith("/") else page.parent
        written = Path(os.path.normpath(base / target.lstrip("/")))  # `sub/../a.rst` as docutils reads it
        path = self._under_root(written)
        if path is None:
            self.note(f"{target} (not found under the knowledge root)")
            if written.is_relative_to(root) and not is_hidden(written.relative_to(root)):
                self.watched.append(written.relative_to(root).as_posix())
            return None
        name = path.relative_to(root).as_posix()
        chain = self.chain
        if name in chain or len(chain) > MAX_INCLUDE_DEPTH:
            self.note(f"{target} (included from itself or over {MAX_INCLUDE_DEPTH} levels deep)")
            return None
        try:
            data = path.read_bytes() if path.stat().st_size <= self.budget else None
        except OSError as err:
            self.note(f"{target} ({err.strerror or err})")
            return None
        if data is None or len(data) > self.budget:
            self.note(f"{target} (over the {self.max_bytes}-byte cap of a page and what it includes)")
            return None
        self.budget -= len(data)
        try:
            text = data.decode("utf-8-sig").replace("\r\n", "\n").replace("\r", "\n")
        except UnicodeDecodeError as err:
            self.note(f"{target} (not UTF-8 text: {err.reason} at byte {err.start})")
            self.watched.append(name)
            return None
        self.included.append(name)
        return path, name, text

    def _under_root(self, written: Path) -> Path | None:
        """The file a path names, links followed, when it is a file under the root and in no hidden folder."""
        assert self.root is not None
        try:
            path = written.resolve(strict=True)
        except (OSError, RuntimeError):
            return None
        if not path.is_relative_to(self.root) or not path.is_file() or is_hidden(path.relative_to(self.root)):
            return None
        return path
