from __future__ import annotations

import copy
import inspect
import shutil
import threading
import time
import uuid
from pathlib import Path

import numpy as np
import pytest
from haystack.core.serialization import component_from_dict, component_to_dict

from components.core.embedding_backends import get_backend
from components.core.scores import normalized_similarity
from components.core.text_matching import script_language
from components.retrievers.filtered_retry_retriever import LOW_QUALITY, NO_EVIDENCE, FilteredRetryRetriever
from components.store.knowledge_collection import KnowledgeCollection
from components.store.knowledge_index import KnowledgeIndex
from components.store.lexical import TermStatistics, tokenize
from components.store.milvus_chunk_store import MilvusChunkStore
from components.store.schema import CollectionSchema
from components.store.vector_table import VectorTable, table_rows
from pipelines.measure.evaluation import load_eval_set
from tests.conftest import KNOWLEDGE_DIR, index_tiny_kb

DISK_QUESTION = "the disk on a node is full, what should I do"
INJECTION = 'alerts" or metadata["category"] != "x'
CANDIDATE_META = ("raw_score", "score_semantics", "retrieval_path", "attempt", "evidence_key")


def embed(query: str) -> list[float]:
    return get_backend("multilingual-e5-small").embed_queries([query])[0].tolist()


def embed_crosslingual(query: str) -> list[float]:
    return get_backend("use-multilingual-v3").embed_queries([query])[0].tolist()


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    """The tiny knowledge base indexed once into Milvus Lite for the whole module."""
    return index_tiny_kb(tmp_path_factory.mktemp("retriever"))


@pytest.fixture(scope="module")
def disk_vector() -> list[float]:
    return embed(DISK_QUESTION)


COLLECTION_PARAMS = set(inspect.signature(KnowledgeCollection.__init__).parameters) - {"self"}
# what these tests were written against: dense only, ten candidates, no evidence floor, rank score = similarity
# (the tiny knowledge base is bilingual, so language balancing would shift scores); each test says what differs
POLICY = {
    "top_k": 10,
    "reference_threshold": 0.9,
    "evidence_threshold": 0.0,
    "lexical_weight": 0.0,
    "language_balance": 0.0,
}


@pytest.fixture
def make_retriever(data_dir):
    """A retriever on the tiny knowledge base; collection parameters among `kwargs` go to its collection."""
    made: list[FilteredRetryRetriever] = []

    def make(**kwargs) -> FilteredRetryRetriever:
        params = {"uri": str(data_dir / "milvus.db"), "index_path": str(data_dir / "knowledge_index.json")}
        params.update({k: kwargs.pop(k) for k in list(kwargs) if k in COLLECTION_PARAMS})
        retriever = FilteredRetryRetriever(KnowledgeCollection(**params), **{**POLICY, **kwargs})
        made.append(retriever)
        return retriever

    yield make
    for retriever in made:
        retriever.close()


def attempt_names(out: dict) -> list[str]:
    return [a["name"] for a in out["retrieval_trace"]["attempts"]]


def lexical(retriever: FilteredRetryRetriever, query: str, top_k: int) -> list[tuple[str, float]]:
    """The BM25 hits the retriever's collection gives on the retriever's lexical source."""
    return retriever.collection.lexical_search(query, top_k, source=retriever.lexical_source)[0]


