from __future__ import annotations

from dataclasses import replace

import pytest
from haystack import Document
from haystack.core.serialization import component_from_dict, component_to_dict

from components.evidence.evidence_deduper import EvidenceDeduper


def _block(
    source: str = "alerts/disk.md",
    chunk_index: int = 0,
    score: float = 0.9,
    reasons: list[str] | None = None,
    attempt: str = "filtered",
    **meta,
) -> Document:
    base = {
        "source": source,
        "doc_id": source.removesuffix(".md").replace("/", "-"),
        "title": "Disk Full Runbook",
        "category": "alerts",
        "keywords": ["disk full"],
        "entities": ["node_exporter"],
        "chunk_index": chunk_index,
        "evidence_key": f"{source}#{chunk_index}",
        "attempt": attempt,
        "hit_reasons": reasons if reasons is not None else [f"l1_{attempt}"],
    }
    return Document(
        id=f"{source}#{chunk_index}@{attempt}",
        content=f"chunk {chunk_index} of {source}",
        score=score,
        meta={**base, **meta},
    )


def _keys(documents: list[Document]) -> list[str]:
    return [d.meta["evidence_key"] for d in documents]


class TestEvidenceDeduper:
    def test_init_defaults(self):
        deduper = EvidenceDeduper()
        assert deduper.max_per_document == 2
        assert deduper.max_blocks == 6
        assert deduper.versions_share_cap is True
        assert deduper.order_releases is True

    @pytest.mark.parametrize(
        ("kwargs", "pattern"),
        [
            ({"max_per_document": 0}, r"max_per_document=0\b"),
            ({"max_per_document": -1}, r"max_per_document=-1\b"),
            ({"max_blocks": 0}, r"max_blocks=0\b"),
            ({"max_blocks": -3}, r"max_blocks=-3\b"),
        ],
    )
    def test_invalid_init(self, kwargs, pattern):
        with pytest.raises(ValueError, match=pattern):
            EvidenceDeduper(**kwargs)

    def test_to_dict_from_dict(self):
        deduper = EvidenceDeduper(max_per_document=1, max_blocks=4, versions_share_cap=False, order_releases=False)
        data = component_to_dict(deduper, "deduper")
        assert data["init_parameters"] == {
            "max_per_document": 1,
            "max_blocks": 4,
            "versions_share_cap": False,
            "order_releases": False,
        }
        restored = component_from_dict(EvidenceDeduper, data, "deduper")
        assert isinstance(restored, EvidenceDeduper)
        assert (restored.max_per_document, restored.max_blocks, restored.versions_share_cap) == (1, 4, False)
        assert restored.order_releases is False
        out = restored.run(documents=[_block(chunk_index=0), _block(chunk_index=1)])
        assert out["dedup_summary"]["final_count"] == 1

    def test_distinct_chunks_of_one_source_are_kept_separately(self):
        docs = [_block(chunk_index=0, score=0.9), _block(chunk_index=3, score=0.8)]
        out = EvidenceDeduper().run(documents=docs)
        assert _keys(out["documents"]) == ["alerts/disk.md#0", "alerts/disk.md#3"]
        assert [d.score for d in out["documents"]] == [0.9, 0.8]
        assert out["dedup_summary"]["dropped"] == []
        assert out["dedup_summary"]["candidate_count"] == 2
        assert out["dedup_summary"]["final_count"] == 2

    def test_same_evidence_key_collapses_into_one_block(self):
        first = _block(score=0.9, reasons=["l1_filtered", "keyword:disk full"])
        second = _block(
            score=0.95,
            attempt="unfiltered",
            reasons=["l1_unfiltered", "keyword:disk full", "entity:node_exporter"],
        )
        out = EvidenceDeduper().run(documents=[first, second])
        assert len(out["documents"]) == 1
        block = out["documents"][0]
        assert block.meta["evidence_key"] == "alerts/disk.md#0"
        assert block.score == 0.95
        assert block.meta["hit_reasons"] == [
            "l1_filtered",
            "keyword:disk full",
            "l1_unfiltered",
            "entity:node_exporter",
        ]
        assert block.meta["merged_from"] == ["filtered", "unfiltered"]
        summary = out["dedup_summary"]
        assert summary["dropped"] == [
            {"evidence_key": "alerts/disk.md#0", "source": "alerts/disk.md", "reason": "duplicate_key"}
        ]
        assert summary["candidate_count"] == 2
        assert summary["final_count"] == 1

    def test_merge_keeps_higher_score_when_first_is_higher(self):
        first = _block(score=0.97, reasons=["l1_filtered"])
        second = _block(score=0.6, attempt="unfiltered", reasons=["l1_unfiltered", "domain:alerts"])
        block = EvidenceDeduper().run(documents=[first, second])["documents"][0]
        assert block.score == 0.97
        assert block.meta["hit_reasons"] == ["l1_filtered", "l1_unfiltered", "domain:alerts"]

    def test_merged_block_keeps_its_first_rank_position(self):
        docs = [
            _block("a.md", 0, 0.9),
            _block("b.md", 0, 0.8),
            _block("a.md", 0, 0.7, attempt="unfiltered"),
        ]
        out = EvidenceDeduper().run(documents=docs)
        assert _keys(out["documents"]) == ["a.md#0", "b.md#0"]
        assert out["documents"][0].score == 0.9

    def test_three_duplicates_merge_all_reasons(self):
        docs = [
            _block(score=0.7, reasons=["l1_filtered"]),
            _block(score=0.8, attempt="unfiltered", reasons=["l1_unfiltered", "title:Disk Full Runbook"]),
            _block(score=0.75, attempt="keyword", reasons=["l1_keyword", "keyword:disk full"]),
        ]
        out = EvidenceDeduper().run(documents=docs)
        block = out["documents"][0]
        assert block.score == 0.8
        assert block.meta["hit_reasons"] == [
            "l1_filtered",
            "l1_unfiltered",
            "title:Disk Full Runbook",
            "l1_keyword",
            "keyword:disk full",
        ]
        assert [d["reason"] for d in out["dedup_summary"]["dropped"]] == ["duplicate_key", "duplicate_key"]

    def test_per_document_cap(self):
        docs = [_block(chunk_index=i, score=0.9 - i / 10) for i in range(4)]
        docs.append(_block("faq/plans.md", 0, 0.3))
        out = EvidenceDeduper(max_per_document=2).run(documents=docs)
        assert _keys(out["documents"]) == ["alerts/disk.md#0", "alerts/disk.md#1", "faq/plans.md#0"]
        assert out["dedup_summary"]["dropped"] == [
            {"evidence_key": "alerts/disk.md#2", "source": "alerts/disk.md", "reason": "per_document_cap"},
            {"evidence_key": "alerts/disk.md#3", "source": "alerts/disk.md", "reason": "per_document_cap"},
        ]

    @pytest.mark.parametrize("share", [True, False])
    def test_a_pages_versions_share_its_cap(self, share):
        # WasmEdge keeps one file per release of its C API reference: nine releases filled the evidence
        sources = ["ref/0.10.x.md", "ref/0.9.x.md", "ref/latest.md", "ref/0.10.x.md", "guide/aot.md"]
        docs = [_block(s, i, 0.9 - i / 100) for i, s in enumerate(sources)]
        # in rank order (the order of releases has a test of its own)
        out = EvidenceDeduper(max_per_document=2, versions_share_cap=share, order_releases=False).run(documents=docs)
        if share:
            assert _keys(out["documents"]) == ["ref/0.10.x.md#0", "ref/0.9.x.md#1", "guide/aot.md#4"]
            assert [(d["source"], d["reason"]) for d in out["dedup_summary"]["dropped"]] == [
                ("ref/latest.md", "page_versions_cap"),
                ("ref/0.10.x.md", "page_versions_cap"),
            ]
        else:
            assert len(out["documents"]) == 5
        assert [d.meta["source"] for d in docs] == sources  # inputs untouched

    @pytest.mark.parametrize("order", [True, False])
    def test_the_ranks_a_pages_releases_earned_go_to_the_current_one_first(self, order):
        # HAMi: the two oldest releases' chunks scored highest, the current page's lower
        old, older, current = (
            "versioned_docs/version-v2.5.0/uninstall.md",
            "versioned_docs/version-v1.3.0/uninstall.md",
            "docs/uninstall.md",
        )
        sources = [older, old, "docs/install.md", current, current]
        docs = [
            _block(s, i, 0.96 - i / 100, doc_id=s) for i, s in enumerate(sources)
        ]  # one doc_id per release: they are documents of their own
        out = EvidenceDeduper(max_per_document=2, order_releases=order).run(documents=docs, query="uninstall HAMi")
        kept = [(d.meta["source"], d.meta["chunk_index"]) for d in out["documents"]]
        if order:
            # the page's first two ranks (0 and 1) go to the current page's chunks, the other page keeps its rank
            assert kept == [(current, 3), (current, 4), ("docs/install.md", 2)]
            assert [d.score for d in out["documents"]] == [docs[3].score, docs[4].score, docs[2].score]
        else:
            assert kept == [(older, 0), (old, 1), ("docs/install.md", 2)]

    def test_a_release_the_question_names_comes_first(self):
        sources = [
            "docs/uninstall.md",
            "versioned_docs/version-v2.9.0/uninstall.md",
            "versioned_docs/version-v1.3.0/uninstall.md",
        ]
        docs = [_block(s, i, 0.9 - i / 100, doc_id=s) for i, s in enumerate(sources)]
        for query, first in (
            ("How do I uninstall HAMi v1.3?", sources[2]),
            ("How do I uninstall HAMi 2.9.0?", sources[1]),
            ("How do I uninstall HAMi?", sources[0]),
            (None, sources[0]),
        ):
            out = EvidenceDeduper(max_per_document=3).run(documents=docs, query=query)
            assert out["documents"][0].meta["source"] == first, query
        # the current page first whichever release earned the first rank
        for query in ("How do I uninstall HAMi?", None):
            out = EvidenceDeduper(max_per_document=3).run(documents=docs[::-1], query=query)
            assert [d.meta["source"] for d in out["documents"]] == [sources[0], sources[1], sources[2]]

    def test_a_releases_block_with_the_text_another_release_gave_is_left_out(self):
        same = "Run helm uninstall hami -n kube-system."
        docs = [
            _block("docs/uninstall.md", 0, 0.96, doc_id="current"),
            _block("versioned_docs/version-v2.9.0/uninstall.md", 0, 0.96, doc_id="v2.9.0"),
            _block("versioned_docs/version-v2.9.0/uninstall.md", 1, 0.95, doc_id="v2.9.0"),
            _block("docs/other.md", 0, 0.94, doc_id="other"),  # the same words on another page are its own evidence
            _block("docs/other.md", 1, 0.93, doc_id="other"),  # ... and twice on one page, twice
        ]
        docs = [
            replace(d, content=same) if d.meta["chunk_index"] == 0 or d.meta["doc_id"] == "other" else d for d in docs
        ]
        out = EvidenceDeduper(max_per_document=2).run(documents=docs)
        assert [d.meta["evidence_key"] for d in out["documents"]] == [
            "docs/uninstall.md#0",
            "versioned_docs/version-v2.9.0/uninstall.md#1",
            "docs/other.md#0",
            "docs/other.md#1",
        ]
        assert out["dedup_summary"]["dropped"] == [
            {
                "evidence_key": "versioned_docs/version-v2.9.0/uninstall.md#0",
                "source": "versioned_docs/version-v2.9.0/uninstall.md",
                "reason": "same_text_as_release",
            }
        ]
        kept = EvidenceDeduper(max_per_document=2, order_releases=False).run(documents=docs)
        assert len(kept["documents"]) == 4 and kept["documents"][1].meta["chunk_index"] == 0

    def test_per_document_cap_uses_source_without_doc_id(self):
        docs = [_block(chunk_index=i, doc_id=None) for i in range(3)]
        out = EvidenceDeduper(max_per_document=1).run(documents=docs)
        assert _keys(out["documents"]) == ["alerts/disk.md#0"]
        assert [d["reason"] for d in out["dedup_summary"]["dropped"]] == ["per_document_cap", "per_document_cap"]

    def test_max_blocks(self):
        docs = [_block(f"doc{i}.md", 0, 0.9 - i / 100) for i in range(5)]
        out = EvidenceDeduper(max_blocks=3).run(documents=docs)
        assert _keys(out["documents"]) == ["doc0.md#0", "doc1.md#0", "doc2.md#0"]
        assert out["dedup_summary"]["dropped"] == [
            {"evidence_key": "doc3.md#0", "source": "doc3.md", "reason": "max_blocks"},
            {"evidence_key": "doc4.md#0", "source": "doc4.md", "reason": "max_blocks"},
        ]
        assert out["dedup_summary"]["final_count"] == 3
        assert out["dedup_summary"]["candidate_count"] == 5

    def test_summary_accounts_for_every_drop(self):
        docs = [
            _block("a.md", 0, 0.95),
            _block("a.md", 0, 0.94, attempt="unfiltered"),
            _block("a.md", 1, 0.93),
            _block("a.md", 2, 0.92),
            _block("b.md", 0, 0.91),
            _block("c.md", 0, 0.90),
            _block("d.md", 0, 0.89),
        ]
        out = EvidenceDeduper(max_per_document=2, max_blocks=4).run(documents=docs)
        summary = out["dedup_summary"]
        assert _keys(out["documents"]) == ["a.md#0", "a.md#1", "b.md#0", "c.md#0"]
        assert summary["candidate_count"] == 7
        assert summary["final_count"] == 4
        assert summary["max_per_document"] == 2
        assert summary["max_blocks"] == 4
        assert summary["dropped"] == [
            {"evidence_key": "a.md#0", "source": "a.md", "reason": "duplicate_key"},
            {"evidence_key": "a.md#2", "source": "a.md", "reason": "per_document_cap"},
            {"evidence_key": "d.md#0", "source": "d.md", "reason": "max_blocks"},
        ]
        assert summary["candidate_count"] == summary["final_count"] + len(summary["dropped"])

    def test_missing_evidence_key_falls_back_to_document_id(self):
        one = Document(id="x1", content="alpha", score=0.9, meta={"source": "s.md", "hit_reasons": ["l1_vector"]})
        same = Document(id="x1", content="alpha", score=0.8, meta={"source": "s.md", "hit_reasons": ["keyword:k"]})
        other = Document(id="x2", content="beta", score=0.7, meta={"source": "s.md", "hit_reasons": ["l1_vector"]})
        out = EvidenceDeduper().run(documents=[one, same, other])
        assert [d.id for d in out["documents"]] == ["x1", "x2"]
        assert out["documents"][0].meta["hit_reasons"] == ["l1_vector", "keyword:k"]
        assert out["dedup_summary"]["dropped"] == [{"evidence_key": "x1", "source": "s.md", "reason": "duplicate_key"}]

    def test_empty_input_gives_empty_output(self):
        out = EvidenceDeduper().run(documents=[])
        assert out["documents"] == []
        assert out["dedup_summary"]["candidate_count"] == 0
        assert out["dedup_summary"]["final_count"] == 0
        assert out["dedup_summary"]["dropped"] == []

    def test_inputs_are_not_mutated(self):
        docs = [
            _block(score=0.9, reasons=["l1_filtered", "keyword:disk full"]),
            _block(score=0.95, attempt="unfiltered", reasons=["l1_unfiltered", "entity:node_exporter"]),
            _block(chunk_index=1, score=0.8),
            _block(chunk_index=2, score=0.7),
        ]
        snapshot = [d.to_dict() for d in docs]
        EvidenceDeduper(max_per_document=2).run(documents=docs)
        assert [d.to_dict() for d in docs] == snapshot
        assert len(docs) == 4

    def test_returned_documents_are_copies(self):
        docs = [_block(chunk_index=0), _block(chunk_index=1)]
        snapshot = [d.to_dict() for d in docs]
        out = EvidenceDeduper().run(documents=docs)
        assert all(block is not doc for block in out["documents"] for doc in docs)
        for block in out["documents"]:
            block.meta["hit_reasons"] = ["changed downstream"]
        assert [d.to_dict() for d in docs] == snapshot
