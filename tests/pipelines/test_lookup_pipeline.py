"""Every WHEN/THEN scenario of the governing seed, through the real pipeline on a real store."""

from __future__ import annotations

import importlib
import json
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from haystack import Pipeline
from haystack.core.errors import DeserializationError
from sqlmodel import Session, func, select

from components.store.knowledge_index import IndexedDocument, KnowledgeIndex
from components.trace.trace_store import ToolInvocation, TraceStore
from pipelines import load_pipeline, lookup, lookup_with_details
from pipelines.indexing import KnowledgeIndexer
from pipelines.settings import DEFAULT_INDEXING_PIPELINE, DEFAULT_LOOKUP_PIPELINE, Deployment
from tests.conftest import count_index_requests, write_tiny_kb

pytestmark = pytest.mark.integration

QUOTED_CATEGORY = 'ops" or metadata["category"] != "x'
LONG_SECTION = " ".join(f"Step {i}: check the inode usage with df -i and clear the cache directory." for i in range(40))


def _extra_docs(root: Path) -> None:
    """Documents beyond the tiny base: a long multi-chunk runbook and one in a hostile category name."""
    (root / "alerts/cpu.md").write_text(
        "---\nid: alerts-cpu\ntitle: High CPU Runbook\ncategory: alerts\nkeywords: [high cpu, load average]\n"
        "entities: [checkout-api]\n---\n# High CPU Runbook\n\n## Triage\n\nWhen CPU usage of checkout-api stays above "
        "90 percent for ten minutes, look at the load average and the hottest threads.\n\n## Long checklist\n\n"
        + LONG_SECTION
        + "\n\n## Scaling\n\nAdd two replicas of checkout-api when the load average keeps rising.\n",
        encoding="utf-8",
    )
    (root / "ops").mkdir(exist_ok=True)
    (root / "ops/quoted.md").write_text(
        f"---\nid: ops-quoted\ntitle: Quoted Category Notes\ncategory: '{QUOTED_CATEGORY}'\n"
        "keywords: [zebra maintenance window]\n---\n# Quoted Category Notes\n\n## Window\n\n"
        "The zebra maintenance window starts every Sunday at 02:00 UTC and lasts two hours.\n",
        encoding="utf-8",
    )


