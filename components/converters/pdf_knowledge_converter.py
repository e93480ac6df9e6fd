from __future__ import annotations

import io
import math
import re
from pathlib import Path
from typing import Any

from haystack import Document, component, logging
from haystack.components.converters.utils import normalize_metadata
from haystack.dataclasses import ByteStream
from haystack.lazy_imports import LazyImport

from components.core.conversion import check_max_file_bytes, convert_each, read_capped

with LazyImport("Run 'pip install pypdf'") as pypdf_import:
    from pypdf import PdfReader
    from pypdf.errors import PyPdfError

logger = logging.getLogger(__name__)

#: default cap of one file
MAX_FILE_BYTES = 64 * 1024 * 1024

#: titles that word processors and converters write for the user: they name no subject
_PLACEHOLDER_TITLE = re.compile(
    r"^(?:untitled(?:\s+document)?|document\d*|slide\s*\d+|microsoft\s+\w+\s+-\s+.*|.*\.(?:docx?|pptx?|xlsx?|pdf|tex|"
    r"dvi|odt|rtf|indd|md|html?))$",
    re.IGNORECASE,
)
_DIGITS = re.compile(r"\d+")
_OUTLINE_DEPTH = 6


def pdf_title(reader: PdfReader) -> str:
    """
    The document's title property, unless it is a placeholder such as `Microsoft Word - draft.docx` or `Untitled`.

    :param reader: An open PDF.
    :returns: The title, whitespace collapsed; '' for none.
    """
    try:
        title = reader.metadata.title if reader.metadata is not None else None
    except (PyPdfError, ValueError, KeyError):
        return ""
    title = " ".join(str(title or "").split())
    return "" if not title or _PLACEHOLDER_TITLE.match(title) else title


def pdf_outline(reader: PdfReader) -> list[list[int | str]]:
    """
    The document's outline (its bookmarks), in reading order.

    An entry whose destination cannot be resolved to a page is left out: a heading must know where it starts.

    :param reader: An open PDF.
    :returns: `[page, level, title]` per entry: the 1-based page it points at, its depth (1 for a top entry, at most 6).
    """
    entries: list[list[int | str]] = []

    def walk(items: list[Any], level: int) -> None:
        for item in items:
            if isinstance(item, list):
                walk(item, min(level + 1, _OUTLINE_DEPTH))
                continue
            title = " ".join(str(getattr(item, "title", "") or "").split())
            try:
                page = reader.get_destination_page_number(item)
            except (PyPdfError, ValueError, KeyError, AttributeError):
                page = None
            if title and page is not None and page >= 0:
                entries.append([page + 1, level, title])

    try:
        walk(reader.outline, 1)
    except (PyPdfError, ValueError, KeyError, RecursionError):
        logger.warning("The PDF's outline could not be read; its pages are chunked without headings")
        return []
    return entries


def without_page_furniture(pages: list[str], edge_lines: int = 2) -> list[str]:
    """
    Pages without their running headers and footers: lines at a page's top or bottom that recur on most pages.

    A line counts as the same on every page when only its numbers differ (`Page 3 of 9`, a footer ending in the page
    number). Only lines within `edge_lines` of a page's top or bottom are considered, and only in documents of three
    pages or more, so that body text that happens to repeat stays.

    :param pages: The text of each page.
    :param edge_lines: How many lines at each edge of a page may be furniture.
    :returns: The pages without those lines.
    """
    if len(pages) < 3:
        return list(pages)
    split = [page.split("\n") for page in pages]

    def key(line: str) -> str:
        return _DIGITS.sub("0", " ".join(line.split())).casefold()

    def edges(lines: list[str]) -> set[int]:
        count = len(lines)
        return {i for i in range(count) if i < edge_lines or i >= count - edge_lines}

    seen: dict[str, int] = {}
    for lines in split:
        for found in {key(lines[i]) for i in edges(lines) if lines[i].strip()}:
            seen[found] = seen.get(found, 0) + 1
    recurring = {k for k, n in seen.items() if n >= max(3, math.ceil(len(pages) / 2))}
    if not recurring:
        return list(pages)
    return [
        "\n".join(line for i, line in enumerate(lines) if not (i in edges(lines) and key(line) in recurring))
        for lines in split
    ]


@component
class PdfKnowledgeConverter:
    """
    Converts PDF files into paged text Documents that know their title, their outline and nothing of page furniture.

    The text is extracted page by page with pypdf and the pages are joined by form feeds, so that every chunk knows
    its pages (as Haystack's `PyPDFToDocument` does). On top of that text, this converter gives what a breadcrumb and
    a citation need: `title` is the PDF's title property (a placeholder such as `Microsoft Word - x.docx` is ignored,
    and metadata given by the caller wins), `outline` holds the bookmarks as `[page, level, title]` entries (the
    chunker starts a heading section at the line of the page that reads as the entry), and running headers and
    footers (lines at a page's edge that recur on most pages, numbers aside) are removed. `markup` is `text`: a
    PDF's lines are never read as markdown. A file that cannot be read does not stop the run: it is reported in
    `failures`.

    ### Usage example

    ```python
    from components.converters.pdf_knowledge_converter import PdfKnowledgeConverter

    result = PdfKnowledgeConverter().run(sources=["knowledge/manuals/guide.pdf"], meta={"source": "guide.pdf"})
    print(result["documents"][0].meta["outline"][:3], result["failures"])
    ```
    """

    def __init__(self, max_file_bytes: int = MAX_FILE_BYTES, remove_page_furniture: bool = True) -> None:
        """
        Create the converter.

        :param max_file_bytes: Largest file converted (a larger one is reported as failed).
        :param remove_page_furniture: Remove running headers and footers (lines at a page's top or bottom that recur
            on most pages of a document of three pages or more).
        :raises ValueError: If the cap is not positive.
        """
        check_max_file_bytes(max_file_bytes)
        pypdf_import.check()
        self.max_file_bytes = max_file_bytes
        self.remove_page_furniture = remove_page_furniture

    def _convert(self, source: str | Path | ByteStream, meta: dict[str, Any]) -> Document:
        stream = read_capped(source, self.max_file_bytes)
        try:
            reader = PdfReader(io.BytesIO(stream.data))
            pages = [page.extract_text(extraction_mode="plain") or "" for page in reader.pages]
        except (PyPdfError, ValueError, KeyError, TypeError) as err:
            msg = f"not a readable PDF ({type(err).__name__}: {err})"
            raise ValueError(msg) from err
        if self.remove_page_furniture:
            pages = without_page_furniture(pages)
        merged = {**stream.meta, **meta}
        title = pdf_title(reader)
        if title and not merged.get("title"):
            merged["title"] = title
        merged.update(markup="text", page_count=len(pages), outline=pdf_outline(reader))
        return Document(content="\f".join(pages), meta=merged)

    @component.output_types(documents=list[Document], failures=list[dict[str, str]])
    def run(
        self, sources: list[str | Path | ByteStream], meta: dict[str, Any] | list[dict[str, Any]] | None = None
    ) -> dict[str, Any]:
        """
        Convert the given files.

        :param sources: File paths or `ByteStream`s.
        :param meta: Metadata for every source (one dict), or one dict per source.
        :returns: `documents`: one Document per converted file; `failures`: `{"source", "reason"}` per file that
            could not be converted.
        """
        documents, failures = convert_each(sources, normalize_metadata(meta, len(sources)), self._convert)
        return {"documents": documents, "failures": failures}
