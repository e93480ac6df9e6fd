from __future__ import annotations

import copy
import functools
from datetime import date, timedelta
from pathlib import Path

import pytest
from haystack.core.serialization import component_from_dict, component_to_dict

from components.core.citation import chunk_ids
from components.core.frozen import FrozenList
from components.query.document_filter_resolver import (
    BUILT_IN_KEYS,
    MATCHES_NOTHING,
    DocumentFilterResolver,
    available_values,
)
from components.store.knowledge_index import IndexedDocument, KnowledgeIndex


def _doc(source: str, chunks: int = 2, **fields) -> IndexedDocument:
    return IndexedDocument(doc_id=source, source=source, doc_version=f"v-{source}", chunks=chunks, **fields)


DOCS = [
    _doc("alerts/disk.md", category="alerts", keywords=["disk full", "inode"], updated="2026-03-01"),
    _doc("alerts/cpu.md", chunks=3, category="alerts", keywords=["cpu"], updated="2025-12-31"),
    _doc("payments/refund.md", category="payments", keywords=["退款"], fields={"team": ["billing"], "tier": ["2"]}),
    _doc("faq/plans.md", category="product-faq", keywords=["pricing"], fields={"team": ["growth", "billing"]}),
]


def _ids(*sources: str) -> list[str]:
    by_source = {d.source: d for d in DOCS}
    return [cid for s in sources for cid in chunk_ids(s, by_source[s].doc_version, by_source[s].chunks)]


def _sorted_ids(pages: list[IndexedDocument], *sources: str) -> list[str]:
    by_source = {d.source: d for d in pages}
    return sorted(c for s in sources for c in chunk_ids(s, by_source[s].doc_version, by_source[s].chunks))


@pytest.fixture
def resolver(tmp_path: Path) -> DocumentFilterResolver:
    path = tmp_path / "knowledge_index.json"
    KnowledgeIndex(documents=DOCS).save(path)
    return DocumentFilterResolver(index_path=str(path))


