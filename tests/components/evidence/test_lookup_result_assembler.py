from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

import pytest
from haystack import Document
from haystack.core.serialization import component_from_dict, component_to_dict
from pydantic import ValidationError

from components.core.citation import Citation
from components.core.cursor import Cursor
from components.core.lookup_result import LookupResult
from components.evidence.context_packer import ContextPacker
from components.evidence.lookup_result_assembler import LookupResultAssembler

RESULT_KEYS = {
    "found",
    "evidenceStatus",
    "message",
    "evidenceBlocks",
    "contextPack",
    "retrievalTrace",
    "rerankTrace",
    "relevanceLevel",
    "completenessHint",
    "l0Hints",
    "evidenceDecision",
    "truncated",
    "moreAvailable",
    "cursor",
    "filters",
}
BLOCK_KEYS = {
    "evidenceKey",
    "source",
    "docId",
    "title",
    "breadcrumb",
    "location",
    "lines",
    "pages",
    "category",
    "retrievalLayer",
    "content",
    "score",
    "similarity",
    "lexicalCoverage",
    "crosslingualSimilarity",
    "noiseMargin",
    "evidenceBasis",
    "rawScore",
    "scoreSemantics",
    "retrievalPath",
    "scoreLabel",
    "hitReasons",
    "citation",
    "anchor",
    "truncated",
    "superseded",
    "replaces",
    "stale",
    "reviewed",
}
DETAIL_KEYS = {
    "l0_hints",
    "query_transform",
    "retrieval_trace",
    "rerank_trace",
    "context_pack_summary",
    "evidence_blocks",
    "fallback_reason",
    "candidate_count",
    "evidence_block_count",
    "evidence",
    "sidecar",
}
HINTS = {
    "matched_titles": ["Disk Full Runbook"],
    "matched_keywords": ["disk full"],
    "domains": ["alerts"],
    "entities": ["node_exporter"],
    "matched_doc_ids": ["alerts-disk"],
}
NO_HINTS = {"matched_titles": [], "matched_keywords": [], "domains": [], "entities": [], "matched_doc_ids": []}


def _doc(
    i: int,
    content: str | None = None,
    *,
    score: float = 0.9,
    base: float = 0.88,
    attempt: str = "unfiltered",
    boosts: list[dict[str, Any]] | None = None,
    **meta: Any,
) -> Document:
    base_meta = {
        "source": f"alerts/doc{i}.md",
        "doc_id": f"doc-{i}",
        "title": f"Doc {i}",
        "breadcrumb": f"Doc {i} > Part {i}",
        "category": "alerts",
        "evidence_key": f"alerts/doc{i}.md#{i}",
        "hit_reasons": [f"l1_{attempt}"],
        "base_score": base,
        "raw_score": 0.7654321,
        "score_semantics": "cosine",
        "retrieval_path": "haystack",
        "attempt": attempt,
        "boosts": boosts or [],
    }
    return Document(content=content or f"Evidence text of doc {i}.", score=score, meta={**base_meta, **meta})


def _attempt(name: str = "unfiltered", candidates: int = 2, error: str | None = None) -> dict[str, Any]:
    return {
        "name": name,
        "filter": {"category": "alerts"} if name == "filtered" else None,
        "mode": "dense",
        "path": None if error else "haystack",
        "raw_hits": candidates,
        "stale_dropped": 0,
        "below_threshold_dropped": 0,
        "candidate_count": candidates,
        "top_score": None if error or not candidates else 0.9,
        "latency_ms": 1.5,
        "error": error,
    }


def _trace(
    attempts: list[dict[str, Any]] | None = None, *, enabled: bool = True, reference: float = 0.75, fallback=None
) -> dict[str, Any]:
    return {
        "l1_enabled": enabled,
        "mode": "dense",
        "reference_threshold": reference,
        "evidence_threshold": 0.5,
        "attempts": [_attempt()] if attempts is None else attempts,
        "selected_attempt": "unfiltered" if enabled else None,
        "fallback_reason": fallback,
    }


def _rerank(docs: list[Document]) -> dict[str, Any]:
    return {
        "weights": {"title": 0.03, "keyword": 0.02, "domain": 0.01, "l0_document": 0.02},
        "max_boost": 0.06,
        "candidates": [
            {
                "rank": rank,
                "source": d.meta["source"],
                "evidence_key": d.meta["evidence_key"],
                "base_score": d.meta["base_score"],
                "final_score": d.score,
                "boost_reasons": [],
            }
            for rank, d in enumerate(docs, start=1)
        ],
    }