class TestLookupPipeline:
    @pytest.fixture(scope="class")
    @classmethod
    def milvus_uri(cls, tmp_path_factory) -> str:
        return str(tmp_path_factory.mktemp("lite") / "milvus.db")

    @pytest.fixture(scope="class")
    @classmethod
    def deployment(cls, tmp_path_factory, milvus_uri) -> SimpleNamespace:
        root = tmp_path_factory.mktemp("lookup")
        kb = write_tiny_kb(root / "knowledge")
        _extra_docs(kb)
        deployment = Deployment.resolve(root / "data", milvus_uri=milvus_uri)
        collection = f"kb_{uuid.uuid4().hex[:10]}"
        indexer = KnowledgeIndexer(
            deployment, component_params={"writer": {"collection": {"collection_name": collection}}}
        )
        assert indexer.index(kb, progress=False).failed == 0
        indexer.close()
        # a category that L0 knows but Milvus has no chunks for (index and collection out of step)
        index = KnowledgeIndex.load(deployment.index_path)
        index.documents.append(
            IndexedDocument(
                doc_id="archive-mainframe",
                source="archive/mainframe.md",
                title="Mainframe Archive",
                category="archive",
                keywords=["legacy mainframe"],
                doc_version="0000",
            )
        )
        index.save(deployment.index_path)
        return SimpleNamespace(
            data_dir=deployment.data_dir,
            milvus_uri=deployment.milvus_uri,
            trace_db_url=deployment.trace_db_url,
            collection=collection,
        )

    @pytest.fixture(scope="class")
    @classmethod
    def make_pipeline(cls, deployment):
        def make(**params) -> Pipeline:
            # the pipeline names no collection: it reads the one `index` recorded in the data folder
            return load_pipeline(
                data_dir=deployment.data_dir, milvus_uri=deployment.milvus_uri, component_params=params
            )

        return make

    @pytest.fixture(scope="class")
    @classmethod
    def pipeline(cls, make_pipeline) -> Pipeline:
        return make_pipeline(retriever={"reference_threshold": 0.5, "evidence_threshold": 0.5})

    @staticmethod
    def trace_row(deployment, result) -> ToolInvocation:
        row = TraceStore(deployment.trace_db_url).get(result["traceId"])
        assert row is not None
        return row

    # --- L0 as hint provider -------------------------------------------------------------------------------

    def test_l0_produces_traceable_hint_data(self, pipeline, deployment):
        result = lookup(pipeline, "our checkout-api has high cpu")
        hints = result["l0Hints"]
        assert hints["matchedKeywords"] == ["high cpu"]
        assert hints["entities"] == ["checkout-api"]
        assert hints["domains"] == ["alerts"]
        assert "alerts-cpu" in hints["matchedDocIds"]
        details = self.trace_row(deployment, result).retrieval_details
        assert details["l0_hints"]["matched_keywords"] == ["high cpu"]
        assert details["l0_hints"]["entities"] == ["checkout-api"]

    def test_l0_single_match_does_not_bypass_l1(self, pipeline):
        result = lookup(pipeline, "what happens in the zebra maintenance window")
        assert result["l0Hints"]["matchedDocIds"] == ["ops-quoted"]
        assert len(result["retrievalTrace"]["attempts"]) >= 1
        assert result["evidenceBlocks"] and all(
            b["retrievalLayer"] in ("L1", "L0+L1") for b in result["evidenceBlocks"]
        )

    def test_l0_hints_never_become_evidence(self, make_pipeline, deployment):
        pipe = make_pipeline(retriever={"reference_threshold": 0.5, "evidence_threshold": 0.999})
        result = lookup(pipe, "disk full on the node")
        assert result["l0Hints"]["matchedDocIds"] == ["alerts-disk"]
        assert result["found"] is False and result["evidenceBlocks"] == []
        assert result["contextPack"]["packedText"] == ""
        details = self.trace_row(deployment, result).retrieval_details
        assert details["l0_hints"]["matched_doc_ids"] == ["alerts-disk"]
        assert details["evidence_blocks"] == []

    def test_retrieval_layer_reflects_cooperating_retrieval(self, pipeline, deployment):
        with_hints = lookup(pipeline, "disk full on the node")
        assert self.trace_row(deployment, with_hints).retrieval_layer == "L0+L1"
        assert with_hints["evidenceBlocks"][0]["retrievalLayer"] == "L0+L1"
        without = lookup(pipeline, "how much does the basic tier cost per month")
        assert without["l0Hints"]["matchedDocIds"] == []
        assert self.trace_row(deployment, without).retrieval_layer == "L1"
        assert {b["retrievalLayer"] for b in without["evidenceBlocks"]} == {"L1"}

    # --- domain filter ---------------------------------------------------------------------------------------

    def test_single_domain_filter(self, pipeline):
        result = lookup(pipeline, "disk full on the node")
        assert result["l0Hints"]["categoryFilter"] == "alerts"
        first = result["retrievalTrace"]["attempts"][0]
        assert first["name"] == "filtered" and first["filter"] == {"category": "alerts"}
        assert {b["category"] for b in result["evidenceBlocks"]} == {"alerts"}

    def test_ambiguous_domain_no_filter(self, pipeline):
        result = lookup(pipeline, "disk full after the subscription change")
        assert result["l0Hints"]["domains"] == ["alerts", "product-faq"]
        assert result["l0Hints"]["categoryFilter"] is None
        attempts = result["retrievalTrace"]["attempts"]
        assert [a["name"] for a in attempts] == ["unfiltered"] and attempts[0]["filter"] is None

    def test_zero_domains_no_filter(self, pipeline):
        result = lookup(pipeline, "how much does the basic tier cost per month")
        assert result["l0Hints"]["domains"] == [] and result["l0Hints"]["categoryFilter"] is None
        assert [a["filter"] for a in result["retrievalTrace"]["attempts"]] == [None]

    # --- filtered retrieval with retry ---------------------------------------------------------------------

    def test_filtered_retrieval_succeeds_without_retry(self, pipeline, deployment):
        result = lookup(pipeline, "disk full on the node")
        trace = result["retrievalTrace"]
        assert [a["name"] for a in trace["attempts"]] == ["filtered"]
        assert trace["selectedAttempt"] == "filtered" and trace["fallbackReason"] is None
        assert self.trace_row(deployment, result).fallback_reason is None

    def test_opening_a_pipeline_describes_the_vector_index_once(self, make_pipeline, monkeypatch):
        """Milvus Lite counts every row of the collection for each index it describes (0.5 s at 100k chunks)."""
        calls = count_index_requests(monkeypatch)
        pipe = make_pipeline(retriever={"reference_threshold": 0.5, "evidence_threshold": 0.5})
        assert lookup(pipe, "where are the legacy mainframe disk usage reports")["found"] is True  # two attempts
        assert lookup(pipe, "disk full on the node")["found"] is True
        assert calls == {"describe_index": 1}

    def test_filtered_retrieval_no_evidence_retries_unfiltered(self, pipeline, deployment):
        result = lookup(pipeline, "where are the legacy mainframe disk usage reports")
        trace = result["retrievalTrace"]
        assert result["l0Hints"]["categoryFilter"] == "archive"
        assert [a["name"] for a in trace["attempts"]] == ["filtered", "unfiltered"]
        assert trace["attempts"][0]["candidateCount"] == 0
        assert trace["fallbackReason"] == "filtered_vector_no_evidence"
        assert trace["selectedAttempt"] == "unfiltered"
        assert result["found"] is True
        row = self.trace_row(deployment, result)
        assert row.fallback_reason == "filtered_vector_no_evidence"
        assert row.retrieval_details["fallback_reason"] == "filtered_vector_no_evidence"
        assert row.retrieval_details["retrieval_trace"]["selected_attempt"] == "unfiltered"

    def test_filtered_retrieval_below_reference_quality_retries(self, make_pipeline, deployment):
        pipe = make_pipeline(retriever={"reference_threshold": 0.999, "evidence_threshold": 0.5})
        result = lookup(pipe, "disk full on the node")
        trace = result["retrievalTrace"]
        assert trace["attempts"][0]["topScore"] < 0.999
        assert [a["name"] for a in trace["attempts"]] == ["filtered", "unfiltered"]
        assert trace["fallbackReason"] == "filtered_vector_low_quality"
        assert self.trace_row(deployment, result).retrieval_details["fallback_reason"] == "filtered_vector_low_quality"
        # the chunks both attempts found reach the gate once: each is a block or a rejected candidate, not both
        decision = result["evidenceDecision"]
        keys = [b["evidenceKey"] for b in result["evidenceBlocks"]] + [r["evidenceKey"] for r in decision["rejected"]]
        assert len(keys) == len(set(keys)) == decision["candidates"]

    def test_both_attempts_fail_gives_no_evidence(self, make_pipeline, deployment):
        pipe = make_pipeline(retriever={"reference_threshold": 0.999, "evidence_threshold": 0.999})
        result = lookup(pipe, "disk full on the node")
        assert [a["candidateCount"] for a in result["retrievalTrace"]["attempts"]] == [0, 0]
        assert result["found"] is False and result["evidenceStatus"] == "no_evidence"
        assert "No knowledge evidence was found" in result["message"]
        assert result["evidenceBlocks"] == []
        row = self.trace_row(deployment, result)
        assert row.status == "no_evidence" and len(row.retrieval_details["retrieval_trace"]["attempts"]) == 2

    def test_l1_disabled_by_configuration(self, make_pipeline):
        result = lookup(make_pipeline(retriever={"enabled": False}), "disk full on the node")
        assert result["found"] is False and result["evidenceStatus"] == "l1_disabled"
        assert result["retrievalTrace"]["l1Enabled"] is False and result["retrievalTrace"]["attempts"] == []

    # --- evidence blocks, dedup, counts ------------------------------------------------------------------------

    def test_evidence_block_contains_source_metadata(self, pipeline):
        block = lookup(pipeline, "disk full on the node")["evidenceBlocks"][0]
        assert block["source"] == "alerts/disk.md" and block["docId"] == "alerts-disk"
        assert block["title"] == "Disk Full Runbook" and block["breadcrumb"].startswith("Disk Full Runbook > ")
        assert block["evidenceKey"].startswith("alerts/disk.md#") and block["content"]
        assert block["retrievalLayer"] == "L0+L1" and block["hitReasons"]

    def test_result_has_no_legacy_fields(self, pipeline):
        result = lookup(pipeline, "disk full on the node")
        assert "primary" not in result and "supplement" not in result
        for key in ("evidenceBlocks", "contextPack", "retrievalTrace", "rerankTrace", "relevanceLevel"):
            assert key in result
        assert result["completenessHint"] in ("complete", "truncated")

    def test_rerank_trace_lists_the_returned_blocks_in_their_order(self, make_pipeline):
        pipe = make_pipeline(
            retriever={"reference_threshold": 0.5, "evidence_threshold": 0.5},
            # every candidate counts as evidence here, so the per-document cap has work to do
            gate={"max_gap": 1.0, "dense_margin": -1.0, "unfamiliar_dense_margin": -1.0},
            deduper={"max_per_document": 1},
        )
        result = lookup(pipe, "high cpu load average checkout-api replicas")
        blocks = result["evidenceBlocks"]
        assert len(blocks) >= 2 and len({b["source"] for b in blocks}) == len(blocks)  # the cap dropped chunks
        items = result["rerankTrace"]["items"]
        assert [i["evidenceKey"] for i in items] == [b["evidenceKey"] for b in blocks]
        assert [i["rank"] for i in items] == list(range(1, len(blocks) + 1))
        assert [i["finalScore"] for i in items] == [b["score"] for b in blocks]

    def test_chunk_level_dedup_keeps_distinct_chunks(self, pipeline):
        result = lookup(pipeline, "inode usage cache directory checklist for high cpu")
        cpu_blocks = [b for b in result["evidenceBlocks"] if b["source"] == "alerts/cpu.md"]
        assert len(cpu_blocks) == 2  # max_per_document
        assert len({b["evidenceKey"] for b in cpu_blocks}) == 2

    def test_same_evidence_key_collapses_with_merged_reasons(self, make_pipeline):
        pipe = make_pipeline(retriever={"reference_threshold": 0.999, "evidence_threshold": 0.5})
        result = lookup(pipe, "disk full on the node")
        keys = [b["evidenceKey"] for b in result["evidenceBlocks"]]
        assert len(keys) == len(set(keys))
        merged = [b for b in result["evidenceBlocks"] if {"l1_filtered", "l1_unfiltered"} <= set(b["hitReasons"])]
        assert merged, [b["hitReasons"] for b in result["evidenceBlocks"]]

    def test_postprocess_count_tracking(self, pipeline, deployment):
        result = lookup(pipeline, "inode usage cache directory checklist for high cpu")
        row = self.trace_row(deployment, result)
        details = row.retrieval_details
        assert details["candidate_count"] == row.candidate_count >= details["evidence_block_count"]
        assert details["evidence_block_count"] == row.evidence_block_count == len(result["evidenceBlocks"])
        assert any(d["reason"] == "per_document_cap" for d in details["dedup"]["dropped"])

    def test_evidence_summaries_are_persisted(self, pipeline, deployment):
        result = lookup(pipeline, "disk full on the node")
        summaries = self.trace_row(deployment, result).retrieval_details["evidence_blocks"]
        assert len(summaries) == len(result["evidenceBlocks"])
        for summary in summaries:
            assert {"source", "title", "retrieval_layer", "score", "hit_reasons", "preview"} <= set(summary)

    def test_full_content_is_not_duplicated_into_details(self, pipeline, deployment):
        result = lookup(pipeline, "inode usage cache directory checklist")
        long_block = max(result["evidenceBlocks"], key=lambda b: len(b["content"]))
        assert len(long_block["content"]) > 400
        details = self.trace_row(deployment, result).retrieval_details
        assert long_block["content"] not in json.dumps(details, ensure_ascii=False)
        assert all(len(s["preview"]) <= 161 for s in details["evidence_blocks"])

    # --- context pack ------------------------------------------------------------------------------------------

    def test_context_pack_preserves_source_metadata(self, pipeline):
        result = lookup(pipeline, "disk full on the node")
        pack = result["contextPack"]
        for block in result["evidenceBlocks"]:
            assert f"source: {block['source']}" in pack["packedText"]
            assert f"section: {block['breadcrumb']}" in pack["packedText"]
            assert ", ".join(block["hitReasons"]) in pack["packedText"]
        assert pack["usedChars"] == len(pack["packedText"]) <= pack["charBudget"]

    def test_budget_truncation_keeps_metadata(self, make_pipeline):
        pipe = make_pipeline(
            retriever={"reference_threshold": 0.5, "evidence_threshold": 0.5}, packer={"char_budget": 500}
        )
        result = lookup(pipe, "inode usage cache directory checklist for high cpu")
        pack = result["contextPack"]
        assert pack["usedChars"] <= 500 and pack["charBudget"] == 500
        assert pack["truncatedSources"] or pack["omittedSources"]
        assert result["completenessHint"] == "truncated"
        first = result["evidenceBlocks"][0]
        assert f"source: {first['source']}" in pack["packedText"]
        assert f"title: {first['title']}" in pack["packedText"]
        assert f"section: {first['breadcrumb']}" in pack["packedText"]
        assert pack["includedSources"] and set(pack["omittedSources"]).isdisjoint(pack["includedSources"])

    # --- rerank --------------------------------------------------------------------------------------------------

    def test_rerank_trace_records_score_contributions(self, make_pipeline, pipeline):
        weighted = make_pipeline(
            retriever={"reference_threshold": 0.5, "evidence_threshold": 0.5},
            reranker={"weights": {"keyword": 0.02, "entity": 0.02, "title": 0.0, "domain": 0.0, "l0_document": 0.0}},
        )
        result = lookup(weighted, "our checkout-api has high cpu")
        items = result["rerankTrace"]["items"]
        assert [i["rank"] for i in items] == list(range(1, len(items) + 1))
        top = items[0]
        assert top["source"] == "alerts/cpu.md"
        assert top["finalScore"] == pytest.approx(top["baseScore"] + 0.04, abs=1e-3)
        assert "keyword:high cpu (+0.02)" in top["boostReasons"]
        assert result["rerankTrace"]["weights"]["keyword"] == 0.02
        # the shipped weights are 0: the match is explained but moves nothing
        default_top = lookup(pipeline, "our checkout-api has high cpu")["rerankTrace"]["items"][0]
        assert default_top["finalScore"] == default_top["baseScore"]
        assert "keyword:high cpu (+0.0)" in default_top["boostReasons"]

    @pytest.mark.parametrize(("override", "full_weight"), [({}, False), ({"lexical_normalization": "best"}, True)])
    def test_lexical_bonus_follows_the_configured_normalization(self, make_pipeline, override, full_weight):
        pipe = make_pipeline(fusion=override, retriever={"evidence_threshold": 0.5})  # {}: the shipped `ideal`
        weight = pipe.get_component("fusion").lexical_weight
        assert weight > 0  # the shipped YAML is hybrid
        query = "disk full on the node"
        out = pipe.run(
            {"query_transformer": {"query": query}, "recorder": {"raw_query": query}},
            include_outputs_from={"fusion"},
        )
        bonuses = [d.meta.get("lexical_score", 0.0) for d in out["fusion"]["documents"]]
        assert max(bonuses) > 0
        # ideal: a chunk gets the share of the query's reachable BM25 it matches, never the whole weight
        assert (max(bonuses) == pytest.approx(weight, abs=1e-4)) is full_weight

    def test_hint_boost_becomes_a_hit_reason_not_evidence(self, pipeline):
        result = lookup(pipeline, "our checkout-api has high cpu")
        reasons = result["evidenceBlocks"][0]["hitReasons"]
        assert "keyword:high cpu" in reasons and "entity:checkout-api" in reasons
        assert all(b["content"] and b["source"].endswith(".md") for b in result["evidenceBlocks"])

    # --- vector store modes and score semantics ---------------------------------------------------------------

    def test_modes_haystack_and_sdk_agree(self, make_pipeline):
        results = {}
        for mode in ("haystack", "sdk"):
            pipe = make_pipeline(retriever={"mode": mode, "reference_threshold": 0.5, "evidence_threshold": 0.5})
            results[mode] = lookup(pipe, "退款多久能到账")
            assert {a["path"] for a in results[mode]["retrievalTrace"]["attempts"]} == {mode}
        assert [b["evidenceKey"] for b in results["haystack"]["evidenceBlocks"]] == [
            b["evidenceKey"] for b in results["sdk"]["evidenceBlocks"]
        ]
        for a, b in zip(results["haystack"]["evidenceBlocks"], results["sdk"]["evidenceBlocks"], strict=True):
            assert a["score"] == pytest.approx(b["score"], abs=1e-3)

    def test_auto_mode_falls_back_to_sdk_with_reason(self, make_pipeline):
        pipe = make_pipeline(retriever={"mode": "auto", "reference_threshold": 0.5, "evidence_threshold": 0.5})
        collection = pipe.get_component("retriever").collection

        def broken(*args, **kwargs):
            raise ConnectionError("milvus-haystack store unavailable")

        collection._search_haystack = broken
        result = lookup(pipe, "退款多久能到账")
        attempt = result["retrievalTrace"]["attempts"][0]
        assert attempt["path"] == "sdk" and attempt["error"] is None
        assert attempt["fallback"]["from"] == "haystack" and "store unavailable" in attempt["fallback"]["reason"]
        assert result["found"] is True

    def test_score_semantics_are_labelled_per_path(self, make_pipeline):
        for mode in ("haystack", "sdk"):
            pipe = make_pipeline(retriever={"mode": mode, "reference_threshold": 0.5, "evidence_threshold": 0.5})
            block = lookup(pipe, "disk full on the node")["evidenceBlocks"][0]
            assert "l2_distance" in block["scoreLabel"] and f"via {mode} path" in block["scoreLabel"]

    # --- session dedup -----------------------------------------------------------------------------------------

    def test_session_dedup_returns_no_consumable_evidence_again(self, pipeline, deployment):
        session = f"s-{uuid.uuid4().hex[:8]}"
        first = lookup(pipeline, "Basic plan seats and price", session_id=session)
        assert first["found"] is True
        second = lookup(pipeline, "Basic plan seats and price", session_id=session)
        assert second["found"] is False and second["evidenceStatus"] == "already_returned"
        assert second["relevanceLevel"] == first["relevanceLevel"] != "none"  # the relevance of what was found
        assert second["evidenceBlocks"] == [] and second["contextPack"]["packedText"] == ""
        assert second["retrievalTrace"]["attempts"] and second["rerankTrace"]["items"] == []  # nothing returned
        assert "already returned" in second["message"]
        details = self.trace_row(deployment, second).retrieval_details
        assert details["session"]["suppressed"]
        assert details["rerank_trace"]["candidates"]  # what was found stays in the trace
        other = lookup(pipeline, "Basic plan seats and price", session_id=session + "-other")
        assert other["found"] is True

    def test_session_memory_holds_back_returned_evidence_before_the_caps(self, make_pipeline):
        """Fresh relevant blocks ranked below the caps come back on the next call instead of `already_returned`."""
        pipe = make_pipeline(
            retriever={"reference_threshold": 0.5, "evidence_threshold": 0.5},
            gate={"max_gap": 1.0, "dense_margin": -1.0, "unfamiliar_dense_margin": -1.0},
            deduper={"max_per_document": 2, "max_blocks": 2},
        )
        session = f"s-{uuid.uuid4().hex[:8]}"
        query = "check the inode usage with df -i and clear the cache directory"
        first = lookup(pipe, query, session_id=session)
        second = lookup(pipe, query, session_id=session)
        assert len(first["evidenceBlocks"]) == 2 and second["evidenceStatus"] == "evidence"
        first_keys = {b["evidenceKey"] for b in first["evidenceBlocks"]}
        second_keys = {b["evidenceKey"] for b in second["evidenceBlocks"]}
        assert second_keys and not first_keys & second_keys
        assert "2 more, returned earlier in this session, were held back" in second["message"]

    # --- bad input, always recorded ----------------------------------------------------------------------------

    @staticmethod
    def row_count(deployment) -> int:
        with Session(TraceStore(deployment.trace_db_url).engine) as session:
            return session.exec(select(func.count()).select_from(ToolInvocation)).one()

    @pytest.mark.parametrize(
        ("query", "fragment"),
        [("", "query is empty"), ("   \n\t ", "query is empty"), ("\x00\x01\x1b", "control characters")],
    )
    def test_empty_input_is_rejected_and_recorded(self, pipeline, deployment, query, fragment):
        before = self.row_count(deployment)
        result = lookup(pipeline, query)
        assert result["found"] is False and result["evidenceStatus"] == "invalid_query"
        assert fragment in result["error"]
        assert self.row_count(deployment) == before + 1
        row = self.trace_row(deployment, result)
        assert row.status == "invalid_query" and fragment in row.error

    def test_one_megabyte_query_is_rejected_and_recorded(self, pipeline, deployment):
        result = lookup(pipeline, "disk " * 210_000)
        assert result["evidenceStatus"] == "invalid_query" and "limit is 2000" in result["error"]
        row = self.trace_row(deployment, result)
        assert len(row.query) == 2000

    def test_control_characters_are_removed_from_a_real_query(self, pipeline):
        result = lookup(pipeline, "disk\x00 full\u200b on the\x1b node")
        assert result["found"] is True and result["query"] == "disk full on the node"
        assert result["l0Hints"]["categoryFilter"] == "alerts"

    def test_category_with_expression_syntax_is_matched_literally(self, pipeline, deployment):
        result = lookup(pipeline, "when is the zebra maintenance window")
        assert result["l0Hints"]["categoryFilter"] == QUOTED_CATEGORY
        attempt = result["retrievalTrace"]["attempts"][0]
        assert attempt["error"] is None and attempt["filter"] == {"category": QUOTED_CATEGORY}
        assert {b["category"] for b in result["evidenceBlocks"]} == {QUOTED_CATEGORY}
        assert self.trace_row(deployment, result).status == "evidence"

    def test_every_lookup_writes_exactly_one_row(self, pipeline, deployment):
        before = self.row_count(deployment)
        lookup(pipeline, "disk full on the node")
        lookup(pipeline, "")
        lookup(pipeline, "completely unrelated question about gardening tomatoes")
        assert self.row_count(deployment) == before + 3

    def test_retrieval_details_keys(self, pipeline, deployment):
        details = self.trace_row(deployment, lookup(pipeline, "disk full on the node")).retrieval_details
        for key in (
            "l0_hints",
            "query_transform",
            "retrieval_trace",
            "rerank_trace",
            "context_pack_summary",
            "evidence_blocks",
            "fallback_reason",
            "candidate_count",
            "evidence_block_count",
            "sidecar",
        ):
            assert key in details, key
        assert "packedText" not in details["context_pack_summary"]

    # --- sidecar comparison retrieval --------------------------------------------------------------------------

    @staticmethod
    def _stable(result: dict) -> dict:
        """The result without what differs between two runs anyway (trace id, timings)."""
        stable = json.loads(json.dumps(result))
        stable.pop("traceId")
        for attempt in stable["retrievalTrace"]["attempts"]:
            for timing in ("latencyMs", "latency_ms", "stageMs", "stage_ms"):
                attempt.pop(timing, None)
        return stable

    @pytest.mark.parametrize(
        ("retriever", "mode"), [("bm25", "sdk"), ("dense", "sdk"), ("dense", "haystack"), ("hybrid", "sdk")]
    )
    def test_sidecar_is_traced_and_never_changes_the_result(self, make_pipeline, deployment, retriever, mode):
        main = {"reference_threshold": 0.5, "evidence_threshold": 0.5}
        query = "disk usage above 90 percent on a node"
        off = lookup(make_pipeline(retriever=main), query)
        on = lookup(
            make_pipeline(retriever=main, sidecar={"enabled": True, "retriever": retriever, "mode": mode}), query
        )
        failing = lookup(
            make_pipeline(
                retriever=main, sidecar={"enabled": True, "collection": {"collection_name": "no_such_collection"}}
            ),
            query,
        )
        assert self._stable(on) == self._stable(off) == self._stable(failing)
        assert self.trace_row(deployment, off).retrieval_details["sidecar"] == {"enabled": False, "status": "off"}
        sidecar = self.trace_row(deployment, on).retrieval_details["sidecar"]
        assert (sidecar["status"], sidecar["retriever"], sidecar["error"]) == ("ok", retriever, None)
        assert sidecar["mode"] == (None if retriever == "bm25" else mode)
        assert {row["path"] for row in sidecar["rows"]} <= {"milvus", "local", mode, "bm25"}
        assert sidecar["rows"][0]["source"] == "alerts/disk.md"
        assert {"doc_id", "title", "breadcrumb", "category", "rank", "preview", "score_label", "score"} <= set(
            sidecar["rows"][0]
        )
        comparison = sidecar["comparison"]
        assert comparison["overlap"] + len(comparison["only_in_sidecar"]) == len(sidecar["rows"])
        assert off["evidenceBlocks"][0]["evidenceKey"] in {s["evidence_key"] for s in comparison["rank_shifts"]}
        broken = self.trace_row(deployment, failing).retrieval_details["sidecar"]
        assert broken["status"] == "failed" and "no_such_collection" in broken["error"]

    def test_trace_store_down_does_not_fail_the_lookup_nor_lose_the_row(self, deployment, tmp_path):
        blocker = tmp_path / "not-a-dir"
        blocker.write_text("x")
        pipe = load_pipeline(
            data_dir=deployment.data_dir,
            milvus_uri=deployment.milvus_uri,
            trace_db_url=f"sqlite:///{blocker}/traces.db",
            component_params={"recorder": {"spool_path": str(tmp_path / "spool.jsonl")}},
        )
        result = lookup(pipe, "disk full on the node")
        assert result["found"] is True and result["traceId"] is None
        spooled = [json.loads(line) for line in (tmp_path / "spool.jsonl").read_text().splitlines()]
        assert spooled[0]["query"] == "disk full on the node" and spooled[0]["status"] == "evidence"


