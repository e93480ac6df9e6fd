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

from components.core.citation import chunk_ids
from components.core.embedding_backends import get_backend
from components.core.query_vector import QueryVector
from components.core.scores import normalized_similarity
from components.core.versions import text_key
from components.query.document_filter_resolver import MATCHES_NOTHING
from components.retrievers.filtered_retry_retriever import LOW_QUALITY, NO_EVIDENCE, FilteredRetryRetriever
from components.store.knowledge_collection import KnowledgeCollection
from components.store.knowledge_index import KnowledgeIndex
from components.store.lexical import TermStatistics, tokenize
from components.store.milvus_chunk_store import MilvusChunkStore
from components.store.schema import CollectionSchema
from tests.conftest import index_tiny_kb

DISK_QUESTION = "the disk on a node is full, what should I do"
INJECTION = 'alerts" or metadata["category"] != "x'
CANDIDATE_META = (
    "similarity",
    "raw_score",
    "score_semantics",
    "retrieval_path",
    "attempt",
    "evidence_key",
    "text_key",
    "usable",
)
BM25_META = ("bm25", "lexical_ideal", "lexical_best", "lexical_coverage")
# every key of an attempt's trace (`fallback` only when auto mode fell back); the ranking moved out of the
# retriever, and with it the attempt's `crosslingual` and `vectors` fields and the `balance` stage
ATTEMPT_KEYS = {
    "name",
    "filter",
    "mode",
    "path",
    "raw_hits",
    "stale_dropped",
    "below_threshold_dropped",
    "candidate_count",
    "top_score",
    "lexical_path",
    "latency_ms",
    "stage_ms",
    "error",
}


def embed(query: str) -> list[float]:
    return get_backend("multilingual-e5-small").embed_queries([query])[0].tolist()


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    """The tiny knowledge base indexed once into Milvus Lite for the whole module."""
    return index_tiny_kb(tmp_path_factory.mktemp("retriever"))


@pytest.fixture(scope="module")
def disk_vector() -> list[float]:
    return embed(DISK_QUESTION)


