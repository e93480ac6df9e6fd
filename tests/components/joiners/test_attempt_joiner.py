from __future__ import annotations

import copy
from pathlib import Path

import pytest
from haystack import Document, Pipeline
from haystack.core.serialization import component_from_dict, component_to_dict

from components.core.embedding_backends import get_backend
from components.joiners.attempt_joiner import AttemptJoiner
from components.rankers.hybrid_fusion_ranker import HybridFusionRanker
from components.rankers.language_balance_ranker import LanguageBalanceRanker
from components.retrievers.filtered_retry_retriever import LOW_QUALITY, FilteredRetryRetriever
from components.store.knowledge_collection import KnowledgeCollection
from tests.conftest import index_tiny_kb

DISK_QUESTION = "the disk on a node is full, what should I do"
RETRY = {"attempts": [{"name": "filtered"}, {"name": "unfiltered"}], "selected_attempt": "unfiltered"}


def cand(chunk: str, score: float, attempt: str = "unfiltered", usable: bool | None = True, **meta) -> Document:
    """A ranked candidate: `score` the rank score so far, the retriever's `attempt` and `usable` in meta."""
    flags = {} if usable is None else {"usable": usable}
    return Document(
        id=chunk, content=f"text of {chunk}", score=score, meta={"attempt": attempt, **flags, "source": chunk, **meta}
    )


def found(documents) -> list[tuple[str, float, str]]:
    return [(d.id, d.score, d.meta["attempt"]) for d in documents]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    """The tiny knowledge base indexed once into Milvus Lite for the whole module."""
    return index_tiny_kb(tmp_path_factory.mktemp("joiner"))


@pytest.fixture(scope="module")
def disk_vector() -> list[float]:
    return get_backend("multilingual-e5-small").embed_queries([DISK_QUESTION])[0].tolist()


@pytest.fixture
def collection_of(data_dir):
    """A new collection on the tiny knowledge base per call; all closed after the test."""
    made: list[KnowledgeCollection] = []

    def make() -> KnowledgeCollection:
        made.append(
            KnowledgeCollection(uri=str(data_dir / "milvus.db"), index_path=str(data_dir / "knowledge_index.json"))
        )
        return made[-1]

    yield make
    for collection in made:
        collection.close()


@pytest.fixture
def chain(collection_of):
    """
    The shipped ranking after the retriever: retriever -> HybridFusionRanker -> LanguageBalanceRanker ->
    AttemptJoiner (pipelines.yaml), called one after the other; returns the joined candidates and the retrieval.
    """

    def run(
        vector: list[float],
        query: str = DISK_QUESTION,
        category: str | None = None,
        joiner_top_k: int = 60,
        lexical_weight: float = 0.15,
        **retriever_params,
    ) -> tuple[list[Document], dict]:
        params = {"top_k": 20, "evidence_threshold": 0.0, **retriever_params}
        retrieved = FilteredRetryRetriever(collection_of(), **params).run(
            query_embedding=vector, query=query, category_filter=category
        )
        fused = HybridFusionRanker(lexical_weight=lexical_weight).run(documents=retrieved["candidates"])
        balanced = LanguageBalanceRanker(collection_of()).run(
            documents=fused["documents"], query=query, query_embedding=vector
        )
        joined = AttemptJoiner(top_k=joiner_top_k).run(
            documents=balanced["documents"], retrieval_trace=retrieved["retrieval_trace"]
        )
        return list(joined["documents"]), retrieved

    return run


