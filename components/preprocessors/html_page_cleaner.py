from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from haystack import Document, component, logging

from components.core.frontmatter import MAX_FRONTMATTER_BYTES, FrontmatterError, split_frontmatter
from components.core.markdown_text import closes_fence, opening_fence

logger = logging.getLogger(__name__)

#: the marks sites put after a heading as its permalink (Sphinx and MkDocs `¶`, `§`, a link icon), and the
#: zero-width space Docusaurus puts before its `#`
_PERMALINK = re.compile(r"[ \t\u200b]*(?:[¶§\U0001f517]|\u200b#)+[ \t]*$")
_HEADING = re.compile(r"^#{1,6}[ \t]")


def _without_permalinks(text: str) -> str:
    """Every heading line outside code without the permalink mark after it."""
    lines, fence = text.split("\n"), ""
    for i, line in enumerate(lines):
        if fence:
            fence = "" if closes_fence(line, fence) else fence
        elif opened := opening_fence(line):
            fence = opened
        elif _HEADING.match(line):
            lines[i] = _PERMALINK.sub("", line)
    return "\n".join(lines)


@component
class HtmlPageCleaner:
    """
    Takes the page's own metadata out of an HTML page's extracted text, and the permalink marks out of its headings.

    Haystack's `HTMLToDocument` with trafilatura's `with_metadata` writes what the page's `<head>` says (title,
    author, url, description, date, tags) as a YAML block before the main content. This component moves the
    `meta_fields` of that block into the document's meta (`title` by default: the page's title, which the main
    content may not repeat as a heading) and drops the block, so it is neither embedded nor read as front matter
    text. Descriptions and dates are left out by default: a `<meta name="description">` is often text written for
    search engines, and a date may be trafilatura's guess. Headings lose the mark a documentation site puts after
    them as their permalink (`Fitness function¶`), which would otherwise end up in every breadcrumb. A document
    without a block keeps its text and meta; a block that cannot be read is left in the text, with a warning.

    ### Usage example

    ```python
    from haystack import Document
    from components.preprocessors.html_page_cleaner import HtmlPageCleaner

    page = Document(content="---\\ntitle: XOR example\\n---\\n## Fitness function¶\\n\\nText.")
    out = HtmlPageCleaner().run(documents=[page])["documents"][0]
    print(out.meta["title"], out.content)  # XOR example / "## Fitness function\\n\\nText."
    ```
    """

    def __init__(self, meta_fields: list[str] | None = None) -> None:
        """
        Create the component.

        :param meta_fields: Fields of the page's metadata block that become document meta (default `["title"]`;
            e.g. add `description` for a site whose meta descriptions are written for readers).
        :raises ValueError: If `meta_fields` holds something else than field names.
        """
        if meta_fields is not None and not all(isinstance(name, str) and name for name in meta_fields):
            msg = f"meta_fields={meta_fields!r} must be a list of field names, e.g. ['title']; leave it unset for that"
            raise ValueError(msg)
        self.meta_fields = list(meta_fields) if meta_fields is not None else ["title"]

    def _lifted(self, doc: Document) -> Document:
        text = doc.content or ""
        meta = dict(doc.meta)
        if text.startswith("---\n"):
            try:
                block, text, _ = split_frontmatter(text, max_bytes=MAX_FRONTMATTER_BYTES, max_aliases=0)
            except FrontmatterError as err:
                logger.warning(
                    "{source}: the page's metadata block is kept as text: {reason}",
                    source=meta.get("file_path") or doc.id,
                    reason=str(err),
                )
                block = {}
            for name in self.meta_fields:
                value = block.get(name)
                if value not in (None, "") and name not in meta:  # what the caller set wins
                    meta[name] = _PERMALINK.sub("", str(value)).strip() if name == "title" else value
        return replace(doc, content=_without_permalinks(text).lstrip("\n"), meta=meta)

    @component.output_types(documents=list[Document])
    def run(self, documents: list[Document]) -> dict[str, Any]:
        """
        Lift each page's metadata block and clean its headings.

        :param documents: Documents `HTMLToDocument` made; they are not modified.
        :returns: `documents`: copies without the block, its `meta_fields` in their meta.
        """
        return {"documents": [self._lifted(doc) for doc in documents]}