COLLECTION_PARAMS = set(inspect.signature(KnowledgeCollection.__init__).parameters) - {"self"}
# what these tests were written against: dense only, ten deep, no evidence floor; each test says what differs
POLICY = {
    "top_k": 10,
    "reference_threshold": 0.9,
    "evidence_threshold": 0.0,
    "lexical": False,
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


def lexical(retriever: FilteredRetryRetriever, query: str, top_k: int, category: str | None = None) -> list:
    """The BM25 hits the retriever's collection gives on the retriever's lexical source."""
    filters = {"field": "meta.category", "operator": "==", "value": category} if category else None
    return retriever.collection.lexical_search(query, top_k, filters, source=retriever.lexical_source)[0]


def chunk_ids_of(data_dir: Path, source: str) -> list[str]:
    """The primary keys of a document's chunks, as the knowledge index determines them."""
    doc = KnowledgeIndex.load(data_dir / "knowledge_index.json").by_source()[source]
    return chunk_ids(doc.source, doc.doc_version, doc.chunks)


def ids_filter(ids: list[str]) -> dict:
    return {"field": "id", "operator": "in", "value": ids}


def ideal_score(retriever: FilteredRetryRetriever, query: str) -> float:
    """The largest BM25 score the query's terms can reach, counted here from the collection's chunks."""
    rows = retriever.collection.scan(with_content=True)
    return TermStatistics(tokenize(r["content"]) for r in rows).ideal_score(tokenize(query))


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
        assert retriever.reference_threshold == 0.94
        assert retriever.evidence_threshold == 0.88
        assert retriever.lexical is True
        assert retriever.lexical_source == "auto"
        assert retriever.enabled is True
        # it retrieves and no longer ranks: fusion, balancing and joining are the rankers' and the joiner's
        assert list(retriever.__haystack_input__._sockets_dict) == [
            "query_embedding",
            "query",
            "category_filter",
            "top_k",
            "embedding_meta",
            "filters",
            "hidden",
        ]
        assert list(retriever.__haystack_output__._sockets_dict) == ["candidates", "retrieval_trace"]

    @pytest.mark.parametrize(
        "removed",
        ["search_depth", "lexical_weight", "lexical_normalization", "language_balance", "crosslingual_weight"],
    )
    def test_ranking_parameters_are_gone(self, removed):
        with pytest.raises(TypeError, match=removed):
            FilteredRetryRetriever(**{removed: 1})

    def test_init_does_not_connect(self, tmp_path):
        FilteredRetryRetriever(KnowledgeCollection(uri=str(tmp_path / "nowhere" / "milvus.db")))
        assert not (tmp_path / "nowhere").exists()

    @pytest.mark.parametrize(
        ("kwargs", "match"),
        [
            ({"mode": "fast"}, "mode='fast'"),
            ({"top_k": 0}, "top_k=0"),
            ({"lexical_source": "elastic"}, "lexical_source='elastic'"),
            ({"reference_threshold": 1.5}, "reference_threshold=1.5"),
            ({"reference_threshold": -0.1}, r"reference_threshold=-0\.1"),
            ({"evidence_threshold": 2.0}, r"evidence_threshold=2\.0"),
            ({"evidence_threshold": -0.5}, r"evidence_threshold=-0\.5"),
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
            "reference_threshold": 0.75,
            "evidence_threshold": 0.3,
            "lexical": False,
            "lexical_source": "local",
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
        with pytest.raises(Exception, match="is not a KnowledgeStore"):
            component_from_dict(FilteredRetryRetriever, data, "retriever")

    # --- attempts, filter and retry against a real Milvus Lite store ----------------------------------------------

    @pytest.mark.integration
    def test_no_category_runs_one_unfiltered_attempt(self, make_retriever, disk_vector):
        out = make_retriever(mode="sdk").run(query_embedding=disk_vector)
        trace = out["retrieval_trace"]
        assert attempt_names(out) == ["unfiltered"]
        assert trace["selected_attempt"] == "unfiltered"
        assert trace["fallback_reason"] is None
        assert trace["l1_enabled"] is True and trace["mode"] == "sdk"
        attempt = trace["attempts"][0]
        assert set(attempt) == ATTEMPT_KEYS
        assert attempt["filter"] is None and attempt["error"] is None and attempt["path"] == "sdk"
        candidates = out["candidates"]
        assert attempt["candidate_count"] == len(candidates) > 0
        assert {d.meta["category"] for d in candidates} == {"alerts", "payments", "product-faq"}
        assert candidates[0].meta["source"] == "alerts/disk.md"
        assert attempt["top_score"] == pytest.approx(candidates[0].score, abs=1e-4)
        scores = [d.score for d in candidates]
        assert scores == sorted(scores, reverse=True)  # dense hits, found best first

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
        assert filtered["candidate_count"] == 0 and filtered["error"] is None and filtered["raw_hits"] == 0
        assert unfiltered["candidate_count"] > 0
        assert out["candidates"] and {d.meta["attempt"] for d in out["candidates"]} == {"unfiltered"}

    @pytest.mark.integration
    @pytest.mark.parametrize(("mode", "lexical_source"), [("sdk", "local"), ("haystack", "milvus"), ("auto", "auto")])
    def test_an_explicit_filter_is_strict_even_when_weak(
        self, make_retriever, disk_vector, data_dir, mode, lexical_source
    ):
        # the disk question, searched only within the plans page: weak, and never retried without the filter
        ids = chunk_ids_of(data_dir, "faq/plans.md")
        retriever = make_retriever(mode=mode, reference_threshold=0.99, lexical=True, lexical_source=lexical_source)
        out = retriever.run(query_embedding=disk_vector, query=DISK_QUESTION, filters=ids_filter(ids))
        assert attempt_names(out) == ["explicit"]
        assert out["retrieval_trace"]["attempts"][0]["filter"] == {"explicit": f"{len(ids)} chunks"}
        assert out["candidates"] and {d.meta["source"] for d in out["candidates"]} == {"faq/plans.md"}

    @pytest.mark.integration
    def test_l0s_category_is_retried_away_but_the_explicit_filter_stays(self, make_retriever, disk_vector, data_dir):
        ids = chunk_ids_of(data_dir, "alerts/disk.md") + chunk_ids_of(data_dir, "faq/plans.md")
        retriever = make_retriever(mode="sdk", reference_threshold=0.99, lexical=True)
        out = retriever.run(
            query_embedding=disk_vector, query="pricing", category_filter="payments", filters=ids_filter(ids)
        )
        assert attempt_names(out) == ["filtered", "explicit"]
        filtered, explicit = out["retrieval_trace"]["attempts"]
        assert explicit["filter"] == {"explicit": f"{len(ids)} chunks"} and explicit["candidate_count"] > 0
        assert filtered["filter"] == {"category": "payments", "explicit": f"{len(ids)} chunks"}
        assert filtered["raw_hits"] == 0  # payments AND (disk or plans): nothing
        assert {d.meta["source"] for d in out["candidates"]} == {"alerts/disk.md", "faq/plans.md"}
        assert out["retrieval_trace"]["selected_attempt"] == "explicit"

    @pytest.mark.integration
    @pytest.mark.parametrize(("mode", "lexical_source"), [("sdk", "local"), ("haystack", "milvus")])
    def test_hidden_chunks_are_left_out_of_every_attempt(
        self, make_retriever, disk_vector, data_dir, mode, lexical_source
    ):
        hidden = chunk_ids_of(data_dir, "alerts/disk.md")
        retriever = make_retriever(mode=mode, reference_threshold=0.99, lexical=True, lexical_source=lexical_source)
        seen = retriever.run(query_embedding=disk_vector, query=DISK_QUESTION, category_filter="alerts")
        assert "alerts/disk.md" in {d.meta["source"] for d in seen["candidates"]}
        out = retriever.run(query_embedding=disk_vector, query=DISK_QUESTION, category_filter="alerts", hidden=hidden)
        assert attempt_names(out) == ["filtered", "unfiltered"]
        assert all(a["filter"]["hidden"] == f"{len(hidden)} chunks" for a in out["retrieval_trace"]["attempts"])
        assert out["candidates"] and "alerts/disk.md" not in {d.meta["source"] for d in out["candidates"]}

    def test_a_filter_that_matches_nothing_searches_nothing(self, make_retriever, disk_vector, monkeypatch):
        retriever = make_retriever(mode="sdk")
        monkeypatch.setattr(retriever, "_attempt", lambda *a, **k: pytest.fail("no attempt may search"))
        out = retriever.run(query_embedding=disk_vector, query=DISK_QUESTION, filters=dict(MATCHES_NOTHING))
        assert list(out["candidates"]) == []
        trace = out["retrieval_trace"]
        assert attempt_names(out) == ["explicit"] and trace["attempts"][0]["candidate_count"] == 0
        assert trace["selected_attempt"] == "explicit" and trace["fallback_reason"] is None

    @pytest.mark.integration
    def test_a_hostile_category_in_an_explicit_filter_matches_literally(self, make_retriever, disk_vector):
        hostile = {"field": "meta.category", "operator": "==", "value": INJECTION}
        out = make_retriever(mode="sdk", lexical=True).run(query_embedding=disk_vector, query="disk", filters=hostile)
        assert list(out["candidates"]) == [] and out["retrieval_trace"]["attempts"][0]["error"] is None

    @pytest.mark.integration
    def test_low_quality_filtered_attempt_is_retried(self, make_retriever, disk_vector):
        out = make_retriever(mode="sdk", reference_threshold=0.99).run(
            query_embedding=disk_vector, category_filter="product-faq"
        )
        trace = out["retrieval_trace"]
        assert attempt_names(out) == ["filtered", "unfiltered"]
        assert trace["fallback_reason"] == LOW_QUALITY
        assert trace["selected_attempt"] == "unfiltered"
        filtered, unfiltered = trace["attempts"]
        assert filtered["candidate_count"] > 0 and filtered["top_score"] < 0.99
        candidates = out["candidates"]
        # every candidate of both attempts, the retry's first: the joiner after the rankers merges them
        attempts = [d.meta["attempt"] for d in candidates]
        assert attempts == ["unfiltered"] * unfiltered["candidate_count"] + ["filtered"] * filtered["candidate_count"]
        assert candidates[0].meta["source"] == "alerts/disk.md"
        # the low-quality filtered candidates are handed on to compete
        filtered_docs = [d for d in candidates if d.meta["attempt"] == "filtered"]
        assert filtered_docs and {d.meta["category"] for d in filtered_docs} == {"product-faq"}
        # a chunk both attempts found comes once from each, with the same similarity
        unfiltered_scores = {d.id: d.score for d in candidates if d.meta["attempt"] == "unfiltered"}
        assert all(unfiltered_scores[d.id] == pytest.approx(d.score) for d in filtered_docs)
        for name in ("unfiltered", "filtered"):
            scores = [d.score for d in candidates if d.meta["attempt"] == name]
            assert scores == sorted(scores, reverse=True)

    @pytest.mark.integration
    def test_each_attempt_hands_on_what_it_found_alone(self, make_retriever, disk_vector):
        """A retry's candidates are those of the filtered and of the unfiltered search, as each finds them alone."""

        def found(out: dict) -> list[tuple[str, float]]:
            return [(d.id, d.score) for d in out["candidates"]]

        run = {"query_embedding": disk_vector, "query": DISK_QUESTION}
        alone_filtered = make_retriever(reference_threshold=0.0, lexical=True).run(**run, category_filter="product-faq")
        alone_unfiltered = make_retriever(lexical=True).run(**run)
        out = make_retriever(reference_threshold=0.99, lexical=True).run(**run, category_filter="product-faq")
        assert attempt_names(out) == ["filtered", "unfiltered"]
        retried = found(out)
        assert retried == found(alone_unfiltered) + found(alone_filtered)
        assert len({i for i, _ in retried}) < len(retried), "the test needs a chunk both attempts find"

    # --- the usable flag, candidate_count and top_score -----------------------------------------------------------

    @pytest.mark.integration
    def test_evidence_threshold_flags_weak_candidates(self, make_retriever, disk_vector):
        baseline = make_retriever(mode="sdk").run(query_embedding=disk_vector)["candidates"]
        assert len(baseline) >= 3 and all(d.meta["usable"] is True for d in baseline)
        threshold = (baseline[1].score + baseline[2].score) / 2
        assert baseline[1].score > threshold > baseline[2].score
        out = make_retriever(mode="sdk", evidence_threshold=threshold).run(query_embedding=disk_vector)
        # nothing is dropped any more: the weak candidates are flagged, for the joiner to leave out
        assert [d.id for d in out["candidates"]] == [d.id for d in baseline]
        assert [d.meta["usable"] for d in out["candidates"]] == [True, True] + [False] * (len(baseline) - 2)
        assert all(d.meta["similarity"] < threshold for d in out["candidates"] if not d.meta["usable"])
        attempt = out["retrieval_trace"]["attempts"][0]
        assert attempt["below_threshold_dropped"] == len(baseline) - 2
        assert attempt["candidate_count"] == 2
        assert attempt["top_score"] == pytest.approx(baseline[0].score, abs=1e-4)

    @pytest.mark.integration
    def test_evidence_threshold_near_one_leaves_no_usable_candidate(self, make_retriever, disk_vector):
        out = make_retriever(mode="sdk", evidence_threshold=0.999).run(
            query_embedding=disk_vector, category_filter="alerts"
        )
        trace = out["retrieval_trace"]
        assert attempt_names(out) == ["filtered", "unfiltered"]
        assert trace["fallback_reason"] == NO_EVIDENCE
        for attempt in trace["attempts"]:
            assert attempt["candidate_count"] == 0
            assert attempt["top_score"] is None
            assert attempt["raw_hits"] > 0 and attempt["below_threshold_dropped"] == attempt["raw_hits"]
        # every candidate found is still handed on, none of them usable
        assert len(out["candidates"]) == sum(a["raw_hits"] for a in trace["attempts"])
        assert all(d.meta["usable"] is False for d in out["candidates"])

    @pytest.mark.integration
    def test_a_filtered_attempt_with_only_unusable_candidates_is_no_evidence(self, make_retriever, disk_vector):
        """The retry decision counts usable candidates: found but too weak is as good as nothing."""
        baseline = make_retriever(mode="sdk").run(query_embedding=disk_vector)["candidates"]
        plans = max(d.score for d in baseline if d.meta["category"] == "product-faq")
        threshold = (plans + baseline[0].score) / 2  # the disk runbook is usable, the plans chunk is not
        out = make_retriever(mode="sdk", evidence_threshold=threshold).run(
            query_embedding=disk_vector, category_filter="product-faq"
        )
        trace = out["retrieval_trace"]
        filtered, unfiltered = trace["attempts"]
        assert filtered["raw_hits"] > 0 and filtered["candidate_count"] == 0 and filtered["top_score"] is None
        assert trace["fallback_reason"] == NO_EVIDENCE
        assert unfiltered["candidate_count"] > 0
        assert unfiltered["top_score"] == pytest.approx(baseline[0].score, abs=1e-4)
        flagged = [d for d in out["candidates"] if d.meta["attempt"] == "filtered"]
        assert flagged and all(d.meta["usable"] is False for d in flagged)

    @pytest.mark.integration
    def test_top_score_is_the_best_usable_similarity_not_a_fused_score(self, make_retriever, disk_vector):
        out = make_retriever(lexical=True).run(query_embedding=disk_vector, query=DISK_QUESTION)
        candidates = out["candidates"]
        assert any(d.meta.get("bm25", 0) > 0 for d in candidates)
        # the retriever does not fuse: every score is the candidate's similarity, BM25 or not
        assert all(d.score == d.meta["similarity"] for d in candidates)
        attempt = out["retrieval_trace"]["attempts"][0]
        assert attempt["top_score"] == round(max(d.meta["similarity"] for d in candidates), 4)

    @pytest.mark.integration
    def test_top_k_is_how_deep_each_attempt_searches_not_a_cut(self, make_retriever, disk_vector, monkeypatch):
        retriever = make_retriever(mode="sdk", lexical=True)
        collection = retriever.collection
        limits: dict[str, list[int]] = {"dense": [], "lexical": []}
        dense, lexical_search = collection.dense_search, collection.lexical_search

        def spy_dense(vector, top_k, *args, **kwargs):
            limits["dense"].append(top_k)
            return dense(vector, top_k, *args, **kwargs)

        def spy_lexical(query, top_k, *args, **kwargs):
            limits["lexical"].append(top_k)
            return lexical_search(query, top_k, *args, **kwargs)

        monkeypatch.setattr(collection, "dense_search", spy_dense)
        monkeypatch.setattr(collection, "lexical_search", spy_lexical)
        full = retriever.run(query_embedding=disk_vector)["candidates"]  # no query: no BM25
        assert limits == {"dense": [20], "lexical": []}
        out = retriever.run(query_embedding=disk_vector, top_k=2)  # the run overrides the init top_k
        assert limits == {"dense": [20, 4], "lexical": []}
        # twice top_k dense hits, all of them handed on and usable: nothing is cut to top_k
        assert [d.id for d in out["candidates"]] == [d.id for d in full[:4]]
        assert out["retrieval_trace"]["attempts"][0]["candidate_count"] == 4
        out = retriever.run(query_embedding=disk_vector, query=DISK_QUESTION, top_k=1)
        assert limits == {"dense": [20, 4, 2], "lexical": [1]}
        assert out["retrieval_trace"]["attempts"][0]["candidate_count"] == len(out["candidates"]) >= 2

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
        out = retriever.run(query_embedding=[], query="disk full", category_filter="alerts")
        assert out["candidates"] == []
        assert out["retrieval_trace"]["attempts"] == []
        assert out["retrieval_trace"]["l1_enabled"] is True
        assert out["retrieval_trace"]["selected_attempt"] is None
        assert not (tmp_path / "milvus.db").exists()

    @pytest.mark.integration
    @pytest.mark.parametrize("how", ["query_vector", "embedder_meta"])
    def test_a_query_embedded_with_another_model_is_refused_not_compared(self, make_retriever, disk_vector, how):
        retriever = make_retriever(mode="sdk")
        if how == "query_vector":  # the offline embedder's vector names its model
            out = retriever.run(query_embedding=QueryVector(tuple(disk_vector), "another-model"), query=DISK_QUESTION)
        else:  # any Haystack text embedder's `meta` does
            out = retriever.run(
                query_embedding=disk_vector, query=DISK_QUESTION, embedding_meta={"model": "another-model"}
            )
        assert out["candidates"] == []
        [attempt] = out["retrieval_trace"]["attempts"]
        assert "'multilingual-e5-small'" in attempt["error"] and "'another-model'" in attempt["error"]
        same = retriever.run(query_embedding=QueryVector(tuple(disk_vector), "multilingual-e5-small"), query="disk")
        assert same["candidates"] and not same["retrieval_trace"]["attempts"][0]["error"]
        unnamed = retriever.run(query_embedding=disk_vector, query="disk")  # a model nobody named: not checked
        assert unnamed["candidates"]

    # --- provenance, paths and the store ---------------------------------------------------------------------

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
            assert doc.meta["text_key"] == text_key(doc.meta["source"], doc.content)
            assert doc.meta["usable"] is True  # no evidence floor here
            assert 0.0 <= doc.score <= 1.0
            assert doc.score == doc.meta["similarity"]
            assert doc.score == pytest.approx(normalized_similarity(doc.meta["raw_score"], "L2"), abs=1e-4)
            assert doc.meta["doc_version"]  # original chunk metadata is kept, flattened
            assert doc.embedding is None
            # dense only: no BM25 facts, and nothing a ranker adds
            assert not set(BM25_META) & set(doc.meta)
            assert not {"lexical_score", "language_offset", "crosslingual_bonus", "attempts"} & set(doc.meta)

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
        assert set(attempt) == ATTEMPT_KEYS | {"fallback"}
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
            # dropped, not flagged: a superseded chunk is not a candidate at all
            sources = {d.meta["source"] for d in out["candidates"]}
            assert "alerts/disk.md" not in sources
            assert sources == {"payments/refund.md", "faq/plans.md"}
            attempt = out["retrieval_trace"]["attempts"][0]
            assert attempt["stale_dropped"] == len(alerts_chunks)
            assert attempt["candidate_count"] == len(out["candidates"])

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
        out = make_retriever(mode=mode, reference_threshold=0.5, lexical=True).run(
            query_embedding=disk_vector, query=DISK_QUESTION, category_filter=INJECTION
        )
        trace = out["retrieval_trace"]
        filtered = trace["attempts"][0]
        assert filtered["name"] == "filtered"
        assert filtered["filter"] == {"category": INJECTION}
        assert filtered["candidate_count"] == 0
        assert filtered["raw_hits"] == 0  # neither the dense search nor BM25 matched anything
        assert filtered["lexical_path"] is not None
        assert filtered["error"] is None  # a parse error would mean the value reached the expression unquoted
        assert "fallback" not in filtered
        assert trace["fallback_reason"] == NO_EVIDENCE
        assert out["candidates"] and all(d.meta["attempt"] == "unfiltered" for d in out["candidates"])

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
                assert got.meta["similarity"] == got.score

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
        make_retriever(mode="auto", reference_threshold=0.99, lexical=True).run(
            query_embedding=vector, query=DISK_QUESTION, category_filter="alerts"
        )
        assert vector == original

    @pytest.mark.integration
    def test_repeated_runs_do_not_leak_the_previous_filter(self, make_retriever, disk_vector):
        retriever = make_retriever(mode="haystack", reference_threshold=0.5)
        first = retriever.run(query_embedding=disk_vector, category_filter="payments")
        assert {d.meta["category"] for d in first["candidates"]} == {"payments"}
        second = retriever.run(query_embedding=disk_vector)
        assert {d.meta["category"] for d in second["candidates"]} == {"alerts", "payments", "product-faq"}
        assert {d.meta["attempt"] for d in second["candidates"]} == {"unfiltered"}

    # --- BM25 beside the dense search ---------------------------------------------------------------------------

    @pytest.mark.integration
    @pytest.mark.parametrize("source", ["milvus", "local"])
    def test_bm25_facts_come_with_every_candidate_of_the_attempt(self, make_retriever, disk_vector, source):
        retriever = make_retriever(top_k=3, lexical=True, lexical_source=source)
        out = retriever.run(query_embedding=disk_vector, query=DISK_QUESTION)
        assert out["retrieval_trace"]["attempts"][0]["lexical_path"] == source
        pairs = lexical(retriever, DISK_QUESTION, 3)
        assert pairs, "the test needs BM25 hits"
        ideal = ideal_score(retriever, DISK_QUESTION)
        bm25 = dict(pairs)
        candidates = out["candidates"]
        assert {d.id for d in candidates} >= set(bm25)  # every BM25 hit is a candidate
        for doc in candidates:
            assert doc.meta["bm25"] == pytest.approx(bm25.get(doc.id, 0.0), abs=1e-4)  # raw; 0.0: not found by it
            assert doc.meta["lexical_ideal"] == pytest.approx(ideal, abs=1e-4)
            assert doc.meta["lexical_best"] == pytest.approx(pairs[0][1], abs=1e-4)
            assert doc.meta["lexical_coverage"] == pytest.approx(min(1.0, bm25.get(doc.id, 0.0) / ideal), abs=1e-4)
            assert doc.score == doc.meta["similarity"]  # not fused here: that is HybridFusionRanker's
            assert "lexical_score" not in doc.meta
        # a query matches only part of what its terms could: the best hit covers less than all of it
        assert 0 < max(d.meta["lexical_coverage"] for d in candidates) < 1

    @pytest.mark.integration
    def test_an_attempt_whose_bm25_found_nothing_adds_no_bm25_facts(self, make_retriever, disk_vector):
        retriever = make_retriever(lexical=True, reference_threshold=0.0)
        assert lexical(retriever, DISK_QUESTION, 10, "product-faq") == []  # no word of it in the plans chunk
        out = retriever.run(query_embedding=disk_vector, query=DISK_QUESTION, category_filter="product-faq")
        attempt = out["retrieval_trace"]["attempts"][0]
        assert attempt["lexical_path"] is not None and attempt["error"] is None
        assert out["candidates"] and all(not set(BM25_META) & set(d.meta) for d in out["candidates"])

    @pytest.mark.integration
    def test_lexical_off_runs_no_bm25(self, make_retriever, disk_vector, monkeypatch):
        retriever = make_retriever(lexical=False)

        def broken(*args, **kwargs):
            raise AssertionError("BM25 ran")

        monkeypatch.setattr(retriever.collection, "lexical_search", broken)
        out = retriever.run(query_embedding=disk_vector, query=DISK_QUESTION)
        attempt = out["retrieval_trace"]["attempts"][0]
        assert attempt["error"] is None and attempt["lexical_path"] is None
        assert set(attempt["stage_ms"]) == {"dense"}
        assert out["candidates"] and all("bm25" not in d.meta for d in out["candidates"])

    @pytest.mark.integration
    def test_term_statistics_follow_an_index_change(self, make_retriever, data_dir, disk_vector, tmp_path):
        index_path = tmp_path / "knowledge_index.json"
        index = KnowledgeIndex.load(data_dir / "knowledge_index.json")
        index.save(index_path)
        retriever = make_retriever(lexical=True, lexical_source="milvus", index_path=str(index_path))
        retriever.run(query_embedding=disk_vector, query=DISK_QUESTION)
        before = retriever.collection.term_statistics("milvus")
        assert retriever.collection.term_statistics("milvus") is before  # once per index change, not per lookup
        index.embedding_model = "re-indexed"
        index.save(index_path)
        assert retriever.collection.term_statistics("milvus") is not before

    @pytest.mark.integration
    def test_chunks_found_only_by_bm25_join_with_their_own_similarity(self, make_retriever):
        query = "Pro plan API access seats"
        vector = embed("完全无关的问题：今天天气怎么样")  # dense alone would not rank the plans chunk first
        out = make_retriever(top_k=1, lexical=True, mode="sdk").run(query_embedding=vector, query=query)
        paths = [d.meta["retrieval_path"] for d in out["candidates"]]
        assert "bm25" in paths, paths
        # found order: the dense hits, then the chunks only BM25 found
        assert paths == sorted(paths, key=lambda p: p == "bm25")
        lexical_only = out["candidates"][paths.index("bm25")]
        assert lexical_only.meta["source"] == "faq/plans.md"
        assert lexical_only.meta["score_semantics"] == "l2_distance"
        assert lexical_only.meta["similarity"] == pytest.approx(
            normalized_similarity(lexical_only.meta["raw_score"], "L2")
        )
        assert lexical_only.score == lexical_only.meta["similarity"]
        assert lexical_only.meta["bm25"] > 0 and lexical_only.meta["usable"] is True
        # its similarity is its stored vector's, as the dense search would have scored it
        (stored,) = [
            d for d in make_retriever(mode="sdk").run(query_embedding=vector)["candidates"] if d.id == lexical_only.id
        ]
        assert lexical_only.meta["similarity"] == pytest.approx(stored.score, abs=1e-4)
        assert float(np.dot(vector, embed(query))) < 0.95  # the two embeddings really differ

    @pytest.mark.integration
    def test_bm25_hits_respect_the_category_filter(self, make_retriever, disk_vector):
        query = "Basic plan price seats"
        unfiltered = make_retriever(top_k=5, lexical=True).run(query_embedding=disk_vector, query=query)
        assert any(d.meta["category"] == "product-faq" and d.meta["bm25"] > 0 for d in unfiltered["candidates"])
        out = make_retriever(top_k=5, lexical=True, reference_threshold=0.5).run(
            query_embedding=disk_vector, query=query, category_filter="alerts"
        )
        assert attempt_names(out) == ["filtered"]
        assert out["retrieval_trace"]["attempts"][0]["lexical_path"] is not None
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
            retriever = make_retriever(lexical=True, index_path=str(index_path))
            assert retriever.collection.full_text_field() == "sparse"
            out = retriever.run(query_embedding=disk_vector, query=DISK_QUESTION)
            assert [a["lexical_path"] for a in out["retrieval_trace"]["attempts"]] == [path]
            assert any(d.meta.get("bm25", 0) > 0 for d in out["candidates"])

    @pytest.mark.integration
    def test_auto_uses_in_process_bm25_on_a_collection_without_full_text(self, make_retriever, data_dir, disk_vector):
        self._copy_without_full_text(data_dir, "no_full_text")
        out = make_retriever(collection_name="no_full_text", lexical=True).run(
            query_embedding=disk_vector, query=DISK_QUESTION
        )
        attempt = out["retrieval_trace"]["attempts"][0]
        assert (attempt["error"], attempt["lexical_path"]) == (None, "local")
        assert any(d.meta.get("bm25", 0) > 0 for d in out["candidates"])

    @pytest.mark.integration
    def test_forcing_milvus_bm25_on_a_collection_without_full_text_is_a_recorded_error(
        self, make_retriever, data_dir, disk_vector
    ):
        self._copy_without_full_text(data_dir, "no_full_text_forced")
        retriever = make_retriever(collection_name="no_full_text_forced", lexical=True, lexical_source="milvus")
        out = retriever.run(query_embedding=disk_vector, query=DISK_QUESTION)
        attempt = out["retrieval_trace"]["attempts"][0]
        assert "no BM25 full-text field" in attempt["error"]
        assert attempt["candidate_count"] == 0
        assert out["candidates"] == []

    @pytest.mark.integration
    def test_a_damaged_bm25_index_is_logged_and_bm25_runs_inside_milvus(self, data_dir, disk_vector, tmp_path, caplog):
        index = KnowledgeIndex.load(data_dir / "knowledge_index.json")
        index.save(tmp_path / "knowledge_index.json")  # the same index, its BM25 index damaged
        shutil.copy(data_dir / index.statistics.vector_table, tmp_path / index.statistics.vector_table)
        damaged = tmp_path / index.statistics.bm25_index
        shutil.copytree(data_dir / index.statistics.bm25_index, damaged)
        (damaged / "vocab.index.json").write_text("{not json")
        collection = KnowledgeCollection(
            uri=str(data_dir / "milvus.db"), index_path=str(tmp_path / "knowledge_index.json")
        )
        retriever = FilteredRetryRetriever(collection)
        out = retriever.run(query_embedding=disk_vector, query=DISK_QUESTION)
        retriever.close()
        attempt = out["retrieval_trace"]["attempts"][0]
        assert (attempt["error"], attempt["lexical_path"]) == (None, "milvus")
        assert out["candidates"] and any(d.meta.get("bm25", 0) > 0 for d in out["candidates"])
        assert "Not using the index run's BM25 index" in caplog.text and "lookup-knowledge index" in caplog.text

    # --- trace: calibration, query terms, timings ------------------------------------------------------------

    @pytest.mark.integration
    def test_the_trace_carries_the_calibration_and_the_query_terms(self, make_retriever, disk_vector, data_dir):
        out = make_retriever(lexical=True).run(query_embedding=disk_vector, query="disk usage zzqxv")
        trace = out["retrieval_trace"]
        statistics = KnowledgeIndex.load(data_dir / "knowledge_index.json").statistics
        assert trace["calibration"]["noise_similarity"] == statistics.noise_similarity
        assert trace["calibration"]["noise_probes"] == statistics.noise_probes
        assert trace["calibration"]["language_chunks"] == statistics.language_chunks
        assert trace["query_terms"] == {"terms": 3, "known": 2}  # disk, usage; the made-up word is unknown
        dense_only = make_retriever(lexical=False).run(query_embedding=disk_vector, query="disk full")
        assert dense_only["retrieval_trace"]["query_terms"] is None
        assert make_retriever(lexical=True).run(query_embedding=disk_vector)["retrieval_trace"]["query_terms"] is None

    @pytest.mark.integration
    def test_a_collection_without_statistics_has_no_calibration(self, make_retriever, data_dir, disk_vector, tmp_path):
        index = KnowledgeIndex.load(data_dir / "knowledge_index.json")
        index.statistics = None
        index.save(tmp_path / "knowledge_index.json")
        out = make_retriever(index_path=str(tmp_path / "knowledge_index.json")).run(
            query_embedding=disk_vector, query=DISK_QUESTION
        )
        assert out["retrieval_trace"]["calibration"] is None
        assert out["candidates"]

    @pytest.mark.integration
    def test_each_attempt_says_where_its_time_went(self, make_retriever, disk_vector):
        out = make_retriever(lexical=True, reference_threshold=0.99).run(
            query_embedding=disk_vector, query=DISK_QUESTION, category_filter="alerts"
        )
        assert attempt_names(out) == ["filtered", "unfiltered"]
        for attempt in out["retrieval_trace"]["attempts"]:
            # no `balance` stage any more: balancing is LanguageBalanceRanker's
            assert set(attempt["stage_ms"]) == {"dense", "lexical", "lexical_wait", "lexical_fetch"}
            assert all(ms >= 0 for ms in attempt["stage_ms"].values())
            # the stages happen inside the attempt; BM25 overlaps the dense search, so the sum may exceed it
            inside = sum(ms for stage, ms in attempt["stage_ms"].items() if stage != "lexical")
            assert inside <= attempt["latency_ms"] + 1

    @pytest.mark.integration
    def test_bm25_runs_beside_the_dense_search(self, make_retriever, disk_vector, monkeypatch):
        retriever = make_retriever(lexical=True, lexical_source="milvus")
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
        retriever = make_retriever(lexical=True)
        others = {t for t in threading.enumerate() if t.name.startswith("lexical-search")}  # other pipelines' threads

        def broken(*args, **kwargs):
            raise ConnectionError("BM25 is down")

        def own() -> set[threading.Thread]:
            return {t for t in threading.enumerate() if t.name.startswith("lexical-search")} - others

        monkeypatch.setattr(retriever.collection, "lexical_search", broken)
        out = retriever.run(query_embedding=disk_vector, query=DISK_QUESTION)
        attempt = out["retrieval_trace"]["attempts"][0]
        assert attempt["error"] == "ConnectionError: BM25 is down" and attempt["candidate_count"] == 0
        assert out["candidates"] == []
        assert own()
        monkeypatch.undo()
        retriever.close()
        assert not own()
        # closed is not broken: the next run starts its threads again
        assert retriever.run(query_embedding=disk_vector, query=DISK_QUESTION)["candidates"]
