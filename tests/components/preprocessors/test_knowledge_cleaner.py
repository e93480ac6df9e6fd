from __future__ import annotations

from haystack import Document
from haystack.core.serialization import component_from_dict, component_to_dict

from components.preprocessors.knowledge_cleaner import KnowledgeCleaner


class TestKnowledgeCleaner:
    def test_init_defaults(self):
        assert KnowledgeCleaner().strip_trailing_spaces is False

    def test_to_dict_from_dict(self):
        data = component_to_dict(KnowledgeCleaner(strip_trailing_spaces=True), "cleaner")
        assert data["init_parameters"] == {"strip_trailing_spaces": True}
        assert component_from_dict(KnowledgeCleaner, data, "cleaner").strip_trailing_spaces is True

    def test_line_endings_byte_order_mark_and_control_characters(self):
        doc = Document(content="\ufeffDisk full\r\nclean \x00/var/log\x1b\rdone\tok  \n", meta={"source": "a.md"})
        [out] = KnowledgeCleaner().run(documents=[doc])["documents"]
        assert out.content == "Disk full\nclean /var/log\ndone\tok  \n"
        assert out.meta == doc.meta and out.id == doc.id

    def test_a_form_feed_stays_it_marks_a_pdf_page(self):
        doc = Document(content="page one\fpage two\x0b", meta={"source": "a.pdf"})
        [out] = KnowledgeCleaner().run(documents=[doc])["documents"]
        assert out.content == "page one\fpage two"

    def test_trailing_spaces_go_only_when_asked(self):
        doc = Document(content="a  \nb\t\n", meta={"source": "a.md"})
        [out] = KnowledgeCleaner(strip_trailing_spaces=True).run(documents=[doc])["documents"]
        assert out.content == "a\nb\n"

    def test_a_clean_document_is_passed_on_as_it_is(self):
        doc = Document(content="# Title\n\ntext\n", meta={"source": "a.md"})
        [out] = KnowledgeCleaner().run(documents=[doc])["documents"]
        assert out is doc

    def test_a_document_without_text_is_reported_not_passed_on(self):
        docs = [
            Document(content=" \x00\r\n ", meta={"source": "empty.pdf"}),
            Document(content="kept", meta={"source": "b.md"}),
        ]
        out = KnowledgeCleaner().run(documents=docs)
        assert [d.meta["source"] for d in out["documents"]] == ["b.md"]
        assert out["failures"] == [{"source": "empty.pdf", "reason": "no text left after cleaning"}]

    def test_empty_input_gives_empty_output_and_inputs_are_not_mutated(self):
        assert KnowledgeCleaner().run(documents=[]) == {"documents": [], "failures": []}
        doc = Document(content="a\r\nb", meta={"source": "a.md"})
        KnowledgeCleaner().run(documents=[doc])
        assert doc.content == "a\r\nb"
