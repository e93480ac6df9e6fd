from __future__ import annotations

import os
from pathlib import Path

import pytest
from haystack.core.serialization import component_from_dict, component_to_dict

from components.query.l0_hint_provider import L0HintProvider
from components.store.knowledge_index import IndexedDocument, KnowledgeIndex


def _doc(doc_id: str, **fields) -> IndexedDocument:
    return IndexedDocument(doc_id=doc_id, source=f"{doc_id}.md", doc_version="v1", **fields)


BASE_DOCS = [
    _doc(
        "alerts-disk",
        title="Disk Full Runbook",
        category="alerts",
        keywords=["disk full", "inode", "cpu", "db"],
        entities=["node_exporter"],
    ),
    _doc("storage-zh", title="磁盘清理指南", category="storage", keywords=["磁盘满", "盘"], entities=["日志轮转"]),
    _doc("payments-refund", title="退款处理流程", category="payments", keywords=["退款"], entities=["refund-worker"]),
    _doc("faq-plans", title="Subscription Plans", category="product-faq", keywords=["subscription", "pricing"]),
]


def _write(path: Path, docs: list[IndexedDocument]) -> str:
    KnowledgeIndex(documents=docs).save(path)
    return str(path)


@pytest.fixture
def index_path(tmp_path: Path) -> str:
    return _write(tmp_path / "knowledge_index.json", BASE_DOCS)