class TestFilteredRetryRetriever:
    # --- init, validation, serialization ---------------------------------------------------------------------

    def test_init_defaults(self):
        retriever = FilteredRetryRetriever()
        assert isinstance(retriever.collection, KnowledgeCollection)
        assert retriever.collection.uri == "data/milvus.db"
        assert retriever.collection.index_path == "data/knowledge_index.json"
        assert retriever.category_key == "category"
        assert retriever.mode == "auto"
        # the shipped pipelines.yaml values (tests/pipelines/test_lookup_pipeline.py checks the two agree)
        assert retriever.top_k == 60
        assert retriever.search_depth is None
        assert retriever.reference_threshold == 0.94
        assert retriever.evidence_threshold == 0.88
        assert retriever.lexical_weight == 0.15
        assert retriever.lexical_source == "auto"
        assert retriever.lexical_normalization == "ideal"
        assert retriever.language_balance == 0.75
        assert retriever.crosslingual_weight == 0.1
        assert retriever.enabled is True

    def test_init_does_not_connect(self, tmp_path):
        FilteredRetryRetriever(KnowledgeCollection(uri=str(tmp_path / "nowhere" / "milvus.db")))
        assert not (tmp_path / "nowhere").exists()

    @pytest.mark.parametrize(
        ("kwargs", "match"),
        [
            ({"mode": "fast"}, "mode='fast'"),
            ({"top_k": 0}, "top_k=0"),
            ({"search_depth": 0}, "search_depth=0"),
            ({"lexical_weight": -0.1}, "lexical_weight=-0.1"),
            ({"lexical_source": "elastic"}, "lexical_source='elastic'"),
            ({"lexical_normalization": "max"}, "lexical_normalization='max'"),
            ({"language_balance": 1.5}, "language_balance=1.5"),
            ({"language_balance": -0.1}, r"language_balance=-0\.1"),
            ({"crosslingual_weight": -0.1}, r"crosslingual_weight=-0\.1"),
            ({"reference_threshold": 1.5}, "reference_threshold=1.5"),
            ({"reference_threshold": -0.1}, r"reference_threshold=-0\.1"),
            ({"evidence_threshold": 2.0}, r"evidence_threshold=2\.0"),
            ({"category_key": 'category"]'}, "metadata key"),
        ],
    )
    def test_invalid_init(self, kwargs, match):
        with pytest.raises(ValueError, match=match):
            FilteredRetryRetriever(**kwargs)

    def test_to_dict_from_dict_keeps_every_parameter(self):
        collection = KnowledgeCollection(uri="http://127.0.0.1:19530", collection_name="kb_other", metric_type="IP")
        params = {
            "category_key": "section",
            "mode": "sdk",
            "top_k": 4,
            "search_depth": 12,
            "reference_threshold": 0.75,
            "evidence_threshold": 0.3,
            "lexical_weight": 0.2,
            "lexical_source": "local",
            "lexical_normalization": "best",
            "language_balance": 0.5,
            "crosslingual_weight": 0.3,
            "enabled": False,
        }
        data = component_to_dict(FilteredRetryRetriever(collection, **params), "retriever")
        assert data["init_parameters"] == {"collection": collection.to_dict(), **params}
        restored = component_from_dict(FilteredRetryRetriever, data, "retriever")
        assert {name: getattr(restored, name) for name in params} == params
        assert restored.collection.to_dict() == collection.to_dict()

    def test_from_dict_accepts_only_a_knowledge_collection(self):
        data = component_to_dict(FilteredRetryRetriever(), "retriever")
        data["init_parameters"]["collection"]["type"] = "builtins.dict"
        with pytest.raises(Exception, match="KnowledgeCollection"):
            component_from_dict(FilteredRetryRetriever, data, "retriever")

    # --- run behaviour against a real Milvus Lite store -----------------------------------------------------------

    @pytest.mark.integration
    def test_no_category_runs_one_unfiltered_attempt(self, make_retriever, disk_vector):
        out = make_retriever(mode="sdk").run(query_embedding=disk_vector)
        trace = out["retrieval_trace"]
        assert attempt_names(out) == ["unfiltered"]
        assert trace["selected_attempt"] == "unfiltered"
        assert trace["fallback_reason"] is None
        assert trace["l1_enabled"] is True and trace["mode"] == "sdk"
        attempt = trace["attempts"][0]
        assert attempt["filter"] is None and attempt["error"] is None and attempt["path"] == "sdk"
        candidates = out["candidates"]
        assert attempt["candidate_count"] == len(candidates) > 0
        assert {d.meta["category"] for d in candidates} == {"alerts", "payments", "product-faq"}
        assert candidates[0].meta["source"] == "alerts/disk.md"
        assert attempt["top_score"] == pytest.approx(candidates[0].score, abs=1e-4)
        scores = [d.score for d in candidates]
        assert scores == sorted(scores, reverse=True)

    @pytest.mark.integration
    def test_blank_category_counts_as_none(self, make_retriever, disk_vector):
        out = make_retriever(mode="sdk").run(query_embedding=disk_vector, category_filter="   ")
        assert attempt_names(out) == ["unfiltered"]
        assert out["retrieval_trace"]["fallback_reason"] is None

    @pytest.mark.integration
    @pytest.mark.parametrize("mode", ["sdk", "haystack"])
    def test_good_filtered_attempt_is_used_alone(self, make_retriever, disk_vector, mode):
        out = make_retriever(mode=mode, reference_threshold=0.5).run(
            query_embedding=disk_vector, category_filter="alerts"
        )
        trace = out["retrieval_trace"]
        assert attempt_names(out) == ["filtered"]
        assert trace["selected_attempt"] == "filtered"
        assert trace["fallback_reason"] is None
        assert trace["attempts"][0]["filter"] == {"category": "alerts"}
        candidates = out["candidates"]
        assert candidates and candidates[0].score >= 0.5
        assert {d.meta["category"] for d in candidates} == {"alerts"}
        assert {d.meta["attempt"] for d in candidates} == {"filtered"}

    @pytest.mark.integration
    @pytest.mark.parametrize("mode", ["sdk", "haystack", "auto"])
    def test_category_without_matches_falls_back_unfiltered(self, make_retriever, disk_vector, mode):
        out = make_retriever(mode=mode, reference_threshold=0.5).run(
            query_embedding=disk_vector, category_filter="nonexistent"
        )
        trace = out["retrieval_trace"]
        assert attempt_names(out) == ["filtered", "unfiltered"]
        assert trace["fallback_reason"] == NO_EVIDENCE
        assert trace["selected_attempt"] == "unfiltered"
        filtered, unfiltered = trace["attempts"]
        assert filtered["candidate_count"] == 0 and filtered["error"] is None
        assert unfiltered["candidate_count"] > 0
        assert out["candidates"] and {d.meta["attempt"] for d in out["candidates"]} == {"unfiltered"}

    @pytest.mark.integration
    def test_low_quality_filtered_attempt_is_retried(self, make_retriever, disk_vector):
        out = make_retriever(mode="sdk", reference_threshold=0.99).run(
            query_embedding=disk_vector, category_filter="product-faq"
        )
        trace = out["retrieval_trace"]
        assert attempt_names(out) == ["filtered", "unfiltered"]
        assert trace["fallback_reason"] == LOW_QUALITY
        assert trace["selected_attempt"] == "unfiltered"
        filtered = trace["attempts"][0]
        assert filtered["candidate_count"] > 0 and filtered["top_score"] < 0.99
        candidates = out["candidates"]
        # the disk runbook found by the retry outranks the weak filtered hits
        assert candidates[0].meta["source"] == "alerts/disk.md"
        assert candidates[0].meta["attempt"] == "unfiltered"
        # low-quality filtered candidates still compete (a chunk the retry found too names both attempts)
        assert any(
            "filtered" in d.meta.get("attempts", [d.meta["attempt"]]) and d.meta["category"] == "product-faq"
            for d in candidates
        )
        scores = [d.score for d in candidates]
        assert scores == sorted(scores, reverse=True)

    @pytest.mark.integration
    def test_a_chunk_both_attempts_found_is_a_candidate_once(self, make_retriever, disk_vector):
        def scores(out: dict) -> dict[str, float]:
            return {d.id: d.score for d in out["candidates"]}

        run = {"query_embedding": disk_vector}
        filtered = scores(
            make_retriever(mode="sdk", top_k=20, reference_threshold=0.0).run(**run, category_filter="product-faq")
        )
        unfiltered = scores(make_retriever(mode="sdk", top_k=20).run(**run))
        both = set(filtered) & set(unfiltered)
        assert both, "the test needs chunks that both attempts find"
        out = make_retriever(mode="sdk", top_k=20, reference_threshold=0.99).run(**run, category_filter="product-faq")
        assert attempt_names(out) == ["filtered", "unfiltered"]
        ids = [d.id for d in out["candidates"]]
        # once per chunk, so that the gate's standout and decision depth count chunks, not copies
        assert len(ids) == len(set(ids)) == len(set(filtered) | set(unfiltered))
        merged = scores(out)
        assert all(merged[i] == max(filtered[i], unfiltered[i]) for i in both)
        # and it says that both found it, so that its hit reasons can
        found_by = {d.id: sorted(d.meta.get("attempts", [d.meta["attempt"]])) for d in out["candidates"]}
        assert all(found_by[i] == ["filtered", "unfiltered"] for i in both)
        assert all(len(found_by[i]) == 1 for i in set(ids) - both)
        assert list(merged.values()) == sorted(merged.values(), reverse=True)

    @pytest.mark.integration
    def test_evidence_threshold_drops_weak_candidates(self, make_retriever, disk_vector):
        baseline = make_retriever(mode="sdk").run(query_embedding=disk_vector)["candidates"]
        assert len(baseline) >= 3
        threshold = (baseline[1].score + baseline[2].score) / 2
        assert baseline[1].score > threshold > baseline[2].score
        out = make_retriever(mode="sdk", evidence_threshold=threshold).run(query_embedding=disk_vector)
        assert [d.id for d in out["candidates"]] == [d.id for d in baseline[:2]]
        attempt = out["retrieval_trace"]["attempts"][0]
        assert attempt["below_threshold_dropped"] == len(baseline) - 2

    @pytest.mark.integration
    def test_evidence_threshold_near_one_leaves_no_candidates(self, make_retriever, disk_vector):
        out = make_retriever(mode="sdk", evidence_threshold=0.999).run(
            query_embedding=disk_vector, category_filter="alerts"
        )
        trace = out["retrieval_trace"]
        assert out["candidates"] == []
        assert attempt_names(out) == ["filtered", "unfiltered"]
        assert trace["fallback_reason"] == NO_EVIDENCE
        for attempt in trace["attempts"]:
            assert attempt["candidate_count"] == 0
            assert attempt["top_score"] is None
            assert attempt["raw_hits"] > 0 and attempt["below_threshold_dropped"] == attempt["raw_hits"]

    @pytest.mark.integration
    def test_top_k_override(self, make_retriever, disk_vector):
        retriever = make_retriever(mode="sdk")
        full = retriever.run(query_embedding=disk_vector)["candidates"]
        out = retriever.run(query_embedding=disk_vector, top_k=2)
        assert [d.id for d in out["candidates"]] == [d.id for d in full[:2]]

    @pytest.mark.integration
    def test_search_depth_fuses_deeper_and_keeps_top_k(self, make_retriever, disk_vector):
        params = {"mode": "sdk", "lexical_weight": 0.2}
        shallow = make_retriever(top_k=1, **params).run(query_embedding=disk_vector, query=DISK_QUESTION)
        deep = make_retriever(top_k=1, search_depth=5, **params).run(query_embedding=disk_vector, query=DISK_QUESTION)
        wide = make_retriever(top_k=5, **params).run(query_embedding=disk_vector, query=DISK_QUESTION)
        shallow_attempt, deep_attempt = (
            shallow["retrieval_trace"]["attempts"][0],
            deep["retrieval_trace"]["attempts"][0],
        )
        assert deep_attempt["raw_hits"] > shallow_attempt["raw_hits"]
        assert deep_attempt["candidate_count"] == len(deep["candidates"]) == 1
        # the one kept is the best of the deeper fused pool, as if all five had been returned
        assert [d.id for d in deep["candidates"]] == [d.id for d in wide["candidates"][:1]]
        assert deep["candidates"][0].score == pytest.approx(wide["candidates"][0].score)

    @pytest.mark.integration
    def test_search_depth_below_top_k_searches_top_k(self, make_retriever, disk_vector):
        out = make_retriever(top_k=3, search_depth=1, mode="sdk").run(query_embedding=disk_vector)
        assert len(out["candidates"]) == 3

    def test_disabled_runs_no_attempt(self, disk_vector, tmp_path):
        collection = KnowledgeCollection(uri=str(tmp_path / "milvus.db"), index_path=str(tmp_path / "index.json"))
        retriever = FilteredRetryRetriever(collection, enabled=False)
        out = retriever.run(query_embedding=disk_vector, category_filter="alerts")
        trace = out["retrieval_trace"]
        assert out["candidates"] == []
        assert trace["attempts"] == [] and trace["l1_enabled"] is False
        assert trace["selected_attempt"] is None and trace["fallback_reason"] is None
        assert not (tmp_path / "milvus.db").exists()

    def test_empty_query_embedding_runs_no_attempt(self, tmp_path):
        retriever = FilteredRetryRetriever(
            KnowledgeCollection(uri=str(tmp_path / "milvus.db"), index_path=str(tmp_path / "index.json"))
        )
        out = retriever.run(query_embedding=[], category_filter="alerts")
        assert out["candidates"] == []
        assert out["retrieval_trace"]["attempts"] == []
        assert out["retrieval_trace"]["l1_enabled"] is True
        assert out["retrieval_trace"]["selected_attempt"] is None

    @pytest.mark.integration
    @pytest.mark.parametrize("mode", ["sdk", "haystack"])
    def test_every_candidate_carries_its_provenance(self, make_retriever, disk_vector, mode):
        out = make_retriever(mode=mode, reference_threshold=0.99).run(
            query_embedding=disk_vector, category_filter="product-faq"
        )
        candidates = out["candidates"]
        assert candidates
        for doc in candidates:
            for key in CANDIDATE_META:
                assert key in doc.meta, key
            assert doc.meta["score_semantics"] == "l2_distance"
            assert doc.meta["retrieval_path"] == mode
            assert doc.meta["attempt"] in ("filtered", "unfiltered")
            assert doc.meta["evidence_key"] == f"{doc.meta['source']}#{doc.meta['chunk_index']}"
            assert 0.0 <= doc.score <= 1.0
            assert doc.score == pytest.approx(normalized_similarity(doc.meta["raw_score"], "L2"), abs=1e-4)
            assert doc.meta["doc_version"]  # original chunk metadata is kept, flattened

    @pytest.mark.integration
    @pytest.mark.parametrize("category", [None, "alerts", "payments"])
    def test_sdk_and_haystack_paths_agree(self, make_retriever, disk_vector, category):
        sdk = make_retriever(mode="sdk", reference_threshold=0.0).run(
            query_embedding=disk_vector, category_filter=category
        )
        hay = make_retriever(mode="haystack", reference_threshold=0.0).run(
            query_embedding=disk_vector, category_filter=category
        )
        assert sdk["candidates"]
        assert [d.id for d in sdk["candidates"]] == [d.id for d in hay["candidates"]]
        for a, b in zip(sdk["candidates"], hay["candidates"], strict=True):
            assert a.score == pytest.approx(b.score, abs=1e-4)
            assert a.meta["raw_score"] == pytest.approx(b.meta["raw_score"], abs=1e-3)
            assert (a.meta["retrieval_path"], b.meta["retrieval_path"]) == ("sdk", "haystack")
            assert a.meta["evidence_key"] == b.meta["evidence_key"]
            assert a.content == b.content
        assert [a["path"] for a in sdk["retrieval_trace"]["attempts"]] == ["sdk"]
        assert [a["path"] for a in hay["retrieval_trace"]["attempts"]] == ["haystack"]

    @pytest.mark.integration
    def test_auto_mode_uses_haystack_when_it_works(self, make_retriever, disk_vector):
        out = make_retriever(mode="auto").run(query_embedding=disk_vector)
        attempt = out["retrieval_trace"]["attempts"][0]
        assert attempt["path"] == "haystack" and "fallback" not in attempt
        assert {d.meta["retrieval_path"] for d in out["candidates"]} == {"haystack"}

    @pytest.mark.integration
    def test_auto_mode_falls_back_to_sdk(self, make_retriever, disk_vector, monkeypatch):
        retriever = make_retriever(mode="auto", reference_threshold=0.5)

        def broken(*args, **kwargs):
            raise RuntimeError("boom")

        monkeypatch.setattr(retriever.collection, "_search_haystack", broken)
        out = retriever.run(query_embedding=disk_vector, category_filter="alerts")
        trace = out["retrieval_trace"]
        assert trace["selected_attempt"] == "filtered"
        attempt = trace["attempts"][0]
        assert attempt["error"] is None
        assert attempt["fallback"]["from"] == "haystack"
        assert attempt["fallback"]["to"] == "sdk"
        assert "boom" in attempt["fallback"]["reason"]
        assert attempt["path"] == "sdk"
        assert out["candidates"] and {d.meta["retrieval_path"] for d in out["candidates"]} == {"sdk"}
        assert {d.meta["category"] for d in out["candidates"]} == {"alerts"}

    @pytest.mark.integration
    @pytest.mark.parametrize("mode", ["sdk", "haystack", "auto"])
    def test_missing_collection_is_recorded_not_raised(self, make_retriever, disk_vector, mode):
        retriever = make_retriever(mode=mode, collection_name=f"missing_{uuid.uuid4().hex[:8]}")
        retriever.warm_up()  # must not raise either
        out = retriever.run(query_embedding=disk_vector, category_filter="alerts")
        trace = out["retrieval_trace"]
        assert out["candidates"] == []
        assert attempt_names(out) == ["filtered", "unfiltered"]
        assert trace["fallback_reason"] == NO_EVIDENCE
        for attempt in trace["attempts"]:
            assert "does not exist" in attempt["error"], attempt
            assert attempt["candidate_count"] == 0
            assert "fallback" not in attempt  # a missing collection is missing on both paths

    @pytest.mark.integration
    def test_superseded_versions_are_dropped(self, make_retriever, data_dir, disk_vector, tmp_path):
        baseline = make_retriever(mode="sdk").run(query_embedding=disk_vector)
        alerts_chunks = [d for d in baseline["candidates"] if d.meta["source"] == "alerts/disk.md"]
        assert alerts_chunks
        assert baseline["retrieval_trace"]["attempts"][0]["stale_dropped"] == 0

        index = KnowledgeIndex.load(data_dir / "knowledge_index.json")
        entry = index.by_source()["alerts/disk.md"]
        entry.doc_version = "a-newer-version"
        index.save(tmp_path / "knowledge_index.json")

        for mode in ("sdk", "haystack"):
            out = make_retriever(mode=mode, index_path=str(tmp_path / "knowledge_index.json")).run(
                query_embedding=disk_vector
            )
            sources = {d.meta["source"] for d in out["candidates"]}
            assert "alerts/disk.md" not in sources
            assert sources == {"payments/refund.md", "faq/plans.md"}
            assert out["retrieval_trace"]["attempts"][0]["stale_dropped"] == len(alerts_chunks)

    @pytest.mark.integration
    def test_index_change_is_picked_up_without_restart(self, make_retriever, data_dir, disk_vector, tmp_path):
        index_path = tmp_path / "knowledge_index.json"
        index = KnowledgeIndex.load(data_dir / "knowledge_index.json")
        index.save(index_path)
        retriever = make_retriever(mode="sdk", index_path=str(index_path))
        before = retriever.run(query_embedding=disk_vector)["candidates"]
        assert any(d.meta["source"] == "faq/plans.md" for d in before)
        index.by_source()["faq/plans.md"].doc_version = "superseded-elsewhere"
        index.save(index_path)
        after = retriever.run(query_embedding=disk_vector)["candidates"]
        assert after and all(d.meta["source"] != "faq/plans.md" for d in after)

    @pytest.mark.integration
    def test_missing_index_file_keeps_every_candidate(self, make_retriever, disk_vector, tmp_path):
        out = make_retriever(mode="sdk", index_path=str(tmp_path / "absent.json")).run(query_embedding=disk_vector)
        assert {d.meta["source"] for d in out["candidates"]} == {
            "alerts/disk.md",
            "payments/refund.md",
            "faq/plans.md",
        }
        assert out["retrieval_trace"]["attempts"][0]["stale_dropped"] == 0

    @pytest.mark.integration
    @pytest.mark.parametrize("mode", ["sdk", "haystack", "auto"])
    def test_category_with_expression_syntax_is_matched_literally(self, make_retriever, disk_vector, mode):
        out = make_retriever(mode=mode, reference_threshold=0.5).run(
            query_embedding=disk_vector, category_filter=INJECTION
        )
        trace = out["retrieval_trace"]
        filtered = trace["attempts"][0]
        assert filtered["name"] == "filtered"
        assert filtered["filter"] == {"category": INJECTION}
        assert filtered["candidate_count"] == 0
        assert filtered["raw_hits"] == 0
        assert filtered["error"] is None  # a parse error would mean the value reached the expression unquoted
        assert "fallback" not in filtered
        assert trace["fallback_reason"] == NO_EVIDENCE
        assert all(d.meta["attempt"] == "unfiltered" for d in out["candidates"])

    @pytest.mark.integration
    def test_cosine_collection_uses_the_same_scale(self, make_retriever, data_dir, disk_vector):
        """The same chunks in a COSINE collection get the same normalized scores as in the L2 one."""
        uri = str(data_dir / "milvus.db")
        l2 = MilvusChunkStore(uri, CollectionSchema())
        cosine = MilvusChunkStore(uri, CollectionSchema(collection_name="chunks_cosine", metric_type="COSINE"))
        try:
            l2.load()
            rows = l2.client.query("knowledge_chunks", filter='id != ""', output_fields=["*"])
            cosine.drop()
            cosine.ensure_collection()
            fields = ("id", "content", "vector", "metadata", "crosslingual", "category")
            cosine.insert([{k: r[k] for k in fields} for r in rows])
            cosine.flush()
        finally:
            l2.close()
            cosine.close()
        reference = make_retriever(mode="sdk").run(query_embedding=disk_vector)["candidates"]
        for mode in ("sdk", "haystack"):
            out = make_retriever(mode=mode, collection_name="chunks_cosine", metric_type="COSINE").run(
                query_embedding=disk_vector
            )
            candidates = out["candidates"]
            assert [d.id for d in candidates] == [d.id for d in reference]
            for got, want in zip(candidates, reference, strict=True):
                assert got.meta["score_semantics"] == "cosine_similarity"
                assert got.meta["retrieval_path"] == mode
                assert got.score == pytest.approx(want.score, abs=1e-3)

    @pytest.mark.integration
    @pytest.mark.parametrize("mode", ["sdk", "haystack"])
    def test_custom_field_names(self, make_retriever, data_dir, disk_vector, mode):
        """A collection with other field names (configurable, per the docs) is searched on both paths."""
        uri = str(data_dir / "milvus.db")
        names = {"id_field": "pk", "content_field": "text", "vector_field": "emb", "metadata_field": "meta_json"}
        source = MilvusChunkStore(uri, CollectionSchema())
        target = MilvusChunkStore(
            uri, CollectionSchema(collection_name=f"custom_{mode}", crosslingual_field="", **names)
        )
        try:
            source.load()
            rows = source.client.query("knowledge_chunks", filter='id != ""', output_fields=["*"])
            target.drop()
            target.ensure_collection()
            target.insert(
                [
                    {
                        "pk": r["id"],
                        "text": r["content"],
                        "emb": r["vector"],
                        "meta_json": r["metadata"],
                        "category": r["category"],
                    }
                    for r in rows
                ]
            )
            target.flush()
        finally:
            source.close()
            target.close()
        reference = make_retriever(mode="sdk", reference_threshold=0.5).run(
            query_embedding=disk_vector, category_filter="alerts"
        )
        out = make_retriever(mode=mode, collection_name=f"custom_{mode}", reference_threshold=0.5, **names).run(
            query_embedding=disk_vector, category_filter="alerts"
        )
        trace = out["retrieval_trace"]
        assert [a["error"] for a in trace["attempts"]] == [None]
        assert trace["selected_attempt"] == "filtered"
        assert [d.id for d in out["candidates"]] == [d.id for d in reference["candidates"]]
        assert [d.content for d in out["candidates"]] == [d.content for d in reference["candidates"]]
        assert {d.meta["category"] for d in out["candidates"]} == {"alerts"}

    @pytest.mark.integration
    def test_inputs_are_not_mutated(self, make_retriever, disk_vector):
        vector = list(disk_vector)
        original = copy.deepcopy(vector)
        make_retriever(mode="auto", reference_threshold=0.99).run(query_embedding=vector, category_filter="alerts")
        assert vector == original

    @pytest.mark.integration
    def test_repeated_runs_do_not_leak_the_previous_filter(self, make_retriever, disk_vector):
        retriever = make_retriever(mode="haystack", reference_threshold=0.5)
        first = retriever.run(query_embedding=disk_vector, category_filter="payments")
        assert {d.meta["category"] for d in first["candidates"]} == {"payments"}
        second = retriever.run(query_embedding=disk_vector)
        assert {d.meta["category"] for d in second["candidates"]} == {"alerts", "payments", "product-faq"}

    # --- hybrid (dense + BM25) ----------------------------------------------------------------------------------

    def test_lexical_weight_adds_a_bm25_bonus_and_keeps_similarity(self, make_retriever, disk_vector):
        plain = make_retriever(top_k=3, lexical_weight=0.0).run(query_embedding=disk_vector, query=DISK_QUESTION)
        hybrid = make_retriever(top_k=3, lexical_weight=0.1).run(query_embedding=disk_vector, query=DISK_QUESTION)
        assert all("lexical_score" not in d.meta for d in plain["candidates"])
        best = hybrid["candidates"][0]
        assert 0 < best.meta["lexical_score"] <= 0.1
        assert best.score == pytest.approx(best.meta["similarity"] + best.meta["lexical_score"], abs=1e-3)
        scores = [d.score for d in hybrid["candidates"]]
        assert scores == sorted(scores, reverse=True)
        # the reference threshold is checked on similarity, never on the fused score
        assert hybrid["retrieval_trace"]["attempts"][0]["top_score"] <= 1.0

    @pytest.mark.parametrize("source", ["milvus", "local"])
    def test_ideal_normalization_divides_by_the_query_terms_largest_score(self, make_retriever, disk_vector, source):
        retriever = make_retriever(top_k=3, lexical_weight=0.1, lexical_source=source)
        out = retriever.run(query_embedding=disk_vector, query=DISK_QUESTION)
        pairs = lexical(retriever, DISK_QUESTION, 3)
        rows = retriever.collection.scan(with_content=True)
        ideal = TermStatistics(tokenize(r["content"]) for r in rows).ideal_score(tokenize(DISK_QUESTION))
        bonus = {d.id: d.meta["lexical_score"] for d in out["candidates"] if "lexical_score" in d.meta}
        assert bonus
        for chunk, score in pairs:
            if chunk in bonus:
                assert bonus[chunk] == pytest.approx(0.1 * score / ideal, abs=1e-4)
        # a query matches only part of what its terms could: the best hit gets less than the full weight
        assert 0 < max(bonus.values()) < 0.1

    def test_best_normalization_gives_the_best_lexical_hit_the_full_weight(self, make_retriever, disk_vector):
        retriever = make_retriever(top_k=3, lexical_weight=0.1, lexical_normalization="best")
        out = retriever.run(query_embedding=disk_vector, query=DISK_QUESTION)
        (best_chunk, _), *_ = lexical(retriever, DISK_QUESTION, 3)
        assert {d.id: d.meta["lexical_score"] for d in out["candidates"]}[best_chunk] == pytest.approx(0.1)

    def test_term_statistics_follow_an_index_change(self, make_retriever, data_dir, disk_vector, tmp_path):
        index_path = tmp_path / "knowledge_index.json"
        index = KnowledgeIndex.load(data_dir / "knowledge_index.json")
        index.save(index_path)
        retriever = make_retriever(lexical_weight=0.1, lexical_source="milvus", index_path=str(index_path))
        retriever.run(query_embedding=disk_vector, query=DISK_QUESTION)
        before = retriever.collection.term_statistics("milvus")
        assert retriever.collection.term_statistics("milvus") is before  # once per index change, not per lookup
        index.embedding_model = "re-indexed"
        index.save(index_path)
        assert retriever.collection.term_statistics("milvus") is not before

    def test_chunks_found_only_by_bm25_join_with_their_own_similarity(self, make_retriever):
        query = "Pro plan API access seats"
        vector = embed("完全无关的问题：今天天气怎么样")  # dense alone would not rank the plans chunk first
        out = make_retriever(top_k=1, lexical_weight=0.5, mode="sdk").run(query_embedding=vector, query=query)
        by_path = {d.meta["retrieval_path"]: d for d in out["candidates"]}
        assert "bm25" in by_path, [d.meta["retrieval_path"] for d in out["candidates"]]
        lexical_only = by_path["bm25"]
        assert lexical_only.meta["source"] == "faq/plans.md"
        assert lexical_only.meta["score_semantics"] == "l2_distance"
        assert lexical_only.meta["similarity"] == pytest.approx(
            normalized_similarity(lexical_only.meta["raw_score"], "L2")
        )
        assert float(np.dot(vector, embed(query))) < 0.95  # the two embeddings really differ

    def test_bm25_hits_respect_the_category_filter(self, make_retriever, disk_vector):
        out = make_retriever(top_k=5, lexical_weight=0.5, reference_threshold=0.5).run(
            query_embedding=disk_vector, query="Basic plan price seats", category_filter="alerts"
        )
        assert {d.meta["category"] for d in out["candidates"]} == {"alerts"}

    # --- where BM25 runs: inside Milvus or in-process -----------------------------------------------------------

    @staticmethod
    def _copy_without_full_text(data_dir: Path, name: str) -> None:
        """A copy of the indexed collection without the BM25 fields, as a Milvus before 2.5 would hold it."""
        uri = str(data_dir / "milvus.db")
        source = MilvusChunkStore(uri, CollectionSchema())
        target = MilvusChunkStore(
            uri, CollectionSchema(collection_name=name, lexical_field="", sparse_field="", crosslingual_field="")
        )
        try:
            source.load()
            fields = ["id", "content", "vector", "metadata", "category"]
            rows = source.client.query("knowledge_chunks", filter='id != ""', output_fields=fields)
            target.drop()
            target.ensure_collection()
            target.insert(rows)
            target.flush()
            assert target.full_text_fields() is None
        finally:
            source.close()
            target.close()

    @pytest.mark.integration
    def test_auto_bm25_runs_on_the_index_runs_file_else_inside_milvus(
        self, make_retriever, data_dir, disk_vector, tmp_path
    ):
        index = KnowledgeIndex.load(data_dir / "knowledge_index.json")
        assert index.statistics is not None and index.statistics.bm25_index
        without = tmp_path / "knowledge_index.json"
        index.statistics.bm25_index = None  # an index written before the BM25 file existed
        index.save(without)
        for index_path, path in [(data_dir / "knowledge_index.json", "local"), (without, "milvus")]:
            retriever = make_retriever(lexical_weight=0.1, index_path=str(index_path))
            assert retriever.collection.full_text_field() == "sparse"
            out = retriever.run(query_embedding=disk_vector, query=DISK_QUESTION)
            assert [a["lexical_path"] for a in out["retrieval_trace"]["attempts"]] == [path]
            assert any(d.meta.get("lexical_score", 0) > 0 for d in out["candidates"])

    @pytest.mark.integration
    def test_auto_uses_in_process_bm25_on_a_collection_without_full_text(self, make_retriever, data_dir, disk_vector):
        self._copy_without_full_text(data_dir, "no_full_text")
        out = make_retriever(collection_name="no_full_text", lexical_weight=0.1).run(
            query_embedding=disk_vector, query=DISK_QUESTION
        )
        attempt = out["retrieval_trace"]["attempts"][0]
        assert (attempt["error"], attempt["lexical_path"]) == (None, "local")
        assert any(d.meta.get("lexical_score", 0) > 0 for d in out["candidates"])

    @pytest.mark.integration
    def test_forcing_milvus_bm25_on_a_collection_without_full_text_is_a_recorded_error(
        self, make_retriever, data_dir, disk_vector
    ):
        self._copy_without_full_text(data_dir, "no_full_text_forced")
        retriever = make_retriever(collection_name="no_full_text_forced", lexical_weight=0.1, lexical_source="milvus")
        out = retriever.run(query_embedding=disk_vector, query=DISK_QUESTION)
        assert "no BM25 full-text field" in out["retrieval_trace"]["attempts"][0]["error"]
        assert out["candidates"] == []

    # --- language balance, coverage and calibration ------------------------------------------------------------

    @pytest.mark.integration
    def test_language_balance_lifts_answers_in_the_other_language(self, knowledge_data):
        """On the repository's bilingual knowledge base: cross-lingual answers rank higher, similarity unchanged."""
        collection = {
            "uri": str(knowledge_data / "milvus.db"),
            "index_path": str(knowledge_data / "knowledge_index.json"),
        }
        queries = [q for q in load_eval_set(KNOWLEDGE_DIR / "eval.jsonl") if q.type == "cross-lingual"]
        assert len(queries) >= 10
        plain = FilteredRetryRetriever(KnowledgeCollection(**collection), language_balance=0.0)
        balanced = FilteredRetryRetriever(KnowledgeCollection(**collection), language_balance=0.75)

        def first_rank(out: dict, expected: list[str]) -> int:
            docs = [d.meta["doc_id"] for d in out["candidates"]]
            return min((docs.index(e) for e in expected if e in docs), default=len(docs))

        lifted, lowered = 0, 0
        for query in queries:
            vector = embed(query.query)
            before = plain.run(query_embedding=vector, query=query.query)
            after = balanced.run(query_embedding=vector, query=query.query)
            lifted += first_rank(after, query.expected) < first_rank(before, query.expected)
            lowered += first_rank(after, query.expected) > first_rank(before, query.expected)
            by_id = {d.id: d for d in before["candidates"]}
            for doc in after["candidates"]:
                if doc.id in by_id:  # the similarity itself is never changed
                    assert doc.meta["similarity"] == pytest.approx(by_id[doc.id].meta["similarity"])
                assert doc.meta["language"] in ("en", "zh") and "language_offset" in doc.meta
        assert lifted >= len(queries) / 2 and lowered <= 2
        plain.close()
        balanced.close()

    @pytest.mark.integration
    def test_crosslingual_bonus_lifts_other_language_answers_and_keeps_same_language_order(self, knowledge_data):
        """On the bilingual knowledge base: the bonus moves only other-language candidates, by the stated amount."""
        collection = {
            "uri": str(knowledge_data / "milvus.db"),
            "index_path": str(knowledge_data / "knowledge_index.json"),
        }
        queries = [q for q in load_eval_set(KNOWLEDGE_DIR / "eval.jsonl") if q.type == "cross-lingual"]
        without = FilteredRetryRetriever(KnowledgeCollection(**collection), crosslingual_weight=0.0)
        with_bonus = FilteredRetryRetriever(KnowledgeCollection(**collection), crosslingual_weight=0.1)

        def first_rank(out: dict, expected: list[str]) -> int:
            docs = [d.meta["doc_id"] for d in out["candidates"]]
            return min((docs.index(e) for e in expected if e in docs), default=len(docs))

        lifted, lowered = 0, 0
        for query in queries:
            vector, bridge = embed(query.query), embed_crosslingual(query.query)
            before = without.run(query_embedding=vector, query=query.query, crosslingual_embedding=bridge)
            after = with_bonus.run(query_embedding=vector, query=query.query, crosslingual_embedding=bridge)
            lifted += first_rank(after, query.expected) < first_rank(before, query.expected)
            lowered += first_rank(after, query.expected) > first_rank(before, query.expected)
            language = script_language(query.query)
            same = [d for d in after["candidates"] if d.meta["language"] == language]
            (attempt,) = after["retrieval_trace"]["attempts"]
            assert attempt["crosslingual"]["status"] == "applied"
            reference = attempt["crosslingual"]["reference"]  # the median over every same-language hit fused
            for doc in after["candidates"]:
                expected_bonus = (
                    0.0 if doc.meta["language"] == language else 0.1 * (doc.meta["crosslingual_similarity"] - reference)
                )
                assert doc.meta["crosslingual_bonus"] == pytest.approx(expected_bonus, abs=2e-3)
            both = {d.id for d in same} & {d.id for d in before["candidates"]}
            order_after = [d.id for d in same if d.id in both]
            assert order_after == [d.id for d in before["candidates"] if d.id in both]  # e5 orders them alike
            assert before["retrieval_trace"]["attempts"][0]["crosslingual"] is None  # weight 0: not applied
        assert lifted >= len(queries) / 2 and lowered <= 2
        without.close()
        with_bonus.close()

    @pytest.mark.integration
    @pytest.mark.parametrize("mode", ["haystack", "sdk"])
    @pytest.mark.parametrize("source", ["table", "search"])
    def test_balancing_reads_each_candidates_own_vectors_and_returns_none(self, knowledge_data, mode, source):
        collection = KnowledgeCollection(
            uri=str(knowledge_data / "milvus.db"), index_path=str(knowledge_data / "knowledge_index.json")
        )
        if source == "search":  # an index written before vector tables: the search returns the vectors
            collection.vector_table = lambda: None
        retriever = FilteredRetryRetriever(collection, mode=mode)
        query = "how long do refunds take?"
        query_vector = embed_crosslingual(query)
        out = retriever.run(query_embedding=embed(query), query=query, crosslingual_embedding=query_vector)
        assert out["retrieval_trace"]["attempts"][0]["vectors"] == source
        candidates = out["candidates"]
        assert candidates and all(d.embedding is None and "_vectors" not in d.meta for d in candidates)
        # each similarity is the one of that chunk's own stored vector, read here by id in a request of its own
        stored = collection.crosslingual_vectors([d.id for d in candidates])
        unit = np.asarray(query_vector) / np.linalg.norm(query_vector)
        for doc in candidates:
            expected = float(np.asarray(stored[doc.id]) @ unit / np.linalg.norm(stored[doc.id]))
            assert doc.meta["crosslingual_similarity"] == pytest.approx(expected, abs=1e-4)
        retriever.close()

    @staticmethod
    def _ranking(knowledge_data: Path, query: str, collection_setup=None) -> tuple[list, dict]:
        collection = KnowledgeCollection(
            uri=str(knowledge_data / "milvus.db"), index_path=str(knowledge_data / "knowledge_index.json")
        )
        if collection_setup is not None:
            collection_setup(collection)
        retriever = FilteredRetryRetriever(collection)
        out = retriever.run(query_embedding=embed(query), query=query, crosslingual_embedding=embed_crosslingual(query))
        retriever.close()
        ranking = [(d.id, d.score, d.meta) for d in out["candidates"]]
        return ranking, out["retrieval_trace"]["attempts"][0]

    @pytest.mark.integration
    @pytest.mark.parametrize("query", ["how long do refunds take?", "磁盘满了怎么办", "rotate the API keys"])
    def test_the_vector_table_ranks_exactly_as_vectors_read_with_the_search(self, knowledge_data, query, monkeypatch):
        searched: list[tuple[str, ...]] = []
        dense_search = KnowledgeCollection.dense_search

        def spy(self, *args, **kwargs):
            searched.append(tuple(kwargs.get("vector_fields", ())))
            return dense_search(self, *args, **kwargs)

        monkeypatch.setattr(KnowledgeCollection, "dense_search", spy)
        from_table, attempt = self._ranking(knowledge_data, query)
        assert attempt["vectors"] == "table" and searched == [()]  # no vectors came with the search
        from_search, attempt = self._ranking(knowledge_data, query, lambda c: setattr(c, "vector_table", lambda: None))
        assert attempt["vectors"] == "search" and searched[1] == ("vector", "crosslingual")
        assert from_table == from_search  # ids, rank scores and every meta value, bit for bit

    @pytest.mark.integration
    def test_candidates_missing_from_the_table_are_read_from_milvus(self, knowledge_data, monkeypatch):
        """A chunk written after the table (an index run under way) still gets its own vectors."""
        query = "how long do refunds take?"
        expected, _ = self._ranking(knowledge_data, query)
        full = KnowledgeCollection(
            uri=str(knowledge_data / "milvus.db"), index_path=str(knowledge_data / "knowledge_index.json")
        ).vector_table()
        ids = [row[0] for row in expected]
        kept = ids[1::2]  # every other candidate is missing
        fields = {"vector": 384, "crosslingual": 512}
        part = table_rows([(i, {f: full.vectors([i], f)[i].tolist() for f in fields}) for i in kept], fields)
        partial = VectorTable.open(knowledge_data.parent, VectorTable.write(knowledge_data.parent, [part]))
        fetched: list[str] = []
        get_vectors = MilvusChunkStore.get_vectors

        def spy(self, ids, fields=()):
            fetched.extend(ids)
            return get_vectors(self, ids, fields)

        monkeypatch.setattr(MilvusChunkStore, "get_vectors", spy)
        ranking, attempt = self._ranking(knowledge_data, query, lambda c: setattr(c, "vector_table", lambda: partial))
        assert attempt["vectors"] == "table" and ranking == expected
        assert set(ids[::2]) <= set(fetched) and not set(kept) & set(fetched)

    @pytest.mark.integration
    def test_a_damaged_table_is_logged_and_the_vectors_come_with_the_search(self, knowledge_data, tmp_path, caplog):
        query = "磁盘满了怎么办"
        expected, _ = self._ranking(knowledge_data, query)
        index = KnowledgeIndex.load(knowledge_data / "knowledge_index.json")
        index.save(tmp_path / "knowledge_index.json")  # the same index, its table damaged
        (tmp_path / index.statistics.vector_table).write_bytes(b"\x93NUMPY damaged")
        shutil.copytree(knowledge_data / index.statistics.bm25_index, tmp_path / index.statistics.bm25_index)
        collection = KnowledgeCollection(
            uri=str(knowledge_data / "milvus.db"), index_path=str(tmp_path / "knowledge_index.json")
        )
        retriever = FilteredRetryRetriever(collection)
        out = retriever.run(query_embedding=embed(query), query=query, crosslingual_embedding=embed_crosslingual(query))
        retriever.close()
        assert out["retrieval_trace"]["attempts"][0]["vectors"] == "search"
        assert [(d.id, d.score, d.meta) for d in out["candidates"]] == expected
        assert "not a readable vector table" in caplog.text

    @pytest.mark.integration
    def test_a_damaged_bm25_index_is_logged_and_bm25_runs_inside_milvus(self, knowledge_data, tmp_path, caplog):
        index = KnowledgeIndex.load(knowledge_data / "knowledge_index.json")
        index.save(tmp_path / "knowledge_index.json")  # the same index, its BM25 index damaged
        shutil.copy(knowledge_data / index.statistics.vector_table, tmp_path / index.statistics.vector_table)
        damaged = tmp_path / index.statistics.bm25_index
        shutil.copytree(knowledge_data / index.statistics.bm25_index, damaged)
        (damaged / "vocab.index.json").write_text("{not json")
        collection = KnowledgeCollection(
            uri=str(knowledge_data / "milvus.db"), index_path=str(tmp_path / "knowledge_index.json")
        )
        retriever = FilteredRetryRetriever(collection)
        out = retriever.run(query_embedding=embed(DISK_QUESTION), query=DISK_QUESTION)
        retriever.close()
        attempt = out["retrieval_trace"]["attempts"][0]
        assert (attempt["error"], attempt["lexical_path"]) == (None, "milvus")
        assert out["candidates"] and any(d.meta.get("lexical_score", 0) > 0 for d in out["candidates"])
        assert "Not using the index run's BM25 index" in caplog.text and "lookup-knowledge index" in caplog.text

    @pytest.mark.integration
    def test_crosslingual_bonus_needs_the_query_vector_and_the_collection_field(self, knowledge_data, monkeypatch):
        retriever = FilteredRetryRetriever(
            KnowledgeCollection(
                uri=str(knowledge_data / "milvus.db"), index_path=str(knowledge_data / "knowledge_index.json")
            )
        )
        query = "how long do refunds take?"
        no_query_vector = retriever.run(query_embedding=embed(query), query=query)
        assert no_query_vector["retrieval_trace"]["attempts"][0]["crosslingual"] is None
        assert all("crosslingual_bonus" not in d.meta for d in no_query_vector["candidates"])
        fields = retriever.collection.vector_fields

        def without_crosslingual(dense=True, crosslingual=True):  # as if indexed without them
            return fields(dense, False)

        monkeypatch.setattr(retriever.collection, "vector_fields", without_crosslingual)
        no_field = retriever.run(
            query_embedding=embed(query), query=query, crosslingual_embedding=embed_crosslingual(query)
        )
        assert no_field["retrieval_trace"]["attempts"][0]["crosslingual"] == {"status": "no_vectors"}
        assert [d.id for d in no_field["candidates"]] == [d.id for d in no_query_vector["candidates"]]
        retriever.close()

    @pytest.mark.integration
    def test_language_balance_is_a_no_op_without_two_languages(self, make_retriever, data_dir):
        """The tiny base has two Chinese chunks: too few for a centroid, so nothing is balanced."""
        statistics = KnowledgeIndex.load(data_dir / "knowledge_index.json").statistics
        assert statistics is not None and statistics.language_chunks["zh"] < 20
        out = make_retriever(mode="sdk", language_balance=1.0).run(
            query_embedding=embed(DISK_QUESTION), query=DISK_QUESTION
        )
        assert out["candidates"]
        assert all("language_offset" not in d.meta and d.score == d.meta["similarity"] for d in out["candidates"])

    @pytest.mark.integration
    def test_lexical_coverage_is_bm25_over_the_query_terms_largest_score(self, make_retriever, disk_vector):
        retriever = make_retriever(lexical_weight=0.1, lexical_normalization="best")
        out = retriever.run(query_embedding=disk_vector, query=DISK_QUESTION)
        stats = retriever.collection.term_statistics()
        ideal = stats.ideal_score(tokenize(DISK_QUESTION))
        pairs = dict(lexical(retriever, DISK_QUESTION, 10))
        for doc in out["candidates"]:
            assert doc.meta["lexical_coverage"] == pytest.approx(min(1.0, pairs.get(doc.id, 0.0) / ideal), abs=1e-4)
        assert max(d.meta["lexical_coverage"] for d in out["candidates"]) > 0

    @pytest.mark.integration
    def test_the_trace_carries_the_calibration_and_the_query_terms(self, make_retriever, disk_vector, data_dir):
        out = make_retriever(lexical_weight=0.1).run(query_embedding=disk_vector, query="disk usage zzqxv")
        trace = out["retrieval_trace"]
        statistics = KnowledgeIndex.load(data_dir / "knowledge_index.json").statistics
        assert trace["calibration"]["noise_similarity"] == statistics.noise_similarity
        assert trace["calibration"]["language_chunks"] == statistics.language_chunks
        assert trace["query_terms"] == {"terms": 3, "known": 2}  # disk, usage; the made-up word is unknown
        dense_only = make_retriever(lexical_weight=0.0).run(query_embedding=disk_vector, query="disk full")
        assert dense_only["retrieval_trace"]["query_terms"] is None

    @pytest.mark.integration
    def test_a_collection_without_statistics_has_no_calibration(self, make_retriever, data_dir, disk_vector, tmp_path):
        index = KnowledgeIndex.load(data_dir / "knowledge_index.json")
        index.statistics = None
        index.save(tmp_path / "knowledge_index.json")
        out = make_retriever(index_path=str(tmp_path / "knowledge_index.json"), language_balance=0.75).run(
            query_embedding=disk_vector, query=DISK_QUESTION
        )
        assert out["retrieval_trace"]["calibration"] is None
        assert out["candidates"] and all("language_offset" not in d.meta for d in out["candidates"])

    @pytest.mark.integration
    def test_each_attempt_says_where_its_time_went(self, knowledge_data):
        retriever = FilteredRetryRetriever(
            KnowledgeCollection(
                uri=str(knowledge_data / "milvus.db"), index_path=str(knowledge_data / "knowledge_index.json")
            )
        )
        query = "how long do refunds take?"
        out = retriever.run(query_embedding=embed(query), query=query, crosslingual_embedding=embed_crosslingual(query))
        retriever.close()
        attempt = out["retrieval_trace"]["attempts"][0]
        assert set(attempt["stage_ms"]) == {"dense", "lexical", "lexical_wait", "lexical_fetch", "balance"}
        assert all(ms >= 0 for ms in attempt["stage_ms"].values())
        # the stages happen inside the attempt; BM25 overlaps the dense search, so the sum may exceed it
        inside = sum(ms for stage, ms in attempt["stage_ms"].items() if stage not in ("lexical",))
        assert inside <= attempt["latency_ms"] + 1
        assert attempt["crosslingual"]["status"] == "applied"

    @pytest.mark.integration
    def test_bm25_runs_beside_the_dense_search(self, make_retriever, disk_vector, monkeypatch):
        retriever = make_retriever(lexical_weight=0.1, lexical_source="milvus")
        retriever.warm_up()
        collection = retriever.collection
        dense, lexical_search = collection.dense_search, collection.lexical_search

        def slow(search):
            def run(*args, **kwargs):
                time.sleep(1.0)
                return search(*args, **kwargs)

            return run

        monkeypatch.setattr(collection, "dense_search", slow(dense))
        monkeypatch.setattr(collection, "lexical_search", slow(lexical_search))
        attempt = retriever.run(query_embedding=disk_vector, query=DISK_QUESTION)["retrieval_trace"]["attempts"][0]
        assert attempt["error"] is None and attempt["lexical_path"] == "milvus"
        assert attempt["stage_ms"]["dense"] >= 1000 and attempt["stage_ms"]["lexical"] >= 1000
        assert attempt["latency_ms"] < 1800  # one after the other would take 2,000 ms and more

    @pytest.mark.integration
    def test_a_failing_bm25_search_fails_the_attempt_and_close_releases_its_threads(
        self, make_retriever, disk_vector, monkeypatch
    ):
        retriever = make_retriever(lexical_weight=0.1)

        def broken(*args, **kwargs):
            raise ConnectionError("BM25 is down")

        monkeypatch.setattr(retriever.collection, "lexical_search", broken)
        attempt = retriever.run(query_embedding=disk_vector, query=DISK_QUESTION)["retrieval_trace"]["attempts"][0]
        assert attempt["error"] == "ConnectionError: BM25 is down" and attempt["candidate_count"] == 0
        monkeypatch.undo()
        retriever.close()
        assert not [t for t in threading.enumerate() if t.name.startswith("lexical-search")]
        # closed is not broken: the next run starts its threads again
        assert retriever.run(query_embedding=disk_vector, query=DISK_QUESTION)["candidates"]
