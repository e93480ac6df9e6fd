from __future__ import annotations

from dataclasses import replace
from typing import Any

from haystack import Document, component

from components.core.location import moved_line_map
from components.core.site_markup import clean_markup, clean_markup_lines, with_page_values

__all__ = ["MarkupCleaner", "clean_markup"]


@component
class MarkupCleaner:
    """
    Removes the markup documentation sites put in markdown, keeping the text, so that only words are embedded.

    HTML comments (an Apache licence header's `#` lines are no headings), MDX `import`/`export` lines and `{/* */}`
    comments, JSX components and HTML layout tags (their inner text is kept; a tab's `label` stays as a line), Hugo
    shortcodes (`{{< >}}`, `{{% %}}`: the delimiters go, the text between a pair stays, and so do the words a shortcode
    shows: its `text`, `title`, `label` or `caption`, a tab's name), Jekyll/Liquid tags, the markers of MkDocs (`!!!
    note`, `=== "Tab"`, pymdownx's `/// note | Title`), Docusaurus (`:::tip`) and GitHub (`> [!NOTE]`) admonitions
    (their text and title stay; an untitled one shows its kind, "Tip", as the site does), a comment's code blocks,
    reference links (`[text][ref]` keeps its text; the `[ref]: url` lines go) and heading anchors (`{#id}`). A component
    keeps the words it shows (a `title`, `caption`, `label` or `text`: Mintlify's steps, Starlight's cards, VitePress'
    badges) and its indented body moves out as MDX reads it; a GitBook tag keeps its `title` or `date`; MyST directives
    keep their words (code ones become code blocks), their options, targets, comments and roles go; unresolved mdBook
    directives go; a Vue page's `{{ }}` goes; an MDX export runs to where its brackets close; a component's JSX-valued
    attribute (`icon={<svg ...>}`) is read as the words it shows; parentheses holding only an icon go; an HTML code
    element is a code span (its links dropped) and an HTML code block (GitBook's `<pre><code class="lang-bash">`) a
    fenced block, so a `#` line in it is no heading; character references become characters; an HTML table becomes a
    markdown table of whole rows (a spanned cell repeated in each row it covers), and the lines it no longer needs leave
    the text with the document's `line_map` moved to match (a fence added where code shares its line with a tag moves it
    too). Code shortcodes (`highlight`, `code`, `code-toggle`, Liquid's `highlight`) become fenced blocks; fenced code
    and inline code are never changed, except Docusaurus' `mdx-code-block` fences, which hold MDX the site renders: the
    fences go and their content is cleaned as prose. Every other removed piece leaves its line breaks, so a chunk's line
    range still points into the file. Only documents whose `markup` meta is one of `markups` are cleaned (the converters
    set it; Haystack's own leave it unset: their HTML comes out as clean markdown, their text is text).

    ### Usage example

    ```python
    from haystack import Document
    from components.preprocessors.markup_cleaner import MarkupCleaner

    text = "<!--\\n# Licensed\\n-->\\n# CORS\\n{{< note >}}Enable it.{{< /note >}}"
    doc = Document(content=text, meta={"markup": "markdown"})
    print(MarkupCleaner().run(documents=[doc])["documents"][0].content)  # "\\n\\n\\n# CORS\\nEnable it."
    ```
    """

    def __init__(self, markups: list[str] | None = None) -> None:
        """
        Create the cleaner.

        :param markups: The `markup` meta values cleaned (default `["markdown"]`; a document without one is not
            cleaned).
        :raises ValueError: If `markups` is empty.
        """
        if markups is not None and not markups:
            msg = "markups=[] cleans nothing; give the markup values to clean, e.g. ['markdown'], or leave it unset"
            raise ValueError(msg)
        self.markups = list(markups) if markups is not None else ["markdown"]

    @component.output_types(documents=list[Document])
    def run(self, documents: list[Document]) -> dict[str, Any]:
        """
        Clean the documents.

        :param documents: Converted documents; they are not modified.
        :returns: `documents`: cleaned copies (a document with nothing to clean is passed on as it is).
        """
        markups = set(self.markups)
        cleaned: list[Document] = []
        for doc in documents:
            if doc.meta.get("markup") not in markups or not doc.content:
                cleaned.append(doc)
                continue
            content = with_page_values(doc.content, doc.meta)
            text, origins = clean_markup_lines(content)
            meta = doc.meta
            if origins is not None and doc.meta.get("line_map"):  # a table took fewer lines: the map follows them
                meta = {**doc.meta, "line_map": moved_line_map(doc.meta["line_map"], origins)}
            elif origins is not None:  # no map to carry the move: every line stays where it was
                text = clean_markup(content)
            cleaned.append(doc if text == doc.content else replace(doc, content=text, meta=meta))
        return {"documents": cleaned}
