import math

import pytest

from components.store.lexical import K1, Bm25ChunkIndex, TermStatistics, tokenize

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


class TestBm25ChunkIndex:
    def test_scores_on_milvus_scale(self):
        index = Bm25ChunkIndex(["a", "b", "c"], CHUNKS)
        (best, score), _ = index.search("disk full", top_k=3)
        # tf 1 at average length: bm25s gives idf / (k1 + 1) per term; Milvus' scale multiplies it back
        assert best == "a"
        assert score == pytest.approx(math.log(1.6) + math.log(1 + 2.5 / 1.5))

    def test_best_hit_stays_below_the_ideal_score(self):
        index = Bm25ChunkIndex(["a", "b", "c"], CHUNKS)
        hits = index.search("disk full", top_k=3)
        assert 0 < hits[0][1] < index.statistics.ideal_score(tokenize("disk full"))

    def test_statistics_cover_the_indexed_chunks(self):
        index = Bm25ChunkIndex(["a", "b"], ["退款到账", "disk"])
        assert index.statistics.chunks == 2
        assert index.statistics.df["退款"] == 1

    def test_empty_index_and_empty_query(self):
        assert Bm25ChunkIndex([], []).search("disk", top_k=3) == []
        assert Bm25ChunkIndex(["a"], ["disk"]).search("the", top_k=3) == []

    def test_misaligned_input_is_rejected(self):
        with pytest.raises(ValueError, match="same length"):
            Bm25ChunkIndex(["a"], [])
