from __future__ import annotations

import copy
from pathlib import Path

import pytest
from haystack import Document
from haystack.core.serialization import component_from_dict, component_to_dict

from components.core.embedding_backends import get_backend
from components.joiners.attempt_joiner import AttemptJoiner
from components.rankers.hybrid_fusion_ranker import HybridFusionRanker
from components.retrievers.filtered_retry_retriever import FilteredRetryRetriever
from components.store.knowledge_collection import KnowledgeCollection
from components.store.lexical import TermStatistics, tokenize
from tests.conftest import index_tiny_kb

DISK_QUESTION = "the disk on a node is full, what should I do"


def candidate(
    chunk: str, similarity: float, bm25: float | None = None, ideal: float = 10.0, best: float = 5.0, **meta
) -> Document:
    """A retrieved candidate as the retriever hands it on: score = similarity, BM25 facts where BM25 ran."""
    facts = {} if bm25 is None else {"bm25": bm25, "lexical_ideal": ideal, "lexical_best": best}
    return Document(
        id=chunk,
        content=f"text of {chunk}",
        score=similarity,
        meta={"similarity": similarity, "attempt": "unfiltered", "usable": True, **facts, **meta},
    )


def ids(documents) -> list[str]:
    return [d.id for d in documents]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    """The tiny knowledge base indexed once into Milvus Lite for the whole module."""
    return index_tiny_kb(tmp_path_factory.mktemp("fusion"))


@pytest.fixture(scope="module")
def disk_vector() -> list[float]:
    return get_backend("multilingual-e5-small").embed_queries([DISK_QUESTION])[0].tolist()


@pytest.fixture
def make_retriever(data_dir):
    made: list[FilteredRetryRetriever] = []

    def make(**kwargs) -> FilteredRetryRetriever:
        collection = KnowledgeCollection(
            uri=str(data_dir / "milvus.db"), index_path=str(data_dir / "knowledge_index.json")
        )
        retriever = FilteredRetryRetriever(collection, **{"top_k": 10, "evidence_threshold": 0.0, **kwargs})
        made.append(retriever)
        return retriever

    yield make
    for retriever in made:
        retriever.close()


