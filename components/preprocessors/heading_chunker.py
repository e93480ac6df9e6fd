from __future__ import annotations

import hashlib
import re
import unicodedata
from dataclasses import dataclass, field
from typing import Any

from haystack import Document, component

from components.core.citation import chunk_id
from components.core.location import file_line
from components.core.markdown_text import closes_fence, opening_fence, plain_heading

_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
_SENTENCE = re.compile(r".+?(?:[.!?;]+(?=\s)\s*|[。？！；]+\s*|$)", re.DOTALL)
_CJK = re.compile(r"[\u3000-\u303f\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff00-\uffef]")
#: a heading's number, which an outline entry and the page's line may write differently (`2.1`, `2.1.`, `IV.`, `B)`)
_NUMBERING = re.compile(r"^(?:\d+(?:\.\d+)*\.?|[ivxlc]+\.|[a-z][.)])\s+", re.IGNORECASE)
#: meta of a whole document that its chunks do not carry
_DOCUMENT_ONLY_META = ("line_map", "outline", "page_count")


@dataclass
class _Unit:
    text: str
    kind: str  # "block" (paragraph or list), "sentence" (continues the previous unit), "code" or "table"
    first: int = 0  # the lines of the document it spans (0-based)
    last: int = 0


@dataclass
class _Section:
    path: list[str]
    blocks: list[_Unit] = field(default_factory=list)


@dataclass
class _Heading:
    level: int
    title: str
    lines: int  # the document lines that are the heading's own text (0: it starts at its page's first line)


def _heading_key(text: str) -> str:
    """A heading as compared: its words, case and numbering aside (`2.1 Setup` and `SETUP` are one heading)."""
    text = _NUMBERING.sub("", unicodedata.normalize("NFKC", text).casefold().strip())
    return " ".join(re.findall(r"\w+", text))


def _outline_headings(lines: list[str], pages: list[int], outline: list[Any]) -> dict[int, list[_Heading]]:
    """
    Where the entries of a paged document's outline (`[page, level, title]`) start: at the line of their page that
    reads as the entry (alone, or joined with the next line: a title may wrap), else at the page's first line. An
    entry of a page without text is left out.
    """
    page_lines: dict[int, list[int]] = {}
    for number, page in enumerate(pages):
        if lines[number].strip() and lines[number] != "\f":
            page_lines.setdefault(page, []).append(number)
    starts: dict[int, list[_Heading]] = {}
    last_page, after = 0, -1
    for page, level, title in ((int(e[0]), int(e[1]), str(e[2])) for e in outline):
        # two entries of one page come in its reading order: the second is looked for after the first
        candidates = [n for n in page_lines.get(page, []) if page != last_page or n > after]
        if not candidates and page == last_page and after >= 0:  # the page's text ends with the entry before
            candidates = [after]
        if not candidates:
            continue
        key = _heading_key(title)
        at, size = candidates[0], 0
        for number in candidates:
            if key and _heading_key(lines[number]) == key:
                at, size = number, 1
                break
            wrapped = number + 1 in candidates and _heading_key(f"{lines[number]} {lines[number + 1]}") == key
            if key and wrapped:
                at, size = number, 2
                break
        starts.setdefault(at, []).append(_Heading(max(1, min(level, 6)), title, size))
        last_page, after = page, at + max(size, 1) - 1
    return starts


_TABLE_RULE = re.compile(r"^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$")


def _is_table(lines: list[str]) -> bool:
    """A markdown table: a header row, a rule of dashes, rows; every line with a `|`."""
    return len(lines) >= 2 and "|" in lines[0] and bool(_TABLE_RULE.match(lines[1])) and all("|" in x for x in lines)


