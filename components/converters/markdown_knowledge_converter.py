from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from haystack import Document, component
from haystack.dataclasses import ByteStream

from components.core.conversion import (
    CODE_LANGUAGES,
    MAX_INCLUDE_DEPTH,
    convert_each,
    include_warnings,
    is_hidden,
    knowledge_root_of,
    scan_includes,
)
from components.core.file_version import file_version
from components.core.frontmatter import (
    MAX_FRONTMATTER_ALIASES,
    MAX_FRONTMATTER_BYTES,
    FrontmatterError,
    split_frontmatter,
)
from components.core.markdown_text import (
    MDX_CODE_BLOCK,
    closes_directive,
    closes_fence,
    first_heading,
    opening_fence,
    without_code,
)
from components.core.site_markup import RAW_CLOSE, RAW_OPEN
from components.core.sphinx_conf import literal_setting, nearest_configuration

_KNOWN_KEYS = ("id", "title", "category", "domain", "keywords", "entities")


#: defaults of the converter's caps (pipelines/indexing.yaml sets them)
MAX_FILE_BYTES = 512 * 1024


class KnowledgeFileError(ValueError):
    """A knowledge file that cannot be loaded; the message names the reason."""


def _string_list(value: Any, field: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    if isinstance(value, list) and all(isinstance(v, str | int | float) for v in value):
        return [str(v).strip() for v in value if str(v).strip()]
    raise KnowledgeFileError(f"frontmatter field '{field}' must be a list of strings")


def parse_knowledge_file(
    data: bytes,
    source: str,
    max_frontmatter_bytes: int = MAX_FRONTMATTER_BYTES,
    max_frontmatter_aliases: int = MAX_FRONTMATTER_ALIASES,
) -> Document:
    """
    Parse one knowledge file into a Document whose content is the markdown body.

    :param data: The raw bytes of the file.
    :param source: The path relative to the knowledge root, used as `source` and as the default `doc_id`.
    :param max_frontmatter_bytes: Largest frontmatter accepted.
    :param max_frontmatter_aliases: Most YAML aliases accepted in the frontmatter.
    :returns: A Document with `doc_id`, `source`, `title`, `category`, `keywords`, `entities`, `doc_version`,
        `markup` (`markdown`), `line_map` (where the body's lines are in the file) and any other frontmatter keys in
        its meta. A page of front matter only has an empty content: `KnowledgeMetadata` makes it its description.
    :raises KnowledgeFileError: If the file is empty, binary, not UTF-8, its frontmatter is malformed or over a
        cap, or it has neither a body nor a front block.
    """
    if not data.strip():
        raise KnowledgeFileError("the file is empty")
    if b"\x00" in data:
        raise KnowledgeFileError("binary file (NUL bytes), not markdown")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise KnowledgeFileError(f"not valid UTF-8 (byte {err.start})") from err
    text = text.replace("\r\n", "\n")
    try:
        front, body, front_lines = split_frontmatter(text, max_frontmatter_bytes, max_frontmatter_aliases)
    except FrontmatterError as err:
        raise KnowledgeFileError(str(err)) from err
    if not body.strip() and not front:
        raise KnowledgeFileError("the markdown body is empty")
    title = str(front.get("title") or first_heading(body) or Path(source).stem).strip()
    category = front.get("category", front.get("domain"))
    if isinstance(category, list):  # `category: [a, b]`: the first
        category = next((c for c in category if isinstance(c, str | int)), None)
    if category is not None and not isinstance(category, str | int):
        raise KnowledgeFileError("frontmatter field 'category' must be a string or a list of strings")
    meta: dict[str, Any] = {k: v for k, v in front.items() if k not in _KNOWN_KEYS}
    meta.update(
        doc_id=str(front.get("id") or source),
        source=source,
        title=title,
        category=str(category or "").strip(),
        keywords=_string_list(front.get("keywords"), "keywords"),
        entities=_string_list(front.get("entities"), "entities"),
        doc_version=file_version(data),
        markup="markdown",
        line_map=[[0, front_lines + 1, 1]],
    )
    return Document(content=body, meta=meta)


#: Hugo's `include`/`readfile` shortcodes, Jekyll's `include`/`include_relative` tags and MkDocs' snippets, with the
#: path they name
_INCLUDE = re.compile(
    r"\{\{[<%]-?\s*(?:include|readfile)\s+(?:file\s*=\s*)?[\"'`]?(?P<hugo>[^\"'`\s>%]+)[\"'`]?[^}]*?-?[>%]\}\}"
    r"|\{%-?\s*(?P<kind>include_relative|include)\s+[\"']?(?P<jekyll>[^\"'\s%]+)[\"']?[^%]*?-?%\}"
    # pymdownx.snippets, as MkDocs Material sites include: `--8<-- "path"` on a line of its own
    r"|^[ \t]*-+8<-+[ \t]+[\"'](?P<snippet>[^\"'\n]+)[\"'][ \t]*$"
    # a source file shown as code, as FastAPI's docs write it: `{* ../../docs_src/app.py hl[3] *}` on its own line
    r"|^[ \t]*\{\*[ \t]*(?P<code>[^\s*]+)[^\n]*?\*\}[ \t]*$"
    # a Hugo site's code example, as Kubernetes shows one: `{{< codenew file="pods/pod.yaml" >}}`, `code_sample`
    r"|\{\{[<%]-?\s*(?:codenew|code_sample)\s[^}]*?\bfile\s*=\s*[\"'](?P<sample>[^\"'\s]+)[\"'][^}]*?-?[>%]\}\}"
    # Docsify's embedded file: `[filename](_media/example.md ':include')`, `':include :type=code'` (not a URL's)
    r"|^[ \t]*!?\[[^\]\n]*\]\((?P<docsify>(?![a-z]+:)[^()\s]+)[ \t]+"
    r"(?P<quote>[\"']):include(?P<options>[^\"'\n]*)(?P=quote)\)[ \t]*$",
    re.MULTILINE,
)
#: what Docsify embeds as markdown; a file of another type is code, except the pages and media it shows otherwise
_DOCSIFY_MARKDOWN = (".md", ".markdown")
_DOCSIFY_NOT_TEXT = (".html", ".htm", ".mp3", ".mp4", ".ogg", ".webm", ".wav")
#: the part of a code file Docsify embeds (`:fragment=demo`: the lines between its `/// [demo]` marks)
_DOCSIFY_FRAGMENT = re.compile(r":fragment=([\w-]+)")
#: mdBook's directives (`{{#include file.rs:anchor}}`, `{{#rustdoc_include}}`, `{{#playground}}`, `{{#title}}`); a
#: backslash before one (`\{{#include x}}`) shows it as written
_MDBOOK = re.compile(r"(?<!\\)\{\{#(?P<name>include|rustdoc_include|playground|title)\b(?P<arg>[^}\n]*)\}\}")
_MDBOOK_ESCAPED = re.compile(r"\\\{\{#(?=(?:include|rustdoc_include|playground|title)\b)")
#: a MyST include (```` ```{include} ../README.md ````, `:::{literalinclude} example.py`), whose options follow it
_MYST_INCLUDE = re.compile(
    r"^[ \t]*(?P<fence>`{3,}|~{3,}|:{3,})\{(?P<name>include|literalinclude)\}[ \t]+(?P<target>\S+)[ \t]*$"
)
_MYST_INCLUDE_ANY = re.compile(r"\{(?:include|literalinclude)\}")
_MYST_OPTION_VALUE = re.compile(r"^[ \t]*:([\w-]+):[ \t]*(.*?)[ \t]*$", re.MULTILINE)
#: a MyST substitution (`{{ key }}`), its key
_SUBSTITUTION = re.compile(r"\{\{\s*([\w.-]+)\s*\}\}")
_MDBOOK_ANY = re.compile(r"\{\{#(?:include|rustdoc_include|playground|title)\b")
_MDBOOK_ANCHOR = re.compile(r"\bANCHOR(?:_END)?:\s*(\w+)")
#: an MDX import of a markdown partial (`import Intro from './_intro.mdx';`), which `<Intro />` then shows
#: (or from the site's root, as Mintlify writes `import Note from "/snippets/note.mdx"`)
_MDX_PARTIAL = re.compile(
    r"^import\s+([A-Z]\w*)\s+from\s+[\"']((?:\.{1,2})?/[^\"'\n]+\.mdx?)[\"'];?[ \t]*$", re.MULTILINE
)


def _code_block(code: str, language: str) -> str:
    """Code as a fenced block whose fence is longer than any run of backticks in it."""
    fence = "`" * max(3, 1 + max((len(run) for run in re.findall(r"`+", code)), default=0))
    return f"{fence}{language}\n{code.strip(chr(10))}\n{fence}"


def _include_candidates(target: str, kind: str, source: str, root: Path) -> list[Path]:
    """
    Where an include's target may lie: Hugo's against the content root, Jekyll's in the site's `_includes/`; the
    site's root is the knowledge root or, when the knowledge folder holds the site lower down, a folder above the page.
    """
    here = (root / source).parent
    # the site's root is the knowledge root or a folder above the page (a knowledge folder may hold several sites)
    sites = [f for f in (here, *here.parents) if f.is_relative_to(root)]
    if kind == "include_relative":
        return [here / target]
    if kind == "include":  # Jekyll: the site's `_includes`
        return [f / "_includes" / target for f in sites] + [root / target.lstrip("/")]
    if target.startswith("/"):  # Hugo: the site's content root
        return [f / target.lstrip("/") for f in reversed(sites)]
    # Hugo: beside the page, under the site's root, or in its folder of includes or, for code, of examples (where
    # Kubernetes' shortcodes look)
    folder = "examples" if kind == "code" else "includes"
    return [here / target, *(f / target for f in reversed(sites)), *(f / folder / target for f in reversed(sites))]


class _Includes:
    """Resolves the include shortcodes of one page against the knowledge root; what it cannot resolve, it notes."""

    def __init__(
        self,
        root: Path | None,
        source: str,
        max_bytes: int,
        caps: tuple[int, int],
        substitutions: dict[str, str] | None = None,
    ) -> None:
        self.root = root
        self.source = source
        self.max_bytes = max_bytes
        self.caps = caps
        self.substitutions = substitutions or {}
        self.unresolved: list[str] = []
        self.included: list[str] = []
        #: the files shown whole somewhere (not only a line range, an anchor's part or a MyST `:lines:` part)
        self.whole: list[str] = []

    def _substitute(self, line: str) -> str:
        """
        A MyST substitution's value where `{{ key }}` stands (a value may use others, two levels deep); a line whose
        values would grow past the file cap stays as written, and is reported.
        """
        sizes: dict[tuple[str, int], int] = {}

        def size(text: str, depth: int) -> int:  # what `text` grows to, counted before anything is built
            total = len(text)
            for match in _SUBSTITUTION.finditer(text):
                found = self.substitutions.get(match.group(1))
                if found is not None:
                    key = (match.group(1), depth)
                    if key not in sizes:
                        sizes[key] = size(found, depth + 1) if depth < 2 else len(found)
                    total += sizes[key] - len(match.group(0))
            return total

        if size(line, 0) > self.max_bytes:
            self.unresolved.append(f"substitutions of `{line.strip()[:60]}` (over the {self.max_bytes}-byte cap)")
            return line
        return self._substituted(line, 0)

    def _substituted(self, text: str, depth: int) -> str:
        def value(match: re.Match[str]) -> str:
            found = self.substitutions.get(match.group(1))
            return match.group(0) if found is None else self._substituted(found, depth + 1) if depth < 2 else found

        return _SUBSTITUTION.sub(value, text)

    def _locate(
        self, target: str, kind: str, source: str, depth: int, seen: tuple[str, ...]
    ) -> tuple[Path, str] | None:
        """The file an include names and its source, when it lies under the root, within the caps; else noted."""
        if self.root is None:
            self.unresolved.append(f"{target} (no knowledge root to resolve it against)")
            return None
        root = self.root
        for candidate in _include_candidates(target, kind, source, root):
            try:
                path = candidate.resolve(strict=True)
            except (OSError, RuntimeError):
                continue
            if not path.is_relative_to(root) or not path.is_file() or is_hidden(path.relative_to(root)):
                continue
            name = path.relative_to(root).as_posix()
            if name in seen or depth >= MAX_INCLUDE_DEPTH:
                self.unresolved.append(f"{target} (included from itself or over {MAX_INCLUDE_DEPTH} levels deep)")
                return None
            try:
                too_large = path.stat().st_size > self.max_bytes
            except OSError as err:
                self.unresolved.append(f"{target} ({err.strerror or err})")
                return None
            if too_large:
                self.unresolved.append(f"{target} (over the {self.max_bytes}-byte cap)")
                return None
            return path, name
        self.unresolved.append(f"{target} (not found under the knowledge root)")
        return None

    def _load(
        self, target: str, kind: str, source: str, depth: int, seen: tuple[str, ...]
    ) -> tuple[Path, str, str] | None:
        """The file an include names, its source and its text, recorded as included; None (noted) when unreadable."""
        located = self._locate(target, kind, source, depth, seen)
        if located is None:
            return None
        path, name = located
        try:
            text = path.read_bytes().decode("utf-8-sig").replace("\r\n", "\n")
        except (OSError, UnicodeDecodeError) as err:
            self.unresolved.append(f"{target} ({getattr(err, 'strerror', None) or err})")
            return None
        self.included.append(name)
        return path, name, text

    def _read(self, target: str, kind: str, source: str, depth: int, seen: tuple[str, ...]) -> str | None:
        """The body of the file an include names (`kind`: `include`, `include_relative`, `code` or '' for Hugo's)."""
        loaded = self._load(target, kind, source, depth, seen)
        if loaded is None:
            return None
        path, name, text = loaded
        self.whole.append(name)
        if kind == "code":  # source code: a code block, never read for front matter or includes
            return _code_block(text, CODE_LANGUAGES.get(path.suffix, ""))
        return self._markdown(text, target, name, depth, seen)

    def _read_docsify(self, target: str, options: str, source: str, depth: int, seen: tuple[str, ...]) -> str | None:
        """
        What Docsify's `[x](target ':include options')` embeds: a markdown file's body, or a file as code, only the
        part between its `/// [name]` lines with `:fragment=name`; None for a page or a medium (shown, not text).
        """
        kind = _docsify_kind(target, options)
        fragment = _DOCSIFY_FRAGMENT.search(options)
        if kind == "shown":
            return None
        if kind == "code":
            target = target.lstrip("/")
        if kind != "code" or fragment is None:
            return self._read(target, kind, source, depth, seen)
        loaded = self._load(target, kind, source, depth, seen)
        if loaded is None:
            return None
        path, name, text = loaded
        part = _docsify_fragment(text, fragment.group(1))
        if part is None:  # no such fragment: the whole file rather than nothing
            self.whole.append(name)
        return _code_block(text if part is None else part, CODE_LANGUAGES.get(path.suffix, ""))

    def _markdown(self, text: str, target: str, name: str, depth: int, seen: tuple[str, ...]) -> str | None:
        """An included markdown file's body, its own includes expanded."""
        try:
            _, body, _ = split_frontmatter(text, *self.caps)
        except FrontmatterError as err:
            self.included.remove(name)
            self.unresolved.append(f"{target} ({err})")
            return None
        return self.expand(body, name, depth + 1, (*seen, name))[0].strip("\n")

    def _read_mdbook(self, match: re.Match[str], in_code: bool, source: str, depth: int, seen: tuple[str, ...]) -> str:
        """
        What an mdBook directive shows: `include` and `rustdoc_include` the file's text (the part a line range or an
        anchor names), `playground` the file as a Rust code block (inside a code block, its text), `title` nothing.
        """
        name, argument = match.group("name"), (match.group("arg") or "").strip()
        if name == "title" or not argument:
            return ""
        target, _, part = argument.split()[0].partition(":")
        loaded = self._load(target, "include_relative", source, depth, seen)
        if loaded is None:
            return match.group(0)
        path, included, text = loaded
        if not part:
            self.whole.append(included)
        text = _mdbook_part(text, part)
        if name == "include" and not in_code and path.suffix in (".md", ".markdown"):
            return self._markdown(text, target, included, depth, seen) or ""
        if name == "playground" and not in_code:
            return _code_block(text, "rust")
        return text.strip("\n")

    def expand(
        self, body: str, source: str, depth: int = 0, seen: tuple[str, ...] = ()
    ) -> tuple[str, list[tuple[int, int]]]:
        """
        The body with every resolvable include replaced by the included file's body (an unresolvable one stays for
        the markup cleaner to drop), and, per output line, the body line it came from and whether it is the page's own.

        :returns: The text and `[(body_line, own)]` with `own` 1 for the page's lines and 0 for included ones.
        """
        out: list[str] = []
        origin: list[tuple[int, int]] = []
        fence = ""
        mdx = ""  # an open mdx-code-block: MDX the site renders, so its partials are shown
        partials = dict(_MDX_PARTIAL.findall(body))
        lines = body.split("\n")
        skip_to = -1  # the closing line of a MyST include directive already expanded
        raw = False  # inside a Liquid `raw` block: an include there is an example, shown as written
        for number, line in enumerate(lines):
            if number <= skip_to:
                continue
            if not fence and (raw or ("raw" in line and RAW_OPEN.search(line))):
                raw = _raw_after(line, raw)
                out.append(line)
                origin.append((number, 1))
                continue
            if "{{#" in line and _MDBOOK_ANY.search(line):  # mdBook expands its directives in code blocks too
                pieces = self._expand_mdbook(line, bool(fence), source, depth, seen or (self.source,)).split("\n")
                out.extend(pieces)
                origin.extend((number, int(len(pieces) == 1)) for _ in pieces)  # one line: still the page's own
                continue
            shown = _mdx_component(line, partials)
            rendered = MDX_CODE_BLOCK.match(line)
            if fence:
                fence = "" if closes_fence(line, fence) else fence
            elif mdx and closes_fence(line, mdx):
                mdx = ""
            elif rendered:
                mdx = rendered.group(1)
            elif (directive := _MYST_INCLUDE.match(line)) and (
                block := self._myst_include(directive, lines, number, source, depth, seen or (self.source,))
            ):
                end, included = block
                if included is None:  # left as written, for the cleaner to hide: its lines are the page's own
                    out.extend(lines[number : end + 1])
                    origin.extend((n, 1) for n in range(number, end + 1))
                else:
                    pieces = included.split("\n")
                    out.extend(pieces)
                    origin.extend((number, 0) for _ in pieces)
                skip_to = end
                continue
            elif opening_fence(line):
                fence = opening_fence(line)
            elif shown:
                target = partials[shown]
                kind = "" if target.startswith("/") else "include_relative"  # `/`: the site's root, as Hugo's
                included = self._read(target, kind, source, depth, seen or (self.source,))
                pieces = (line if included is None else included).split("\n")
                out.extend(pieces)
                origin.extend((number, 0) for _ in pieces)
                continue
            elif self.substitutions and "{{" in line and _SUBSTITUTION.search(line):
                pieces = self._substitute(line).strip("\n").split("\n")
                out.extend(pieces)
                origin.extend((number, int(len(pieces) == 1)) for _ in pieces)
                continue
            elif ("{" in line or "8<" in line or ":include" in line) and _INCLUDE.search(line):
                pieces = self._expand_line(line, source, depth, seen or (self.source,))
                out.extend(pieces)
                origin.extend((number, 0) for _ in pieces)
                continue
            out.append(line)
            origin.append((number, 1))
        return "\n".join(out), origin

    def _myst_include(
        self, opened: re.Match[str], lines: list[str], start: int, source: str, depth: int, seen: tuple[str, ...]
    ) -> tuple[int, str | None] | None:
        """
        A MyST `{include}` or `{literalinclude}` directive at `start`: its closing line and what it shows (None: not
        resolved, the directive stays for the cleaner to hide); None when it is not closed.
        """
        fence = opened.group("fence")
        end = next((n for n in range(start + 1, len(lines)) if closes_directive(lines[n], fence)), None)
        if end is None:
            return None
        options = dict(_MYST_OPTION_VALUE.findall("\n".join(lines[start + 1 : end])))
        target = opened.group("target")
        loaded = self._load(target, "", source, depth, seen)
        if loaded is None:
            return end, None
        path, name, text = loaded
        if not _MYST_PART_OPTIONS.intersection(options):
            self.whole.append(name)
        text = _myst_part(text, options)
        if opened.group("name") == "literalinclude" or "literal" in options:
            language = options.get("language") or options.get("code") or CODE_LANGUAGES.get(path.suffix, "")
            return end, _code_block(text, language.strip())
        return end, self._markdown(text, target, name, depth, seen) or ""

    def _expand_mdbook(self, line: str, in_code: bool, source: str, depth: int, seen: tuple[str, ...]) -> str:
        expanded = _MDBOOK.sub(lambda m: self._read_mdbook(m, in_code, source, depth, seen), line)
        return _MDBOOK_ESCAPED.sub("{{#", expanded)  # `\{{#include x}}` shows the directive itself

    def _expand_line(self, line: str, source: str, depth: int, seen: tuple[str, ...]) -> list[str]:
        text = ""
        position = 0
        for match in _INCLUDE.finditer(line):
            code = match.group("code") or match.group("sample")
            target = match.group("hugo") or match.group("jekyll") or match.group("snippet") or code
            kind = "code" if code else match.group("kind") or ""
            if match.group("docsify"):
                included = self._read_docsify(match.group("docsify"), match.group("options"), source, depth, seen)
            else:
                included = self._read(target, kind, source, depth, seen)
            text += line[position : match.start()] + (match.group(0) if included is None else f"\n{included}\n")
            position = match.end()
        return (text + line[position:]).split("\n")


def _raw_after(line: str, raw: bool) -> bool:
    """Whether a Liquid `raw` block is open after this line (`raw`: whether one was before it)."""
    opened = None if raw else RAW_OPEN.search(line)
    return RAW_CLOSE.search(line, opened.end() if opened else 0) is None


def _docsify_fragment(text: str, name: str) -> str | None:
    """The lines between a file's first two `/// [name]` (or `### [name]`) marks, the marks left out; None without."""
    parts = re.split(r"(?:///|###)[ \t]*\[" + re.escape(name) + r"\]", text)
    return parts[1] if len(parts) >= 3 else None


def _docsify_kind(target: str, options: str) -> str:
    """
    How Docsify embeds a file: markdown as markdown (beside the page, or from the site's root for `/x.md`), another
    file as code (`:type=code` makes a markdown file code too); a page or a medium (`shown`) is not text to read.
    """
    suffix = PurePosixPath(target).suffix.lower()
    if ":type=code" in options or (suffix not in _DOCSIFY_MARKDOWN and suffix not in _DOCSIFY_NOT_TEXT):
        return "code"
    if suffix in _DOCSIFY_NOT_TEXT:
        return "shown"
    return "" if target.startswith("/") else "include_relative"


def _substitutions(meta: dict[str, Any]) -> dict[str, str]:
    """A MyST page's substitutions, from its front matter (`myst: substitutions:`, or `substitutions:` as before)."""
    myst = meta.get("myst")
    given = (myst.get("substitutions") if isinstance(myst, dict) else None) or meta.get("substitutions")
    if not isinstance(given, dict):
        return {}
    return {str(k): str(v) for k, v in given.items() if isinstance(v, str | int | float)}


def _names_an_include(text: str) -> bool:
    """Whether a page's text names an include of any kind the converter resolves."""
    return any(pattern.search(text) for pattern in (_INCLUDE, _MDX_PARTIAL, _MDBOOK_ANY, _MYST_INCLUDE_ANY))


#: front matter fields that make a page's readers or time narrower than a page of its own (`included_files`)
NARROWING_FIELDS = ("access", "status", "valid_from", "valid_until")


@dataclass(frozen=True)
class _SiteConfiguration:
    """The `conf.py` a page's substitutions come from, and the files whose edit or creation may change them."""

    source: str | None  #: the nearest `conf.py` above the page, under the knowledge root (None: there is none)
    substitutions: dict[str, str]  #: its `myst_substitutions` (empty when it has none or cannot be read)
    watched: list[str]  #: where a nearer configuration could appear, and the one that is there (the files to watch)


def _conf_substitutions(page: Path, root: Path) -> _SiteConfiguration:
    """
    The `myst_substitutions` of the Sphinx `conf.py` nearest above a page, under the knowledge root: the site's own
    substitutions, which a page's front matter may override. The file is parsed, never run: only a literal value of
    the name at its top level counts.

    :returns: The configuration, its substitutions and the files to watch: a page re-indexes when its configuration
        is edited (its substitutions may come, go or be mended) or when one is created nearer to it.
    """
    found = nearest_configuration(page, root)
    given = literal_setting(found.path, "myst_substitutions") if found.path else None
    if not isinstance(given, dict):
        return _SiteConfiguration(found.source, {}, found.watched)
    substitutions = {str(k): str(v) for k, v in given.items() if isinstance(v, str | int | float)}
    return _SiteConfiguration(found.source, substitutions, found.watched)


#: the options of a MyST include that show only part of the file
_MYST_PART_OPTIONS = frozenset(("start-line", "end-line", "lines", "start-after", "end-before", "start-at", "end-at"))


def _is_number(text: str) -> bool:
    """A line number as a page writes one: ASCII digits (`²` is a digit to `isdigit`, not to `int`), at most 18."""
    return text.isascii() and text.isdigit() and len(text) <= 18


def _myst_part(text: str, options: dict[str, str]) -> str:
    """
    The part of a file a MyST include's options name: `start-line`/`end-line` (Python slices), `lines` (`1,3,5-7`,
    1-based), `start-after`/`end-before` and `start-at`/`end-at` (the first line holding the text).
    """
    lines = text.split("\n")
    with contextlib.suppress(ValueError):
        lines = lines[int(options.get("start-line") or 0) : int(options["end-line"]) if "end-line" in options else None]
    if options.get("lines"):
        wanted: list[int] = []
        for piece in options["lines"].split(","):
            first, _, last = piece.strip().partition("-")
            if _is_number(first) and (not last or _is_number(last)):  # bounded by the file: `1-999999999` is its end
                wanted.extend(range(int(first), min(int(last or first), len(lines)) + 1))
        lines = [lines[n - 1] for n in wanted if 0 < n <= len(lines)]
    for key, after in (("start-after", True), ("start-at", False)):
        marker = options.get(key)
        at = next((n for n, line in enumerate(lines) if marker and marker in line), None)
        if at is not None:
            lines = lines[at + after :]
    for key, at_line in (("end-before", False), ("end-at", True)):
        marker = options.get(key)
        at = next((n for n, line in enumerate(lines) if marker and marker in line), None)
        if at is not None:
            lines = lines[: at + at_line]
    return "\n".join(lines)


def _mdbook_part(text: str, part: str) -> str:
    """
    The part of an included file an mdBook include names: `2` (line 2), `2:10`, `2:`, `:10` (1-based, inclusive), or an
    anchor's name (the lines between `ANCHOR: name` and `ANCHOR_END: name`); anchor lines themselves never show.
    """
    lines = text.strip("\n").split("\n")
    numbers = part.split(":")
    if part and all(_is_number(n) or not n for n in numbers):
        first = max(1, int(numbers[0] or 1))
        last = int(numbers[1] or len(lines)) if len(numbers) > 1 else first
        lines = lines[first - 1 : last]
    elif part:
        marks = [(n, m) for n, line in enumerate(lines) if (m := _MDBOOK_ANCHOR.search(line)) and m.group(1) == part]
        starts = [n for n, m in marks if "_END" not in m.group(0)]
        ends = [n for n, m in marks if "_END" in m.group(0)]
        start = starts[0] if starts else len(lines)
        lines = lines[start + 1 : next((n for n in ends if n > start), len(lines))]
    return "\n".join(line for line in lines if not _MDBOOK_ANCHOR.search(line))


def _mdx_component(line: str, partials: dict[str, str]) -> str:
    """The imported partial a line shows on its own (`<Intro />`), '' for none."""
    if not partials or "<" not in line:
        return ""
    shown = re.fullmatch(r"[ \t]*<([A-Z]\w*)(?:[ \t][^<>]*)?/>[ \t]*", line)
    return shown.group(1) if shown and shown.group(1) in partials else ""


def _line_map(origin: list[tuple[int, int]], first_line: int) -> list[list[int]]:
    """Compress per-line origins into segments `[output_line, file_line, step]` (step 0: every line maps to one)."""
    segments: list[list[int]] = []
    for index, (line, own) in enumerate(origin):
        file_line = first_line + line
        if segments:
            start, start_line, step = segments[-1]
            if step == own and start_line + step * (index - start) == file_line:
                continue
        segments.append([index, file_line, own])
    return segments


@component
class MarkdownKnowledgeConverter:
    """
    Converts markdown knowledge files with frontmatter into Haystack Documents, one per file.

    The content is the markdown body; the front matter (YAML `---`, TOML `+++` as Hugo writes it, or JSON) becomes the
    metadata: `id` (default: the file's source), `title` (default: the first heading outside code and comments),
    `category` (alias `domain`), `keywords`, `entities`, and any other key as is. Hugo's `include`/`readfile`
    shortcodes, Jekyll's `include`/`include_relative` tags and MkDocs' `--8<--` snippets are replaced by the body of
    the file they name (FastAPI's `{* file.py *}` lines and Hugo's `codenew`/`code_sample` examples by the file as a
    code block) when it lies under the
    knowledge root (a site's root may be a folder below it); an include the
    converter cannot resolve is reported in `warnings` (and the markup cleaner drops it). MyST substitutions
    (`{{ key }}`) come from the front matter and from the `myst_substitutions` of the nearest Sphinx `conf.py` above
    the page (parsed for a literal value, never run; listed in `included_files`, or in `watched_files` while it gives
    nothing or is not there yet: its creation or edit re-indexes the page). `line_map` says which line of the file each
    line of the content is, for the chunks' line ranges.
    Each file's `source` (its path relative to the knowledge root) and `doc_version` come with its `meta` (the indexer
    gives both; without them the source is the file name and the version the hash of the bytes). A file that cannot
    be read or parsed does not stop the run: it is reported in `failures` with its source and the reason.

    ### Usage example

    ```python
    from components.converters.markdown_knowledge_converter import MarkdownKnowledgeConverter

    converter = MarkdownKnowledgeConverter()
    result = converter.run(sources=["knowledge/alerts/disk-full.md"], meta=[{"source": "alerts/disk-full.md"}])
    print(result["documents"][0].meta["title"], result["failures"])
    ```
    """

    def __init__(
        self,
        max_file_bytes: int = MAX_FILE_BYTES,
        max_frontmatter_bytes: int = MAX_FRONTMATTER_BYTES,
        max_frontmatter_aliases: int = MAX_FRONTMATTER_ALIASES,
    ) -> None:
        """
        Create the converter.

        :param max_file_bytes: Largest file converted (a larger one is reported as failed: embedding it would hold the
            store for long).
        :param max_frontmatter_bytes: Largest frontmatter accepted.
        :param max_frontmatter_aliases: Most YAML aliases accepted in a frontmatter (a few can expand to gigabytes).
        :raises ValueError: If a cap is not positive.
        """
        for name, value in (("max_file_bytes", max_file_bytes), ("max_frontmatter_bytes", max_frontmatter_bytes)):
            if value < 1:
                msg = f"{name}={value!r} must be a positive number of bytes"
                raise ValueError(msg)
        if max_frontmatter_aliases < 0:
            msg = f"max_frontmatter_aliases={max_frontmatter_aliases!r} must be 0 or more"
            raise ValueError(msg)
        self.max_file_bytes = max_file_bytes
        self.max_frontmatter_bytes = max_frontmatter_bytes
        self.max_frontmatter_aliases = max_frontmatter_aliases

    def _convert(self, source: str | Path | ByteStream, meta: dict[str, Any]) -> Document:
        """One file's Document; raises `KnowledgeFileError` or `OSError` for a file that cannot be one."""
        return self._expanded(*self._parsed(source, meta))[0]

    def _parsed(self, source: str | Path | ByteStream, meta: dict[str, Any]) -> tuple[Document, Path | None]:
        """One file's Document before its includes are resolved, and its knowledge root."""
        if isinstance(source, ByteStream):
            data = source.data
            meta = {**source.meta, **meta}
        else:
            path = Path(source)
            size = path.stat().st_size
            if size > self.max_file_bytes:
                raise KnowledgeFileError(f"{size} bytes, over the {self.max_file_bytes}-byte cap (max_file_bytes)")
            data = path.read_bytes()
            meta = {"source": path.name, **meta}
        if len(data) > self.max_file_bytes:
            raise KnowledgeFileError(f"{len(data)} bytes, over the {self.max_file_bytes}-byte cap (max_file_bytes)")
        name = str(meta.get("source") or Path(str(meta.get("file_path") or "")).name)
        document = parse_knowledge_file(data, name, self.max_frontmatter_bytes, self.max_frontmatter_aliases)
        if meta.get("doc_version"):
            document.meta["doc_version"] = str(meta["doc_version"])
        return document, knowledge_root_of(source, name)

    def _expanded(self, document: Document, root: Path | None) -> tuple[Document, _Includes | None]:
        """
        The document with its include shortcodes resolved (`unresolved_includes` names those that were not), and
        what resolved them (None for a page that names no include nor substitution).
        """
        body = document.content or ""
        substitutions = _substitutions(document.meta)
        conf = (
            _conf_substitutions(root / str(document.meta["source"]), root)
            if root and "{{" in body and _SUBSTITUTION.search(body)
            else None
        )
        if conf is not None:  # the site's, under the page's own
            substitutions = {**conf.substitutions, **substitutions}
        # a page whose `{{ }}` stand in code only (Liquid, Helm, GitHub Actions examples) needs no configuration watched
        watched = conf.watched if conf is not None and _SUBSTITUTION.search(without_code(body)) else []
        if not (_names_an_include(body) or substitutions or watched):
            return document, None
        caps = (self.max_frontmatter_bytes, self.max_frontmatter_aliases)
        includes = _Includes(root, str(document.meta["source"]), self.max_file_bytes, caps, substitutions)
        text, origin = includes.expand(body, str(document.meta["source"]))
        if conf is not None and conf.substitutions:  # the configuration is read like an include
            includes.included.append(str(conf.source))
        meta = dict(document.meta)
        meta["line_map"] = _line_map(origin, int(meta["line_map"][0][1]))
        if includes.included:
            meta["included_files"] = sorted(set(includes.included))
        if watched := sorted(set(watched) - set(includes.included)):
            meta["watched_files"] = watched
        if includes.unresolved:
            meta["unresolved_includes"] = includes.unresolved
        return Document(content=text, meta=meta), includes

    def included_files(
        self, sources: list[Path], meta: list[dict[str, Any]], narrowing: tuple[str, ...] = NARROWING_FIELDS
    ) -> dict[str, list[str]]:
        """
        What each file shows whole of other files (its includes' includes too; not a file of which it shows only a
        line range, an anchor's part or a MyST `:lines:` part), without the documents: a file whose text names no
        include nor substitution is not parsed at all, so telling a knowledge folder's included pages costs little.

        :param sources: File paths.
        :param meta: One dict per source, with its `source` (the path relative to the knowledge root).
        :param narrowing: Front matter fields that make a page's readers or time narrower than a page of its own
            (`access`, `status`, `valid_from`, `valid_until`): a page that sets one shows none of its includes here.
        :returns: For each file that could be read, its source and the sources it shows whole (none for a file that
            cannot be converted: the run reports it).
        """

        def shown_whole(path: Path, info: dict[str, Any]) -> list[str]:
            document, root = self._parsed(path, info)
            if any(document.meta.get(field) not in (None, "", []) for field in narrowing):
                return []
            _, includes = self._expanded(document, root)
            return includes.whole if includes else []

        return scan_includes(sources, meta, self.max_file_bytes, _names_an_include, shown_whole)

    @component.output_types(documents=list[Document], failures=list[dict[str, str]], warnings=list[dict[str, str]])
    def run(
        self, sources: list[str | Path | ByteStream], meta: dict[str, Any] | list[dict[str, Any]] | None = None
    ) -> dict[str, Any]:
        """
        Convert the given files.

        :param sources: File paths, or `ByteStream`s (as a `FileTypeRouter` hands them on, their meta with them).
        :param meta: Metadata for every source (one dict), or one dict per source: `source` (the path relative to the
            knowledge root) and `doc_version` are used as such.
        :returns: `documents`: one Document per converted file; `failures`: `{"source", "reason"}` per file that
            could not be converted; `warnings`: `{"source", "reason"}` per include shortcode that was left unresolved.
        :raises ValueError: If `meta` is a list of another length than `sources`.
        """
        metas = meta if isinstance(meta, list) else [dict(meta or {})] * len(sources)
        if len(metas) != len(sources):
            msg = f"meta has {len(metas)} entries for {len(sources)} sources; give one per source, or one for all"
            raise ValueError(msg)
        documents, failures = convert_each(sources, metas, self._convert, (OSError, KnowledgeFileError))
        return {
            "documents": documents,
            "failures": failures,
            "warnings": include_warnings(documents, "include not resolved"),
        }
