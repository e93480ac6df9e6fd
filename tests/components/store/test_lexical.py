import math

import numpy as np
import pytest

from components.store.lexical import BM25_PREFIX, K1, Bm25ChunkIndex, Bm25Corpus, TermStatistics, tokenize

CHUNKS = ["disk full", "disk quota", "network down"]


class TestTermStatistics:
    def test_counts_chunks_not_occurrences(self):
        stats = TermStatistics([["disk", "disk", "full"], ["disk"]])
        assert stats.chunks == 2
        assert stats.df == {"disk": 2, "full": 1}

    def test_idf_is_milvus_formula(self):
        stats = TermStatistics(tokenize(t) for t in CHUNKS)
        # hand-checked: N 3; df(disk) 2 -> ln(1 + 1.5 / 2.5) = ln 1.6; unknown term df 0 -> ln(1 + 3.5 / 0.5) = ln 8
        assert stats.idf("disk") == pytest.approx(math.log(1.6))
        assert stats.idf("zebra") == pytest.approx(math.log(8))

    def test_ideal_score_sums_distinct_terms_times_k1_plus_1(self):
        stats = TermStatistics(tokenize(t) for t in CHUNKS)
        expected = (math.log(1.6) + math.log(1 + 2.5 / 1.5)) * (K1 + 1)
        assert stats.ideal_score(["disk", "full", "disk"]) == pytest.approx(expected)

    def test_no_terms_no_score(self):
        assert TermStatistics([]).ideal_score([]) == 0.0
        assert TermStatistics(tokenize(t) for t in CHUNKS).ideal_score([]) == 0.0


class TestBm25Corpus:
    def test_statistics_are_those_of_the_chunks_terms(self):
        corpus = Bm25Corpus()
        for n, text in enumerate([*CHUNKS, "退款到账", "the"]):  # "the" has no terms: counted, never matched
            corpus.add(str(n), tokenize(text))
        expected = TermStatistics(tokenize(t) for t in [*CHUNKS, "退款到账", "the"])
        assert (
            (corpus.statistics().chunks, corpus.statistics().df) == (expected.chunks, expected.df) == (5, expected.df)
        )
        assert len(corpus) == 5 and corpus.index().search("the", top_k=3) == []


