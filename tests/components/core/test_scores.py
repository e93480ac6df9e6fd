from __future__ import annotations

import pytest
from haystack import Document

from components.core.scores import (
    boost_reasons,
    document_key,
    evidence_key,
    normalized_similarity,
    raw_from_normalized,
    similarity_of,
)


class TestScores:
    def test_normalized_similarity_fixed_points(self):
        assert normalized_similarity(0.0, "L2") == 1.0
        assert normalized_similarity(4.0, "L2") == 0.0
        assert normalized_similarity(2.0, "L2") == pytest.approx(0.5)
        assert normalized_similarity(1.0, "COSINE") == 1.0
        assert normalized_similarity(-1.0, "COSINE") == 0.0
        assert normalized_similarity(0.0, "IP") == pytest.approx(0.5)

    def test_normalized_similarity_is_clipped(self):
        assert normalized_similarity(5.0, "L2") == 0.0
        assert normalized_similarity(-0.5, "L2") == 1.0
        assert normalized_similarity(1.2, "IP") == 1.0
        assert normalized_similarity(-3.0, "IP") == 0.0

    @pytest.mark.parametrize("distance", [0.0, 0.3, 1.0, 1.7, 2.5, 4.0])
    def test_l2_and_cosine_agree_for_unit_vectors(self, distance):
        cosine = 1 - distance / 2  # Milvus' L2 value for unit vectors is 2 - 2cos
        assert normalized_similarity(distance, "L2") == pytest.approx(normalized_similarity(cosine, "COSINE"))

    @pytest.mark.parametrize("metric", ["L2", "COSINE", "IP"])
    @pytest.mark.parametrize("similarity", [0.0, 0.25, 0.5, 0.9, 1.0])
    def test_raw_from_normalized_inverts(self, metric, similarity):
        raw = raw_from_normalized(similarity, metric)
        assert normalized_similarity(raw, metric) == pytest.approx(similarity)

    def test_similarity_of_ignores_what_was_added_to_the_score(self):
        assert similarity_of(Document(content="x", score=0.99, meta={"similarity": 0.9, "base_score": 0.95})) == 0.9
        assert similarity_of(Document(content="x", score=0.99, meta={"base_score": 0.95})) == 0.95
        assert similarity_of(Document(content="x", score=0.8)) == 0.8
        assert similarity_of(Document(content="x")) == 0.0

    def test_evidence_key_is_the_chunk(self):
        assert evidence_key({"source": "a.md", "chunk_index": 3}, "id-1") == "a.md#3"
        assert evidence_key({"source": "a.md", "chunk_index": 0}, "id-1") == "a.md#0"
        assert evidence_key({"source": "a.md"}, "id-1") == "a.md"
        assert evidence_key({}, "id-1") == "id-1"

    def test_document_key_is_the_document(self):
        assert document_key({"doc_id": "kb-1", "source": "a.md"}, "id-1") == "kb-1"
        assert document_key({"doc_id": "", "source": "a.md"}, "id-1") == "a.md"
        assert document_key({}, "id-1") == "id-1"

    def test_boost_reasons(self):
        meta = {"boosts": [{"signal": "keyword", "value": "disk full", "weight": 0.02}]}
        assert boost_reasons(meta) == ["keyword:disk full (+0.02)"]
        assert boost_reasons({}) == []
