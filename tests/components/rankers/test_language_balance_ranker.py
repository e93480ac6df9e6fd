from __future__ import annotations

import copy
import math
import statistics as stats
from functools import cache
from pathlib import Path

import numpy as np
import pytest
from haystack import Document
from haystack.core.serialization import component_from_dict, component_to_dict

from components.core.embedding_backends import get_backend
from components.core.text_matching import script_language
from components.joiners.attempt_joiner import AttemptJoiner
from components.rankers.hybrid_fusion_ranker import HybridFusionRanker
from components.rankers.language_balance_ranker import LanguageBalanceRanker
from components.retrievers.filtered_retry_retriever import FilteredRetryRetriever
from components.store.collection_statistics import CollectionStatistics, language_offsets
from components.store.knowledge_collection import KnowledgeCollection
from components.store.knowledge_index import KnowledgeIndex
from components.store.vector_table import VectorTable, table_rows
from pipelines.measure.evaluation import load_eval_set
from tests.conftest import KNOWLEDGE_DIR, index_tiny_kb

DISK_QUESTION = "the disk on a node is full, what should I do"
BALANCE_META = ("language", "language_offset")
CROSSLINGUAL_META = ("crosslingual_similarity", "crosslingual_bonus", "crosslingual_reference")

# --- a two-language collection in three dimensions, for the unit tests --------------------------------------

STATISTICS = CollectionStatistics(
    embedding_model="test",
    chunks=60,
    language_chunks={"en": 30, "zh": 30},
    language_centroids={"en": [0.8, 0.6, 0.0], "zh": [0.6, 0.0, 0.8]},
)
ONE_LANGUAGE = STATISTICS.model_copy(update={"language_chunks": {"en": 58, "zh": 2}})
QUERY = "how long do refunds take"  # English
QUERY_VECTOR = [0.9, 0.3, 0.3]
BRIDGE = [1.0, 0.0]  # the query's cross-lingual vector: a candidate's cross-lingual similarity is its x


def bridge_vector(similarity: float) -> list[float]:
    """A cross-lingual vector whose cosine with `BRIDGE` is `similarity`."""
    return [similarity, math.sqrt(1 - similarity**2)]


DENSE = {
    "en1": [0.85, 0.5, 0.1],
    "en2": [0.8, 0.55, 0.2],
    "en3": [0.7, 0.6, 0.3],
    "zh1": [0.65, 0.05, 0.75],
    "zh2": [0.5, 0.1, 0.85],
}
CROSSLINGUAL = {
    "en1": bridge_vector(0.9),
    "en2": bridge_vector(0.5),
    "en3": bridge_vector(0.7),
    "zh1": bridge_vector(0.8),
    "zh2": bridge_vector(0.4),
}
TEXT = {"en": "Refunds are paid back within seven days.", "zh": "退款在审核通过后七个工作日内原路退回。"}


def cand(chunk: str, score: float, attempt: str = "unfiltered", **meta) -> Document:
    """A fused candidate: `score` the rank score so far, `similarity` and `attempt` in meta."""
    return Document(
        id=chunk,
        content=TEXT[chunk[:2]],
        score=score,
        meta={"similarity": score - 0.01, "attempt": attempt, "usable": True, **meta},
    )


@pytest.fixture
def stub_collection(monkeypatch, tmp_path):
    """
    A collection that is never connected: its statistics, vector fields and stored vectors are the test's (the
    vectors are read per call, recorded in `collection.reads`).
    """

    def make(statistics=STATISTICS, fields=("vector", "crosslingual")) -> KnowledgeCollection:
        collection = KnowledgeCollection(
            uri=str(tmp_path / "nowhere" / "milvus.db"), index_path=str(tmp_path / "index.json")
        )
        stored = {"vector": DENSE, "crosslingual": CROSSLINGUAL}
        reads: list[tuple[list[str], list[str]]] = []

        def vector_fields(dense=True, crosslingual=True):
            return [f for f, wanted in (("vector", dense), ("crosslingual", crosslingual)) if wanted and f in fields]

        def candidate_vectors(ids, wanted):
            reads.append((list(ids), list(wanted)))
            return {f: {i: stored[f][i] for i in ids if i in stored[f]} for f in wanted}

        monkeypatch.setattr(collection, "statistics", lambda: statistics)
        monkeypatch.setattr(collection, "vector_fields", vector_fields)
        monkeypatch.setattr(collection, "candidate_vectors", candidate_vectors)
        collection.reads = reads
        return collection

    yield make
    assert not (tmp_path / "nowhere").exists()  # nothing connected