class TestDocumentFilterResolver:
    def test_init_defaults(self):
        resolver = DocumentFilterResolver()
        assert (resolver.index_path, resolver.category_key) == ("data/knowledge_index.json", "category")

    @pytest.mark.parametrize("param", ["index_path", "category_key"])
    def test_invalid_init(self, param):
        with pytest.raises(ValueError, match=f"{param}=''"):
            DocumentFilterResolver(**{param: ""})

    def test_init_does_no_io(self, tmp_path):
        DocumentFilterResolver(index_path=str(tmp_path / "missing" / "index.json"))  # nothing read yet

    def test_to_dict_from_dict(self):
        data = component_to_dict(DocumentFilterResolver(index_path="x/index.json", category_key="domain"), "f")
        assert data["init_parameters"] == {
            "index_path": "x/index.json",
            "category_key": "domain",
            "hidden_statuses": ["draft", "archived"],
        }
        restored = component_from_dict(DocumentFilterResolver, data, "f")
        assert (restored.index_path, restored.category_key) == ("x/index.json", "domain")

    @pytest.mark.parametrize("filters", [None, {}])
    def test_no_filters_is_no_filter(self, resolver, filters):
        assert resolver.run(filters=filters) == {"filters": None, "filter_report": None, "error": "", "hidden": []}

    def test_a_category_alone_filters_the_category_column(self, resolver):
        out = resolver.run(filters={"category": "ALERTS"})
        assert out["filters"] == {"field": "meta.category", "operator": "==", "value": "alerts"}
        assert out["filter_report"] == {"requested": {"category": "ALERTS"}, "documents": 2, "chunks": 5}

    def test_several_categories_are_any_of(self, resolver):
        out = resolver.run(filters={"category": ["alerts", "payments"]})
        assert out["filters"] == {"field": "meta.category", "operator": "in", "value": ["alerts", "payments"]}

    @pytest.mark.parametrize(
        ("filters", "sources"),
        [
            ({"tags": "inode"}, ["alerts/disk.md"]),
            ({"keywords": ["CPU", "退款"]}, ["alerts/cpu.md", "payments/refund.md"]),
            ({"source_prefix": "./alerts/"}, ["alerts/disk.md", "alerts/cpu.md"]),
            ({"source": ["faq/plans.md", "Alerts/CPU.md"]}, ["alerts/cpu.md", "faq/plans.md"]),
            ({"updated_after": "2026-01-01"}, ["alerts/disk.md"]),
            ({"updated_after": "2025-12-31T08:00:00Z"}, ["alerts/disk.md", "alerts/cpu.md"]),  # the day, inclusive
            ({"team": "billing"}, ["payments/refund.md", "faq/plans.md"]),
            ({"team": "billing", "category": "payments"}, ["payments/refund.md"]),  # keys combine with AND
            ({"tier": 2}, ["payments/refund.md"]),  # a number matches as written
        ],
    )
    def test_document_fields_resolve_to_their_chunks(self, resolver, filters, sources):
        out = resolver.run(filters=filters)
        assert out["error"] == ""
        assert sorted(out["filters"]["value"]) == sorted(_ids(*sources))
        assert out["filters"]["field"] == "id" and out["filters"]["operator"] == "in"
        assert out["filter_report"]["documents"] == len(sources)

    def test_filters_that_match_nothing_search_nothing_and_name_what_exists(self, resolver):
        out = resolver.run(filters={"category": "nope", "team": "billing"})
        assert out["filters"] == MATCHES_NOTHING
        report = out["filter_report"]
        assert report["documents"] == 0 and report["chunks"] == 0
        assert report["available"]["category"][0] == {"value": "alerts", "documents": 2}
        assert {v["value"] for v in report["available"]["category"]} == {"alerts", "payments", "product-faq"}
        assert report["available"]["team"] == [
            {"value": "billing", "documents": 2},
            {"value": "growth", "documents": 1},
        ]

    @pytest.mark.parametrize(
        ("filters", "error"),
        [
            ({"colour": "red"}, "filters has no key 'colour': filter on category, tags, keywords, source,"),
            ({"category": ""}, "filters.category is empty"),
            ({"category": []}, "filters.category must be a string or a non-empty list"),
            ({"category": {"$ne": 1}}, "filters.category must be a string or a non-empty list"),
            ({"tags": [True]}, "filters.tags must be a string or a non-empty list"),
            ({"source_prefix": 3}, "filters.source_prefix must be a non-empty path prefix"),
            ({"updated_after": "last week"}, "filters.updated_after must be a date such as '2026-01-31'"),
        ],
    )
    def test_bad_filters_are_refused_with_what_is_accepted(self, resolver, filters, error):
        out = resolver.run(filters=filters)
        assert out["filters"] is None and out["filter_report"] is None
        assert error in out["error"]

    def test_a_filter_key_a_document_declares_is_accepted(self, resolver):
        keys = DocumentFilterResolver.filterable_keys(KnowledgeIndex.load(resolver.index_path))
        assert keys == [*BUILT_IN_KEYS, "team", "tier"]

    def test_a_hostile_value_is_matched_literally(self, resolver):
        out = resolver.run(filters={"category": 'alerts" or 1==1 or "'})
        assert out["filters"] == MATCHES_NOTHING and out["error"] == ""

    def test_the_index_is_read_again_after_a_reindex(self, resolver):
        assert resolver.run(filters={"category": "hr"})["filter_report"]["documents"] == 0
        KnowledgeIndex(documents=[*DOCS, _doc("hr/leave.md", category="hr")]).save(resolver.index_path)
        assert resolver.run(filters={"category": "hr"})["filter_report"]["documents"] == 1

    def test_inputs_not_mutated(self, resolver):
        filters = {"category": ["alerts"], "team": ["billing"]}
        before = copy.deepcopy(filters)
        resolver.run(filters=filters)
        assert filters == before

    def test_drafts_archived_and_future_pages_are_hidden_unless_asked_for(self, tmp_path):
        tomorrow = (date.today() + timedelta(days=1)).isoformat()
        pages = [
            *DOCS,
            _doc("ops/draft.md", status="draft"),
            _doc("ops/old.md", status="archived"),
            _doc("ops/next.md", valid_from=tomorrow),
            _doc("ops/gone.md", status="superseded"),  # the supersession resolver's, not hidden here
        ]
        path = tmp_path / "index.json"
        KnowledgeIndex(documents=pages).save(path)
        resolver = DocumentFilterResolver(index_path=str(path))
        ids = functools.partial(_sorted_ids, pages)

        assert sorted(resolver.run()["hidden"]) == ids("ops/draft.md", "ops/old.md", "ops/next.md")
        drafts = resolver.run(filters={"status": "draft"})
        assert sorted(drafts["hidden"]) == ids("ops/old.md", "ops/next.md")
        assert sorted(drafts["filters"]["value"]) == ids("ops/draft.md")
        current = resolver.run(filters={"status": "current"})["filter_report"]
        assert current["documents"] == len(DOCS) + 1  # every page without a status, and the one valid from tomorrow
        assert sorted(DocumentFilterResolver(index_path=str(path), hidden_statuses=[]).run()["hidden"]) == ids(
            "ops/next.md"
        )

    def test_hidden_statuses_are_checked_and_serialized(self):
        with pytest.raises(ValueError, match="hidden_statuses=\\[''\\]"):
            DocumentFilterResolver(hidden_statuses=[""])
        data = component_to_dict(DocumentFilterResolver(hidden_statuses=["draft"]), "f")
        assert component_from_dict(DocumentFilterResolver, data, "f").hidden_statuses == ["draft"]

    def test_available_values_of_folders_and_days(self):
        index = KnowledgeIndex(documents=DOCS)
        assert available_values(index, "source_prefix")[0] == {"value": "alerts/", "documents": 2}
        assert {v["value"] for v in available_values(index, "updated_after")} == {"2026-03-01", "2025-12-31"}

    def test_pages_a_caller_may_not_read_are_hidden_matched_and_counted_for_it_only(self, tmp_path):
        pages = [
            *DOCS,
            _doc("finance/payroll.md", category="treasury", keywords=["payroll"], access=["finance"]),
            _doc("hr/salary.md", category="alerts", access=["hr", "finance"]),
        ]
        path = tmp_path / "index.json"
        KnowledgeIndex(documents=pages).save(path)
        resolver = DocumentFilterResolver(index_path=str(path))
        ids = functools.partial(_sorted_ids, pages)

        assert sorted(resolver.run()["hidden"]) == ids("finance/payroll.md", "hr/salary.md")  # anonymous: public only
        assert sorted(resolver.run(groups=["hr"])["hidden"]) == ids("finance/payroll.md")
        assert sorted(resolver.run(groups=[" FINANCE "])["hidden"]) == []  # groups compare casefolded
        assert list(resolver.run(groups=["*"])["hidden"]) == []
        # a filter naming a page the caller may not read matches nothing, and names no such page or value
        out = resolver.run(filters={"source": "finance/payroll.md"}, groups=["hr"])
        assert out["filters"] == MATCHES_NOTHING and out["filter_report"]["documents"] == 0
        assert "payroll" not in str(out["filter_report"]["available"])
        category = resolver.run(filters={"category": "treasury"})["filter_report"]
        assert "treasury" not in str(category["available"]) and category["documents"] == 0
        # a category filter still leaves the unreadable pages of that category out (hidden, inside the query)
        alerts = resolver.run(filters={"category": "alerts"})
        assert alerts["filter_report"]["documents"] == 2 and set(ids("hr/salary.md")) <= set(alerts["hidden"])
        assert resolver.run(filters={"access": "finance"}, groups=["finance"])["filter_report"]["documents"] == 2
        # a refused filter still hides what the caller may not read
        assert sorted(resolver.run(filters={"nope": 1})["hidden"]) == ids("finance/payroll.md", "hr/salary.md")

    def test_the_hidden_list_is_one_read_only_value_per_caller_groups(self, resolver):
        first, again = resolver.run(groups=["a"])["hidden"], resolver.run(groups=["a"])["hidden"]
        assert isinstance(first, FrozenList) and first is again  # handed on without a copy