class TestL0HintProvider:
    def test_init_defaults(self):
        provider = L0HintProvider()
        assert provider.index_path == "data/knowledge_index.json"
        assert provider.min_term_chars == 3
        assert provider.min_cjk_term_chars == 2
        assert provider.max_keyword_doc_fraction == 0.3
        assert provider.enabled is True

    @pytest.mark.parametrize(
        ("kwargs", "pattern"),
        [
            ({"min_term_chars": 0}, r"min_term_chars=0\b"),
            ({"min_cjk_term_chars": 0}, r"min_cjk_term_chars=0\b"),
            ({"min_term_chars": -2}, r"min_term_chars=-2\b"),
            ({"max_keyword_doc_fraction": 0}, r"max_keyword_doc_fraction=0\b"),
            ({"max_keyword_doc_fraction": -0.1}, r"max_keyword_doc_fraction=-0\.1\b"),
            ({"max_keyword_doc_fraction": 1.5}, r"max_keyword_doc_fraction=1\.5\b"),
            ({"min_domain_purity": 0}, r"min_domain_purity=0\b"),
            ({"min_domain_purity": 1.2}, r"min_domain_purity=1\.2\b"),
        ],
    )
    def test_invalid_init(self, kwargs, pattern):
        with pytest.raises(ValueError, match=pattern):
            L0HintProvider(**kwargs)

    def test_fraction_of_one_is_valid(self):
        assert L0HintProvider(max_keyword_doc_fraction=1).max_keyword_doc_fraction == 1

    def test_to_dict_from_dict(self, index_path):
        provider = L0HintProvider(
            index_path=index_path,
            min_term_chars=2,
            min_cjk_term_chars=1,
            max_keyword_doc_fraction=0.5,
            min_domain_purity=0.6,
            enabled=False,
        )
        data = component_to_dict(provider, "l0")
        assert data["init_parameters"] == {
            "index_path": index_path,
            "min_term_chars": 2,
            "min_cjk_term_chars": 1,
            "max_keyword_doc_fraction": 0.5,
            "min_domain_purity": 0.6,
            "enabled": False,
        }
        restored = component_from_dict(L0HintProvider, data, "l0")
        assert isinstance(restored, L0HintProvider)
        assert restored.index_path == index_path
        assert (restored.min_term_chars, restored.min_cjk_term_chars) == (2, 1)
        assert restored.max_keyword_doc_fraction == 0.5
        assert restored.enabled is False

    def test_round_trip_restores_a_working_provider(self, index_path):
        data = component_to_dict(L0HintProvider(index_path=index_path, min_term_chars=2), "l0")
        restored = component_from_dict(L0HintProvider, data, "l0")
        assert restored.run(query="db down")["hints"]["matched_keywords"] == ["db"]

    def test_english_terms_match_case_insensitively(self, index_path):
        out = L0HintProvider(index_path=index_path).run(query="My DISK FULL alert")
        assert out["hints"]["matched_keywords"] == ["disk full"]
        assert out["hints"]["domains"] == ["alerts"]
        assert out["hints"]["matched_doc_ids"] == ["alerts-disk"]
        assert out["category_filter"] == "alerts"

    @pytest.mark.parametrize(
        ("query", "expected"),
        [
            ("cpu is busy", ["cpu"]),
            ("high CPU.", ["cpu"]),
            ("all cpus are busy", []),
            ("vcpu count", []),
            ("cpu_usage high", []),
            ("the diskfull flag", []),
            ("disk fullness", []),
        ],
    )
    def test_english_terms_match_on_word_boundaries_only(self, index_path, query, expected):
        out = L0HintProvider(index_path=index_path).run(query=query)
        assert out["hints"]["matched_keywords"] == expected

    def test_english_terms_shorter_than_min_term_chars_are_ignored(self, index_path):
        out = L0HintProvider(index_path=index_path).run(query="db down")
        assert out["hints"]["matched_keywords"] == []
        assert out["category_filter"] == ""
        out = L0HintProvider(index_path=index_path, min_term_chars=2).run(query="db down")
        assert out["hints"]["matched_keywords"] == ["db"]
        assert out["category_filter"] == "alerts"

    def test_chinese_terms_match_as_substrings(self, index_path):
        out = L0HintProvider(index_path=index_path).run(query="服务器磁盘满了怎么办")
        assert out["hints"]["matched_keywords"] == ["磁盘满"]
        assert out["hints"]["domains"] == ["storage"]
        assert out["hints"]["matched_doc_ids"] == ["storage-zh"]
        assert out["category_filter"] == "storage"

    def test_chinese_terms_shorter_than_min_cjk_term_chars_are_ignored(self, index_path):
        out = L0HintProvider(index_path=index_path).run(query="硬盘坏了")
        assert out["hints"]["matched_keywords"] == []
        out = L0HintProvider(index_path=index_path, min_cjk_term_chars=1).run(query="硬盘坏了")
        assert out["hints"]["matched_keywords"] == ["盘"]
        assert out["category_filter"] == "storage"

    def test_keywords_in_too_many_documents_are_ignored(self, tmp_path):
        docs = [
            _doc(
                f"d{i}",
                title=f"Title {i}",
                category=f"cat{i}",
                keywords=(["linux"] if i < 4 else []) + (["nginx"] if i < 3 else []),
            )
            for i in range(10)
        ]
        path = _write(tmp_path / "index.json", docs)
        out = L0HintProvider(index_path=path).run(query="linux nginx")
        # 4 of 10 documents > 0.3, 3 of 10 documents is not
        assert out["hints"]["matched_keywords"] == ["nginx"]
        assert out["hints"]["matched_doc_ids"] == ["d0", "d1", "d2"]
        out = L0HintProvider(index_path=path, max_keyword_doc_fraction=0.4).run(query="linux nginx")
        assert out["hints"]["matched_keywords"] == ["linux", "nginx"]
        assert out["hints"]["matched_doc_ids"] == ["d0", "d1", "d2", "d3"]

    def test_keyword_exactly_at_fraction_is_kept(self, tmp_path):
        docs = [_doc(f"d{i:03d}", title=f"Title {i}", keywords=["shared"] if i < 29 else []) for i in range(100)]
        path = _write(tmp_path / "index.json", docs)
        out = L0HintProvider(index_path=path, max_keyword_doc_fraction=0.29).run(query="shared disk")
        # 29 of 100 documents is not more than 0.29 of the documents
        assert out["hints"]["matched_keywords"] == ["shared"]

    def test_two_domains_give_no_filter(self, index_path):
        out = L0HintProvider(index_path=index_path).run(query="disk full 还是 退款")
        assert out["hints"]["domains"] == ["alerts", "payments"]
        assert out["hints"]["matched_doc_ids"] == ["alerts-disk", "payments-refund"]
        assert out["category_filter"] == ""

    def test_no_match_gives_empty_hints_and_filter(self, index_path):
        out = L0HintProvider(index_path=index_path).run(query="weather tomorrow")
        assert out["hints"] == L0HintProvider.empty_hints()
        assert out["category_filter"] == ""

    def test_category_name_in_query_counts_as_domain(self, index_path):
        provider = L0HintProvider(index_path=index_path)
        out = provider.run(query="question about payments")
        assert out["hints"]["domains"] == ["payments"]
        assert out["category_filter"] == "payments"
        out = provider.run(query="payments and disk full")
        assert out["hints"]["domains"] == ["alerts", "payments"]
        assert out["category_filter"] == ""

    def test_category_matching_its_own_documents_gives_one_domain(self, tmp_path):
        docs = [
            _doc("net", title="Network", category="network", keywords=["packet loss"]),
            _doc("other", title="Other Things", category="other"),
        ]
        path = _write(tmp_path / "index.json", docs)
        out = L0HintProvider(index_path=path).run(query="network packet loss")
        # the matched document and the mentioned category name point at the same category
        assert out["hints"]["domains"] == ["network"]
        assert out["category_filter"] == "network"

    def test_blank_categories_are_not_domains(self, tmp_path):
        docs = [
            _doc("a", title="Alpha Guide", category="", keywords=["kafka lag"]),
            _doc("b", title="Beta Guide", category="streaming", keywords=["kafka lag"]),
        ]
        path = _write(tmp_path / "index.json", docs)
        out = L0HintProvider(index_path=path, max_keyword_doc_fraction=1).run(query="kafka lag")
        assert out["hints"]["matched_doc_ids"] == ["a", "b"]
        assert out["hints"]["domains"] == ["streaming"]
        assert out["category_filter"] == "streaming"

    def test_entities_and_titles_are_reported(self, index_path):
        out = L0HintProvider(index_path=index_path).run(query="node_exporter says see the disk full runbook")
        hints = out["hints"]
        assert hints["entities"] == ["node_exporter"]
        assert hints["matched_titles"] == ["Disk Full Runbook"]
        assert hints["matched_keywords"] == ["disk full"]
        assert hints["matched_doc_ids"] == ["alerts-disk"]
        assert out["category_filter"] == "alerts"

    def test_chinese_titles_and_entities_are_reported(self, index_path):
        out = L0HintProvider(index_path=index_path).run(query="按照退款处理流程检查 refund-worker 日志")
        hints = out["hints"]
        assert hints["matched_titles"] == ["退款处理流程"]
        assert hints["entities"] == ["refund-worker"]
        assert hints["matched_keywords"] == ["退款"]
        assert hints["matched_doc_ids"] == ["payments-refund"]
        assert out["category_filter"] == "payments"

    def test_matched_doc_ids_are_sorted_and_unique(self, index_path):
        out = L0HintProvider(index_path=index_path).run(query="subscription pricing and the inode problem")
        assert out["hints"]["matched_doc_ids"] == ["alerts-disk", "faq-plans"]
        assert out["hints"]["matched_keywords"] == ["inode", "pricing", "subscription"]

    def test_disabled_gives_no_hints(self, index_path):
        out = L0HintProvider(index_path=index_path, enabled=False).run(query="My DISK FULL alert")
        assert out["hints"] == L0HintProvider.empty_hints()
        assert out["category_filter"] == ""

    @pytest.mark.parametrize("query", ["", "   "])
    def test_empty_query_gives_empty_hints(self, index_path, query):
        out = L0HintProvider(index_path=index_path).run(query=query)
        assert out["hints"] == L0HintProvider.empty_hints()
        assert out["category_filter"] == ""

    def test_index_is_reread_when_file_changes(self, tmp_path):
        path = tmp_path / "index.json"
        _write(path, BASE_DOCS)
        provider = L0HintProvider(index_path=str(path))
        provider.warm_up()
        assert provider.run(query="zookeeper session expired")["hints"]["matched_keywords"] == []
        assert provider.run(query="disk full")["category_filter"] == "alerts"
        before = path.stat().st_mtime_ns
        _write(path, [_doc("zk", title="ZK Guide", category="coordination", keywords=["zookeeper"])])
        os.utime(path, ns=(before + 2_000_000_000, before + 2_000_000_000))
        out = provider.run(query="zookeeper session expired")
        assert out["hints"]["matched_keywords"] == ["zookeeper"]
        assert out["category_filter"] == "coordination"
        assert provider.run(query="disk full")["hints"] == L0HintProvider.empty_hints()

    def test_missing_index_file_gives_empty_hints(self, tmp_path):
        path = tmp_path / "missing" / "index.json"
        provider = L0HintProvider(index_path=str(path))
        provider.warm_up()
        out = provider.run(query="My DISK FULL alert")
        assert out["hints"] == L0HintProvider.empty_hints()
        assert out["category_filter"] == ""
        _write(path, BASE_DOCS)
        assert provider.run(query="My DISK FULL alert")["category_filter"] == "alerts"

    def test_category_with_quotes_is_returned_literally(self, tmp_path):
        category = 'a" or 1==1 or "b'
        path = _write(tmp_path / "index.json", [_doc("q", title="Quoted", category=category, keywords=["disk full"])])
        out = L0HintProvider(index_path=path).run(query="disk full")
        assert out["hints"]["domains"] == [category]
        assert out["category_filter"] == category

    def test_index_file_is_not_modified(self, index_path):
        before = Path(index_path).read_bytes()
        mtime = Path(index_path).stat().st_mtime_ns
        provider = L0HintProvider(index_path=index_path)
        provider.run(query="My DISK FULL alert")
        provider.run(query="服务器磁盘满了怎么办")
        assert Path(index_path).read_bytes() == before
        assert Path(index_path).stat().st_mtime_ns == mtime

    def test_terms_spread_over_categories_give_no_domain(self, tmp_path):
        docs = [
            _doc("about-team", title="Team Page", category="about", keywords=["org chart"]),
            _doc("hiring-flow", title="Hiring Flow", category="hiring", keywords=["approval flow"]),
        ]
        stats = {
            "about": {"about": 1, "hiring": 5, "finance": 4},  # a category name that is an everyday word
            "approval flow": {"hiring": 4, "finance": 1},  # specific enough at purity 0.7 (4/5 = 0.8)
            "org chart": {"about": 1},
        }
        path = tmp_path / "index.json"
        KnowledgeIndex(documents=docs, term_categories=stats).save(path)
        provider = L0HintProvider(index_path=str(path), max_keyword_doc_fraction=1)
        out = provider.run(query="what about the approval flow")
        assert out["hints"]["matched_keywords"] == ["approval flow"]
        assert out["hints"]["domains"] == ["hiring"] and out["category_filter"] == "hiring"
        strict = L0HintProvider(index_path=str(path), max_keyword_doc_fraction=1, min_domain_purity=0.9)
        assert strict.run(query="what about the approval flow")["category_filter"] == ""
        assert provider.run(query="tell me about it")["hints"]["domains"] == []

    def test_matching_by_prefix_finds_what_trying_every_term_finds(self, tmp_path):
        """The terms filed under a query's own substrings are exactly the terms it can mention, in any script."""
        import random

        from components.core.text_matching import mentions

        rng = random.Random(7)
        words = ["disk", "Disk Full", "cpu", "cpus", "node_exporter", "c++", "STRASSE", "straße", "İstanbul", "k8s"]
        words += ["磁盘", "磁盘满", "盘", "退款处理", "日志轮转", "nginx报错", "api", "a", "ab", "x-ray", "q&a"]
        docs = [
            _doc(
                f"d{i}",
                title=rng.choice(words),
                category=rng.choice(["alerts", "存储", ""]),
                keywords=rng.sample(words, 4),
            )
            for i in range(60)
        ]
        path = _write(tmp_path / "knowledge_index.json", docs)
        provider = L0HintProvider(index_path=path, min_term_chars=1, min_cjk_term_chars=1, max_keyword_doc_fraction=1)
        provider.warm_up()
        queries = [
            "Disk full on the CPUs",
            "strasse İSTANBUL x-ray",
            "磁盘满了怎么办 nginx报错",
            "Q&A c++ k8s",
            "a",
            "ß",
        ]
        queries += ["".join(rng.choice(words) + rng.choice([" ", "", "-", "_"]) for _ in range(5)) for _ in range(40)]
        for query in queries:
            folded = query.casefold()
            every = {term for term in provider._index.terms if mentions(folded, term)}
            assert {t for t in provider._index.candidates(folded.casefold()) if mentions(folded, t)} == every
        assert len(provider._index.candidates("cpu")) < len(provider._index.terms)

    def test_hints_come_only_from_pages_the_caller_may_read(self, tmp_path):
        secret = _doc(
            "payroll",
            title="Zeta Payroll Runbook",
            category="treasury",
            keywords=["payroll"],
            entities=["zeta-bank"],
            access=["finance"],
        )
        path = _write(tmp_path / "index.json", [*BASE_DOCS, secret])
        provider = L0HintProvider(index_path=path)
        provider.warm_up()
        query = "zeta payroll runbook for treasury via zeta-bank"
        anonymous = provider.run(query=query)
        assert anonymous["hints"] == L0HintProvider.empty_hints() and anonymous["category_filter"] == ""
        assert provider.run(query=query, groups=["hr"])["hints"] == L0HintProvider.empty_hints()
        member = provider.run(query=query, groups=["Finance"])["hints"]
        assert member["matched_titles"] == ["Zeta Payroll Runbook"] and member["matched_doc_ids"] == ["payroll"]
        assert member["entities"] == ["zeta-bank"]
        # a term public pages have too still matches for everyone, through the public pages only
        shared = _doc("refund-run", title="Refund runs", category="payments", entities=["zeta-bank"])
        path = _write(tmp_path / "both.json", [*BASE_DOCS, secret, shared])
        provider = L0HintProvider(index_path=path)
        assert provider.run(query="zeta-bank")["hints"]["matched_doc_ids"] == ["refund-run"]
        assert provider.run(query="zeta-bank", groups=["*"])["hints"]["matched_doc_ids"] == ["payroll", "refund-run"]
