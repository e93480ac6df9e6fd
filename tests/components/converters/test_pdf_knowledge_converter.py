from __future__ import annotations

import io
from pathlib import Path

import pytest
from haystack.core.serialization import component_from_dict, component_to_dict
from haystack.dataclasses import ByteStream
from pypdf import PdfWriter

from components.converters.pdf_knowledge_converter import PdfKnowledgeConverter, without_page_furniture

REAL = Path(__file__).resolve().parents[2] / "fixtures" / "real_docs" / "pdf"
#: the JOSS paper's running footer (pypdf's text of it): on every page, ending in the page number
FOOTER = "Ward et al, (2026). FastPCA: An R package for fast singular value decomposition."


def _made_by_pypdf(title: str | None, outline: list[tuple[str, int, str | None]] | None = None) -> bytes:
    """A PDF of three blank pages with a title property and bookmarks `(title, page index, parent title)`."""
    writer = PdfWriter()
    for _ in range(3):
        writer.add_blank_page(width=200, height=200)
    if title is not None:
        writer.add_metadata({"/Title": title})
    items = {}
    for name, page, parent in outline or []:
        items[name] = writer.add_outline_item(
            title=name, page_number=page, parent=items.get(parent) if parent else None
        )
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


class TestPdfKnowledgeConverter:
    def test_init_defaults_and_invalid(self):
        converter = PdfKnowledgeConverter()
        assert converter.max_file_bytes == 64 * 1024 * 1024 and converter.remove_page_furniture is True
        with pytest.raises(ValueError, match="max_file_bytes=0 must be a positive number of bytes"):
            PdfKnowledgeConverter(max_file_bytes=0)

    def test_to_dict_from_dict(self):
        data = component_to_dict(PdfKnowledgeConverter(max_file_bytes=1000, remove_page_furniture=False), "pdf")
        restored = component_from_dict(PdfKnowledgeConverter, data, "pdf")
        assert restored.max_file_bytes == 1000 and restored.remove_page_furniture is False

    def test_a_real_paper_keeps_its_pages_title_and_bookmarks_without_its_footer(self):
        out = PdfKnowledgeConverter().run(
            sources=[REAL / "fastpca-joss-paper.pdf"], meta={"source": "fastpca.pdf", "doc_version": "v1"}
        )
        [doc] = out["documents"]
        assert out["failures"] == []
        assert doc.meta["source"] == "fastpca.pdf" and doc.meta["doc_version"] == "v1" and doc.meta["markup"] == "text"
        # the title property, whole; the first line of the text wraps it ("... singular value" / "decomposition")
        assert doc.meta["title"] == "FastPCA: An R package for fast singular value decomposition"
        assert doc.meta["page_count"] == 6 and doc.content.count("\f") == 5
        assert doc.meta["outline"] == [
            [1, 1, "Summary"],
            [1, 1, "Statement of Need"],
            [2, 1, "Functionality"],
            [2, 1, "Research Impact"],
            [5, 1, "Conclusion"],
            [5, 1, "Acknowledgements"],
            [5, 1, "References"],
        ]
        assert FOOTER not in doc.content
        assert "FastPCA uses irlba as the default backend" in doc.content

    def test_the_footer_stays_when_furniture_is_kept(self):
        [doc] = PdfKnowledgeConverter(remove_page_furniture=False).run(sources=[REAL / "fastpca-joss-paper.pdf"])[
            "documents"
        ]
        assert doc.content.count(FOOTER) == 6

    def test_a_pdf_without_title_or_bookmarks_has_neither(self):
        [doc] = PdfKnowledgeConverter().run(sources=[REAL / "docling-multi_page.pdf"])["documents"]
        assert "title" not in doc.meta and doc.meta["outline"] == [] and doc.meta["page_count"] == 5

    def test_nested_bookmarks_give_levels_and_a_placeholder_title_is_ignored(self):
        data = _made_by_pypdf(
            "Microsoft Word - draft_v3.docx",
            [("Install", 0, None), ("On Linux", 1, "Install"), ("Use", 2, None)],
        )
        [doc] = PdfKnowledgeConverter().run(sources=[ByteStream(data, meta={"source": "guide.pdf"})])["documents"]
        assert "title" not in doc.meta
        assert doc.meta["outline"] == [[1, 1, "Install"], [2, 2, "On Linux"], [3, 1, "Use"]]

    def test_the_callers_title_wins_over_the_property(self):
        data = _made_by_pypdf("Operations Handbook")
        [doc] = PdfKnowledgeConverter().run(sources=[ByteStream(data)], meta={"title": "Ops"})["documents"]
        assert doc.meta["title"] == "Ops"
        [doc] = PdfKnowledgeConverter().run(sources=[ByteStream(data)])["documents"]
        assert doc.meta["title"] == "Operations Handbook"

    def test_a_damaged_or_oversized_file_is_reported_and_the_rest_converted(self, tmp_path: Path):
        (tmp_path / "broken.pdf").write_bytes(b"%PDF-1.7\n this is no PDF at all")
        out = PdfKnowledgeConverter(max_file_bytes=200_000).run(
            sources=[tmp_path / "broken.pdf", REAL / "fastpca-joss-paper.pdf", REAL / "docling-multi_page.pdf"],
            meta=[{"source": "broken.pdf"}, {"source": "fastpca.pdf"}, {"source": "docling.pdf"}],
        )
        assert [d.meta["source"] for d in out["documents"]] == ["docling.pdf"]
        reasons = {f["source"]: f["reason"] for f in out["failures"]}
        assert reasons["broken.pdf"].startswith("not a readable PDF")
        assert "over the 200000-byte cap (max_file_bytes)" in reasons["fastpca.pdf"]

    def test_empty_input_gives_empty_output(self):
        assert PdfKnowledgeConverter().run(sources=[]) == {"documents": [], "failures": []}


class TestWithoutPageFurniture:
    def test_lines_recurring_at_page_edges_go_numbers_aside(self):
        body = ["Body {c} says Acme Manual.", "More about {c}.", "The {c} part.", "Last of {c}."]
        pages = ["\n".join(["Acme Manual", *body, "Page {i} of 4"]).format(c=c, i=i) for i, c in enumerate("wxyz", 1)]
        assert without_page_furniture(pages) == ["\n".join(body).format(c=c) for c in "wxyz"]

    def test_body_lines_and_short_documents_stay(self):
        # the repeated line is in the middle of each page: body, not furniture
        pages = [f"Top {c}\nfirst {c}\nSame sentence.\nthen {c}\nend {c}" for c in "wxyz"]
        assert without_page_furniture(pages) == pages
        two = ["Header\nOne.", "Header\nTwo."]
        assert without_page_furniture(two) == two

    def test_a_line_on_fewer_than_half_the_pages_stays(self):
        pages = ["Draft\nA.", "Draft\nB.", "C.\nD.", "E.\nF.", "G.\nH.", "I.\nJ.", "K.\nL."]
        assert without_page_furniture(pages) == pages