def _evidence(found: bool, candidates: int, relevance: str = "medium", rejected: list | None = None) -> dict[str, Any]:
    """An evidence gate's trace."""
    return {
        "found": found,
        "candidates": candidates,
        "noise_ceiling": 0.92,
        "noise_level": "p95",
        "calibrated": True,
        "rule": {"dense_margin": 0.005, "lexical_coverage": 0.2, "lexical_margin": 0.04},
        "best": {"evidence_key": "alerts/doc1.md#1", "similarity": 0.95, "noise_margin": 0.03, "basis": "dense"}
        if found
        else None,
        "lead": 0.03 if found else None,
        "runner_up": "alerts-doc2" if found else None,
        "relevance": relevance if found else "none",
        "evidence_count": candidates if found else 0,
        "rejected": rejected or [],
    }


def _inputs(docs: list[Document], *, candidates: int | None = None, budget: int = 4000, **overrides: Any) -> dict:
    inputs: dict[str, Any] = {
        "query": "disk full on node",
        "documents": docs,
        "context_pack": ContextPacker(char_budget=budget).run(documents=docs)["context_pack"],
        "retrieval_trace": _trace(),
        "rerank_trace": _rerank(docs),
        "dedup_summary": {"candidate_count": len(docs), "dropped": []},
        "evidence_trace": _evidence(bool(docs), len(docs) if candidates is None else candidates),
        "query_transform": {"normalized": "disk full on node", "started_at": 1700000000.0},
        "hints": NO_HINTS,
        "session_id": "s1",
    }
    inputs.update(overrides)
    return inputs


def _keys_recursive(value: Any) -> set[str]:
    if isinstance(value, Mapping):  # the result itself is a FrozenDict
        return set(value) | {k for v in value.values() for k in _keys_recursive(v)}
    if isinstance(value, list):
        return {k for v in value for k in _keys_recursive(v)}
    return set()


