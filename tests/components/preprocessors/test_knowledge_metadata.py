from __future__ import annotations

from datetime import date, datetime

import pytest
from haystack import Document
from haystack.core.serialization import component_from_dict, component_to_dict

from components.preprocessors.knowledge_metadata import KnowledgeMetadata


def _run(*docs: Document, **init) -> dict:
    return KnowledgeMetadata(**init).run(documents=list(docs))


class TestKnowledgeMetadata:
    def test_init_defaults_and_invalid(self):
        component = KnowledgeMetadata()
        assert component.category_fields == ["category", "domain", "categories", "section"]
        assert (component.folder_category, component.plain_text_types) == (True, ["text/plain", "application/pdf"])
        with pytest.raises(ValueError, match="category_fields=\\[''\\] must be a list of field names"):
            KnowledgeMetadata(category_fields=[""])

    def test_to_dict_from_dict(self):
        data = component_to_dict(KnowledgeMetadata(category_fields=["area"], folder_category=False), "metadata")
        assert data["init_parameters"]["category_fields"] == ["area"]
        restored = component_from_dict(KnowledgeMetadata, data, "metadata")
        assert (restored.category_fields, restored.folder_category) == (["area"], False)

    def test_category_from_the_first_field_with_a_value_else_the_top_folder(self):
        docs = [
            Document(content="a", meta={"source": "x/a.md", "category": "", "categories": ["install", "macos"]}),
            Document(content="b", meta={"source": "guides/deep/b.md"}),
            Document(content="c", meta={"source": "c.md"}),
            Document(content="d", meta={"source": "x/d.md", "area": "billing"}),
        ]
        out = _run(*docs)["documents"]
        assert [d.meta["category"] for d in out] == ["install", "guides", "", "x"]
        configured = _run(*docs, category_fields=["area"], folder_category=False)["documents"]
        assert [d.meta["category"] for d in configured] == ["", "", "", "billing"]

    def test_title_keywords_markup_and_description(self):
        page = Document(
            content="```\n# not this\n```\n## Setup\ntext",
            meta={"source": "a.md", "tags": ["hugo", "macos"], "keywords": "install, hugo", "summary": "How to."},
        )
        pdf = Document(content="FastPCA: fast SVD\nbody", meta={"source": "papers/p.pdf"})
        text = Document(content="# a comment, not a heading\n" + "x" * 200, meta={"source": "notes.txt"})
        [a, b, c] = _run(page, pdf, text)["documents"]
        assert (a.meta["title"], a.meta["markup"], a.meta["description"]) == ("Setup", "markdown", "How to.")
        assert a.meta["keywords"] == ["install", "hugo", "macos"]
        assert (b.meta["title"], b.meta["markup"]) == ("FastPCA: fast SVD", "text")
        assert (c.meta["title"], c.meta["markup"]) == ("# a comment, not a heading", "text")
        assert a.meta["doc_id"] == "a.md" and a.meta["doc_version"]

    def test_a_markdown_title_reads_as_text_and_a_text_files_stays_as_written(self):
        front = Document(content="body", meta={"source": "hmr.md", "title": "HMR `hotUpdate` **Plugin** Hook"})
        heading = Document(content='# <i class="fa fa-users"></i> About [Us](us.md)\nbody', meta={"source": "u.md"})
        text = Document(content="**Release notes** for `v2`\nbody", meta={"source": "notes.txt"})
        [a, b, c] = _run(front, heading, text)["documents"]
        assert (a.meta["title"], b.meta["title"]) == ("HMR hotUpdate Plugin Hook", "About Us")
        assert c.meta["title"] == "**Release notes** for `v2`"

    def test_the_update_day_and_the_declared_filterable_fields(self):
        page = Document(
            content="# A\ntext",
            meta={
                "source": "a.md",
                "lastmod": date(2026, 3, 4),
                "date": "2020-01-01",
                "team": ["billing", "growth"],
                "tier": 2,
                "public": True,
                "reviewed": datetime(2026, 1, 2, 9, 30),
                "owner": {"name": "x"},
            },
        )
        other = Document(content="# B\ntext", meta={"source": "b.md", "updated": "not a date", "date": "2024-05-06Z"})
        fields = ["team", "tier", "public", "reviewed", "owner", "missing"]
        [a, b] = _run(page, other, filterable_fields=fields)["documents"]
        assert a.meta["updated"] == "2026-03-04"  # lastmod comes before date
        assert a.meta["fields"] == {
            "team": ["billing", "growth"],
            "tier": ["2"],
            "public": ["true"],
            "reviewed": ["2026-01-02"],
        }
        assert b.meta["updated"] == "2024-05-06" and b.meta["fields"] == {}
        assert _run(page)["documents"][0].meta["fields"] == {}  # nothing declared, nothing filterable

    def test_field_lists_are_checked_and_serialized(self):
        with pytest.raises(ValueError, match=r"filterable_fields=\[3\] must be a list of field names"):
            KnowledgeMetadata(filterable_fields=[3])  # type: ignore[list-item]
        data = component_to_dict(KnowledgeMetadata(updated_fields=["changed"], filterable_fields=["team"]), "m")
        restored = component_from_dict(KnowledgeMetadata, data, "m")
        assert (restored.updated_fields, restored.filterable_fields) == (["changed"], ["team"])

    @pytest.mark.parametrize(
        ("value", "groups"),
        [
            (None, []),
            (["Finance", " hr ", "finance"], ["finance", "hr"]),
            ("finance, hr", ["finance", "hr"]),
            ([], ["*"]),  # set, naming no group: fails closed, only a caller holding every group reads it
            ({"team": "x"}, ["*"]),
            ("  ", ["*"]),
        ],
    )
    def test_access_groups_are_normalized_and_a_field_naming_none_fails_closed(self, value, groups):
        meta = {"source": "a.md"} if value is None else {"source": "a.md", "access": value}
        [doc] = _run(Document(content="# A\ntext", meta=meta))["documents"]
        assert doc.meta["access"] == groups
        data = component_to_dict(KnowledgeMetadata(access_fields=["visibility"]), "m")
        assert component_from_dict(KnowledgeMetadata, data, "m").access_fields == ["visibility"]
        with pytest.raises(ValueError, match="access_fields"):
            KnowledgeMetadata(access_fields=[""])

    def test_a_page_of_front_matter_only_is_its_description_or_skipped_with_why(self):
        section = Document(content="\n\n", meta={"source": "install/_index.md", "description": "Install Hugo."})
        empty = Document(content="", meta={"source": "install/empty.md", "title": "Empty"})
        out = _run(section, empty)
        assert [(d.content, d.meta["title"]) for d in out["documents"]] == [("Install Hugo.", "_index")]
        assert out["skipped"] == [
            {"source": "install/empty.md", "reason": "no text: front matter only, with no description or summary"}
        ]

    def test_inputs_are_not_mutated_and_empty_input_gives_empty_output(self):
        doc = Document(content="text", meta={"source": "a/b.md"})
        _run(doc)
        assert doc.meta == {"source": "a/b.md"}
        assert _run() == {"documents": [], "skipped": []}