def untouchable(*args, **kwargs):
    raise AssertionError("the collection was read")


def by_key(documents) -> dict[tuple[str, str], Document]:
    return {(d.id, d.meta["attempt"]): d for d in documents}


# --- the real store ------------------------------------------------------------------------------------------


@cache
def embed(query: str) -> tuple[float, ...]:
    return tuple(get_backend("multilingual-e5-small").embed_queries([query])[0].tolist())


@cache
def embed_crosslingual(query: str) -> tuple[float, ...]:
    return tuple(get_backend("use-multilingual-v3").embed_queries([query])[0].tolist())


@pytest.fixture
def collection_of(knowledge_data):
    """A new collection on the repository's bilingual knowledge base per call (or another index file of it)."""
    made: list[KnowledgeCollection] = []

    def make(index_path: Path | None = None) -> KnowledgeCollection:
        index_path = index_path or knowledge_data / "knowledge_index.json"
        made.append(KnowledgeCollection(uri=str(knowledge_data / "milvus.db"), index_path=str(index_path)))
        return made[-1]

    yield make
    for collection in made:
        collection.close()


@pytest.fixture
def fused(collection_of):
    """The retrieved and fused candidates of a query, with its retrieval trace (the shipped retriever and fusion)."""

    def run(query: str, category: str | None = None) -> tuple[list[Document], dict]:
        retriever = FilteredRetryRetriever(collection_of())
        retrieved = retriever.run(query_embedding=list(embed(query)), query=query, category_filter=category)
        retriever.close()
        documents = HybridFusionRanker().run(documents=retrieved["candidates"])["documents"]
        return documents, retrieved["retrieval_trace"]

    return run


def balance(ranker: LanguageBalanceRanker, documents, query: str, crosslingual: bool = True) -> list[Document]:
    bridge = list(embed_crosslingual(query)) if crosslingual else None
    out = ranker.run(
        documents=documents, query=query, query_embedding=list(embed(query)), crosslingual_embedding=bridge
    )
    return list(out["documents"])


def ranking(documents) -> list[tuple]:
    return [(d.id, d.score, d.meta) for d in documents]


def first_rank(joined: list[Document], expected: list[str]) -> int:
    docs = [d.meta["doc_id"] for d in joined]
    return min((docs.index(e) for e in expected if e in docs), default=len(docs))