class TestPipelinesYaml:
    def test_loads_with_plain_haystack_and_the_allowlist(self):
        text = DEFAULT_LOOKUP_PIPELINE.read_text(encoding="utf-8")
        pipe = Pipeline.loads(text, allowed_modules=["components"])
        assert "retriever" in dict(pipe.walk())

    def test_refuses_to_load_without_the_allowlist(self):
        with pytest.raises(DeserializationError):
            Pipeline.loads(DEFAULT_LOOKUP_PIPELINE.read_text(encoding="utf-8"))

    @pytest.mark.parametrize("path", [DEFAULT_LOOKUP_PIPELINE, DEFAULT_INDEXING_PIPELINE])
    def test_every_shipped_value_is_the_code_default(self, path):
        """One source of truth: a component built without arguments is configured as the shipped YAML says."""
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        # a second embedder of the same class differs from the defaults exactly by its role
        roles = {"crosslingual_embedder": {"model", "embedding_meta_key"}}
        for name, spec in data["components"].items():
            module, _, class_name = spec["type"].rpartition(".")
            if not module.startswith("components."):
                continue  # Haystack's own components (the router, the joiner) are configured in the YAML alone
            cls = getattr(importlib.import_module(module), class_name)
            default = cls()
            for param, value in spec["init_parameters"].items():
                if isinstance(value, dict) and "init_parameters" in value:
                    continue  # a nested collection: the indexing pipeline defines the schema there (commented)
                if param in roles.get(name, set()):
                    continue
                shipped = getattr(cls(**{param: value}), param)
                assert getattr(default, param) == shipped, f"{path.name}: {name}.{param} ships {shipped!r}"

    def test_the_lookup_yaml_names_no_schema(self):
        """The lookup side says where the collection is; its schema is what `index` created it with."""
        data = yaml.safe_load(DEFAULT_LOOKUP_PIPELINE.read_text(encoding="utf-8"))
        for name in ("retriever", "language_balance", "sidecar"):
            collection = data["components"][name]["init_parameters"]["collection"]["init_parameters"]
            assert set(collection) == {"uri", "index_path", "token"}, name

    def test_round_trip_gives_the_same_pipeline(self):
        first = Pipeline.loads(DEFAULT_LOOKUP_PIPELINE.read_text(encoding="utf-8"), allowed_modules=["components"])
        second = Pipeline.loads(first.dumps(), allowed_modules=["components"])
        a, b = first.to_dict(), second.to_dict()
        assert a["components"] == b["components"]

        def edges(data):
            return sorted((c["sender"], c["receiver"]) for c in data["connections"])

        assert edges(a) == edges(b) and len(edges(a)) == 53

    @pytest.mark.integration
    def test_editing_the_yaml_changes_behaviour(self, tmp_path, tiny_kb):
        deployment = Deployment.resolve(tmp_path / "data")
        indexer = KnowledgeIndexer(deployment)
        indexer.index(tiny_kb, progress=False)
        indexer.close()
        text = DEFAULT_LOOKUP_PIPELINE.read_text(encoding="utf-8")
        edits = {
            "budget": ("char_budget: 4000", "char_budget: 200"),
            "mode": ("mode: auto", "mode: sdk"),
            "threshold": ("reference_threshold: 0.94", "reference_threshold: 0.999"),
            "weight": ("keyword: 0.0", "keyword: 0.5"),
        }
        base = lookup(load_pipeline(data_dir=deployment.data_dir), "disk full on the node")
        for name, (old, new) in edits.items():
            assert old in text, name
            path = tmp_path / f"{name}.yaml"
            path.write_text(text.replace(old, new), encoding="utf-8")
            edited = lookup(load_pipeline(path, data_dir=deployment.data_dir), "disk full on the node")
            if name == "budget":
                assert edited["contextPack"]["charBudget"] == 200 < base["contextPack"]["usedChars"]
            elif name == "mode":
                assert {a["path"] for a in edited["retrievalTrace"]["attempts"]} == {"sdk"}
                assert {a["path"] for a in base["retrievalTrace"]["attempts"]} == {"haystack"}
            elif name == "threshold":
                assert edited["retrievalTrace"]["fallbackReason"] == "filtered_vector_low_quality"
                assert base["retrievalTrace"]["fallbackReason"] is None
            else:
                base_top, edited_top = base["rerankTrace"]["items"][0], edited["rerankTrace"]["items"][0]
                assert base_top["finalScore"] == base_top["baseScore"]
                assert edited_top["finalScore"] == pytest.approx(edited_top["baseScore"] + 0.06, abs=1e-3)  # max_boost