def _split_sections(
    body: str, headings: bool = True, outline: dict[int, list[_Heading]] | None = None
) -> list[_Section]:
    """
    The document's heading sections and their blocks, each block with its line span. `headings=False` (plain text):
    no line is a heading or a fence. A form feed (a PDF's page break) ends a paragraph. `outline`: headings that
    start at given lines, whose own lines are no text (a PDF's bookmarks).
    """
    sections = [_Section(path=[])]
    stack: list[tuple[int, str]] = []
    paragraph: list[str] = []
    start = 0
    code: list[str] | None = None
    fence = ""
    heading_until = -1

    def flush_paragraph() -> None:
        text = "\n".join(paragraph).strip()
        if text:
            kind = "table" if _is_table(paragraph) else "block"
            sections[-1].blocks.append(_Unit(text, kind, start, start + len(paragraph) - 1))
        paragraph.clear()

    def open_section(level: int, title: str) -> None:
        while stack and stack[-1][0] >= level:
            stack.pop()
        stack.append((level, title))
        sections.append(_Section(path=[h for _, h in stack]))

    for number, line in enumerate(body.split("\n")):
        for given in (outline or {}).get(number, []):
            flush_paragraph()
            open_section(given.level, given.title)
            heading_until = max(heading_until, number + given.lines - 1)
        if number <= heading_until:
            continue
        if code is not None:
            code.append(line)
            if closes_fence(line, fence):
                sections[-1].blocks.append(_Unit("\n".join(code), "code", number - len(code) + 1, number))
                code = None
            continue
        opened = opening_fence(line) if headings else ""
        if opened:
            flush_paragraph()
            code, fence = [line], opened
            continue
        heading = _HEADING.match(line) if headings else None
        if heading:
            flush_paragraph()
            open_section(len(heading.group(1)), plain_heading(heading.group(2)))
        elif line.strip() and line != "\f":
            if not paragraph:
                start = number
            paragraph.append(line)
        else:
            flush_paragraph()
    flush_paragraph()
    if code is not None:  # an unclosed fence still stays one block
        last = body.count("\n")
        sections[-1].blocks.append(_Unit("\n".join(code), "code", last - len(code) + 1, last))
    return [s for s in sections if s.blocks]


