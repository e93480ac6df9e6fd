from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any

from haystack import Document, component

_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
_FENCE = re.compile(r"^\s*(```|~~~)")
_SENTENCE = re.compile(r".+?(?:[.!?;]+(?=\s)\s*|[。？！；]+\s*|$)", re.DOTALL)
_CJK = re.compile(r"[\u3000-\u303f\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff00-\uffef]")


def chunk_id(source: str, chunk_index: int, doc_version: str) -> str:
    """
    Return the primary key of a chunk: derived from its source, its index and the version of its file.

    Including the version lets a re-index write the new chunks beside the old ones and switch over atomically.

    :param source: The document's path relative to the knowledge root.
    :param chunk_index: The chunk's position in the document.
    :param doc_version: The version (content hash) of the document's file.
    :returns: 32 hex characters.
    """
    return hashlib.sha256(f"{source}\x00{chunk_index}\x00{doc_version}".encode()).hexdigest()[:32]


@dataclass
class _Unit:
    text: str
    kind: str  # "block" (paragraph or list), "sentence" (continues the previous unit), or "code"


@dataclass
class _Section:
    path: list[str]
    blocks: list[tuple[str, bool]] = field(default_factory=list)  # (text, is_code)


def _split_sections(body: str) -> list[_Section]:
    sections = [_Section(path=[])]
    stack: list[tuple[int, str]] = []
    paragraph: list[str] = []
    code: list[str] | None = None
    fence = ""

    def flush_paragraph() -> None:
        text = "\n".join(paragraph).strip()
        if text:
            sections[-1].blocks.append((text, False))
        paragraph.clear()

    for line in body.split("\n"):
        fence_match = _FENCE.match(line)
        if code is not None:
            code.append(line)
            if fence_match and fence_match.group(1) == fence:
                sections[-1].blocks.append(("\n".join(code), True))
                code = None
            continue
        if fence_match:
            flush_paragraph()
            code, fence = [line], fence_match.group(1)
            continue
        heading = _HEADING.match(line)
        if heading:
            flush_paragraph()
            level = len(heading.group(1))
            while stack and stack[-1][0] >= level:
                stack.pop()
            stack.append((level, heading.group(2).strip()))
            sections.append(_Section(path=[h for _, h in stack]))
        elif line.strip():
            paragraph.append(line)
        else:
            flush_paragraph()
    flush_paragraph()
    if code is not None:  # an unclosed fence still stays one block
        sections[-1].blocks.append(("\n".join(code), True))
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

    def _units(self, section: _Section) -> list[_Unit]:
        units: list[_Unit] = []
        for text, is_code in section.blocks:
            if is_code:
                units.append(_Unit(text, "code"))
            elif self._size(text) <= self.max_chars:
                units.append(_Unit(text, "block"))
            else:
                sentences = self._sentences(text)
                units.append(_Unit(sentences[0], "block"))
                units.extend(_Unit(sentence, "sentence") for sentence in sentences[1:])
        return units

    def _overlap(self, units: list[_Unit]) -> list[_Unit]:
        tail: list[_Unit] = []
        budget = self.overlap_chars
        for unit in reversed(units):
            if unit.kind == "code":
                break
            for sentence in reversed(self._sentences(unit.text)):
                if self._size(sentence) > budget:
                    return tail
                tail.insert(0, _Unit(sentence, "sentence"))
                budget -= self._size(sentence)
            if unit.kind == "block":  # overlap never reaches past the paragraph it started in
                break
        return tail

    @staticmethod
    def _join(units: list[_Unit]) -> str:
        parts = [units[0].text] + [("" if u.kind == "sentence" else "\n\n") + u.text for u in units[1:]]
        return "".join(parts).strip()

    def _pack(self, section: _Section) -> list[str]:
        chunks: list[str] = []
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

    def _chunk_document(self, document: Document) -> list[Document]:
        meta = document.meta
        title = str(meta.get("title") or "")
        source = str(meta.get("source") or document.id)
        version = str(meta.get("doc_version") or "")
        pieces: list[tuple[str, str]] = []
        for section in _split_sections(document.content or ""):
            trail = [title] if title else []
            trail += [h for h in section.path if h != title]
            breadcrumb = " > ".join(trail)
            pieces.extend((breadcrumb, text) for text in self._pack(section))
        if not pieces and (document.content or "").strip():
            # a document of headings only is still findable by them
            pieces = [(title, (document.content or "").strip())]
        chunks = []
        for index, (breadcrumb, text) in enumerate(pieces):
            chunk_meta: dict[str, Any] = {
                **meta,
                "source": source,
                "doc_id": str(meta.get("doc_id") or source),
                "breadcrumb": breadcrumb,
                "chunk_index": index,
                "total_chunks": len(pieces),
                "content_hash": hashlib.sha256(text.encode()).hexdigest()[:16],
                "doc_version": version,
            }
            chunks.append(Document(id=chunk_id(source, index, version), content=text, meta=chunk_meta))
        return chunks

    @component.output_types(documents=list[Document])
    def run(self, documents: list[Document]) -> dict[str, Any]:
        """
        Chunk the documents.

        :param documents: Whole markdown documents (content = body), as the loader produces them.
        :returns: `documents`: the chunks of all documents, in order.
        """
        return {"documents": [chunk for doc in documents for chunk in self._chunk_document(doc)]}