class TestLanguageBalanceRanker:
    # --- init, validation, serialization ---------------------------------------------------------------------

    def test_init_defaults(self):
        ranker = LanguageBalanceRanker()
        assert isinstance(ranker.collection, KnowledgeCollection)
        assert ranker.collection.uri == "data/milvus.db"
        assert ranker.collection.index_path == "data/knowledge_index.json"
        # the shipped pipelines.yaml values (tests/pipelines/test_lookup_pipeline.py checks the two agree)
        assert ranker.language_balance == 0.75
        assert ranker.crosslingual_weight == 0.1

    def test_init_does_not_connect(self, tmp_path):
        LanguageBalanceRanker(KnowledgeCollection(uri=str(tmp_path / "nowhere" / "milvus.db")))
        assert not (tmp_path / "nowhere").exists()

    @pytest.mark.parametrize(
        ("kwargs", "match"),
        [
            ({"language_balance": 1.5}, r"language_balance=1\.5"),
            ({"language_balance": -0.1}, r"language_balance=-0\.1"),
            ({"crosslingual_weight": -0.1}, r"crosslingual_weight=-0\.1"),
        ],
    )
    def test_invalid_init(self, kwargs, match):
        with pytest.raises(ValueError, match=match):
            LanguageBalanceRanker(**kwargs)

    def test_to_dict_from_dict_keeps_every_parameter(self):
        collection = KnowledgeCollection(uri="http://127.0.0.1:19530", collection_name="kb_other", metric_type="IP")
        params = {"language_balance": 0.5, "crosslingual_weight": 0.3, "prefer_query_language": False}
        data = component_to_dict(LanguageBalanceRanker(collection, **params), "language_balance")
        assert data == {
            "type": "components.rankers.language_balance_ranker.LanguageBalanceRanker",
            "init_parameters": {"collection": collection.to_dict(), **params},
        }
        restored = component_from_dict(LanguageBalanceRanker, data, "language_balance")
        assert {name: getattr(restored, name) for name in params} == params
        assert restored.collection.to_dict() == collection.to_dict()

    def test_from_dict_accepts_only_a_knowledge_collection(self):
        data = component_to_dict(LanguageBalanceRanker(), "language_balance")
        data["init_parameters"]["collection"]["type"] = "builtins.dict"
        with pytest.raises(Exception, match="is not a KnowledgeStore"):
            component_from_dict(LanguageBalanceRanker, data, "language_balance")

    def test_warm_up_never_raises(self, stub_collection, monkeypatch):
        collection = stub_collection()

        def down():
            raise ConnectionError("the store is down")

        monkeypatch.setattr(collection, "warm_up", down)
        LanguageBalanceRanker(collection).warm_up()

    # --- run on plain Documents ------------------------------------------------------------------------------

    def test_language_balance_subtracts_each_candidates_language_offset(self, stub_collection):
        collection = stub_collection()
        docs = [cand("en1", 0.90), cand("en2", 0.89), cand("zh1", 0.90), cand("zh2", 0.85)]
        out = LanguageBalanceRanker(collection, language_balance=1.0, crosslingual_weight=0.0).run(
            documents=docs, query=QUERY, query_embedding=QUERY_VECTOR, crosslingual_embedding=BRIDGE
        )["documents"]
        languages = {d.id: script_language(d.content) for d in docs}
        expected = language_offsets(QUERY_VECTOR, "en", {i: DENSE[i] for i in languages}, languages, STATISTICS, 1.0)
        assert len(set(expected.values())) == 4
        for doc in out:
            original = next(d for d in docs if d.id == doc.id)
            assert doc.meta["language"] == languages[doc.id]
            assert doc.meta["language_offset"] == round(expected[doc.id], 4)
            assert doc.score == pytest.approx(original.score - expected[doc.id], abs=1e-9)
            assert doc.meta["similarity"] == original.meta["similarity"]  # never changed
            assert not set(CROSSLINGUAL_META) & set(doc.meta)  # weight 0: no bonus even with the query vector
        # an English query's same-language lean is taken out: the Chinese answer overtakes the English one it tied
        assert [d.id for d in out].index("zh1") < [d.id for d in out].index("en1")
        assert [d.score for d in out] == sorted((d.score for d in out), reverse=True)
        # only the dense vectors were read, every candidate's, in one request
        assert collection.reads == [(["en1", "en2", "zh1", "zh2"], ["vector"])]

    def test_a_page_in_the_querys_language_ranks_just_above_its_translation(self, stub_collection):
        # a bilingual site: `docs/zh/refunds.md` translates `docs/en/refunds.md`; an unrelated English page stays
        docs = [
            cand("en1", 0.95, source="docs/en/refunds.md"),
            cand("en2", 0.93, source="docs/en/other.md"),
            cand("zh1", 0.90, source="docs/zh/refunds.md"),
            cand("zh2", 0.80, source="docs/zh/refunds.md"),
        ]
        query = "退款要多久"  # Chinese

        def ranked(prefer: bool) -> list[Document]:
            ranker = LanguageBalanceRanker(stub_collection(), language_balance=0.0, crosslingual_weight=0.1)
            ranker.prefer_query_language = prefer
            return list(ranker.run(documents=docs, query=query, crosslingual_embedding=None)["documents"])

        assert [d.id for d in ranked(False)] == ["en1", "en2", "zh1", "zh2"]
        out = ranked(True)
        assert [d.id for d in out] == ["zh1", "en1", "en2", "zh2"]  # only the page's best chunk moves
        assert out[0].score == pytest.approx(0.95 + 0.0001) and out[0].meta["translation_of"] == "docs/en/refunds.md"
        assert out[0].meta["twin_lift"] == pytest.approx(0.0501, abs=1e-4)
        assert all("twin_lift" not in d.meta for d in out[1:])
        english = LanguageBalanceRanker(stub_collection(), language_balance=0.0, crosslingual_weight=0.1)
        same = list(english.run(documents=docs, query=QUERY)["documents"])
        assert [d.id for d in same] == ["en1", "en2", "zh1", "zh2"]  # the English page already leads its twin

    def test_balance_weight_scales_the_offsets(self, stub_collection):
        docs = [cand("en1", 0.9), cand("zh1", 0.9)]

        def offsets(weight: float) -> dict[str, float]:
            out = LanguageBalanceRanker(stub_collection(), language_balance=weight, crosslingual_weight=0.0).run(
                documents=docs, query=QUERY, query_embedding=QUERY_VECTOR
            )["documents"]
            return {d.id: 0.9 - d.score for d in out}

        half, full = offsets(0.5), offsets(1.0)
        languages = {"en1": "en", "zh1": "zh"}
        for weight, got in ((0.5, half), (1.0, full)):
            want = language_offsets(QUERY_VECTOR, "en", DENSE, languages, STATISTICS, weight)
            assert got == pytest.approx({i: want[i] for i in got}, abs=1e-9)
        assert half != pytest.approx(full)

    def test_crosslingual_bonus_is_measured_against_each_attempts_same_language_median(self, stub_collection):
        collection = stub_collection()
        docs = [
            cand("en1", 0.95, "unfiltered"),
            cand("en3", 0.93, "unfiltered"),
            cand("zh1", 0.92, "unfiltered"),
            cand("en2", 0.91, "filtered"),
            cand("en3", 0.93, "filtered"),
            cand("zh1", 0.92, "filtered"),
        ]
        out = LanguageBalanceRanker(collection, language_balance=0.0, crosslingual_weight=0.1).run(
            documents=docs, query=QUERY, query_embedding=QUERY_VECTOR, crosslingual_embedding=BRIDGE
        )["documents"]
        assert len(out) == len(docs)  # every attempt's copy is kept: joining is the joiner's
        got = by_key(out)
        # unfiltered: English similarities 0.9 and 0.7, median 0.8; filtered: 0.5 and 0.7, median 0.6
        references = {"unfiltered": 0.8, "filtered": 0.6}
        for (chunk, attempt), doc in got.items():
            assert doc.meta["crosslingual_reference"] == pytest.approx(references[attempt], abs=1e-4)
            assert doc.meta["crosslingual_similarity"] == pytest.approx(float(CROSSLINGUAL[chunk][0]), abs=1e-4)
            assert doc.meta["language_offset"] == 0.0  # balance 0: no offset, no dense vectors read
        assert got["zh1", "unfiltered"].meta["crosslingual_bonus"] == pytest.approx(0.0, abs=1e-4)
        assert got["zh1", "filtered"].meta["crosslingual_bonus"] == pytest.approx(0.02, abs=1e-4)
        assert got["zh1", "filtered"].score == pytest.approx(0.94, abs=1e-4)
        # same-language candidates get no bonus and keep their scores, so their order
        for key in (("en1", "unfiltered"), ("en3", "unfiltered"), ("en2", "filtered"), ("en3", "filtered")):
            assert got[key].meta["crosslingual_bonus"] == 0.0
            assert got[key].score == next(d.score for d in docs if (d.id, d.meta["attempt"]) == key)
        assert [(d.id, d.meta["attempt"]) for d in out] == [
            ("en1", "unfiltered"),
            ("zh1", "filtered"),
            ("en3", "unfiltered"),
            ("en3", "filtered"),
            ("zh1", "unfiltered"),
            ("en2", "filtered"),
        ]
        # each attempt's vectors read in a request of its own, only the cross-lingual ones
        assert sorted(collection.reads) == [
            (["en1", "en3", "zh1"], ["crosslingual"]),
            (["en2", "en3", "zh1"], ["crosslingual"]),
        ]

    def test_a_candidate_below_the_reference_loses(self, stub_collection):
        docs = [cand("en1", 0.95), cand("en2", 0.94), cand("zh2", 0.95)]
        out = LanguageBalanceRanker(stub_collection(), language_balance=0.0, crosslingual_weight=0.2).run(
            documents=docs, query=QUERY, query_embedding=QUERY_VECTOR, crosslingual_embedding=BRIDGE
        )["documents"]
        zh2 = by_key(out)["zh2", "unfiltered"]
        assert zh2.meta["crosslingual_bonus"] == pytest.approx(0.2 * (0.4 - 0.7), abs=1e-4)  # median(0.9, 0.5)
        assert [d.id for d in out] == ["en1", "en2", "zh2"]

    def test_without_same_language_candidates_the_reference_is_the_attempts_median(self, stub_collection):
        docs = [cand("zh1", 0.9), cand("zh2", 0.9)]
        out = LanguageBalanceRanker(stub_collection(), language_balance=0.0, crosslingual_weight=0.1).run(
            documents=docs, query=QUERY, query_embedding=QUERY_VECTOR, crosslingual_embedding=BRIDGE
        )["documents"]
        got = {d.id: d for d in out}
        assert got["zh1"].meta["crosslingual_reference"] == pytest.approx(0.6, abs=1e-4)
        assert got["zh1"].meta["crosslingual_bonus"] == pytest.approx(0.02, abs=1e-4)
        assert got["zh2"].meta["crosslingual_bonus"] == pytest.approx(-0.02, abs=1e-4)

    def test_both_adjustments_add_up(self, stub_collection):
        docs = [cand("en1", 0.9), cand("en2", 0.9), cand("zh1", 0.9)]
        out = LanguageBalanceRanker(stub_collection(), language_balance=0.5, crosslingual_weight=0.1).run(
            documents=docs, query=QUERY, query_embedding=QUERY_VECTOR, crosslingual_embedding=BRIDGE
        )["documents"]
        offsets = language_offsets(QUERY_VECTOR, "en", DENSE, {"en1": "en", "en2": "en", "zh1": "zh"}, STATISTICS, 0.5)
        zh1 = next(d for d in out if d.id == "zh1")
        assert zh1.meta["crosslingual_bonus"] == pytest.approx(0.1 * (0.8 - 0.7), abs=1e-4)
        assert zh1.score == pytest.approx(0.9 - offsets["zh1"] + 0.1 * (0.8 - 0.7), abs=1e-6)

    def test_without_the_crosslingual_query_vector_there_is_no_bonus(self, stub_collection):
        collection = stub_collection()
        docs = [cand("en1", 0.9), cand("zh1", 0.9)]
        out = LanguageBalanceRanker(collection, language_balance=0.75, crosslingual_weight=0.1).run(
            documents=docs, query=QUERY, query_embedding=QUERY_VECTOR
        )["documents"]
        assert all(not set(CROSSLINGUAL_META) & set(d.meta) for d in out)
        assert all(d.meta["language_offset"] != 0.0 for d in out)
        assert collection.reads == [(["en1", "zh1"], ["vector"])]

    def test_without_the_collections_crosslingual_field_there_is_no_bonus(self, stub_collection):
        collection = stub_collection(fields=("vector",))
        docs = [cand("en1", 0.9), cand("zh1", 0.9)]
        out = LanguageBalanceRanker(collection, language_balance=0.75, crosslingual_weight=0.1).run(
            documents=docs, query=QUERY, query_embedding=QUERY_VECTOR, crosslingual_embedding=BRIDGE
        )["documents"]
        assert all(not set(CROSSLINGUAL_META) & set(d.meta) for d in out)
        assert collection.reads == [(["en1", "zh1"], ["vector"])]

    def test_without_the_query_vector_there_is_no_offset(self, stub_collection):
        collection = stub_collection()
        docs = [cand("en1", 0.9), cand("zh1", 0.9)]
        out = LanguageBalanceRanker(collection, language_balance=0.75, crosslingual_weight=0.1).run(
            documents=docs, query=QUERY, crosslingual_embedding=BRIDGE
        )["documents"]
        assert all(d.meta["language_offset"] == 0.0 for d in out)
        assert next(d for d in out if d.id == "zh1").meta["crosslingual_bonus"] == pytest.approx(-0.01, abs=1e-4)
        assert collection.reads == [(["en1", "zh1"], ["crosslingual"])]

    @pytest.mark.parametrize("statistics", [ONE_LANGUAGE, None], ids=["one-language", "no-statistics"])
    def test_a_collection_of_one_language_passes_the_candidates_unchanged(
        self, stub_collection, monkeypatch, statistics
    ):
        collection = stub_collection(statistics=statistics)
        monkeypatch.setattr(collection, "candidate_vectors", untouchable)
        docs = [cand("en2", 0.8), cand("zh1", 0.9)]  # not even sorted
        out = LanguageBalanceRanker(collection, language_balance=1.0, crosslingual_weight=0.5).run(
            documents=docs, query=QUERY, query_embedding=QUERY_VECTOR, crosslingual_embedding=BRIDGE
        )["documents"]
        assert list(out) == docs and all(o is d for o, d in zip(out, docs, strict=True))
        assert all("language_offset" not in d.meta for d in out)

    def test_both_weights_zero_pass_the_candidates_unchanged(self, stub_collection, monkeypatch):
        collection = stub_collection()
        monkeypatch.setattr(collection, "statistics", untouchable)
        monkeypatch.setattr(collection, "candidate_vectors", untouchable)
        docs = [cand("en2", 0.8), cand("zh1", 0.9)]
        out = LanguageBalanceRanker(collection, language_balance=0.0, crosslingual_weight=0.0).run(
            documents=docs, query=QUERY, query_embedding=QUERY_VECTOR, crosslingual_embedding=BRIDGE
        )["documents"]
        assert all(o is d for o, d in zip(out, docs, strict=True)) and len(out) == 2

    def test_empty_input_gives_empty_output(self, stub_collection, monkeypatch):
        collection = stub_collection()
        monkeypatch.setattr(collection, "statistics", untouchable)
        ranker = LanguageBalanceRanker(collection)
        assert ranker.run(documents=[], query=QUERY, query_embedding=QUERY_VECTOR)["documents"] == []

    def test_inputs_are_not_mutated(self, stub_collection):
        docs = [cand("en1", 0.9), cand("zh1", 0.9, "filtered"), cand("zh1", 0.9)]
        vector, bridge = list(QUERY_VECTOR), list(BRIDGE)
        before, metas = copy.deepcopy(docs), [d.meta for d in docs]
        out = LanguageBalanceRanker(stub_collection(), language_balance=1.0, crosslingual_weight=0.1).run(
            documents=docs, query=QUERY, query_embedding=vector, crosslingual_embedding=bridge
        )["documents"]
        assert docs == before and vector == QUERY_VECTOR and bridge == BRIDGE
        assert all(d.meta is m for d, m in zip(docs, metas, strict=True))
        assert all("language_offset" in d.meta for d in out) and all("language" not in d.meta for d in docs)

    # --- on the repository's bilingual knowledge base, after the retriever and fusion, before the joiner -------

    @pytest.mark.integration
    def test_language_balance_lifts_answers_in_the_other_language(self, fused, collection_of):
        """On the repository's bilingual knowledge base: cross-lingual answers rank higher, similarity unchanged."""
        queries = [q for q in load_eval_set(KNOWLEDGE_DIR / "eval.jsonl") if q.type == "cross-lingual"]
        assert len(queries) >= 10
        plain = LanguageBalanceRanker(collection_of(), language_balance=0.0)
        balanced = LanguageBalanceRanker(collection_of(), language_balance=0.75)
        joiner = AttemptJoiner()
        lifted, lowered = 0, 0
        for query in queries:
            documents, trace = fused(query.query)
            before = balance(plain, documents, query.query, crosslingual=False)
            after = balance(balanced, documents, query.query, crosslingual=False)
            rank_before = first_rank(joiner.run(documents=before, retrieval_trace=trace)["documents"], query.expected)
            rank_after = first_rank(joiner.run(documents=after, retrieval_trace=trace)["documents"], query.expected)
            lifted += rank_after < rank_before
            lowered += rank_after > rank_before
            assert all(d.meta["language_offset"] == 0.0 for d in before)
            similarity = {d.id: d.meta["similarity"] for d in documents}
            for doc in after:
                assert doc.meta["similarity"] == similarity[doc.id]  # the similarity itself is never changed
                assert doc.meta["language"] in ("en", "zh") and "language_offset" in doc.meta
            assert any(d.meta["language_offset"] != 0.0 for d in after)
        assert lifted >= len(queries) / 2 and lowered <= 2

    @pytest.mark.integration
    def test_crosslingual_bonus_lifts_other_language_answers_and_keeps_same_language_order(self, fused, collection_of):
        """On the bilingual knowledge base: the bonus moves only other-language candidates, by the stated amount."""
        queries = [q for q in load_eval_set(KNOWLEDGE_DIR / "eval.jsonl") if q.type == "cross-lingual"]
        without = LanguageBalanceRanker(collection_of(), crosslingual_weight=0.0)
        with_bonus = LanguageBalanceRanker(collection_of(), crosslingual_weight=0.1)
        joiner = AttemptJoiner()
        lifted, lowered = 0, 0
        for query in queries:
            documents, trace = fused(query.query)
            before = joiner.run(documents=balance(without, documents, query.query), retrieval_trace=trace)
            balanced = balance(with_bonus, documents, query.query)
            after = joiner.run(documents=balanced, retrieval_trace=trace)["documents"]
            before = before["documents"]
            lifted += first_rank(after, query.expected) < first_rank(before, query.expected)
            lowered += first_rank(after, query.expected) > first_rank(before, query.expected)
            language = script_language(query.query)
            # the reference: the median over every same-language candidate of the attempt, usable or not
            for attempt in {d.meta["attempt"] for d in balanced}:
                group = [d for d in balanced if d.meta["attempt"] == attempt]
                same = [d.meta["crosslingual_similarity"] for d in group if d.meta["language"] == language]
                reference = stats.median(same)
                for doc in group:
                    assert doc.meta["crosslingual_reference"] == pytest.approx(reference, abs=2e-4)
                    expected_bonus = (
                        0.0
                        if doc.meta["language"] == language
                        else 0.1 * (doc.meta["crosslingual_similarity"] - reference)
                    )
                    assert doc.meta["crosslingual_bonus"] == pytest.approx(expected_bonus, abs=2e-3)
            same = [d for d in after if d.meta["language"] == language]
            both = {d.id for d in same} & {d.id for d in before}
            order_after = [d.id for d in same if d.id in both]
            assert order_after == [d.id for d in before if d.id in both]  # e5 orders them alike
            assert all(not set(CROSSLINGUAL_META) & set(d.meta) for d in before)  # weight 0: not applied
        assert lifted >= len(queries) / 2 and lowered <= 2

    @pytest.mark.integration
    @pytest.mark.parametrize("source", ["table", "store"])
    def test_balancing_reads_each_candidates_own_vectors(self, fused, collection_of, monkeypatch, source):
        query = "how long do refunds take?"
        documents, _ = fused(query)
        collection = collection_of()
        assert collection.vector_table() is not None
        if source == "store":  # an index written before vector tables: the vectors come from the store
            monkeypatch.setattr(collection, "vector_table", lambda: None)
        read: list[str] = []
        get_vectors = collection.store.get_vectors

        def spy(ids, fields=()):
            read.extend(ids)
            return get_vectors(ids, fields)

        monkeypatch.setattr(collection.store, "get_vectors", spy)
        out = balance(LanguageBalanceRanker(collection), documents, query)
        assert out and all(d.embedding is None for d in out)
        if source == "table":
            assert read == []  # every candidate is in the table
        else:
            assert set(read) == {d.id for d in documents}
        # each similarity is the one of that chunk's own stored vector, read here by id in a request of its own
        stored = collection_of().crosslingual_vectors([d.id for d in out])
        query_vector = np.asarray(embed_crosslingual(query))
        unit = query_vector / np.linalg.norm(query_vector)
        for doc in out:
            expected = float(np.asarray(stored[doc.id]) @ unit / np.linalg.norm(stored[doc.id]))
            assert doc.meta["crosslingual_similarity"] == pytest.approx(expected, abs=1e-4)

    @pytest.mark.integration
    @pytest.mark.parametrize("query", ["how long do refunds take?", "磁盘满了怎么办", "rotate the API keys"])
    def test_the_vector_table_ranks_exactly_as_vectors_read_from_the_store(
        self, fused, collection_of, monkeypatch, query
    ):
        documents, _ = fused(query)
        from_table = balance(LanguageBalanceRanker(collection_of()), documents, query)
        store = collection_of()
        monkeypatch.setattr(store, "vector_table", lambda: None)
        read: list[str] = []
        get_vectors = store.store.get_vectors

        def spy(ids, fields=()):
            read.extend(ids)
            return get_vectors(ids, fields)

        monkeypatch.setattr(store.store, "get_vectors", spy)
        from_store = balance(LanguageBalanceRanker(store), documents, query)
        assert read, "the vectors did not come from the store"
        assert any(d.meta["language_offset"] != 0.0 for d in from_table)
        assert ranking(from_table) == ranking(from_store)  # ids, rank scores and every meta value, bit for bit

    @pytest.mark.integration
    def test_candidates_missing_from_the_table_are_read_from_the_store(
        self, fused, collection_of, monkeypatch, tmp_path
    ):
        """A chunk written after the table (an index run under way) still gets its own vectors."""
        query = "how long do refunds take?"
        documents, trace = fused(query)
        expected = balance(LanguageBalanceRanker(collection_of()), documents, query)
        full = collection_of().vector_table()
        ids = list(dict.fromkeys(d.id for d in expected))
        kept = ids[1::2]  # every other candidate is missing
        fields = {"vector": 384, "crosslingual": 512}
        part = table_rows([(i, {f: full.vectors([i], f)[i].tolist() for f in fields}) for i in kept], fields)
        partial = VectorTable.open(tmp_path, VectorTable.write(tmp_path, [part]))
        collection = collection_of()
        monkeypatch.setattr(collection, "vector_table", lambda: partial)
        fetched: list[str] = []
        get_vectors = collection.store.get_vectors

        def spy(ids, fields=()):
            fetched.extend(ids)
            return get_vectors(ids, fields)

        monkeypatch.setattr(collection.store, "get_vectors", spy)
        out = balance(LanguageBalanceRanker(collection), documents, query)
        assert set(ids[::2]) <= set(fetched) and not set(kept) & set(fetched)
        # what the lookup hands on (the joined candidates) ranks bit for bit as with the whole table ...
        joiner = AttemptJoiner()
        assert ranking(joiner.run(documents=out, retrieval_trace=trace)["documents"]) == ranking(
            joiner.run(documents=expected, retrieval_trace=trace)["documents"]
        )
        # ... and every balanced candidate alike, its rank score to float32 rounding (the vectors come in
        # another order, table rows first, and the offsets' matrix product rounds by row order)
        assert [(d.id, d.meta) for d in out] == [(d.id, d.meta) for d in expected]
        assert [d.score for d in out] == pytest.approx([d.score for d in expected], abs=1e-7)

    @pytest.mark.integration
    def test_a_damaged_table_is_logged_and_the_vectors_come_from_the_store(
        self, fused, collection_of, knowledge_data, tmp_path, caplog
    ):
        query = "磁盘满了怎么办"
        documents, _ = fused(query)
        expected = balance(LanguageBalanceRanker(collection_of()), documents, query)
        index = KnowledgeIndex.load(knowledge_data / "knowledge_index.json")
        index.save(tmp_path / "knowledge_index.json")  # the same index, its table damaged
        (tmp_path / index.statistics.vector_table).write_bytes(b"\x93NUMPY damaged")
        collection = collection_of(tmp_path / "knowledge_index.json")
        out = balance(LanguageBalanceRanker(collection), documents, query)
        assert collection.vector_table() is None
        assert ranking(out) == ranking(expected)
        assert "not a readable vector table" in caplog.text

    @pytest.mark.integration
    def test_crosslingual_bonus_needs_the_query_vector_and_the_collection_field(
        self, fused, collection_of, monkeypatch
    ):
        query = "how long do refunds take?"
        documents, _ = fused(query)
        ranker = LanguageBalanceRanker(collection_of())
        no_query_vector = balance(ranker, documents, query, crosslingual=False)
        assert all(not set(CROSSLINGUAL_META) & set(d.meta) for d in no_query_vector)
        with_bonus = balance(ranker, documents, query)
        assert any(d.meta.get("crosslingual_bonus") for d in with_bonus)
        fields = ranker.collection.vector_fields

        def without_crosslingual(dense=True, crosslingual=True):  # as if indexed without them
            return fields(dense, False)

        monkeypatch.setattr(ranker.collection, "vector_fields", without_crosslingual)
        no_field = balance(ranker, documents, query)
        assert all(not set(CROSSLINGUAL_META) & set(d.meta) for d in no_field)
        assert [d.id for d in no_field] == [d.id for d in no_query_vector]

    @pytest.mark.integration
    def test_a_collection_without_statistics_passes_the_candidates_unchanged(
        self, fused, collection_of, knowledge_data, tmp_path
    ):
        query = "how long do refunds take?"
        documents, _ = fused(query)
        assert any(
            "language_offset" in d.meta for d in balance(LanguageBalanceRanker(collection_of()), documents, query)
        )
        index = KnowledgeIndex.load(knowledge_data / "knowledge_index.json")
        index.statistics = None  # indexed before statistics existed, or by another tool
        index.save(tmp_path / "knowledge_index.json")
        out = balance(LanguageBalanceRanker(collection_of(tmp_path / "knowledge_index.json")), documents, query)
        assert all(o is d for o, d in zip(out, documents, strict=True)) and len(out) == len(documents)

    @pytest.mark.integration
    def test_language_balance_is_a_no_op_without_two_languages(self, tmp_path):
        """The tiny knowledge base has two Chinese chunks: too few for a centroid, so nothing is balanced."""
        data = index_tiny_kb(tmp_path)
        statistics = KnowledgeIndex.load(data / "knowledge_index.json").statistics
        assert statistics is not None and statistics.language_chunks["zh"] < 20
        collection = KnowledgeCollection(uri=str(data / "milvus.db"), index_path=str(data / "knowledge_index.json"))
        retriever = FilteredRetryRetriever(collection, evidence_threshold=0.0)
        retrieved = retriever.run(query_embedding=list(embed(DISK_QUESTION)), query=DISK_QUESTION)
        documents = HybridFusionRanker().run(documents=retrieved["candidates"])["documents"]
        out = balance(LanguageBalanceRanker(collection, language_balance=1.0), documents, DISK_QUESTION)
        retriever.close()
        assert out and all(o is d for o, d in zip(out, documents, strict=True)) and len(out) == len(documents)
        assert all("language_offset" not in d.meta for d in out)
