from __future__ import annotations

import numpy as np
import pytest

from components.store.collection_statistics import MIN_LANGUAGE_CHUNKS, CollectionStatistics, language_offsets


def _unit(values: list[float]) -> np.ndarray:
    vector = np.asarray(values, dtype=np.float64)
    return vector / np.linalg.norm(vector)


def _statistics(languages: dict[str, list[float]]) -> CollectionStatistics:
    return CollectionStatistics(
        embedding_model="m",
        chunks=MIN_LANGUAGE_CHUNKS * len(languages),
        language_chunks=dict.fromkeys(languages, MIN_LANGUAGE_CHUNKS),
        language_centroids=languages,
    )


def _by_the_formula(query, query_language, vectors, languages, statistics, weight):
    """`w (q·c_x + c_q·x - w c_q·c_x) / 2`, less the same for a chunk on the query language's centroid, one by one."""
    centroids = {lang: np.asarray(c, dtype=np.float64) for lang, c in statistics.language_centroids.items()}
    overall = sum(centroids[lang] * statistics.language_chunks[lang] for lang in centroids) / statistics.chunks
    q, c_q = _unit(query), centroids.get(query_language, overall)

    def offset(c_x, x):
        return weight * (q @ c_x + c_q @ x - weight * (c_q @ c_x)) / 2

    reference = offset(c_q, c_q / np.linalg.norm(c_q))
    return {
        chunk: offset(centroids.get(languages.get(chunk, ""), overall), _unit(vector)) - reference
        for chunk, vector in vectors.items()
    }


class TestLanguageOffsets:
    def test_every_chunk_gets_the_documented_offset(self):
        rng = np.random.default_rng(7)
        statistics = _statistics({"en": rng.normal(size=8).tolist(), "zh": rng.normal(size=8).tolist()})
        vectors = {f"chunk{i}": rng.normal(size=8).tolist() for i in range(12)}
        languages = {chunk: ("en", "zh", "")[i % 3] for i, chunk in enumerate(vectors)}  # "": no language known
        query = rng.normal(size=8).tolist()
        for query_language in ("en", "zh", "fr"):
            got = language_offsets(query, query_language, vectors, languages, statistics, 0.75)
            expected = _by_the_formula(query, query_language, vectors, languages, statistics, 0.75)
            assert got.keys() == expected.keys()
            assert [got[c] for c in vectors] == pytest.approx([expected[c] for c in vectors], abs=1e-6)

    def test_a_chunk_on_the_query_languages_centroid_is_not_moved(self):
        statistics = _statistics({"en": [1.0, 0.0, 0.0], "zh": [0.0, 1.0, 0.0]})
        offsets = language_offsets([0.2, 0.3, 0.9], "en", {"a": [1.0, 0.0, 0.0]}, {"a": "en"}, statistics, 0.75)
        assert offsets == {"a": pytest.approx(0.0, abs=1e-7)}

    def test_nothing_to_balance_gives_no_offsets(self):
        statistics = _statistics({"en": [1.0, 0.0], "zh": [0.0, 1.0]})
        one_language = _statistics({"en": [1.0, 0.0]})
        vectors, languages = {"a": [1.0, 1.0]}, {"a": "zh"}
        assert language_offsets([1.0, 0.0], "en", {}, {}, statistics, 0.75) == {}
        assert language_offsets([1.0, 0.0], "en", vectors, languages, statistics, 0.0) == {}
        assert language_offsets([1.0, 0.0], "en", vectors, languages, one_language, 0.75) == {}
        assert language_offsets([1.0, 0.0], "en", vectors, languages, None, 0.75) == {}
