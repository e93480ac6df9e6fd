from __future__ import annotations

import itertools
import re

import pytest
from haystack import Document
from haystack.core.serialization import component_from_dict, component_to_dict

from components.rankers.rule_reranker import DEFAULT_WEIGHTS, RuleReranker


def _cand(
    source: str = "alerts/disk.md",
    chunk_index: int = 0,
    score: float | None = 0.9,
    content: str = "Check /var/log first when usage is high.",
    **meta,
) -> Document:
    base = {
        "source": source,
        "doc_id": source.removesuffix(".md").replace("/", "-"),
        "title": "Disk Full Runbook",
        "category": "alerts",
        "keywords": ["disk full", "inode"],
        "entities": ["node_exporter"],
        "chunk_index": chunk_index,
        "evidence_key": f"{source}#{chunk_index}",
        "attempt": "filtered",
    }
    return Document(id=f"{source}#{chunk_index}", content=content, score=score, meta={**base, **meta})


def _plans(score: float = 0.9, **meta) -> Document:
    fields = {
        "title": "Subscription Plans",
        "category": "product-faq",
        "keywords": ["subscription"],
        "entities": [],
    }
    return _cand("faq/plans.md", 0, score, "The Basic plan costs 10 dollars a month.", **{**fields, **meta})


# the weights the signal tests use (the shipped defaults are all 0: matches explain without reordering)
RULES = {"keyword": 0.02, "title": 0.03, "entity": 0.02, "domain": 0.01, "l0_document": 0.02}

HINTS = {
    "matched_titles": ["Disk Full Runbook"],
    "matched_keywords": ["disk full"],
    "domains": ["alerts"],
    "entities": ["node_exporter"],
    "matched_doc_ids": ["alerts-disk"],
}


def _keys(documents: list[Document]) -> list[str]:
    return [d.meta["evidence_key"] for d in documents]