class TestAttemptJoiner:
    # --- init, validation, serialization ---------------------------------------------------------------------

    def test_init_defaults(self):
        assert AttemptJoiner().top_k == 60  # the shipped pipelines.yaml value

    @pytest.mark.parametrize("top_k", [0, -3])
    def test_invalid_init(self, top_k):
        with pytest.raises(ValueError, match=f"top_k={top_k}"):
            AttemptJoiner(top_k=top_k)

    def test_to_dict_from_dict_keeps_every_parameter(self):
        data = component_to_dict(AttemptJoiner(top_k=7), "joiner")
        assert data == {"type": "components.joiners.attempt_joiner.AttemptJoiner", "init_parameters": {"top_k": 7}}
        assert component_from_dict(AttemptJoiner, data, "joiner").top_k == 7

    # --- run on plain Documents ------------------------------------------------------------------------------

    def test_unusable_candidates_are_dropped_and_the_flag_is_left_out(self):
        docs = [cand("a", 0.95), cand("b", 0.97, usable=False), cand("c", 0.90, usable=None)]
        out = AttemptJoiner().run(documents=docs)["documents"]
        # a candidate without the flag counts as usable
        assert found(out) == [("a", 0.95, "unfiltered"), ("c", 0.90, "unfiltered")]
        assert all("usable" not in d.meta for d in out)
        assert out[0].meta == {k: v for k, v in docs[0].meta.items() if k != "usable"}

    def test_each_attempt_keeps_its_best_top_k_by_score(self):
        docs = [
            cand("u1", 0.80),
            cand("u2", 0.95),
            cand("u3", 0.90),
            cand("f1", 0.85, "filtered"),
            cand("f2", 0.70, "filtered"),
            cand("f3", 0.88, "filtered"),
        ]
        out = AttemptJoiner(top_k=2).run(documents=docs, retrieval_trace=RETRY)["documents"]
        # the best two of each attempt, wherever they came in the list, not the first two of the list
        assert found(out) == [
            ("u2", 0.95, "unfiltered"),
            ("u3", 0.90, "unfiltered"),
            ("f3", 0.88, "filtered"),
            ("f1", 0.85, "filtered"),
        ]

    def test_the_cut_counts_usable_candidates_only(self):
        docs = [cand("a", 0.99, usable=False), cand("b", 0.98, usable=False), cand("c", 0.5), cand("d", 0.4)]
        out = AttemptJoiner(top_k=2).run(documents=docs)["documents"]
        assert [d.id for d in out] == ["c", "d"]

    def test_the_run_top_k_overrides_the_init_top_k(self):
        docs = [cand(c, s) for c, s in zip("abcde", (0.9, 0.8, 0.7, 0.6, 0.5), strict=True)]
        joiner = AttemptJoiner(top_k=4)
        assert [d.id for d in joiner.run(documents=docs)["documents"]] == ["a", "b", "c", "d"]
        assert [d.id for d in joiner.run(documents=docs, top_k=2)["documents"]] == ["a", "b"]
        assert joiner.top_k == 4
        # an attempt with fewer candidates than top_k keeps them all
        assert len(joiner.run(documents=docs, top_k=60)["documents"]) == 5

    def test_a_chunk_both_attempts_found_is_one_candidate_its_better_copy(self):
        docs = [
            cand("both", 0.90, "unfiltered", rank="u"),
            cand("only-u", 0.85, "unfiltered"),
            cand("both", 0.93, "filtered", rank="f"),  # ranked higher in the filtered attempt
            cand("only-f", 0.80, "filtered"),
        ]
        out = AttemptJoiner().run(documents=docs, retrieval_trace=RETRY)["documents"]
        assert found(out) == [("both", 0.93, "filtered"), ("only-u", 0.85, "unfiltered"), ("only-f", 0.80, "filtered")]
        both = out[0]
        assert both.meta["rank"] == "f"  # the whole better copy, not a mix
        assert both.meta["attempts"] == ["unfiltered", "filtered"]  # the selected attempt first
        assert "attempts" not in out[1].meta and "attempts" not in out[2].meta

    @pytest.mark.parametrize("filtered_first", [True, False])
    @pytest.mark.parametrize("selected", ["unfiltered", "filtered"])
    def test_on_a_tie_the_selected_attempts_copy_is_kept(self, selected, filtered_first):
        copies = [cand("a", 0.9, "filtered", copy="f"), cand("a", 0.9, "unfiltered", copy="u")]
        docs = copies if filtered_first else copies[::-1]
        trace = {"attempts": [{"name": "filtered"}, {"name": "unfiltered"}], "selected_attempt": selected}
        (doc,) = AttemptJoiner().run(documents=docs, retrieval_trace=trace)["documents"]
        assert doc.meta["attempt"] == selected and doc.meta["copy"] == selected[0]
        other = "filtered" if selected == "unfiltered" else "unfiltered"
        assert doc.meta["attempts"] == [selected, other]

    def test_without_a_trace_the_first_attempt_seen_wins_a_tie(self):
        docs = [cand("a", 0.9, "filtered"), cand("a", 0.9, "unfiltered")]
        (doc,) = AttemptJoiner().run(documents=docs)["documents"]
        assert doc.meta["attempt"] == "filtered" and doc.meta["attempts"] == ["filtered", "unfiltered"]

    def test_a_copy_not_kept_by_its_attempt_does_not_name_it(self):
        docs = [
            cand("a", 0.90, "unfiltered"),
            cand("x", 0.95, "filtered"),
            cand("a", 0.90, "filtered"),  # below the filtered attempt's top 1
            cand("b", 0.80, "unfiltered"),
            cand("b", 0.80, "filtered", usable=False),  # not usable in the filtered attempt
        ]
        out = AttemptJoiner(top_k=2).run(documents=docs, retrieval_trace=RETRY)["documents"]
        by_id = {d.id: d for d in out}
        assert set(by_id) == {"a", "b", "x"}
        assert "attempts" not in by_id["b"].meta
        out = AttemptJoiner(top_k=1).run(documents=docs, retrieval_trace=RETRY)["documents"]
        assert found(out) == [("x", 0.95, "filtered"), ("a", 0.90, "unfiltered")]
        assert all("attempts" not in d.meta for d in out)

    def test_the_output_is_sorted_by_descending_score_ties_in_order(self):
        docs = [cand("c", 0.7), cand("a", 0.9, "filtered"), cand("d", 0.7, "filtered"), cand("b", 0.8)]
        out = AttemptJoiner().run(documents=docs, retrieval_trace=RETRY)["documents"]
        assert [d.id for d in out] == ["a", "b", "c", "d"]

    def test_empty_input_gives_empty_output(self):
        assert AttemptJoiner().run(documents=[])["documents"] == []
        assert AttemptJoiner().run(documents=[], retrieval_trace=RETRY)["documents"] == []
        # nothing usable is nothing too
        assert AttemptJoiner().run(documents=[cand("a", 0.9, usable=False)])["documents"] == []

    def test_inputs_are_not_mutated(self):
        docs = [cand("a", 0.9), cand("a", 0.95, "filtered"), cand("b", 0.5, usable=False)]
        trace = copy.deepcopy(RETRY)
        before, metas = copy.deepcopy(docs), [d.meta for d in docs]
        out = AttemptJoiner(top_k=1).run(documents=docs, retrieval_trace=trace)["documents"]
        assert docs == before and trace == RETRY
        assert all(d.meta is m for d, m in zip(docs, metas, strict=True))
        assert all("usable" in d.meta for d in docs) and "attempts" not in docs[1].meta
        assert out[0].meta["attempts"] == ["unfiltered", "filtered"]

    # --- after the retriever and the rankers on the tiny knowledge base ---------------------------------------

    @pytest.mark.integration
    def test_a_chunk_both_attempts_found_is_a_candidate_once(self, chain, disk_vector):
        def scores(joined: list[Document]) -> dict[str, float]:
            return {d.id: d.score for d in joined}

        filtered, alone = chain(disk_vector, category="product-faq", reference_threshold=0.0)
        assert [a["name"] for a in alone["retrieval_trace"]["attempts"]] == ["filtered"]
        filtered = scores(filtered)
        unfiltered = scores(chain(disk_vector)[0])
        both = set(filtered) & set(unfiltered)
        assert both, "the test needs chunks that both attempts find"
        joined, retrieved = chain(disk_vector, category="product-faq", reference_threshold=0.99)
        assert [a["name"] for a in retrieved["retrieval_trace"]["attempts"]] == ["filtered", "unfiltered"]
        assert retrieved["retrieval_trace"]["fallback_reason"] == LOW_QUALITY
        # the retriever hands on both copies ...
        retrieved_ids = [d.id for d in retrieved["candidates"]]
        assert all(retrieved_ids.count(i) == 2 for i in both)
        # ... the joiner keeps each chunk once, so that the gate's standout and decision depth count chunks
        ids = [d.id for d in joined]
        assert len(ids) == len(set(ids)) == len(set(filtered) | set(unfiltered))
        merged = scores(joined)
        assert all(merged[i] == max(filtered[i], unfiltered[i]) for i in both)
        # and it says that both found it, the selected (retry) attempt first, so that its hit reasons can
        found_by = {d.id: d.meta.get("attempts", [d.meta["attempt"]]) for d in joined}
        assert all(found_by[i] == ["unfiltered", "filtered"] for i in both)
        assert all(len(found_by[i]) == 1 for i in set(ids) - both)
        # equal scores: the retry's copy is kept
        assert all(d.meta["attempt"] == "unfiltered" for d in joined if d.id in both)
        assert all("usable" not in d.meta for d in joined)
        assert list(merged.values()) == sorted(merged.values(), reverse=True)

    @pytest.mark.integration
    def test_low_quality_filtered_candidates_compete_after_the_retry(self, chain, disk_vector):
        joined, retrieved = chain(disk_vector, category="product-faq", reference_threshold=0.99, top_k=10)
        assert retrieved["retrieval_trace"]["fallback_reason"] == LOW_QUALITY
        # the disk runbook found by the retry outranks the weak filtered hits
        assert joined[0].meta["source"] == "alerts/disk.md"
        assert joined[0].meta["attempt"] == "unfiltered"
        # low-quality filtered candidates still compete (a chunk the retry found too names both attempts)
        assert any(
            "filtered" in d.meta.get("attempts", [d.meta["attempt"]]) and d.meta["category"] == "product-faq"
            for d in joined
        )
        scores = [d.score for d in joined]
        assert scores == sorted(scores, reverse=True)

    @pytest.mark.integration
    def test_evidence_threshold_leaves_the_weak_candidates_out(self, chain, disk_vector):
        baseline, _ = chain(disk_vector, lexical_weight=0.0)
        assert len(baseline) >= 3
        threshold = (baseline[1].meta["similarity"] + baseline[2].meta["similarity"]) / 2
        assert baseline[1].meta["similarity"] > threshold > baseline[2].meta["similarity"]
        joined, retrieved = chain(disk_vector, lexical_weight=0.0, evidence_threshold=threshold)
        assert len(retrieved["candidates"]) == len(baseline)  # the retriever flags them ...
        assert [d.id for d in joined] == [d.id for d in baseline[:2]]  # ... the joiner leaves them out
        attempt = retrieved["retrieval_trace"]["attempts"][0]
        assert attempt["below_threshold_dropped"] == len(baseline) - 2 and attempt["candidate_count"] == 2

    @pytest.mark.integration
    def test_top_k_keeps_the_best_of_a_deeper_search(self, chain, disk_vector):
        """What `search_depth` did: search deep, fuse, and hand on only the best top_k."""
        shallow, shallow_retrieval = chain(disk_vector, top_k=1, joiner_top_k=1, lexical_weight=0.2)
        deep, deep_retrieval = chain(disk_vector, top_k=5, joiner_top_k=1, lexical_weight=0.2)
        wide, _ = chain(disk_vector, top_k=5, joiner_top_k=5, lexical_weight=0.2)
        shallow_attempt, deep_attempt = (
            shallow_retrieval["retrieval_trace"]["attempts"][0],
            deep_retrieval["retrieval_trace"]["attempts"][0],
        )
        assert deep_attempt["raw_hits"] > shallow_attempt["raw_hits"]
        assert len(deep) == len(shallow) == 1 and len(wide) > 1
        # the one kept is the best of the deeper fused pool, as if all had been handed on
        assert [d.id for d in deep] == [d.id for d in wide[:1]]
        assert deep[0].score == pytest.approx(wide[0].score)
        assert deep[0].score == max(d.score for d in wide)

    @pytest.mark.integration
    def test_the_run_top_k_cuts_the_ranked_candidates(self, chain, disk_vector, collection_of):
        full, retrieved = chain(disk_vector, top_k=10)
        ranked = HybridFusionRanker().run(documents=retrieved["candidates"])["documents"]
        balanced = LanguageBalanceRanker(collection_of()).run(
            documents=ranked, query=DISK_QUESTION, query_embedding=disk_vector
        )["documents"]
        out = AttemptJoiner().run(documents=balanced, retrieval_trace=retrieved["retrieval_trace"], top_k=2)
        assert len(full) > 2
        assert [(d.id, d.score) for d in out["documents"]] == [(d.id, d.score) for d in full[:2]]

    @pytest.mark.integration
    def test_the_shipped_wiring_gives_what_the_components_give_one_by_one(self, chain, disk_vector, collection_of):
        pipeline = Pipeline()
        pipeline.add_component("retriever", FilteredRetryRetriever(collection_of(), top_k=20, evidence_threshold=0.0))
        pipeline.add_component("fusion", HybridFusionRanker())
        pipeline.add_component("language_balance", LanguageBalanceRanker(collection_of()))
        pipeline.add_component("joiner", AttemptJoiner())
        pipeline.connect("retriever.candidates", "fusion.documents")
        pipeline.connect("fusion.documents", "language_balance.documents")
        pipeline.connect("language_balance.documents", "joiner.documents")
        pipeline.connect("retriever.retrieval_trace", "joiner.retrieval_trace")
        out = pipeline.run(
            {
                "retriever": {"query_embedding": disk_vector, "query": DISK_QUESTION, "category_filter": "product-faq"},
                "language_balance": {"query": DISK_QUESTION, "query_embedding": disk_vector},
            }
        )
        joined = out["joiner"]["documents"]
        expected, _ = chain(disk_vector, category="product-faq")
        assert joined and [(d.id, d.score, d.meta) for d in joined] == [(d.id, d.score, d.meta) for d in expected]
        assert len({d.id for d in joined}) == len(joined)