@component
class HeadingChunker:
    """
    Splits markdown documents at headings into bounded, overlapping chunks that carry a breadcrumb.

    Each heading section becomes one or more chunks of at most `max_chars` (CJK characters weigh `cjk_weight`,
    since they cost the embedding model several times more tokens than Latin letters). Paragraphs are packed whole;
    a long paragraph is split at sentence ends (`. ! ? 。 ？ ！`). A fenced code block is never cut, even if it alone
    exceeds the bound. Consecutive chunks of one section overlap by up to `overlap_chars` of trailing sentences.
    Chunks carry `doc_id`, `source`, `title`, `breadcrumb`, `category`, `keywords`, `entities`, `chunk_index`,
    `total_chunks`, `content_hash` and `doc_version` in their meta.

    ### Usage example

    ```python
    from haystack import Document
    from components.preprocessors.heading_chunker import HeadingChunker

    doc = Document(content="# Disk Full\\n## Diagnosis\\nRun df -h.", meta={"source": "a.md", "title": "Disk Full"})
    chunks = HeadingChunker().run([doc])["documents"]
    print(chunks[0].meta["breadcrumb"])  # Disk Full > Diagnosis
    ```
    """

    def __init__(self, max_chars: int = 1200, overlap_chars: int = 150, cjk_weight: int = 3) -> None:
        """
        Create the chunker.

        :param max_chars: Upper bound of a chunk's weighted length.
        :param overlap_chars: Upper bound of the overlap between consecutive chunks of one section.
        :param cjk_weight: Weight of one CJK character in the length.
        :raises ValueError: If a bound is out of range.
        """
        if max_chars < 100:
            msg = f"max_chars={max_chars!r} is too small; use at least 100 (default 1200)"
            raise ValueError(msg)
        if not 0 <= overlap_chars < max_chars // 2:
            msg = f"overlap_chars={overlap_chars!r} must be between 0 and max_chars/2 ({max_chars // 2})"
            raise ValueError(msg)
        if cjk_weight < 1:
            msg = f"cjk_weight={cjk_weight!r} must be at least 1"
            raise ValueError(msg)
        self.max_chars = max_chars
        self.overlap_chars = overlap_chars
        self.cjk_weight = cjk_weight

    def _size(self, text: str) -> int:
        return len(text) + (self.cjk_weight - 1) * len(_CJK.findall(text))

    def _sentences(self, text: str) -> list[str]:
        """Split at sentence ends; the pieces keep their trailing spaces, so joining them gives back `text`."""
        pieces: list[str] = []
        for match in _SENTENCE.finditer(text):
            rest = match.group(0)
            while self._size(rest) > self.max_chars:  # no sentence end in sight: cut by length
                cut = max(1, len(rest) * self.max_chars // self._size(rest))
                pieces.append(rest[:cut])
                rest = rest[cut:]
            if rest:
                pieces.append(rest)
        return pieces

    def _table_parts(self, table: _Unit) -> list[_Unit]:
        """A table over the bound in parts of whole rows, each part repeating the header and its rule."""
        lines = table.text.split("\n")
        head, rows = lines[:2], lines[2:]
        head_size = self._size("\n".join(head))
        parts: list[_Unit] = []
        current: list[str] = []
        first = table.first + 2
        for offset, row in enumerate(rows):
            if current and head_size + self._size("\n".join([*current, row])) + 1 > self.max_chars:
                parts.append(_Unit("\n".join([*head, *current]), "table", first, table.first + 1 + offset))
                current, first = [], table.first + 2 + offset
            current.append(row)
        if current or not parts:
            parts.append(_Unit("\n".join([*head, *current]), "table", first, table.last))
        return parts

    def _units(self, section: _Section) -> list[_Unit]:
        units: list[_Unit] = []
        for block in section.blocks:
            if block.kind == "code" or self._size(block.text) <= self.max_chars:
                units.append(block)
            elif block.kind == "table":
                units.extend(self._table_parts(block))
            else:
                offset = 0
                for index, sentence in enumerate(self._sentences(block.text)):
                    first = block.first + block.text.count("\n", 0, offset)
                    offset += len(sentence)
                    last = block.first + block.text.count("\n", 0, offset)
                    units.append(_Unit(sentence, "block" if index == 0 else "sentence", first, last))
        return units

    def _overlap(self, units: list[_Unit]) -> list[_Unit]:
        tail: list[_Unit] = []
        budget = self.overlap_chars
        for unit in reversed(units):
            if unit.kind in ("code", "table"):
                break
            end = len(unit.text)
            for sentence in reversed(self._sentences(unit.text)):
                if self._size(sentence) > budget:
                    return tail
                end -= len(sentence)
                line = unit.first + unit.text.count("\n", 0, end)
                tail.insert(0, _Unit(sentence, "sentence", line, line + sentence.count("\n")))
                budget -= self._size(sentence)
            if unit.kind == "block":  # overlap never reaches past the paragraph it started in
                break
        return tail

    @staticmethod
    def _join(units: list[_Unit]) -> _Unit:
        parts = [units[0].text] + [("" if u.kind == "sentence" else "\n\n") + u.text for u in units[1:]]
        placed = [u for u in units if u.first >= 0] or units  # the description lead has no line of its own
        return _Unit("".join(parts).strip(), "block", min(u.first for u in placed), max(u.last for u in placed))

    def _pack(self, section: _Section) -> list[_Unit]:
        chunks: list[_Unit] = []
        current: list[_Unit] = []
        size = 0
        fresh = 0  # units in `current` that are not overlap
        for unit in self._units(section):
            unit_size = self._size(unit.text) + 2
            if current and fresh and size + unit_size > self.max_chars:
                chunks.append(self._join(current))
                current = self._overlap(current)
                size = sum(self._size(u.text) + 2 for u in current)
                fresh = 0
                if size + unit_size > self.max_chars:
                    current, size = [], 0
            current.append(unit)
            size += unit_size
            fresh += 1
        if current and fresh:
            chunks.append(self._join(current))
        return chunks

    @staticmethod
    def _with_description(sections: list[_Section], description: str, content: str, title: str) -> list[_Section]:
        """
        The page's description as its lead paragraph, unless the text already says it: before the page's first
        words when they stand under no heading or only under the title (a page's `# Title`), else on its own.
        """
        if not description or " ".join(description.split()) in " ".join(content.split()):
            return sections
        lead = _Unit(description, "block", -1, -1)
        if sections and all(heading == title for heading in sections[0].path):
            return [_Section(path=[], blocks=[lead, *sections[0].blocks]), *sections[1:]]
        return [_Section(path=[], blocks=[lead]), *sections]

    @staticmethod
    def _location(meta: dict[str, Any], chunk: _Unit, pages: list[int] | None) -> dict[str, int]:
        """Where a chunk is: its pages (a paged document), or its lines in the file (a text format)."""
        if pages is not None:
            return {"page_start": pages[max(chunk.first, 0)], "page_end": pages[max(chunk.last, 0)]}
        line_map = meta.get("line_map", [[0, 1, 1]] if meta.get("markup") == "text" else None)
        if not line_map or chunk.first < 0:
            return {}
        return {"line_start": file_line(line_map, chunk.first), "line_end": file_line(line_map, chunk.last)}

    def _chunk_document(self, document: Document) -> list[Document]:
        meta = {k: v for k, v in document.meta.items() if k not in _DOCUMENT_ONLY_META}
        title = str(meta.get("title") or "")
        source = str(meta.get("source") or document.id)
        version = str(meta.get("doc_version") or "")
        content = document.content or ""
        pages: list[int] | None = None
        outline: dict[int, list[_Heading]] = {}
        if "\f" in content or document.meta.get("page_count"):  # a paged document (PDF): every line knows its page
            content = content.replace("\f", "\n\f\n")
            pages, page = [], 1
            for line in content.split("\n"):
                page += line == "\f"
                pages.append(page)
            outline = _outline_headings(content.split("\n"), pages, document.meta.get("outline") or [])
        sections = _split_sections(content, headings=meta.get("markup", "markdown") != "text", outline=outline)
        sections = self._with_description(sections, str(meta.get("description") or ""), content, title)
        pieces: list[tuple[str, _Unit]] = []
        for section in sections:
            trail = [title] if title else []
            trail += [h for h in section.path if h != title]
            breadcrumb = " > ".join(trail)
            pieces.extend((breadcrumb, chunk) for chunk in self._pack(section))
        if not pieces and content.strip():
            # a document of headings only is still findable by them
            pieces = [(title, _Unit(content.strip(), "block", 0, content.count("\n")))]
        chunks = []
        for index, (breadcrumb, piece) in enumerate(pieces):
            chunk_meta: dict[str, Any] = {
                **meta,
                "source": source,
                "doc_id": str(meta.get("doc_id") or source),
                "breadcrumb": breadcrumb,
                "chunk_index": index,
                "total_chunks": len(pieces),
                "content_hash": hashlib.sha256(piece.text.encode()).hexdigest()[:16],
                "doc_version": version,
                **self._location(document.meta, piece, pages),
            }
            chunks.append(Document(id=chunk_id(source, index, version), content=piece.text, meta=chunk_meta))
        return chunks

    @component.output_types(documents=list[Document])
    def run(self, documents: list[Document]) -> dict[str, Any]:
        """
        Chunk the documents.

        :param documents: Whole markdown documents (content = body), as the loader produces them.
        :returns: `documents`: the chunks of all documents, in order.
        """
        return {"documents": [chunk for doc in documents for chunk in self._chunk_document(doc)]}
