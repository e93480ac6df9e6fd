from __future__ import annotations

from pathlib import Path

import docx
import pytest
from haystack.core.serialization import component_from_dict, component_to_dict
from haystack.dataclasses import ByteStream

from components.converters.docx_knowledge_converter import DocxKnowledgeConverter, docx_to_markdown

REAL = Path(__file__).resolve().parents[2] / "fixtures" / "real_docs" / "docx"


def _made_by_python_docx(path: Path) -> Path:
    document = docx.Document()
    document.add_heading("Travel policy", level=0)
    document.add_heading("Booking", level=1)
    document.add_paragraph("Book trains 14 days ahead.")
    document.add_paragraph("Economy class only", style="List Bullet")
    table = document.add_table(rows=2, cols=2)
    table.rows[0].cells[0].text, table.rows[0].cells[1].text = "Trip", "Limit | EUR"
    table.rows[1].cells[0].text, table.rows[1].cells[1].text = "Domestic", "300"
    document.add_heading("Refunds", level=2)
    document.add_paragraph("Claims within 30 days.")
    document.save(path)
    return path


class TestDocxKnowledgeConverter:
    def test_init_defaults_and_invalid(self):
        assert DocxKnowledgeConverter().max_file_bytes == 32 * 1024 * 1024
        with pytest.raises(ValueError, match="max_file_bytes=0 must be a positive number of bytes"):
            DocxKnowledgeConverter(max_file_bytes=0)

    def test_to_dict_from_dict(self):
        data = component_to_dict(DocxKnowledgeConverter(max_file_bytes=1000), "docx")
        assert component_from_dict(DocxKnowledgeConverter, data, "docx").max_file_bytes == 1000

    def test_headings_lists_and_tables_become_markdown_in_order(self, tmp_path: Path):
        text, title = docx_to_markdown(_made_by_python_docx(tmp_path / "t.docx").read_bytes())
        assert title == "Travel policy"
        assert text == (
            "# Travel policy\n\n# Booking\n\nBook trains 14 days ahead.\n\n- Economy class only\n\n"
            "| Trip | Limit \\| EUR |\n|---|---|\n| Domestic | 300 |\n\n## Refunds\n\nClaims within 30 days."
        )

    def test_a_real_word_document_keeps_its_headings(self):
        out = DocxKnowledgeConverter().run(
            sources=[REAL / "REUSE.software-1.0.docx"], meta={"source": "reuse.docx", "doc_version": "v1"}
        )
        [doc] = out["documents"]
        assert (
            doc.meta["source"] == "reuse.docx" and doc.meta["doc_version"] == "v1" and doc.meta["markup"] == "markdown"
        )
        assert "## 1. Provide the exact text of each license used" in doc.content

    def test_a_file_that_is_no_word_document_is_reported_and_the_rest_converted(self, tmp_path: Path):
        (tmp_path / "broken.docx").write_bytes(b"PK\x03\x04 not a zip")
        good = _made_by_python_docx(tmp_path / "good.docx")
        out = DocxKnowledgeConverter().run(
            sources=[tmp_path / "broken.docx", good, ByteStream(b"x" * 10, meta={"file_path": "tiny.docx"})],
            meta=[{"source": "broken.docx"}, {"source": "good.docx"}, {"source": "tiny.docx"}],
        )
        assert [d.meta["source"] for d in out["documents"]] == ["good.docx"]
        assert [f["source"] for f in out["failures"]] == ["broken.docx", "tiny.docx"]
        assert "not a readable .docx file" in out["failures"][0]["reason"]
        # as a router hands it on: the stream carries the source the index run names the file by
        routed = ByteStream(
            b"PK\x03\x04 not a zip", meta={"file_path": str(tmp_path / "broken.docx"), "source": "x/broken.docx"}
        )
        assert DocxKnowledgeConverter().run(sources=[routed])["failures"][0]["source"] == "x/broken.docx"

    def test_empty_input_gives_empty_output(self):
        assert DocxKnowledgeConverter().run(sources=[]) == {"documents": [], "failures": []}