class TestLookupResultAssembler:
    def test_init_defaults(self):
        assert LookupResultAssembler().preview_chars == 160

    def test_init_boundaries_are_valid(self):
        assert LookupResultAssembler(preview_chars=0).preview_chars == 0

    @pytest.mark.parametrize(("kwargs", "match"), [({"preview_chars": -1}, "preview_chars=-1")])
    def test_invalid_init(self, kwargs, match):
        with pytest.raises(ValueError, match=match):
            LookupResultAssembler(**kwargs)

    def test_to_dict_from_dict(self):
        data = component_to_dict(LookupResultAssembler(preview_chars=50), "assembler")
        assert data["init_parameters"] == {"preview_chars": 50}
        restored = component_from_dict(LookupResultAssembler, data, "assembler")
        assert restored.preview_chars == 50

    def test_evidence_result_is_camel_case_and_valid(self):
        docs = [_doc(1), _doc(2)]
        inputs = _inputs(docs)
        result = LookupResultAssembler().run(**inputs)["result"]
        assert set(result) >= RESULT_KEYS
        assert result["found"] is True
        assert result["evidenceStatus"] == "evidence"
        assert result["query"] == "disk full on node"
        assert result["sessionId"] == "s1"
        assert [b["evidenceKey"] for b in result["evidenceBlocks"]] == ["alerts/doc1.md#1", "alerts/doc2.md#2"]
        assert all(set(b) == BLOCK_KEYS for b in result["evidenceBlocks"])
        assert result["contextPack"]["packedText"] == inputs["context_pack"]["packedText"]
        assert result["contextPack"]["includedSources"] == ["alerts/doc1.md#1", "alerts/doc2.md#2"]
        assert result["retrievalTrace"]["attempts"][0]["candidateCount"] == 2
        assert result["retrievalTrace"]["referenceThreshold"] == 0.75
        assert [i["evidenceKey"] for i in result["rerankTrace"]["items"]] == ["alerts/doc1.md#1", "alerts/doc2.md#2"]
        LookupResult.model_validate(result)

    def test_a_block_says_where_it_lies_in_its_file(self):
        lined, paged, plain = _doc(1), _doc(2), _doc(3)
        lined.meta.update(line_start=12, line_end=30)
        paged.meta.update(page_start=3, page_end=3)
        blocks = LookupResultAssembler().run(**_inputs([lined, paged, plain]))["result"]["evidenceBlocks"]
        assert [(b["location"], b["lines"], b["pages"]) for b in blocks] == [
            ("lines 12-30", [12, 30], None),
            ("page 3", None, [3, 3]),
            ("", None, None),
        ]

    def test_field_names_are_camel_case_throughout(self):
        result = LookupResultAssembler().run(**_inputs([_doc(1)], hints=HINTS, category_filter="alerts"))["result"]
        structural = [
            result,
            result["contextPack"],
            result["retrievalTrace"],
            result["rerankTrace"],
            result["l0Hints"],
            *result["evidenceBlocks"],
            *result["retrievalTrace"]["attempts"],
            *result["rerankTrace"]["items"],
            result["evidenceDecision"],
            result["evidenceDecision"]["rule"],
            result["evidenceDecision"]["best"],
        ]
        for part in structural:
            assert not [k for k in part if "_" in k], part

    def test_no_legacy_primary_supplement_keys(self):
        result = LookupResultAssembler().run(**_inputs([_doc(1), _doc(2)], hints=HINTS))["result"]
        keys = _keys_recursive(result)
        assert not {"primary", "supplement", "supplements", "primaryEvidence"} & keys

    def test_model_forbids_extra_keys(self):
        result = LookupResultAssembler().run(**_inputs([_doc(1)]))["result"]
        LookupResult.model_validate(result)
        with pytest.raises(ValidationError):
            LookupResult.model_validate({**result, "primary": []})
        bad_block = {**result["evidenceBlocks"][0], "bogus": 1}
        with pytest.raises(ValidationError):
            LookupResult.model_validate({**result, "evidenceBlocks": [bad_block]})

    def test_evidence_block_fields(self):
        doc = _doc(7, "Rotate and compress old logs.", score=0.91234567, base=0.87654321, hit_reasons=["l1_x", "k:y"])
        block = LookupResultAssembler().run(**_inputs([doc]))["result"]["evidenceBlocks"][0]
        assert block["evidenceKey"] == "alerts/doc7.md#7"
        assert block["source"] == "alerts/doc7.md"
        assert block["docId"] == "doc-7"
        assert block["title"] == "Doc 7"
        assert block["breadcrumb"] == "Doc 7 > Part 7"
        assert block["category"] == "alerts"
        assert block["content"] == "Rotate and compress old logs."
        assert block["score"] == pytest.approx(0.9123)
        assert block["similarity"] == pytest.approx(0.8765)  # the base similarity, not the rank score
        assert (block["rawScore"], block["scoreSemantics"], block["retrievalPath"]) == (0.7654, "cosine", "haystack")
        assert block["hitReasons"] == ["l1_x", "k:y"]
        assert "rank score 0.9123" in block["scoreLabel"]
        assert "similarity 0.8765" in block["scoreLabel"]
        assert "-0.0435 against the noise ceiling 0.9200" in block["scoreLabel"]

    def test_the_score_label_shows_the_language_balance_as_the_sign_it_adds(self):
        doc = _doc(1, "x", score=0.9, base=0.9)
        doc.meta["language_offset"] = -0.0524  # subtracted from the similarity: the block rises by 0.0524
        label = LookupResultAssembler().run(**_inputs([doc]))["result"]["evidenceBlocks"][0]["scoreLabel"]
        assert "similarity + language balance +0.0524 + lexical bonus" in label

    def test_block_with_long_content_keeps_full_content_in_result(self):
        long_text = "word " * 2000
        result = LookupResultAssembler().run(**_inputs([_doc(1, long_text)]))["result"]
        assert result["evidenceBlocks"][0]["content"] == long_text

    @pytest.mark.parametrize(
        ("attempt", "boosts", "layer"),
        [
            ("unfiltered", [], "L1"),
            ("filtered", [], "L0+L1"),
            ("unfiltered", [{"signal": "title", "value": "Doc 1", "weight": 0.03}], "L0+L1"),
            ("filtered", [{"signal": "keyword", "value": "disk", "weight": 0.02}], "L0+L1"),
        ],
    )
    def test_retrieval_layer_per_block(self, attempt, boosts, layer):
        doc = _doc(1, attempt=attempt, boosts=boosts)
        out = LookupResultAssembler().run(**_inputs([doc]))
        assert out["result"]["evidenceBlocks"][0]["retrievalLayer"] == layer
        assert out["details"]["evidence_blocks"][0]["retrieval_layer"] == layer

    def test_invalid_query(self):
        docs = [_doc(1)]
        out = LookupResultAssembler().run(**_inputs(docs, error="query is empty"))
        result = out["result"]
        assert result["evidenceStatus"] == "invalid_query"
        assert result["found"] is False
        assert result["evidenceBlocks"] == []
        assert result["error"] == "query is empty"
        assert "query is empty" in result["message"]
        assert result["relevanceLevel"] == "none"
        assert result["completenessHint"] == "none"
        assert result["contextPack"]["packedText"] == ""
        assert out["details"]["evidence_blocks"] == []
        LookupResult.model_validate(result)

    def test_l1_disabled(self):
        out = LookupResultAssembler().run(**_inputs([], candidates=0, retrieval_trace=_trace([], enabled=False)))
        result = out["result"]
        assert result["evidenceStatus"] == "l1_disabled"
        assert result["found"] is False
        assert result["evidenceBlocks"] == []
        assert result["retrievalTrace"]["l1Enabled"] is False
        assert result["relevanceLevel"] == "none"
        LookupResult.model_validate(result)

    def test_all_attempts_failing_is_error(self):
        attempts = [
            _attempt("filtered", 0, error="MilvusException: collection not loaded"),
            _attempt("unfiltered", 0, error="ConnectionError: refused"),
        ]
        out = LookupResultAssembler().run(**_inputs([], candidates=0, retrieval_trace=_trace(attempts)))
        result = out["result"]
        assert result["evidenceStatus"] == "error"
        assert result["found"] is False
        assert result["evidenceBlocks"] == []
        assert "collection not loaded" in result["error"]
        assert "refused" in result["error"]
        assert "refused" in result["message"]
        LookupResult.model_validate(result)

    def test_one_failing_attempt_is_not_error(self):
        docs = [_doc(1)]
        attempts = [_attempt("filtered", 0, error="MilvusException: boom"), _attempt("unfiltered", 1)]
        result = LookupResultAssembler().run(**_inputs(docs, retrieval_trace=_trace(attempts)))["result"]
        assert result["evidenceStatus"] == "evidence"
        assert result["found"] is True
        assert result["error"] is None

    def test_no_candidates_is_no_evidence(self):
        trace = _trace([_attempt("unfiltered", 0)], fallback=None)
        out = LookupResultAssembler().run(**_inputs([], candidates=0, retrieval_trace=trace, hints=HINTS))
        result = out["result"]
        assert result["evidenceStatus"] == "no_evidence"
        assert result["found"] is False
        assert "no knowledge evidence was found" in result["message"].lower()
        assert result["evidenceBlocks"] == []
        assert result["relevanceLevel"] == "none"
        assert result["completenessHint"] == "none"
        assert result["error"] is None
        # L0 hints are reported as hints only, never turned into evidence
        assert result["l0Hints"]["matchedTitles"] == ["Disk Full Runbook"]
        LookupResult.model_validate(result)

    def test_candidates_the_gate_rejects_are_no_evidence_and_the_message_says_why(self):
        rejected = [
            {"evidence_key": "faq/x.md#0", "source": "faq/x.md", "similarity": 0.9012, "reason": "below_noise"},
            {"evidence_key": "faq/y.md#0", "source": "faq/y.md", "similarity": 0.9101, "reason": "below_noise"},
        ]
        inputs = _inputs([], evidence_trace=_evidence(False, 2, rejected=rejected))
        result = LookupResultAssembler().run(**inputs)["result"]
        assert (result["found"], result["evidenceStatus"], result["relevanceLevel"]) == (False, "no_evidence", "none")
        assert "faq/y.md, has similarity 0.910" in result["message"] and "noise ceiling 0.920" in result["message"]
        assert result["evidenceDecision"]["rejected"][1]["similarity"] == 0.9101
        LookupResult.model_validate(result)

    def test_suppressed_blocks_are_already_returned(self):
        suppressed = [_doc(1), _doc(2)]
        retrieval_trace = _trace([_attempt("unfiltered", 2)], fallback="filtered_vector_low_quality")
        inputs = _inputs(
            [],
            candidates=2,
            retrieval_trace=retrieval_trace,
            rerank_trace=_rerank(suppressed),
            # even a pack of the suppressed blocks must not leak into the result
            context_pack=ContextPacker().run(documents=suppressed)["context_pack"],
            session_summary={"session_id": "s1", "previously_returned": 2, "suppressed": ["a", "b"]},
            evidence_trace=_evidence(True, 2, relevance="high"),
        )
        out = LookupResultAssembler().run(**inputs)
        result = out["result"]
        assert result["evidenceStatus"] == "already_returned"
        assert result["found"] is False
        assert result["evidenceBlocks"] == []
        assert result["contextPack"]["packedText"] == ""
        assert result["contextPack"]["includedSources"] == []
        assert result["contextPack"]["usedChars"] == 0
        assert result["retrievalTrace"]["attempts"][0]["candidateCount"] == 2
        assert result["retrievalTrace"]["fallbackReason"] == "filtered_vector_low_quality"
        assert result["rerankTrace"]["items"] == []  # nothing was returned
        assert result["relevanceLevel"] == "high"  # the relevance of what was found earlier
        details = out["details"]
        assert [c["evidence_key"] for c in details["rerank_trace"]["candidates"]] == [
            "alerts/doc1.md#1",
            "alerts/doc2.md#2",
        ]
        assert details["evidence_blocks"] == []
        assert details["context_pack_summary"] == {}
        assert details["candidate_count"] == 2
        assert details["evidence_block_count"] == 0
        assert details["session"]["previously_returned"] == 2
        LookupResult.model_validate(result)

    def test_status_precedence(self):
        def status(**overrides: Any) -> str:
            return LookupResultAssembler().run(**_inputs([], candidates=0, **overrides))["result"]["evidenceStatus"]

        failing = _trace([_attempt("unfiltered", 0, error="boom")])
        disabled_and_failing = {**failing, "l1_enabled": False}
        assert status(retrieval_trace=failing, error="too long") == "invalid_query"
        assert status(retrieval_trace=disabled_and_failing) == "l1_disabled"
        assert status(retrieval_trace=failing) == "error"
        assert status(retrieval_trace=_trace([_attempt("unfiltered", 0)])) == "no_evidence"

    @pytest.mark.parametrize("level", ["high", "medium", "low"])
    def test_relevance_level_is_the_evidence_gates(self, level):
        inputs = _inputs([_doc(1), _doc(2)], evidence_trace=_evidence(True, 2, relevance=level))
        assert LookupResultAssembler().run(**inputs)["result"]["relevanceLevel"] == level

    def test_a_partly_suppressed_result_says_how_many_blocks_were_held_back(self):
        summary = {"session_id": "s1", "previously_returned": 3, "suppressed": ["a#0", "b#1"]}
        result = LookupResultAssembler().run(**_inputs([_doc(1)], session_summary=summary))["result"]
        assert result["evidenceStatus"] == "evidence"
        assert "2 more, returned earlier in this session, were held back" in result["message"]

    def test_without_an_evidence_gate_every_block_is_low_relevance_evidence(self):
        inputs = _inputs([_doc(1)])
        del inputs["evidence_trace"]
        result = LookupResultAssembler().run(**inputs)["result"]
        assert (result["evidenceStatus"], result["relevanceLevel"]) == ("evidence", "low")
        empty = _inputs([])
        del empty["evidence_trace"]
        assert LookupResultAssembler().run(**empty)["result"]["evidenceStatus"] == "no_evidence"

    def test_completeness_complete_when_everything_fits(self):
        result = LookupResultAssembler().run(**_inputs([_doc(1), _doc(2)]))["result"]
        assert result["completenessHint"] == "complete"

    def test_completeness_truncated_when_a_block_is_cut(self):
        docs = [_doc(1, "x" * 3000)]
        inputs = _inputs(docs, budget=500)
        assert inputs["context_pack"]["truncatedSources"] and not inputs["context_pack"]["omittedSources"]
        assert LookupResultAssembler().run(**inputs)["result"]["completenessHint"] == "truncated"

    def test_completeness_truncated_when_a_block_is_omitted(self):
        docs = [_doc(1, "x" * 280), _doc(2, "y" * 3000)]
        inputs = _inputs(docs, budget=400)
        assert inputs["context_pack"]["omittedSources"] and not inputs["context_pack"]["truncatedSources"]
        assert LookupResultAssembler().run(**inputs)["result"]["completenessHint"] == "truncated"

    def test_a_block_carries_its_citation_and_anchor(self):
        doc = _doc(1, chunk_index=3, doc_version="0123456789abcdef", line_start=10, line_end=24)
        block = LookupResultAssembler().run(**_inputs([doc]))["result"]["evidenceBlocks"][0]
        assert block["citation"] == "alerts/doc1.md#3@0123456789ab"
        assert Citation.parse(block["citation"]) == Citation("alerts/doc1.md", 3, "0123456789ab")
        assert block["anchor"] == {
            "source": "alerts/doc1.md",
            "headingPath": ["Doc 1", "Part 1"],
            "lines": [10, 24],
            "pages": None,
            "docVersion": "0123456789abcdef",
        }

    def test_a_chunk_without_position_or_version_has_no_citation(self):
        block = LookupResultAssembler().run(**_inputs([_doc(1)]))["result"]["evidenceBlocks"][0]
        assert block["citation"] == "" and block["anchor"]["source"] == "alerts/doc1.md"

    def test_evidence_the_pack_left_out_is_more_available_behind_a_cursor(self):
        docs = [_doc(1, "x" * 280), _doc(2, "y" * 3000)]
        inputs = _inputs(docs, budget=400, session_summary={"excluded": ["alerts/doc9.md#9"], "paged": []})
        result = LookupResultAssembler().run(**inputs)["result"]
        assert result["moreAvailable"] is True and result["truncated"] is True
        page = Cursor.decode(result["cursor"])
        assert page.query == "disk full on node" and page.filters == {}
        # what earlier pages delivered and what this one delivers: the next page holds all of it back
        assert page.delivered == ("alerts/doc9.md#9", "alerts/doc1.md#1", "alerts/doc2.md#2")
        assert "cursor" in result["message"]

    def test_a_blocks_text_key_goes_into_the_trace_and_the_cursor(self):
        docs = [_doc(1, "x" * 280, text_key="text:alerts/doc1.md|00aa"), _doc(2, "y" * 3000)]
        out = LookupResultAssembler().run(**_inputs(docs, budget=400))
        assert Cursor.decode(out["result"]["cursor"]).delivered == (
            "alerts/doc1.md#1",
            "text:alerts/doc1.md|00aa",
            "alerts/doc2.md#2",
        )
        blocks = out["details"]["evidence_blocks"]
        assert [block["text_key"] for block in blocks] == ["text:alerts/doc1.md|00aa", None]

    @pytest.mark.parametrize("reason", ["max_blocks", "page_versions_cap"])
    def test_blocks_over_the_block_cap_or_other_releases_are_more_available(self, reason):
        dropped = [{"evidence_key": "alerts/doc7.md#7", "source": "alerts/doc7.md", "reason": reason}]
        inputs = _inputs([_doc(1)], dedup_summary={"candidate_count": 2, "dropped": dropped})
        assert LookupResultAssembler().run(**inputs)["result"]["moreAvailable"] is True

    @pytest.mark.parametrize("reason", ["duplicate_key", "per_document_cap"])
    def test_a_duplicate_or_a_capped_document_is_no_more_evidence(self, reason):
        dropped = [{"evidence_key": "alerts/doc1.md#5", "source": "alerts/doc1.md", "reason": reason}]
        result = LookupResultAssembler().run(**_inputs([_doc(1)], dedup_summary={"dropped": dropped}))["result"]
        assert result["moreAvailable"] is False and result["cursor"] is None

    def test_a_page_after_the_last_says_there_is_no_more(self):
        summary = {"excluded": ["alerts/doc1.md#1"], "paged": ["alerts/doc1.md#1"], "suppressed": []}
        result = LookupResultAssembler().run(
            **_inputs([], candidates=1, session_summary=summary, evidence_trace=_evidence(True, 1))
        )["result"]
        assert result["evidenceStatus"] == "already_returned" and "earlier pages" in result["message"]

    def test_filters_that_match_nothing_say_which_values_exist(self):
        report = {
            "requested": {"category": "nope"},
            "documents": 0,
            "chunks": 0,
            "available": {"category": [{"value": "alerts", "documents": 5}, {"value": "payments", "documents": 2}]},
        }
        inputs = _inputs([], candidates=0, filter_report=report, evidence_trace=_evidence(False, 0))
        result = LookupResultAssembler().run(**inputs)["result"]
        assert result["evidenceStatus"] == "no_evidence" and result["found"] is False
        assert "match no indexed document" in result["message"] and "alerts (5), payments (2)" in result["message"]
        assert result["filters"]["available"]["category"][0] == {"value": "alerts", "documents": 5}

    def test_no_evidence_within_filters_says_where_it_searched(self):
        report = {"requested": {"category": "alerts"}, "documents": 4, "chunks": 30}
        inputs = _inputs([], candidates=3, filter_report=report, evidence_trace=_evidence(False, 3))
        message = LookupResultAssembler().run(**inputs)["result"]["message"]
        assert "Searched only within the filters {'category': 'alerts'}: 4 documents" in message

    def test_the_message_says_what_the_lifecycle_did_to_the_returned_blocks(self):
        docs = [
            _doc(1, replaces="alerts/old.md"),
            _doc(2, superseded=True),
            _doc(3, stale=True, reviewed="2020-01-02"),
        ]
        lifecycle = {
            "replaced": [{"old": "alerts/old.md", "by": "alerts/doc1.md"}, {"old": "x.md", "by": "not-returned.md"}],
            "dropped": [],
            "superseded": ["alerts/doc2.md", "elsewhere.md"],
            "stale": [{"source": "alerts/doc3.md", "reviewed": "2020-01-02"}],
        }
        result = LookupResultAssembler().run(**_inputs(docs, lifecycle=lifecycle))["result"]
        message = result["message"]
        assert "alerts/old.md is superseded: its successor alerts/doc1.md is returned instead." in message
        assert "alerts/doc2.md is marked superseded with no successor indexed" in message
        assert "alerts/doc3.md: not reviewed lately (stale)" in message
        assert "not-returned.md" not in message and "elsewhere.md" not in message
        first, second, third = result["evidenceBlocks"]
        assert first["replaces"] == "alerts/old.md" and second["superseded"] is True
        assert third["stale"] is True and third["reviewed"] == "2020-01-02"

    def test_refused_filters_are_an_invalid_query(self):
        inputs = _inputs([_doc(1)], filter_error="filters has no key 'colour'")
        result = LookupResultAssembler().run(**inputs)["result"]
        assert result["evidenceStatus"] == "invalid_query" and result["evidenceBlocks"] == []
        assert result["error"] == "filters: filters has no key 'colour'"

    def test_l0_hints_and_category_filter(self):
        result = LookupResultAssembler().run(**_inputs([_doc(1)], hints=HINTS, category_filter="alerts"))["result"]
        assert result["l0Hints"] == {
            "matchedTitles": ["Disk Full Runbook"],
            "matchedKeywords": ["disk full"],
            "domains": ["alerts"],
            "entities": ["node_exporter"],
            "matchedDocIds": ["alerts-disk"],
            "categoryFilter": "alerts",
        }
        no_filter = LookupResultAssembler().run(**_inputs([_doc(1)], hints=HINTS, category_filter=""))["result"]
        assert no_filter["l0Hints"]["categoryFilter"] is None

    def test_empty_session_id_becomes_null(self):
        result = LookupResultAssembler().run(**_inputs([_doc(1)], session_id=""))["result"]
        assert result["sessionId"] is None

    def test_details_keys_and_values(self):
        docs = [_doc(1), _doc(2)]
        inputs = _inputs(
            docs,
            retrieval_trace=_trace([_attempt("filtered", 0), _attempt("unfiltered", 2)], fallback="filtered_no_hits"),
            hints=HINTS,
            category_filter="alerts",
        )
        details = LookupResultAssembler().run(**inputs)["details"]
        assert set(details) >= DETAIL_KEYS
        assert details["l0_hints"] == {**HINTS, "category_filter": "alerts"}
        assert details["query_transform"] == inputs["query_transform"]
        assert details["retrieval_trace"] == inputs["retrieval_trace"]
        assert details["rerank_trace"]["candidates"] == inputs["rerank_trace"]["candidates"]
        assert details["rerank_trace"]["weights"] == inputs["rerank_trace"]["weights"]
        assert [i["evidence_key"] for i in details["rerank_trace"]["items"]] == ["alerts/doc1.md#1", "alerts/doc2.md#2"]
        assert details["fallback_reason"] == "filtered_no_hits"
        assert details["candidate_count"] == 2
        assert details["evidence_block_count"] == 2
        assert details["sidecar"]["enabled"] is False
        assert [b["evidence_key"] for b in details["evidence_blocks"]] == ["alerts/doc1.md#1", "alerts/doc2.md#2"]
        json.dumps(dict(details))  # stored in a JSON column: its values are plain JSON

    def test_sidecar_report_goes_to_details_only(self):
        inputs = _inputs([_doc(1), _doc(2)])
        report = {"enabled": True, "status": "ok", "rows": [{"evidence_key": "x.md#0", "rank": 1}], "comparison": {}}
        plain = LookupResultAssembler().run(**inputs)
        with_sidecar = LookupResultAssembler().run(**inputs, sidecar=report)
        assert with_sidecar["details"]["sidecar"] == report
        assert plain["details"]["sidecar"] == {"enabled": False, "status": "off"}
        assert with_sidecar["result"] == plain["result"]

    def test_the_judged_ranking_goes_to_details_only(self):
        inputs = _inputs([_doc(1), _doc(2)])
        plain = LookupResultAssembler().run(**inputs)
        ranked = LookupResultAssembler().run(**inputs, ranking=["alerts/doc2.md#2", "alerts/doc1.md#1", "x.md#0"])
        assert ranked["details"]["ranking"] == ["alerts/doc2.md#2", "alerts/doc1.md#1", "x.md#0"]
        assert plain["details"]["ranking"] == []
        assert ranked["result"] == plain["result"]

    def test_details_context_pack_summary_has_no_packed_text(self):
        inputs = _inputs([_doc(1), _doc(2)])
        summary = LookupResultAssembler().run(**inputs)["details"]["context_pack_summary"]
        assert "packedText" not in summary
        assert summary["includedSources"] == inputs["context_pack"]["includedSources"]
        assert summary["usedChars"] == inputs["context_pack"]["usedChars"]

    def test_details_previews_are_short_and_never_full_content(self):
        long_text = "".join(f"sentence number {i} about rotating logs. " for i in range(200))
        short_text = "Short evidence."
        inputs = _inputs([_doc(1, long_text), _doc(2, short_text)])
        details = LookupResultAssembler(preview_chars=50).run(**inputs)["details"]
        long_preview, short_preview = (b["preview"] for b in details["evidence_blocks"])
        assert len(long_preview) <= 51
        assert long_preview.endswith("…")
        assert long_text.startswith(long_preview.removesuffix("…"))
        assert short_preview == short_text
        assert long_text not in json.dumps(dict(details), ensure_ascii=False)

    def test_details_default_preview_length(self):
        long_text = "z" * 5000
        details = LookupResultAssembler().run(**_inputs([_doc(1, long_text)]))["details"]
        assert 0 < len(details["evidence_blocks"][0]["preview"]) <= 161

    @pytest.mark.parametrize(
        ("hints", "attempts", "layer"),
        [
            (HINTS, [_attempt("filtered", 2)], "L0+L1"),
            ({**NO_HINTS, "matched_keywords": ["disk"]}, [_attempt("unfiltered", 1)], "L0+L1"),
            (NO_HINTS, [_attempt("unfiltered", 2)], "L1"),
            (HINTS, [_attempt("filtered", 0), _attempt("unfiltered", 0)], "none"),
        ],
    )
    def test_details_retrieval_layer(self, hints, attempts, layer):
        candidates = sum(a["candidate_count"] for a in attempts)
        docs = [_doc(1)] if candidates else []
        inputs = _inputs(docs, candidates=candidates, hints=hints, retrieval_trace=_trace(attempts))
        assert LookupResultAssembler().run(**inputs)["details"]["retrieval_layer"] == layer

    def test_empty_input(self):
        out = LookupResultAssembler().run(
            query="",
            documents=[],
            context_pack={},
            retrieval_trace={},
            rerank_trace={},
            dedup_summary={},
        )
        result = out["result"]
        assert result["found"] is False
        assert result["evidenceStatus"] == "no_evidence"
        assert result["evidenceBlocks"] == []
        assert result["contextPack"]["packedText"] == ""
        LookupResult.model_validate(result)
        details = out["details"]
        assert details["evidence_blocks"] == []
        assert details["evidence_block_count"] == 0
        assert details["candidate_count"] == 0
        assert details["context_pack_summary"] == {}

    def test_inputs_not_mutated(self):
        docs = [_doc(1, "x" * 3000, boosts=[{"signal": "title", "value": "Doc 1", "weight": 0.03}]), _doc(2)]
        inputs = _inputs(docs, budget=500, hints=HINTS, category_filter="alerts")
        inputs["session_summary"] = {"session_id": "s1", "previously_returned": 0, "suppressed": []}
        before = copy.deepcopy(inputs)
        LookupResultAssembler().run(**inputs)
        assert inputs == before
