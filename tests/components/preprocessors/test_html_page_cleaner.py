from __future__ import annotations

from pathlib import Path

import pytest
from haystack import Document
from haystack.components.converters.html import HTMLToDocument
from haystack.core.serialization import component_from_dict, component_to_dict

from components.preprocessors.html_page_cleaner import HtmlPageCleaner

HTML = Path(__file__).resolve().parents[2] / "fixtures" / "real_docs" / "html"
BLOCK = '---\ntitle: "Fitness: the XOR example¶"\nauthor: Jane\ndescription: level 2 algebra\n---\n'


def _run(*docs: Document, **init) -> list[Document]:
    return HtmlPageCleaner(**init).run(documents=list(docs))["documents"]


class TestHtmlPageCleaner:
    def test_init_defaults_and_invalid(self):
        assert HtmlPageCleaner().meta_fields == ["title"]
        with pytest.raises(ValueError, match=r"meta_fields=\['title', ''\] must be a list of field names"):
            HtmlPageCleaner(meta_fields=["title", ""])

    def test_to_dict_from_dict(self):
        data = component_to_dict(HtmlPageCleaner(meta_fields=["title", "description"]), "html_page")
        assert data["init_parameters"] == {"meta_fields": ["title", "description"]}
        assert component_from_dict(HtmlPageCleaner, data, "html_page").meta_fields == ["title", "description"]

    def test_the_block_s_title_becomes_meta_and_the_block_leaves_the_text(self):
        page = Document(content=BLOCK + "## Fitness function¶\n\nText.", meta={"file_path": "xor.html"})
        (out,) = _run(page)
        assert out.meta == {"file_path": "xor.html", "title": "Fitness: the XOR example"}
        assert out.content == "## Fitness function\n\nText."
        assert page.content.startswith("---") and "title" not in page.meta  # the input is not modified

    def test_more_fields_when_asked_and_what_the_caller_set_wins(self):
        page = Document(content=BLOCK + "Text.", meta={"title": "Set by the caller"})
        (out,) = _run(page, meta_fields=["title", "description"])
        assert (out.meta["title"], out.meta["description"]) == ("Set by the caller", "level 2 algebra")

    def test_permalink_marks_leave_headings_only_outside_code(self):
        text = "# A title §\n\nA line ending in ¶\n\n```\n# kept ¶\n```\n\n### Next\u200b#\n"
        (out,) = _run(Document(content=text))
        assert out.content == "# A title\n\nA line ending in ¶\n\n```\n# kept ¶\n```\n\n### Next\n"

    def test_a_page_without_a_block_keeps_its_text(self):
        (out,) = _run(Document(content="Just text\n---\nmore", meta={"source": "a.html"}))
        assert (out.content, out.meta) == ("Just text\n---\nmore", {"source": "a.html"})

    def test_an_unreadable_block_stays_in_the_text_with_a_warning(self, caplog):
        text = "---\ntitle: [unclosed\n---\nBody"
        (out,) = _run(Document(content=text, meta={"file_path": "bad.html"}))
        assert out.content == text and "title" not in out.meta
        assert "bad.html: the page's metadata block is kept as text" in caplog.text
        (unclosed,) = _run(Document(content="---\nonly a rule\n\nBody"))
        assert unclosed.content == "---\nonly a rule\n\nBody"

    def test_empty_input_gives_empty_output(self):
        assert HtmlPageCleaner().run(documents=[]) == {"documents": []}

    def test_pages_haystack_s_converter_made_get_their_title(self):
        converter = HTMLToDocument(extraction_kwargs={"output_format": "markdown", "with_metadata": True})
        pages = converter.run(sources=sorted(HTML.glob("*.html")))["documents"]
        out = _run(*pages)
        assert [d.meta["title"] for d in out] == [
            "Does Model and Inference Parameter Matter in LLM Applications? - A Case Study for MATH | AutoGen",
            "Overview of the basic XOR example (xor2.py)",
        ]
        assert all(not d.content.startswith("---") and "¶" not in d.content for d in out)
