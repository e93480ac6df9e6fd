from __future__ import annotations

import os

from components.store.knowledge_index import (
    CachedKnowledgeIndex,
    IndexedDocument,
    KnowledgeIndex,
    hint_values,
    term_category_counts,
)


def _doc(source: str, category: str, **fields) -> IndexedDocument:
    return IndexedDocument(doc_id=source, source=source, category=category, doc_version="v", **fields)


class TestKnowledgeIndex:
    def test_save_is_atomic_and_round_trips(self, tmp_path):
        path = tmp_path / "k.json"
        index = KnowledgeIndex(documents=[_doc("a.md", "x", keywords=["k"])], term_categories={"k": {"x": 1}})
        index.save(path)
        assert KnowledgeIndex.load(path) == index
        assert [p.name for p in tmp_path.iterdir()] == ["k.json"]
        assert KnowledgeIndex.load(tmp_path / "missing.json").documents == []

    def test_term_category_counts_use_text_and_fields(self):
        docs = [
            _doc("a.md", "alerts", title="Disk Full", keywords=["inode"]),
            _doc("b.md", "payments", title="Refunds"),
            _doc("c.md", "payments", title="退款流程"),
        ]
        bodies = {
            "a.md": "check the inode table",
            "b.md": "A disk full alert never blocks refunds.",
            "c.md": "退款七天到账",
        }
        counts = term_category_counts(docs, bodies)
        assert counts["disk full"] == {"alerts": 1, "payments": 1}
        assert counts["inode"] == {"alerts": 1}
        assert counts["refunds"] == {"payments": 1}
        assert counts["退款流程"] == {"payments": 1}
        assert counts["payments"] == {"payments": 2}

    def test_cache_rereads_only_when_the_file_changes(self, tmp_path):
        path = tmp_path / "k.json"
        KnowledgeIndex(documents=[_doc("a.md", "x")]).save(path)
        cache = CachedKnowledgeIndex(path)
        first, changed = cache.get()
        assert changed and len(first.documents) == 1
        assert cache.get()[1] is False
        KnowledgeIndex(documents=[_doc("a.md", "x"), _doc("b.md", "y")]).save(path)
        os.utime(path, ns=(1, cache.signature() + 1_000_000))
        second, changed = cache.get()
        assert changed and len(second.documents) == 2

    def test_readers_of_one_file_share_one_parse_per_version(self, tmp_path, monkeypatch):
        """The L0 provider and the collections read the same file: parsing it is 0.4 s at 10k documents."""
        path = tmp_path / "k.json"
        KnowledgeIndex(documents=[_doc("a.md", "x")]).save(path)
        parses = []
        real = KnowledgeIndex.load.__func__
        monkeypatch.setattr(KnowledgeIndex, "load", classmethod(lambda cls, p: parses.append(p) or real(cls, p)))
        first, other = CachedKnowledgeIndex(path), CachedKnowledgeIndex(tmp_path / "." / "k.json")
        assert first.get()[0] is other.get()[0]
        assert len(parses) == 1
        KnowledgeIndex(documents=[_doc("a.md", "x"), _doc("b.md", "y")]).save(path)
        os.utime(path, ns=(1, first.signature() + 1_000_000))
        newer, changed = other.get()
        assert changed and len(newer.documents) == 2
        assert first.get() == (newer, True)
        assert len(parses) == 2
        assert CachedKnowledgeIndex(tmp_path / "missing.json").get()[0].documents == []

    def test_hint_values_split_titles_into_parts(self):
        doc = _doc("a.md", "hiring", title="Job Families / Approval Flow", keywords=["Manager"], entities=["Workday"])
        values = hint_values(doc)
        assert ("title", "Job Families / Approval Flow") in values
        assert ("title", "Job Families") in values and ("title", "Approval Flow") in values
        assert ("keyword", "Manager") in values and ("entity", "Workday") in values and ("category", "hiring") in values
        assert hint_values(_doc("b.md", "", title="退款处理：时效"))[1:] == [("title", "退款处理"), ("title", "时效")]

    def test_a_caller_sees_the_pages_it_may_read_and_public_counts_only(self):
        docs = [
            _doc("a.md", "ops", title="Disk Full"),
            _doc("b.md", "treasury", title="Payroll", access=["finance"]),
        ]
        index = KnowledgeIndex(documents=docs)
        assert index.restricted and not KnowledgeIndex(documents=docs[:1]).restricted
        public = index.readable_by(frozenset())
        assert [d.source for d in public.documents] == ["a.md"] and index.readable_by(frozenset()) is public
        assert index.readable_by(frozenset({"finance"})) is index and index.readable_by(frozenset({"*"})) is index
        assert index == KnowledgeIndex(documents=docs)  # the cached views are no part of it
        # the category statistics steer every caller's filter: a restricted page's text and fields are not counted
        counts = term_category_counts(docs, {"a.md": "payroll runs never fill a disk", "b.md": "disk full of payroll"})
        assert counts["payroll"] == {"ops": 1} and counts["disk full"] == {"ops": 1}
        assert counts["treasury"] == {}