PRIORITY_DOCS = {
    # the same topic; the plainest answer has the lowest priority
    "it/vpn-basics.md": (1, "VPN access for new staff: install the client, sign in with your account, connect."),
    "it/vpn-remote.md": (2, "Working remotely: the VPN client connects you to the office network from home."),
    "it/vpn-policy.md": (3, "Network policy: traffic to internal services must go through the VPN at all times."),
}


class TestAHaystackRankerInsertedByYaml:
    """Retrieval and ranking are separate nodes: any Haystack ranker fits between them by editing the YAML alone."""

    @staticmethod
    def _insert_after_joiner(text: str, name: str, spec: dict) -> str:
        data = yaml.safe_load(text)
        data["components"][name] = spec
        connections = [
            c for c in data["connections"] if c != {"sender": "joiner.documents", "receiver": "reranker.documents"}
        ]
        assert len(connections) == len(data["connections"]) - 1  # the shipped edge it replaces
        connections += [
            {"sender": "joiner.documents", "receiver": f"{name}.documents"},
            {"sender": f"{name}.documents", "receiver": "reranker.documents"},
        ]
        return yaml.safe_dump({**data, "connections": connections}, sort_keys=False)

    def test_meta_field_ranker_reorders_the_evidence(self, tmp_path):
        kb = tmp_path / "knowledge"
        for source, (priority, text) in PRIORITY_DOCS.items():
            (kb / source).parent.mkdir(parents=True, exist_ok=True)
            title = source.rsplit("/", 1)[1].removesuffix(".md")
            (kb / source).write_text(
                f"---\ntitle: {title}\ncategory: it\npriority: {priority}\n---\n# {title}\n\n{text}\n", encoding="utf-8"
            )
        deployment = Deployment.resolve(tmp_path / "data")
        indexer = KnowledgeIndexer(deployment)
        assert indexer.index(kb, progress=False).indexed == 3
        indexer.close()
        edited = tmp_path / "pipelines.yaml"
        edited.write_text(
            self._insert_after_joiner(
                DEFAULT_LOOKUP_PIPELINE.read_text(encoding="utf-8"),
                "priority_ranker",
                {
                    "type": "haystack.components.rankers.meta_field.MetaFieldRanker",
                    "init_parameters": {"meta_field": "priority", "weight": 0.9, "ranking_mode": "linear_score"},
                },
            ),
            encoding="utf-8",
        )
        query = "how do I get VPN access as new staff?"
        shipped = load_pipeline(data_dir=deployment.data_dir)
        ranked = load_pipeline(edited, data_dir=deployment.data_dir)
        assert "priority_ranker" in dict(ranked.walk())
        first = lookup_with_details(shipped, query)
        second = lookup_with_details(ranked, query)
        order = [key.split("#")[0] for key in first[1]["ranking"]]
        reordered = [key.split("#")[0] for key in second[1]["ranking"]]
        assert order[0] == "it/vpn-basics.md"  # the plainest answer, by similarity
        assert reordered == ["it/vpn-policy.md", "it/vpn-remote.md", "it/vpn-basics.md"]  # by priority, descending
        # the gate, the packer and the result follow the new order: blocks, if any, in priority order
        blocks = [block["source"] for block in second[0]["evidenceBlocks"]]
        assert blocks == [source for source in reordered if source in blocks]
