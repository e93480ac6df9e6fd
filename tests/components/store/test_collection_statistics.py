from __future__ import annotations

import numpy as np
import pytest

from components.core.embedding_backends import E5_SMALL, get_backend
from components.store import collection_statistics
from components.store.collection_statistics import (
    MIN_LANGUAGE_CHUNKS,
    CollectionStatistics,
    agrees,
    compute_statistics,
    embed_probes,
    language_offsets,
    noise_probes,
    probe_vectors_file,
    shipped_probe_vectors,
)


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


class _CountingEncoder:
    """The shipped lookup model's query encoder, counting the texts it embeds (optionally turning them)."""

    def __init__(self, turn: bool = False) -> None:
        self.texts = 0
        self.turn = turn

    def __call__(self, texts: list[str]) -> np.ndarray:
        self.texts += len(texts)
        vectors = get_backend(E5_SMALL).embed_queries(texts)
        return np.roll(vectors, 1, axis=1) if self.turn else vectors


@pytest.fixture
def no_cached_probes(monkeypatch):
    monkeypatch.setattr(collection_statistics, "_PROBE_VECTORS", {})


class TestProbeVectors:
    def test_the_shipped_file_is_what_the_shipped_model_gives(self):
        """Fails when the probes or the model change without `python scripts/probe_vectors.py`."""
        texts = noise_probes()
        shipped = np.load(probe_vectors_file(texts, E5_SMALL), allow_pickle=False)
        computed = embed_probes(texts, get_backend(E5_SMALL).embed_queries)
        assert agrees(computed, shipped)  # what an index run accepts, on every CPU the model runs on
        assert not agrees(computed, np.roll(shipped, 1, axis=1))  # and another model's vectors it does not

    def test_agreement_is_a_cosine_similarity_per_probe(self):
        base = np.eye(2, 4, dtype=np.float32)
        nudged = base + np.float32(0.01) * np.array([[0, 1, 0, 0], [0, 0, 1, 0]], dtype=np.float32)
        assert agrees(nudged * 3, base)  # the scale does not matter, a cosine of 0.99995 does
        assert not agrees(base + np.float32(0.05) * np.ones((2, 4), dtype=np.float32), base)  # 0.9963

    def test_an_index_run_embeds_two_probes_to_check_the_file(self, no_cached_probes):
        encoder = _CountingEncoder()
        statistics = compute_statistics([[("x", [1.0] + [0.0] * 383, ["x"])]], encoder, E5_SMALL)
        assert statistics.noise_probes == 200
        assert encoder.texts == 2
        vectors = shipped_probe_vectors(noise_probes(), encoder, E5_SMALL)
        assert vectors is not None and vectors.shape == (200, 384)

    @pytest.mark.parametrize("model", [E5_SMALL, "another-model"])
    def test_another_model_embeds_every_probe(self, no_cached_probes, monkeypatch, model):
        turned = _CountingEncoder(turn=True)  # a model that embeds otherwise, under the same name or another
        chunks = [("the disk is full", [1.0] + [0.0] * 383, ["disk", "full"])]
        statistics = compute_statistics([chunks], turned, model)
        assert turned.texts == 2 * (model == E5_SMALL) + 200  # the check where a file is shipped, then every probe
        monkeypatch.setattr(collection_statistics, "_PROBE_VECTORS", {})
        shipped = compute_statistics([chunks], get_backend(E5_SMALL).embed_queries, E5_SMALL)
        assert statistics.noise_similarity != shipped.noise_similarity

    def test_statistics_are_the_same_with_and_without_the_file(self, no_cached_probes, tmp_path, monkeypatch):
        chunks = [
            (text, get_backend(E5_SMALL).embed_passages([text])[0].tolist(), text.split())
            for text in ("the disk is full", "退款多久到账")
        ]
        with_file = compute_statistics([chunks], get_backend(E5_SMALL).embed_queries, E5_SMALL)
        monkeypatch.setattr(collection_statistics, "_PROBE_VECTORS", {})
        monkeypatch.setattr(collection_statistics, "PROBE_VECTORS_DIR", tmp_path)
        without = compute_statistics([chunks], get_backend(E5_SMALL).embed_queries, E5_SMALL)
        # identical on the CPU that wrote the file; elsewhere the ceilings within what PROBE_AGREEMENT allows
        assert without.model_dump(exclude={"noise_similarity"}) == with_file.model_dump(exclude={"noise_similarity"})
        assert without.noise_similarity.keys() == with_file.noise_similarity.keys()
        for script, levels in without.noise_similarity.items():
            assert levels == pytest.approx(with_file.noise_similarity[script], abs=5e-4)

    @pytest.mark.parametrize("content", [b"", b"not a numpy file", None])
    def test_a_damaged_or_mismatched_file_is_not_used(self, no_cached_probes, tmp_path, monkeypatch, content):
        monkeypatch.setattr(collection_statistics, "PROBE_VECTORS_DIR", tmp_path)
        texts = noise_probes()
        path = probe_vectors_file(texts, E5_SMALL)
        if content is None:  # a readable file of the wrong shape
            np.save(path, np.zeros((3, 384), dtype=np.float32))
        else:
            path.write_bytes(content)
        encoder = _CountingEncoder()
        assert shipped_probe_vectors(texts, encoder, E5_SMALL) is None
        assert compute_statistics([[("x", [1.0] + [0.0] * 383, ["x"])]], encoder, E5_SMALL).noise_probes == 200
        assert encoder.texts == 200