class TestBm25ChunkIndex:
    def test_scores_on_milvus_scale(self):
        index = Bm25ChunkIndex.build(["a", "b", "c"], CHUNKS)
        (best, score), _ = index.search("disk full", top_k=3)
        # tf 1 at average length: bm25s gives idf / (k1 + 1) per term; Milvus' scale multiplies it back
        assert best == "a"
        assert score == pytest.approx(math.log(1.6) + math.log(1 + 2.5 / 1.5))

    def test_best_hit_stays_below_the_ideal_score(self):
        index = Bm25ChunkIndex.build(["a", "b", "c"], CHUNKS)
        hits = index.search("disk full", top_k=3)
        assert 0 < hits[0][1] < TermStatistics(tokenize(t) for t in CHUNKS).ideal_score(tokenize("disk full"))

    def test_a_category_search_ranks_only_that_category(self):
        index = Bm25ChunkIndex.build(["a", "b", "c"], CHUNKS, ["x", "y", "x"])
        everywhere = dict(index.search("disk", top_k=3))
        assert set(everywhere) == {"a", "b"}
        assert index.search("disk", top_k=3, category="y") == [("b", everywhere["b"])]  # same score, fewer chunks
        assert index.search("disk", top_k=3, category="x") == [("a", everywhere["a"])]
        assert index.search("disk", top_k=3, category="none such") == []

    def test_empty_index_and_empty_query(self):
        assert Bm25ChunkIndex.build([], []).search("disk", top_k=3) == []
        assert Bm25ChunkIndex.build(["a"], ["disk"]).search("the", top_k=3) == []
        assert Bm25ChunkIndex.build(["a"], ["disk"]).search("zebra", top_k=3) == []

    def test_misaligned_input_is_rejected(self):
        with pytest.raises(ValueError, match="same length"):
            Bm25ChunkIndex.build(["a"], [])
        with pytest.raises(ValueError, match="same length"):
            Bm25ChunkIndex.build(["a"], ["disk"], ["x", "y"])

    def test_a_saved_index_opens_memory_mapped_and_searches_alike(self, tmp_path):
        texts = [*CHUNKS, "退款七个工作日内到账", "disk full again and again on the disk"]
        built = Bm25ChunkIndex.build([f"c{n}" for n in range(5)], texts, ["x", "y", "x", "zh", "y"])
        name = built.save(tmp_path)
        assert name.startswith(BM25_PREFIX) and (tmp_path / name).is_dir()
        opened = Bm25ChunkIndex.open(tmp_path, name)
        assert len(opened) == 5
        for query, category in [("disk full", None), ("disk", "y"), ("退款多久到账", None), ("network", "x")]:
            assert opened.search(query, 5, category) == built.search(query, 5, category), (query, category)
        assert opened.search("disk", 5, "y") and not list(tmp_path.glob(".*partial"))

    def test_each_save_is_a_new_folder_and_remove_others_keeps_the_named_one(self, tmp_path):
        index = Bm25ChunkIndex.build(["a"], ["disk"])
        old, new = index.save(tmp_path), index.save(tmp_path)
        (tmp_path / f".{BM25_PREFIX}unfinished.partial").mkdir()
        (tmp_path / "knowledge_index.json").write_text("{}")
        assert old != new
        assert Bm25ChunkIndex.remove_others(tmp_path, new) == 2
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted([new, "knowledge_index.json"])

    def test_an_empty_index_is_not_saved(self, tmp_path):
        with pytest.raises(ValueError, match="at least one chunk"):
            Bm25ChunkIndex.build([], []).save(tmp_path)

    @pytest.mark.parametrize("name", ["../elsewhere", "vectors", f"{BM25_PREFIX}x.partial", f"sub/{BM25_PREFIX}x"])
    def test_a_name_that_is_not_an_index_of_the_folder_is_refused(self, tmp_path, name):
        with pytest.raises(ValueError, match="not the name of a BM25 index"):
            Bm25ChunkIndex.open(tmp_path, name)

    def test_a_missing_linked_or_damaged_index_is_refused_with_the_fix(self, tmp_path):
        name = Bm25ChunkIndex.build(["a", "b"], ["disk full", "disk"]).save(tmp_path)
        fix = "lookup-knowledge index"
        with pytest.raises(ValueError, match=fix):
            Bm25ChunkIndex.open(tmp_path, f"{BM25_PREFIX}missing")
        (tmp_path / f"{BM25_PREFIX}link").symlink_to(tmp_path / name)
        with pytest.raises(ValueError, match=fix):
            Bm25ChunkIndex.open(tmp_path, f"{BM25_PREFIX}link")
        data = next((tmp_path / name).glob("data*.npy"))
        data.write_bytes(data.read_bytes()[:20])  # truncated
        with pytest.raises(ValueError, match=f"not a readable BM25 index.*{fix}"):
            Bm25ChunkIndex.open(tmp_path, name)

    def test_chunks_that_do_not_match_the_index_are_refused(self, tmp_path):
        name = Bm25ChunkIndex.build(["a", "b"], ["disk full", "disk"]).save(tmp_path)
        other = Bm25ChunkIndex.build(["a"], ["disk"]).save(tmp_path)
        (tmp_path / other / "chunks.npy").replace(tmp_path / name / "chunks.npy")
        with pytest.raises(ValueError, match="1 chunks listed for an index of 2"):
            Bm25ChunkIndex.open(tmp_path, name)
        np.save(tmp_path / name / "chunks.npy", np.arange(2))
        with pytest.raises(ValueError, match="does not list the index's chunks"):
            Bm25ChunkIndex.open(tmp_path, name)
