from __future__ import annotations

import copy

import pytest
from haystack import Document
from haystack.core.serialization import component_from_dict, component_to_dict

from components.evidence.evidence_gate import EvidenceGate

NOISE = {
    "en": {"p50": 0.90, "p90": 0.91, "p95": 0.92, "max": 0.93},
    "zh": {"p50": 0.91, "p90": 0.92, "p95": 0.93, "max": 0.94},
}
FAMILIAR = {"terms": 4, "known": 4}
UNFAMILIAR = {"terms": 4, "known": 0}


def trace(terms: dict | None = FAMILIAR, noise: dict | None = NOISE) -> dict:
    return {"calibration": {"noise_similarity": noise} if noise else None, "query_terms": terms}


def cand(i: int, similarity: float, coverage: float = 0.0, score: float | None = None) -> Document:
    return Document(
        id=f"c{i}",
        content=f"chunk {i}",
        score=similarity if score is None else score,
        meta={
            "similarity": similarity,
            "lexical_coverage": coverage,
            "evidence_key": f"d{i}.md#0",
            "source": f"d{i}.md",
        },
    )


def keys(out: dict) -> list[str]:
    return [d.meta["evidence_key"] for d in out["documents"]]


class TestEvidenceGate:
    def test_init_defaults(self):
        gate = EvidenceGate()
        assert (gate.dense_margin, gate.unfamiliar_dense_margin, gate.familiar_share) == (0.005, 0.0075, 0.3)
        assert (gate.lexical_coverage, gate.lexical_margin, gate.min_lexical_terms) == (0.2, 0.04, 2)
        assert (gate.decision_depth, gate.max_gap, gate.noise_level) == (5, 0.02, "p95")
        assert (gate.high_lead, gate.medium_lead) == (0.02, 0.006)
        assert (gate.uncalibrated_noise, gate.trace_rejected, gate.lead_skips_copies) == (0.935, 10, True)

    @pytest.mark.parametrize(
        ("kwargs", "match"),
        [
            ({"noise_level": "p99"}, "noise_level='p99'"),
            ({"lexical_coverage": 1.5}, "lexical_coverage=1.5"),
            ({"familiar_share": -0.1}, "familiar_share=-0.1"),
            ({"lexical_margin": -0.01}, "lexical_margin=-0.01"),
            ({"max_gap": -1}, "max_gap=-1"),
            ({"decision_depth": 0}, "decision_depth=0"),
            ({"medium_lead": 0.05, "high_lead": 0.01}, "medium_lead=0.05"),
            ({"medium_lead": -0.01}, r"medium_lead=-0\.01"),
        ],
    )
    def test_invalid_init(self, kwargs, match):
        with pytest.raises(ValueError, match=match):
            EvidenceGate(**kwargs)

    def test_to_dict_from_dict(self):
        gate = EvidenceGate(dense_margin=0.01, lexical_coverage=0.3, max_gap=0.02, noise_level="max", trace_rejected=3)
        data = component_to_dict(gate, "gate")
        assert data["init_parameters"]["dense_margin"] == 0.01 and data["init_parameters"]["noise_level"] == "max"
        restored = component_from_dict(EvidenceGate, data, "gate")
        assert component_to_dict(restored, "gate") == data

    def test_a_similarity_clear_of_the_noise_ceiling_is_dense_evidence(self):
        docs = [cand(1, 0.926), cand(2, 0.924), cand(3, 0.87)]
        out = EvidenceGate().run(documents=docs, query="disk full", retrieval_trace=trace())
        assert keys(out) == ["d1.md#0", "d2.md#0"]
        evidence = out["evidence_trace"]
        assert evidence["found"] is True and evidence["noise_ceiling"] == 0.92 and evidence["calibrated"] is True
        # 0.926 >= 0.92 + 0.005 carries the decision; 0.924 does not on its own but ranks with it
        assert [d.meta["evidence_basis"] for d in out["documents"]] == ["dense", "rank"]
        assert out["documents"][0].meta["noise_margin"] == pytest.approx(0.006)
        assert evidence["best"]["evidence_key"] == "d1.md#0"
        assert evidence["rejected"] == [  # 0.87 is more than lexical_margin below the ceiling
            {
                "evidence_key": "d3.md#0",
                "source": "d3.md",
                "similarity": 0.87,
                "lexical_coverage": 0.0,
                "reason": "below_noise",
            }
        ]

    def test_without_a_carrier_in_the_top_candidates_nothing_is_evidence(self):
        out = EvidenceGate().run(documents=[cand(1, 0.924), cand(2, 0.923)], query="disk full", retrieval_trace=trace())
        assert out["documents"] == [] and out["evidence_trace"]["found"] is False
        assert [r["reason"] for r in out["evidence_trace"]["rejected"]] == ["below_noise", "below_noise"]

    def test_lexical_coverage_lets_a_lower_similarity_count(self):
        docs = [cand(1, 0.90, coverage=0.25), cand(2, 0.90, coverage=0.1), cand(3, 0.87, coverage=0.9)]
        out = EvidenceGate().run(documents=docs, query="disk full", retrieval_trace=trace())
        assert keys(out) == ["d1.md#0", "d2.md#0"]  # 0.87 is too far below the ceiling, whatever it covers
        assert [d.meta["evidence_basis"] for d in out["documents"]] == ["dense+lexical", "rank"]
        lexical_only = EvidenceGate().run(documents=docs[1:], query="disk full", retrieval_trace=trace())
        assert lexical_only["documents"] == []  # coverage 0.1 carries nothing, and 0.87 is below the floor

    def test_the_lexical_basis_needs_two_query_terms(self):
        docs = [cand(1, 0.90, coverage=0.9)]
        one_word = EvidenceGate().run(documents=docs, query="one", retrieval_trace=trace({"terms": 1, "known": 1}))
        assert one_word["documents"] == [] and one_word["evidence_trace"]["rule"]["lexical_basis_allowed"] is False

    def test_an_unfamiliar_query_needs_the_stronger_dense_margin(self):
        docs = [cand(1, 0.926)]
        familiar = EvidenceGate().run(documents=docs, query="disk full", retrieval_trace=trace(FAMILIAR))
        unfamiliar = EvidenceGate().run(documents=docs, query="zxqv plorn", retrieval_trace=trace(UNFAMILIAR))
        unknown = EvidenceGate().run(documents=docs, query="disk full", retrieval_trace=trace(None))
        assert keys(familiar) == ["d1.md#0"]
        assert unfamiliar["documents"] == [] and unknown["documents"] == []  # 0.926 < 0.92 + 0.0075
        assert unfamiliar["evidence_trace"]["rule"]["dense_margin"] == 0.0075

    def test_the_ceiling_follows_the_query_script(self):
        docs = [cand(1, 0.932)]
        assert keys(EvidenceGate().run(documents=docs, query="disk full", retrieval_trace=trace())) == ["d1.md#0"]
        chinese = EvidenceGate().run(documents=docs, query="磁盘满了怎么办", retrieval_trace=trace())
        assert chinese["documents"] == [] and chinese["evidence_trace"]["noise_ceiling"] == 0.93
        digits = EvidenceGate().run(documents=docs, query="12345", retrieval_trace=trace())
        assert digits["evidence_trace"]["noise_ceiling"] == 0.93  # no script: the strictest ceiling

    def test_an_uncalibrated_collection_uses_the_configured_ceiling(self):
        out = EvidenceGate(uncalibrated_noise=0.95).run(
            documents=[cand(1, 0.952)], query="x y", retrieval_trace=trace(noise=None)
        )
        assert out["evidence_trace"]["calibrated"] is False and out["evidence_trace"]["noise_ceiling"] == 0.95
        assert out["documents"] == []  # 0.952 < 0.95 + 0.005
        assert keys(
            EvidenceGate(uncalibrated_noise=0.94).run(
                documents=[cand(1, 0.952)], query="x y", retrieval_trace=trace(noise=None)
            )
        ) == ["d1.md#0"]

    def test_blocks_far_below_the_best_are_not_evidence(self):
        docs = [cand(1, 0.96), cand(2, 0.95), cand(3, 0.944), cand(4, 0.93, score=0.935), cand(5, 0.95, score=0.93)]
        out = EvidenceGate().run(documents=docs, query="disk full", retrieval_trace=trace())
        assert keys(out) == ["d1.md#0", "d2.md#0", "d3.md#0"]  # rank scores within 0.02 of the first one's
        assert [r["reason"] for r in out["evidence_trace"]["rejected"]] == ["far_below_best", "far_below_best"]

    def test_evidence_must_be_among_the_top_candidates(self):
        # the sixth candidate would be lexical evidence, but is neither among the first five by rank nor by similarity
        docs = [cand(i, 0.91) for i in range(5)] + [cand(9, 0.90, coverage=0.5)]
        out = EvidenceGate().run(documents=docs, query="disk full", retrieval_trace=trace())
        assert out["documents"] == [] and out["evidence_trace"]["found"] is False
        assert out["evidence_trace"]["rejected"][-1]["reason"] == "no_evidence_on_top"
        deeper = EvidenceGate(decision_depth=6).run(documents=docs, query="disk full", retrieval_trace=trace())
        assert deeper["evidence_trace"]["found"] is True

    def test_a_high_similarity_ranked_lower_still_decides(self):
        """Answers in the other language ranked first by their cross-lingual bonus: found by the best similarity."""
        docs = [cand(i, 0.91, score=0.99 - i / 1000) for i in range(5)] + [cand(9, 0.95, score=0.93)]
        out = EvidenceGate().run(documents=docs, query="disk full", retrieval_trace=trace())
        assert out["evidence_trace"]["found"] is True
        assert keys(out) == [f"d{i}.md#0" for i in range(5)]  # the blocks are still the best ranked
        assert {d.meta["evidence_basis"] for d in out["documents"]} == {"rank"}
        assert out["evidence_trace"]["rejected"][-1]["reason"] == "far_below_best"

    def test_rank_order_is_kept(self):
        docs = [cand(1, 0.95, score=0.99), cand(2, 0.96, score=0.97)]
        assert keys(EvidenceGate().run(documents=docs, query="disk full", retrieval_trace=trace())) == [
            "d1.md#0",
            "d2.md#0",
        ]

    def test_the_ranking_lists_every_candidate_judged_in_rank_order(self):
        docs = [cand(3, 0.80, score=0.99), cand(1, 0.96, score=0.97), cand(2, 0.70, score=0.5)]
        out = EvidenceGate().run(documents=docs, query="disk full", retrieval_trace=trace())
        assert out["ranking"] == ["d3.md#0", "d1.md#0", "d2.md#0"]  # rejected ones too: what was judged
        assert keys(out) != out["ranking"]

    @pytest.mark.parametrize(("runner_up", "relevance"), [(0.925, "high"), (0.94, "medium"), (0.946, "low")])
    def test_relevance_follows_the_lead_over_the_next_document(self, runner_up, relevance):
        docs = [cand(1, 0.95), cand(1, 0.949), cand(2, runner_up)]  # a second chunk of d1 does not count
        docs[1].meta["evidence_key"] = "d1.md#1"
        evidence = EvidenceGate().run(documents=docs, query="disk full", retrieval_trace=trace())["evidence_trace"]
        assert evidence["lead"] == pytest.approx(0.95 - runner_up, abs=1e-4)
        assert evidence["runner_up"] == "d2.md"
        assert evidence["relevance"] == relevance
        assert evidence["best"]["similarity"] == 0.95

    @pytest.mark.parametrize(
        ("copy", "skips", "runner_up", "relevance"),
        [
            ("en/x.md", True, "b.md", "high"),  # its translation
            ("en/x.md", False, "en/x.md", "low"),
            ("v1.2/zh/x.md", True, "b.md", "high"),  # an earlier release of it
            ("v1.2/zh/x.md", False, "v1.2/zh/x.md", "low"),
        ],
    )
    def test_the_lead_is_over_the_next_page_that_is_no_copy_of_the_first(self, copy, skips, runner_up, relevance):
        docs = [cand(1, 0.95), cand(2, 0.9499), cand(3, 0.92)]
        for doc, source in zip(docs, ("zh/x.md", copy, "b.md"), strict=True):
            doc.meta.update(source=source, evidence_key=f"{source}#0")
        gate = EvidenceGate(lead_skips_copies=skips)
        evidence = gate.run(documents=docs, query="disk full", retrieval_trace=trace())["evidence_trace"]
        assert (evidence["runner_up"], evidence["relevance"]) == (runner_up, relevance)
        assert [d.meta["source"] for d in docs] == ["zh/x.md", copy, "b.md"]  # inputs untouched

    def test_a_lone_document_leads_by_its_score(self):
        evidence = EvidenceGate().run(documents=[cand(1, 0.95)], query="disk full", retrieval_trace=trace())
        assert evidence["evidence_trace"]["lead"] == 0.95
        assert evidence["evidence_trace"]["runner_up"] is None
        assert evidence["evidence_trace"]["relevance"] == "high"

    def test_the_trace_lists_at_most_trace_rejected(self):
        docs = [cand(i, 0.80) for i in range(20)]
        out = EvidenceGate(trace_rejected=3).run(documents=docs, query="disk full", retrieval_trace=trace())
        assert len(out["evidence_trace"]["rejected"]) == 3 and out["evidence_trace"]["candidates"] == 20

    def test_empty_input_gives_no_evidence(self):
        out = EvidenceGate().run(documents=[])
        assert set(out) == {"documents", "evidence_trace", "ranking"}
        assert out["documents"] == [] and out["ranking"] == [] and out["evidence_trace"]["found"] is False
        assert out["evidence_trace"]["relevance"] == "none" and out["evidence_trace"]["best"] is None

    def test_inputs_are_not_mutated(self):
        docs = [cand(1, 0.96), cand(2, 0.80)]
        before = copy.deepcopy([d.to_dict() for d in docs])
        out = EvidenceGate().run(documents=docs, query="disk full", retrieval_trace=trace())
        assert [d.to_dict() for d in docs] == before
        assert all("evidence_basis" not in d.meta for d in docs) and out["documents"][0] is not docs[0]

    def test_dense_evidence_must_stand_out_from_the_next_candidates(self):
        flat = [cand(0, 0.930)] + [cand(i, 0.928) for i in range(1, 12)]  # a topic the base only borders on
        out = EvidenceGate().run(documents=flat, query="disk full", retrieval_trace=trace())
        assert out["documents"] == [] and out["evidence_trace"]["rule"]["standout"] == pytest.approx(0.002)
        peaked = [cand(0, 0.935)] + [cand(i, 0.928) for i in range(1, 12)]
        assert keys(EvidenceGate().run(documents=peaked, query="disk full", retrieval_trace=trace()))[:2] == [
            "d0.md#0",
            "d1.md#0",
        ]  # it stands out, so the chunks behind it that clear the ceiling count too
        lexical = [cand(0, 0.930, coverage=0.5)] + [cand(i, 0.928) for i in range(1, 12)]
        carried = EvidenceGate().run(documents=lexical, query="disk full", retrieval_trace=trace())
        assert carried["documents"][0].meta["evidence_basis"] == "dense+lexical"
        assert {d.meta["evidence_basis"] for d in carried["documents"][1:]} == {"rank"}
        few = [cand(0, 0.930), cand(1, 0.929)]  # fewer than ten: nothing to stand out of
        assert (
            EvidenceGate().run(documents=few, query="disk full", retrieval_trace=trace())["evidence_trace"]["rule"][
                "standout"
            ]
            is None
        )
