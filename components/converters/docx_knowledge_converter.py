from __future__ import annotations

import io
import re
import zipfile
from pathlib import Path
from typing import Any

from haystack import Document, component, logging
from haystack.components.converters.utils import normalize_metadata
from haystack.dataclasses import ByteStream
from haystack.lazy_imports import LazyImport

from components.core.conversion import check_max_file_bytes, convert_each, read_capped

with LazyImport("Run 'pip install python-docx'") as docx_import:
    import docx
    from docx.table import Table
    from docx.text.paragraph import Paragraph

logger = logging.getLogger(__name__)

_HEADING_STYLE = re.compile(r"^(?:heading|überschrift|titre|título|标题)\s*(\d)$", re.IGNORECASE)
_LIST_STYLE = re.compile(r"^list\b", re.IGNORECASE)

#: default cap of one file
MAX_FILE_BYTES = 32 * 1024 * 1024


def _heading_level(paragraph: Paragraph) -> int:
    """The heading level of a paragraph by its style (`Title` is 1, `Heading N` is N), 0 for body text."""
    style = paragraph.style.name if paragraph.style is not None else ""
    if style == "Title":
        return 1
    match = _HEADING_STYLE.match(style or "")
    return min(int(match.group(1)), 6) if match else 0


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _table(table: Table) -> str:
    """A table as a markdown table, its first row the header (merged cells repeat their text, as Word shows them)."""
    rows = [[_cell(cell.text) for cell in row.cells] for row in table.rows]
    rows = [row for row in rows if any(row)]
    if not rows:
        return ""
    width = max(len(row) for row in rows)
    rows = [row + [""] * (width - len(row)) for row in rows]
    lines = ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * width]
    lines += ["| " + " | ".join(row) + " |" for row in rows[1:]]
    return "\n".join(lines)


def docx_to_markdown(data: bytes) -> tuple[str, str]:
    """
    Turn a Word document into markdown: heading styles into headings, list styles into items, tables into tables.

    :param data: The .docx file.
    :returns: The markdown and the document's title (its core property, else its first heading; '' for none).
    :raises ValueError: If the bytes are not a Word document.
    """
    try:
        document = docx.Document(io.BytesIO(data))
    except (zipfile.BadZipFile, KeyError, ValueError) as err:
        msg = f"not a readable .docx file ({err})"
        raise ValueError(msg) from err
    blocks: list[str] = []
    first_heading = ""
    for item in document.iter_inner_content():
        if isinstance(item, Table):
            blocks.append(_table(item))
            continue
        text = " ".join(item.text.split())
        if not text:
            continue
        level = _heading_level(item)
        if level:
            first_heading = first_heading or text
            blocks.append("#" * level + " " + text)
        elif _LIST_STYLE.match(item.style.name if item.style is not None else ""):
            blocks.append("- " + text)
        else:
            blocks.append(text)
    title = (document.core_properties.title or "").strip() or first_heading
    return "\n\n".join(b for b in blocks if b), title


@component
class DocxKnowledgeConverter:
    """
    Converts Word documents (.docx) into markdown Documents whose headings give the chunks their breadcrumbs.

    Paragraphs styled `Title` or `Heading 1`-`Heading 6` become markdown headings, list paragraphs become items, and
    tables become markdown tables (the first row the header), all in the document's order, using python-docx.
    Haystack's `DOCXToDocument` keeps the text but not which paragraphs are headings, which is what a breadcrumb is
    made of. The title is the document's title property, else its first heading. A file that cannot be read does not
    stop the run: it is reported in `failures`.

    ### Usage example

    ```python
    from components.converters.docx_knowledge_converter import DocxKnowledgeConverter

    result = DocxKnowledgeConverter().run(sources=["knowledge/policies/travel.docx"], meta={"source": "travel.docx"})
    print(result["documents"][0].content[:80], result["failures"])
    ```
    """

    def __init__(self, max_file_bytes: int = MAX_FILE_BYTES) -> None:
        """
        Create the converter.

        :param max_file_bytes: Largest file converted (a larger one is reported as failed).
        :raises ValueError: If the cap is not positive.
        """
        check_max_file_bytes(max_file_bytes)
        docx_import.check()
        self.max_file_bytes = max_file_bytes

    def _convert(self, source: str | Path | ByteStream, meta: dict[str, Any]) -> Document:
        stream = read_capped(source, self.max_file_bytes)
        merged = {**stream.meta, **meta}
        text, title = docx_to_markdown(stream.data)
        if title and not merged.get("title"):
            merged["title"] = title
        merged["markup"] = "markdown"
        return Document(content=text, meta=merged)

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