class TestRuleReranker:
    def test_init_defaults(self):
        reranker = RuleReranker()
        assert reranker.weights == DEFAULT_WEIGHTS
        assert reranker.max_boost == 0.06
        assert reranker.trace_top_n == 5
        assert reranker.run(documents=[])["rerank_trace"]["weights"] == DEFAULT_WEIGHTS
        assert DEFAULT_WEIGHTS == {
            "keyword": 0.0,
            "title": 0.0,
            "entity": 0.0,
            "domain": 0.0,
            "l0_document": 0.0,
            "consensus_domain": 0.0,
        }
        out = reranker.run(documents=[_cand()], hints=HINTS)["documents"][0]
        assert out.score == 0.9  # every hint matches, nothing moves
        assert len(out.meta["hit_reasons"]) == 6

    def test_init_partial_weights_keep_other_defaults(self):
        reranker = RuleReranker(weights={"keyword": 0.05}, max_boost=0.2, trace_top_n=2)
        assert reranker.weights == {**DEFAULT_WEIGHTS, "keyword": 0.05}
        assert (reranker.max_boost, reranker.trace_top_n) == (0.2, 2)
        assert reranker.run(documents=[])["rerank_trace"]["weights"] == {**DEFAULT_WEIGHTS, "keyword": 0.05}

    @pytest.mark.parametrize(
        ("kwargs", "pattern"),
        [
            ({"weights": {"bogus": 0.1}}, r"weights.*'bogus'"),
            ({"weights": {"keyword": 0.1, "popularity": 0.2}}, r"weights.*'popularity'"),
            ({"weights": {"keyword": -0.1}}, re.escape("weights={'keyword': -0.1}")),
            ({"max_boost": -0.01}, r"max_boost=-0\.01\b"),
            ({"trace_top_n": -1}, r"trace_top_n=-1\b"),
        ],
    )
    def test_invalid_init(self, kwargs, pattern):
        with pytest.raises(ValueError, match=pattern):
            RuleReranker(**kwargs)

    def test_to_dict_from_dict(self):
        reranker = RuleReranker(
            weights={"keyword": 0.05, "domain": 0.0},
            max_boost=0.1,
            trace_top_n=3,
            consensus_top_n=4,
            consensus_min_share=0.5,
            lift_named_releases=False,
        )
        data = component_to_dict(reranker, "reranker")
        assert data["init_parameters"] == {
            "weights": {**DEFAULT_WEIGHTS, "keyword": 0.05},
            "max_boost": 0.1,
            "trace_top_n": 3,
            "consensus_top_n": 4,
            "consensus_min_share": 0.5,
            "lift_named_releases": False,
        }
        restored = component_from_dict(RuleReranker, data, "reranker")
        assert isinstance(restored, RuleReranker)
        assert restored.weights == {**DEFAULT_WEIGHTS, "keyword": 0.05}
        assert (restored.max_boost, restored.trace_top_n) == (0.1, 3)
        assert (restored.consensus_top_n, restored.consensus_min_share) == (4, 0.5)
        assert restored.lift_named_releases is False
        trace = restored.run(documents=[_cand()], hints=HINTS)["rerank_trace"]
        assert trace["weights"] == {**DEFAULT_WEIGHTS, "keyword": 0.05, "domain": 0.0}
        assert trace["max_boost"] == 0.1

    @pytest.mark.parametrize("lift", [True, False])
    def test_a_release_the_question_names_takes_the_best_score_of_its_pages_releases(self, lift):
        # HAMi: the current uninstall page outscored its v1.3.0 release by more than the gate's max_gap
        current, asked, other = (
            "docs/uninstall.md",
            "versioned_docs/version-v1.3.0/uninstall.md",
            "versioned_docs/version-v2.9.0/uninstall.md",
        )
        docs = [
            _cand(current, 0, 0.96),
            _cand(other, 0, 0.959),
            _cand("docs/install.md", 0, 0.95),
            _cand(asked, 0, 0.93),
        ]
        docs.append(_cand(asked, 1, 0.92))
        out = RuleReranker(lift_named_releases=lift).run(documents=docs, query="How do I uninstall HAMi v1.3?")
        ranked = {(d.meta["source"], d.meta["chunk_index"]): d for d in out["documents"]}
        if lift:
            assert ranked[(asked, 0)].score == pytest.approx(0.96)
            assert ranked[(asked, 1)].score == pytest.approx(0.95)  # the release's chunks keep their order
            assert "release:v1.3.0" in ranked[(asked, 0)].meta["hit_reasons"]
            assert ranked[(asked, 0)].meta["boosts"][-1] == {"signal": "release", "value": "v1.3.0", "weight": 0.03}
            # the tie breaks on base score; which release of the page comes first is the deduper's (order_releases)
            assert [d.meta["source"] for d in out["documents"]][:2] == [current, asked]
        else:
            assert ranked[(asked, 0)].score == pytest.approx(0.93)
        assert ranked[("docs/install.md", 0)].score == pytest.approx(0.95)  # another page is not lifted
        assert [d.score for d in docs] == [0.96, 0.959, 0.95, 0.93, 0.92]  # inputs untouched

    @pytest.mark.parametrize(
        "query",
        [
            "How do I uninstall HAMi?",  # no release named
            "How do I uninstall HAMi v4.0?",  # a release the candidates do not have
            None,
        ],
    )
    def test_no_named_release_among_the_candidates_lifts_nothing(self, query):
        docs = [_cand("docs/uninstall.md", 0, 0.96), _cand("versioned_docs/version-v1.3.0/uninstall.md", 0, 0.93)]
        out = RuleReranker().run(documents=docs, query=query)
        assert [d.score for d in out["documents"]] == [0.96, 0.93]
        # and a page without releases is never lifted, whatever the question names
        alone = RuleReranker().run(
            documents=[_cand("docs/a.md", 0, 0.9), _cand("docs/v1.3/b.md", 0, 0.8)], query="v1.3"
        )
        assert [d.score for d in alone["documents"]] == [0.9, 0.8]

    def test_default_round_trip(self):
        restored = component_from_dict(RuleReranker, component_to_dict(RuleReranker(), "r"), "r")
        assert restored.run(documents=[])["rerank_trace"]["weights"] == DEFAULT_WEIGHTS
        assert (restored.max_boost, restored.trace_top_n) == (0.06, 5)

    @pytest.mark.parametrize(
        ("doc_meta", "content", "hints", "reason", "weight"),
        [
            ({}, "no match here", {"matched_keywords": ["inode"]}, "keyword:inode", 0.02),
            ({}, "no match here", {"matched_keywords": ["Disk Full"]}, "keyword:Disk Full", 0.02),
            (
                {"keywords": []},
                "The DISK FULL alert fired.",
                {"matched_keywords": ["disk full"]},
                "keyword:disk full",
                0.02,
            ),
            ({"keywords": []}, "服务器磁盘满了", {"matched_keywords": ["磁盘满"]}, "keyword:磁盘满", 0.02),
            ({}, "no match here", {"matched_titles": ["disk full runbook"]}, "title:disk full runbook", 0.03),
            ({}, "no match here", {"entities": ["node_exporter"]}, "entity:node_exporter", 0.02),
            (
                {"entities": []},
                "Restart NODE_EXPORTER now.",
                {"entities": ["node_exporter"]},
                "entity:node_exporter",
                0.02,
            ),
            ({}, "no match here", {"domains": ["alerts"]}, "domain:alerts", 0.01),
            ({}, "no match here", {"matched_doc_ids": ["alerts-disk"]}, "l0_document:alerts-disk", 0.02),
        ],
    )
    def test_each_signal_boosts_and_is_recorded(self, doc_meta, content, hints, reason, weight):
        out = RuleReranker(weights=RULES).run(documents=[_cand(content=content, **doc_meta)], hints=hints)
        doc = out["documents"][0]
        assert doc.meta["hit_reasons"] == ["l1_filtered", reason]
        assert doc.meta["base_score"] == 0.9
        assert doc.score == pytest.approx(0.9 + weight)
        signal, value = reason.split(":", 1)
        assert doc.meta["boosts"] == [{"signal": signal, "value": value, "weight": weight}]

    @pytest.mark.parametrize(
        ("content", "hints"),
        [
            ("all cpus are busy", {"matched_keywords": ["cpu"]}),
            ("the diskfull flag", {"matched_keywords": ["disk full"]}),
            ("no match here", {"matched_titles": ["Disk Full"]}),
            ("no match here", {"matched_titles": ["Disk Full Runbook v2"]}),
            ("node_exporters everywhere", {"entities": ["node_exporter"], "matched_keywords": []}),
            ("no match here", {"domains": ["payments", "storage"]}),
            ("no match here", {"matched_doc_ids": ["alerts-disk-old", "payments-refund"]}),
        ],
    )
    def test_non_matching_hints_give_no_boost(self, content, hints):
        doc = _cand(content=content, keywords=[], entities=[])
        out = RuleReranker(weights=RULES).run(documents=[doc], hints=hints)["documents"][0]
        assert out.meta["hit_reasons"] == ["l1_filtered"]
        assert out.meta["boosts"] == []
        assert out.score == 0.9

    def test_boosts_are_summed_and_capped(self):
        out = RuleReranker(weights=RULES).run(documents=[_cand()], hints=HINTS)["documents"][0]
        assert out.meta["hit_reasons"] == [
            "l1_filtered",
            "keyword:disk full",
            "title:Disk Full Runbook",
            "entity:node_exporter",
            "domain:alerts",
            "l0_document:alerts-disk",
        ]
        assert out.score == pytest.approx(0.9 + 0.06)
        uncapped = RuleReranker(weights=RULES, max_boost=1.0).run(documents=[_cand()], hints=HINTS)["documents"][0]
        assert uncapped.score == pytest.approx(0.9 + 0.1)
        partial = RuleReranker(weights=RULES).run(
            documents=[_cand()], hints={"matched_keywords": ["disk full"], "domains": ["alerts"]}
        )["documents"][0]
        assert partial.score == pytest.approx(0.9 + 0.03)
        no_boost = RuleReranker(weights=RULES, max_boost=0).run(documents=[_cand()], hints=HINTS)["documents"][0]
        assert no_boost.score == pytest.approx(0.9)
        assert len(no_boost.meta["hit_reasons"]) == 6

    def test_hints_move_lower_similarity_candidate_up(self):
        docs = [_plans(score=0.9), _cand(score=0.86)]
        out = RuleReranker(weights=RULES).run(documents=docs, hints=HINTS)
        assert _keys(out["documents"]) == ["alerts/disk.md#0", "faq/plans.md#0"]
        assert out["documents"][0].score == pytest.approx(0.92)
        assert out["documents"][1].score == pytest.approx(0.9)

    def test_without_hints_order_is_similarity_order(self):
        docs = [_cand("a.md", 0, 0.5), _cand("b.md", 0, 0.9), _cand("c.md", 0, 0.7, attempt=None)]
        for hints in (None, {}):
            out = RuleReranker().run(documents=docs, hints=hints)
            assert _keys(out["documents"]) == ["b.md#0", "c.md#0", "a.md#0"]
            assert [d.score for d in out["documents"]] == [0.9, 0.7, 0.5]
            assert [d.meta["hit_reasons"] for d in out["documents"]] == [
                ["l1_filtered"],
                ["l1_vector"],
                ["l1_filtered"],
            ]

    def test_first_hit_reason_names_the_attempt(self):
        out = RuleReranker().run(documents=[_cand(attempt="unfiltered")], hints=HINTS)["documents"][0]
        assert out.meta["hit_reasons"][0] == "l1_unfiltered"

    def test_a_candidate_both_attempts_found_names_both(self):
        doc = _cand(attempt="unfiltered", attempts=["filtered", "unfiltered"])
        out = RuleReranker().run(documents=[doc], hints=HINTS)["documents"][0]
        # the attempt whose score it carries first, then the other, each once
        assert out.meta["hit_reasons"][:2] == ["l1_unfiltered", "l1_filtered"]
        assert sum(r.startswith("l1_") for r in out.meta["hit_reasons"]) == 2

    def test_ties_break_on_source_then_chunk_index(self):
        docs = [_cand("b.md", 1, 0.8), _cand("a.md", 2, 0.8), _cand("a.md", 0, 0.8), _cand("b.md", 0, 0.8)]
        expected = ["a.md#0", "a.md#2", "b.md#0", "b.md#1"]
        for permutation in itertools.permutations(docs):
            out = RuleReranker().run(documents=list(permutation), hints=HINTS)
            assert _keys(out["documents"]) == expected

    def test_chunk_index_ties_compare_numerically(self):
        docs = [_cand("a.md", 10, 0.8), _cand("a.md", 2, 0.8)]
        assert _keys(RuleReranker().run(documents=docs)["documents"]) == ["a.md#2", "a.md#10"]

    def test_equal_final_scores_break_on_base_score(self):
        boosted = _cand("a.md", 0, 0.5, keywords=["kafka"])
        plain = _cand("z.md", 0, 0.75, keywords=[])
        reranker = RuleReranker(weights={"keyword": 0.25}, max_boost=0.5)
        for docs in ([boosted, plain], [plain, boosted]):
            out = reranker.run(documents=docs, hints={"matched_keywords": ["kafka"]})["documents"]
            assert [d.score for d in out] == [0.75, 0.75]
            assert _keys(out) == ["z.md#0", "a.md#0"]

    def test_rerank_trace_candidates(self):
        docs = [_cand("a.md", i, 0.5 + i / 100, title="Alpha", keywords=[], entities=[]) for i in range(8)]
        docs.append(_cand())
        out = RuleReranker(weights=RULES, trace_top_n=3).run(documents=docs, hints=HINTS)
        trace = out["rerank_trace"]
        assert len(out["documents"]) == 9
        assert _keys(out["documents"])[0] == "alerts/disk.md#0"
        assert trace["max_boost"] == 0.06
        assert trace["weights"] == {**DEFAULT_WEIGHTS, **RULES}
        assert len(trace["candidates"]) == 3
        assert [item["rank"] for item in trace["candidates"]] == [1, 2, 3]
        assert all(
            set(item) == {"rank", "source", "evidence_key", "base_score", "final_score", "boost_reasons"}
            for item in trace["candidates"]
        )
        top = trace["candidates"][0]
        assert top["source"] == "alerts/disk.md"
        assert top["evidence_key"] == "alerts/disk.md#0"
        assert top["base_score"] == 0.9
        assert top["final_score"] == 0.96
        assert top["boost_reasons"] == [
            "keyword:disk full (+0.02)",
            "title:Disk Full Runbook (+0.03)",
            "entity:node_exporter (+0.02)",
            "domain:alerts (+0.01)",
            "l0_document:alerts-disk (+0.02)",
        ]
        assert [item["evidence_key"] for item in trace["candidates"][1:]] == ["a.md#7", "a.md#6"]
        assert trace["candidates"][1]["base_score"] == 0.57
        assert trace["candidates"][1]["final_score"] == 0.58
        assert trace["candidates"][1]["boost_reasons"] == ["domain:alerts (+0.01)"]

    def test_trace_top_n_zero_keeps_all_documents(self):
        out = RuleReranker(trace_top_n=0).run(documents=[_cand(), _plans()], hints=HINTS)
        assert out["rerank_trace"]["candidates"] == []
        assert len(out["documents"]) == 2

    def test_weights_change_the_outcome(self):
        docs = [_plans(score=0.88, keywords=[]), _cand(score=0.9, keywords=["disk full"])]
        hints = {"matched_keywords": ["disk full"], "matched_titles": ["Subscription Plans"]}
        default = RuleReranker(weights=RULES).run(documents=docs, hints=hints)["documents"]
        assert _keys(default) == ["alerts/disk.md#0", "faq/plans.md#0"]
        heavy_title = RuleReranker(weights={**RULES, "title": 0.05}).run(documents=docs, hints=hints)["documents"]
        assert _keys(heavy_title) == ["faq/plans.md#0", "alerts/disk.md#0"]
        assert heavy_title[0].score == pytest.approx(0.93)

    def test_zero_weight_explains_without_reordering(self):
        reranker = RuleReranker(weights={"keyword": 0.0, "domain": 0})
        out = reranker.run(documents=[_cand()], hints=HINTS)["documents"][0]
        assert out.meta["hit_reasons"] == [
            "l1_filtered",
            "keyword:disk full",
            "title:Disk Full Runbook",
            "entity:node_exporter",
            "domain:alerts",
            "l0_document:alerts-disk",
        ]
        weights = {b["signal"]: b["weight"] for b in out.meta["boosts"]}
        assert weights["keyword"] == 0.0 and weights["domain"] == 0.0
        only_keyword = reranker.run(documents=[_cand()], hints={"matched_keywords": ["disk full"]})["documents"][0]
        assert only_keyword.score == 0.9
        assert only_keyword.meta["hit_reasons"] == ["l1_filtered", "keyword:disk full"]

    def test_missing_score_counts_as_zero(self):
        out = RuleReranker(weights=RULES).run(documents=[_cand(score=None)], hints={"domains": ["alerts"]})[
            "documents"
        ][0]
        assert out.meta["base_score"] == 0.0
        assert out.score == pytest.approx(0.01)

    def test_output_keeps_id_content_and_meta(self):
        doc = _cand()
        out = RuleReranker().run(documents=[doc], hints=HINTS)["documents"][0]
        assert out.id == doc.id
        assert out.content == doc.content
        assert {k: out.meta[k] for k in doc.meta} == doc.meta

    def test_empty_input_gives_empty_output(self):
        out = RuleReranker().run(documents=[], hints=HINTS)
        assert set(out) == {"documents", "rerank_trace"}
        assert out["documents"] == []
        assert out["rerank_trace"]["candidates"] == []

    def test_inputs_are_not_mutated(self):
        docs = [_plans(score=0.9), _cand(score=0.86)]
        hints = {k: list(v) for k, v in HINTS.items()}
        snapshot = [d.to_dict() for d in docs]
        order = [d.id for d in docs]
        out = RuleReranker().run(documents=docs, hints=hints)
        assert [d.to_dict() for d in docs] == snapshot
        assert [d.id for d in docs] == order
        assert hints == HINTS
        assert all("hit_reasons" not in d.meta and "base_score" not in d.meta for d in docs)
        assert all(o is not d for o in out["documents"] for d in docs)

    def test_consensus_domain_boosts_the_category_the_top_candidates_agree_on(self):
        docs = [
            _cand(source="a.md", category="alerts", score=0.95),
            _cand(source="b.md", category="alerts", score=0.94, chunk_index=1),
            _cand(source="c.md", category="payments", score=0.945, chunk_index=2),
            _cand(source="d.md", category="alerts", score=0.93, chunk_index=3),
        ]
        off = RuleReranker().run(documents=docs)["documents"]
        assert [d.meta["source"] for d in off] == ["a.md", "c.md", "b.md", "d.md"]
        on = RuleReranker(weights={"consensus_domain": 0.01}, consensus_top_n=4, consensus_min_share=0.6).run(
            documents=docs
        )["documents"]
        assert [d.meta["source"] for d in on] == ["a.md", "b.md", "c.md", "d.md"]
        assert on[2].score < on[1].score  # b (alerts, 0.94 + 0.01) overtook c (payments, 0.945)
        assert "consensus_domain:alerts" in on[0].meta["hit_reasons"]
        split = RuleReranker(weights={"consensus_domain": 0.01}, consensus_min_share=0.95).run(documents=docs)
        assert all("consensus_domain:alerts" not in d.meta["hit_reasons"] for d in split["documents"])

    def test_invalid_consensus_parameters(self):
        with pytest.raises(ValueError, match="consensus_top_n=0"):
            RuleReranker(consensus_top_n=0)
        with pytest.raises(ValueError, match=r"consensus_min_share=1\.5"):
            RuleReranker(consensus_min_share=1.5)