class TestHybridFusionRanker:
    # --- init, validation, serialization ---------------------------------------------------------------------

    def test_init_defaults(self):
        ranker = HybridFusionRanker()
        # the shipped pipelines.yaml values (tests/pipelines/test_lookup_pipeline.py checks the two agree)
        assert ranker.lexical_weight == 0.15
        assert ranker.lexical_normalization == "ideal"

    @pytest.mark.parametrize(
        ("kwargs", "match"),
        [
            ({"lexical_weight": -0.1}, r"lexical_weight=-0\.1"),
            ({"lexical_normalization": "max"}, "lexical_normalization='max'"),
            ({"lexical_normalization": ""}, "lexical_normalization=''"),
        ],
    )
    def test_invalid_init(self, kwargs, match):
        with pytest.raises(ValueError, match=match):
            HybridFusionRanker(**kwargs)

    def test_to_dict_from_dict_keeps_every_parameter(self):
        params = {"lexical_weight": 0.2, "lexical_normalization": "best"}
        data = component_to_dict(HybridFusionRanker(**params), "fusion")
        assert data == {
            "type": "components.rankers.hybrid_fusion_ranker.HybridFusionRanker",
            "init_parameters": params,
        }
        restored = component_from_dict(HybridFusionRanker, data, "fusion")
        assert {name: getattr(restored, name) for name in params} == params

    # --- run on plain Documents ------------------------------------------------------------------------------

    def test_ideal_normalization_divides_by_the_query_terms_largest_score(self):
        docs = [candidate("a", 0.90, bm25=4.0, ideal=10.0, best=5.0), candidate("b", 0.92, bm25=0.0)]
        out = HybridFusionRanker(lexical_weight=0.1).run(documents=docs)["documents"]
        fused = {d.id: d for d in out}
        assert fused["a"].score == pytest.approx(0.90 + 0.1 * 4.0 / 10.0)
        assert fused["a"].meta["lexical_score"] == pytest.approx(0.04)
        # found by the dense search only: BM25 0, no bonus, but the facts say BM25 ran
        assert fused["b"].score == pytest.approx(0.92) and fused["b"].meta["lexical_score"] == 0.0
        assert ids(out) == ["a", "b"]  # 0.94 > 0.92: BM25 lifted it over the better dense hit

    def test_best_normalization_gives_the_best_lexical_hit_the_full_weight(self):
        docs = [candidate("a", 0.90, bm25=5.0, best=5.0), candidate("b", 0.90, bm25=2.5, best=5.0)]
        out = HybridFusionRanker(lexical_weight=0.1, lexical_normalization="best").run(documents=docs)["documents"]
        fused = {d.id: d for d in out}
        assert fused["a"].meta["lexical_score"] == pytest.approx(0.1)
        assert fused["b"].meta["lexical_score"] == pytest.approx(0.05)
        assert fused["a"].score == pytest.approx(1.0)

    def test_the_bonus_is_recorded_rounded_and_the_score_is_not(self):
        out = HybridFusionRanker(lexical_weight=0.15).run(documents=[candidate("a", 0.9, bm25=1.0, ideal=3.0)])
        (doc,) = out["documents"]
        assert doc.score == pytest.approx(0.9 + 0.05, abs=1e-12)
        assert doc.meta["lexical_score"] == 0.05

    def test_a_candidate_without_bm25_facts_keeps_its_similarity(self):
        dense_only = candidate("a", 0.91)
        drifted = Document(id="b", content="x", score=0.5, meta={"similarity": 0.93})  # a score a ranker changed
        no_similarity = Document(id="c", content="x", score=0.92)
        out = HybridFusionRanker(lexical_weight=0.5).run(documents=[dense_only, drifted, no_similarity])["documents"]
        assert [(d.id, d.score) for d in out] == [("b", 0.93), ("c", 0.92), ("a", 0.91)]
        assert all("lexical_score" not in d.meta for d in out)
        assert out[2] is dense_only  # unchanged: handed on as it came

    def test_the_score_starts_from_the_similarity_not_the_incoming_score(self):
        doc = Document(id="a", content="x", score=0.2, meta={"similarity": 0.9, "bm25": 2.0, "lexical_ideal": 4.0})
        (fused,) = HybridFusionRanker(lexical_weight=0.1, lexical_normalization="ideal").run(documents=[doc])[
            "documents"
        ]
        assert fused.score == pytest.approx(0.95)
        assert fused.meta["similarity"] == 0.9  # never changed

    def test_a_zero_norm_adds_nothing(self):
        docs = [candidate("a", 0.9, bm25=0.0, ideal=0.0, best=0.0)]
        for normalization in ("ideal", "best"):
            (doc,) = HybridFusionRanker(0.2, normalization).run(documents=docs)["documents"]
            assert doc.score == 0.9 and doc.meta["lexical_score"] == 0.0

    def test_weight_zero_ranks_by_similarity_alone(self):
        docs = [candidate("a", 0.90, bm25=10.0), candidate("b", 0.95, bm25=0.0), candidate("c", 0.93)]
        out = HybridFusionRanker(lexical_weight=0.0).run(documents=docs)["documents"]
        assert [(d.id, d.score) for d in out] == [("b", 0.95), ("c", 0.93), ("a", 0.90)]

    def test_the_run_weight_overrides_the_init_weight(self):
        docs = [candidate("a", 0.90, bm25=5.0, ideal=5.0), candidate("b", 0.95)]
        ranker = HybridFusionRanker(lexical_weight=0.0)
        assert ids(ranker.run(documents=docs)["documents"]) == ["b", "a"]
        out = ranker.run(documents=docs, lexical_weight=0.1)["documents"]
        assert ids(out) == ["a", "b"] and out[0].meta["lexical_score"] == pytest.approx(0.1)
        assert ranker.lexical_weight == 0.0
        assert ids(ranker.run(documents=docs)["documents"]) == ["b", "a"]  # the override was for that run only

    def test_lexical_hits_can_overtake_better_dense_hits(self):
        docs = [candidate("dense", 0.95, bm25=0.0), candidate("both", 0.92, bm25=8.0), candidate("lexical", 0.90, 9.0)]
        out = HybridFusionRanker(lexical_weight=0.1).run(documents=docs)["documents"]
        assert ids(out) == ["both", "lexical", "dense"]  # 0.92 + 0.08 = 1.0, 0.90 + 0.09 = 0.99, 0.95
        assert [d.score for d in out] == pytest.approx([1.0, 0.99, 0.95])
        scores = [d.score for d in out]
        assert scores == sorted(scores, reverse=True)

    def test_ties_keep_their_order(self):
        docs = [candidate("e", 0.9)] + [candidate(c, 0.9, bm25=1.0) for c in "dcab"] + [candidate("f", 0.9)]
        out = HybridFusionRanker().run(documents=docs)["documents"]
        assert ids(out) == ["d", "c", "a", "b", "e", "f"]  # equal scores in the order they came

    def test_every_attempts_candidates_are_fused_alike_and_kept(self):
        """Fusion neither merges nor drops: two attempts' copies of a chunk and unusable candidates all come out."""
        docs = [
            candidate("a", 0.90, bm25=2.0, ideal=4.0, attempt="unfiltered"),
            candidate("a", 0.90, attempt="filtered"),  # the filtered attempt's BM25 found nothing
            candidate("b", 0.80, bm25=0.0, attempt="unfiltered", usable=False),
        ]
        out = HybridFusionRanker(lexical_weight=0.2).run(documents=docs)["documents"]
        assert [(d.id, d.meta["attempt"], d.meta["usable"]) for d in out] == [
            ("a", "unfiltered", True),
            ("a", "filtered", True),
            ("b", "unfiltered", False),
        ]
        assert [d.score for d in out] == pytest.approx([1.0, 0.9, 0.8])

    def test_empty_input_gives_empty_output(self):
        assert HybridFusionRanker().run(documents=[])["documents"] == []

    def test_inputs_are_not_mutated(self):
        docs = [candidate("a", 0.90, bm25=4.0), candidate("b", 0.95), candidate("c", 0.93, bm25=0.0)]
        before = copy.deepcopy(docs)
        metas = [d.meta for d in docs]
        out = HybridFusionRanker(lexical_weight=0.3).run(documents=docs)["documents"]
        assert docs == before and ids(docs) == ["a", "b", "c"]  # the caller's list keeps its order
        assert all(d.meta is m for d, m in zip(docs, metas, strict=True))
        assert all("lexical_score" not in d.meta for d in docs)
        # the fused ones are copies with meta of their own
        assert {d.id for d in out if "lexical_score" in d.meta} == {"a", "c"}
        assert all(o.meta is not m for o in out if "lexical_score" in o.meta for m in metas)

    # --- after the retriever on the tiny knowledge base -------------------------------------------------------

    @pytest.mark.integration
    def test_lexical_weight_adds_a_bm25_bonus_and_keeps_similarity(self, make_retriever, disk_vector):
        retrieved = make_retriever(top_k=3).run(query_embedding=disk_vector, query=DISK_QUESTION)
        plain = HybridFusionRanker(lexical_weight=0.0).run(documents=retrieved["candidates"])["documents"]
        hybrid = HybridFusionRanker(lexical_weight=0.1).run(documents=retrieved["candidates"])["documents"]
        assert all(d.score == d.meta["similarity"] for d in plain)
        best = hybrid[0]
        assert 0 < best.meta["lexical_score"] <= 0.1
        assert best.score == pytest.approx(best.meta["similarity"] + best.meta["lexical_score"], abs=1e-3)
        assert best.score > best.meta["similarity"]
        scores = [d.score for d in hybrid]
        assert scores == sorted(scores, reverse=True)
        by_id = {d.id: d for d in retrieved["candidates"]}
        assert all(d.meta["similarity"] == by_id[d.id].meta["similarity"] for d in hybrid)
        # the reference threshold was checked on similarity, never on the fused score
        attempt = retrieved["retrieval_trace"]["attempts"][0]
        assert attempt["top_score"] == round(max(d.meta["similarity"] for d in hybrid), 4)
        assert attempt["top_score"] < best.score

    @pytest.mark.integration
    @pytest.mark.parametrize("source", ["milvus", "local"])
    def test_ideal_normalization_on_the_store_divides_by_the_query_terms_largest_score(
        self, make_retriever, disk_vector, source
    ):
        retriever = make_retriever(top_k=3, lexical_source=source)
        retrieved = retriever.run(query_embedding=disk_vector, query=DISK_QUESTION)
        out = HybridFusionRanker(lexical_weight=0.1).run(documents=retrieved["candidates"])["documents"]
        pairs = retriever.collection.lexical_search(DISK_QUESTION, 3, source=source)[0]
        rows = retriever.collection.scan(with_content=True)
        ideal = TermStatistics(tokenize(r["content"]) for r in rows).ideal_score(tokenize(DISK_QUESTION))
        bonus = {d.id: d.meta["lexical_score"] for d in out if "lexical_score" in d.meta}
        assert bonus and pairs
        for chunk, score in pairs:
            assert bonus[chunk] == pytest.approx(0.1 * score / ideal, abs=1e-4)
        # a query matches only part of what its terms could: the best hit gets less than the full weight
        assert 0 < max(bonus.values()) < 0.1

    @pytest.mark.integration
    def test_best_normalization_on_the_store_gives_the_best_lexical_hit_the_full_weight(
        self, make_retriever, disk_vector
    ):
        retriever = make_retriever(top_k=3)
        retrieved = retriever.run(query_embedding=disk_vector, query=DISK_QUESTION)
        out = HybridFusionRanker(0.1, "best").run(documents=retrieved["candidates"])["documents"]
        (best_chunk, _), *_ = retriever.collection.lexical_search(DISK_QUESTION, 3, source=retriever.lexical_source)[0]
        assert {d.id: d.meta["lexical_score"] for d in out}[best_chunk] == pytest.approx(0.1)

    @pytest.mark.integration
    def test_a_bm25_only_chunk_can_win_after_fusion(self, make_retriever):
        """A chunk the dense search missed, found by BM25, ranks first once its bonus is added."""
        query = "Pro plan API access seats"
        vector = get_backend("multilingual-e5-small").embed_queries(["完全无关的问题：今天天气怎么样"])[0].tolist()
        retrieved = make_retriever(top_k=1).run(query_embedding=vector, query=query)
        (lexical_only,) = [d for d in retrieved["candidates"] if d.meta["retrieval_path"] == "bm25"]
        assert retrieved["candidates"][0].id != lexical_only.id  # not first by similarity
        out = HybridFusionRanker(lexical_weight=0.5).run(documents=retrieved["candidates"])["documents"]
        assert out[0].id == lexical_only.id and out[0].meta["source"] == "faq/plans.md"
        joined = AttemptJoiner().run(documents=out, retrieval_trace=retrieved["retrieval_trace"])["documents"]
        assert joined[0].id == lexical_only.id
