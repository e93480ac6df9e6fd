"""What a lookup needs to know about the whole collection, counted once per index run and stored with the index.

- **Language centroids**: the mean (unit) vector of each language's chunks. A multilingual embedder scores a query
  higher against text in its own language than against an equally relevant text in the other; the retriever
  subtracts that bias (how much closer the query is to one language's centroid than to the collection's) before it
  ranks, so a cross-lingual answer is not outranked by same-language near-misses.
- **Noise ceiling**: how similar the collection's best chunk is to queries that mean nothing (seeded pseudo-words,
  random Chinese characters, keyboard noise), per script of the query: Latin noise and Chinese noise reach different
  levels. Every collection and embedder has its own; `found` is decided against it, not against a fixed number.
- **Term counts**: how many chunks contain each BM25 term, which the retriever divides BM25 scores by (the query's
  ideal score): counted here, in the same pass, so that no lookup process reads every chunk back at start.
"""

from __future__ import annotations

import hashlib
import random
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt

from components.core.text_matching import script_language
from components.store.lexical import TermStatistics

NOISE_PROBES = 200
# a language's centroid is only a centroid with enough chunks behind it; below this, no balancing against it
MIN_LANGUAGE_CHUNKS = 20
_SEED = 42
_CONSONANTS = "bcdfghjklmnprstvwxz"
_VOWELS = "aeiou"
_KEYBOARD = "qwertyuiopasdfghjklzxcvbnm"
_CJK_FIRST, _CJK_LAST = 0x4E00, 0x9FA5


class TermCounts(BaseModel):
    """BM25 document frequencies over the active chunks (`TermStatistics`, as stored)."""

    model_config = ConfigDict(extra="forbid")

    # counts, never negative: a damaged or edited index file is refused on load, not divided by in a lookup
    chunks: NonNegativeInt
    df: dict[str, NonNegativeInt] = Field(default_factory=dict)

    def term_statistics(self) -> TermStatistics:
        """:returns: The counts as `TermStatistics`."""
        return TermStatistics.from_counts(self.chunks, self.df)


class CollectionStatistics(BaseModel):
    """Per-collection figures that lookups are calibrated against (stored in the knowledge index file)."""

    model_config = ConfigDict(extra="forbid")

    embedding_model: str
    chunks: int
    language_chunks: dict[str, int] = Field(default_factory=dict)
    language_centroids: dict[str, list[float]] = Field(default_factory=dict)
    noise_probes: int = 0
    # per script of the probes (`en`, `zh`): the best chunk's normalized similarity, p50, p90, p95 and max
    noise_similarity: dict[str, dict[str, float]] = Field(default_factory=dict)
    # None in an index written before they were counted: lookups then count them from the collection
    term_counts: TermCounts | None = None
    # the file beside the index holding the active chunks' vectors (`VectorTable`); None: lookups read them from
    # Milvus with each search
    vector_table: str | None = None
    # the folder beside the index holding the active chunks' BM25 index (`Bm25ChunkIndex`); None: BM25 runs inside
    # Milvus or on an index built from the collection
    bm25_index: str | None = None

    def summary(self) -> str:
        """One line for the index summary: languages and the noise ceilings."""
        languages = ", ".join(f"{lang or 'none'} {n}" for lang, n in sorted(self.language_chunks.items()))
        ceilings = ", ".join(f"{lang} {levels['max']:.3f}" for lang, levels in sorted(self.noise_similarity.items()))
        probes = f"noise ceiling over {self.noise_probes} probes: {ceilings or 'none'}"
        return f"{self.chunks} chunks ({languages}); {probes}"


def noise_probes(count: int = NOISE_PROBES, seed: int = _SEED) -> list[str]:
    """
    Queries that mean nothing, in the shapes gibberish takes: pronounceable pseudo-words, random Chinese characters,
    keyboard runs with digits, and mixtures.

    :param count: How many.
    :param seed: The generator's seed (the same probes every run).
    :returns: The probes.
    """
    rng = random.Random(seed)  # noqa: S311 - reproducible probes, not secrets

    def pseudo_word() -> str:
        return "".join(rng.choice(_CONSONANTS) + rng.choice(_VOWELS) for _ in range(rng.randint(1, 3)))

    def chinese(n: int) -> str:
        return "".join(chr(rng.randint(_CJK_FIRST, _CJK_LAST)) for _ in range(n))

    shapes: list[Callable[[], str]] = [
        lambda: " ".join(pseudo_word() for _ in range(rng.randint(2, 6))),
        lambda: chinese(rng.randint(3, 12)),
        lambda: "".join(rng.choice(_KEYBOARD) for _ in range(rng.randint(5, 14))) + str(rng.randint(0, 999)),
        lambda: f"{pseudo_word()} {chinese(rng.randint(2, 4))} {rng.randint(0, 9999)}",
    ]
    return [shapes[i % len(shapes)]() for i in range(count)]


def _unit(rows: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    return rows / np.where(norms > 0, norms, 1.0)


#: probe vectors per (model, probe count): the probes are seeded, so every index run of a process embeds the same texts
_PROBE_VECTORS: dict[tuple[str, int], np.ndarray] = {}
#: the probes' vectors as the shipped models give them (`python scripts/probe_vectors.py` writes them)
PROBE_VECTORS_DIR = Path(__file__).with_name("probe_vectors")
#: the least cosine similarity between a shipped probe vector and the model's own for the file to be used: CPUs of
#: other instruction sets run the 4-bit model's kernels in another order (0.99991 at worst over the 200 probes on an
#: AVX-512 machine against the file's), another model or version lands far below
PROBE_AGREEMENT = 0.9995


def _probe_vectors(texts: list[str], embed_queries: Callable[[list[str]], np.ndarray], model: str) -> np.ndarray:
    key = (model, len(texts))
    if key not in _PROBE_VECTORS:
        shipped = shipped_probe_vectors(texts, embed_queries, model)
        _PROBE_VECTORS[key] = shipped if shipped is not None else embed_probes(texts, embed_queries)
    return _PROBE_VECTORS[key]


def embed_probes(texts: list[str], embed_queries: Callable[[list[str]], np.ndarray]) -> np.ndarray:
    """
    Embed noise probes as queries.

    :param texts: The probes (`noise_probes`).
    :param embed_queries: The lookup embedder's query encoder.
    :returns: Their unit vectors (float32), a row each.
    """
    return _unit(np.asarray(embed_queries(texts), dtype=np.float32))


def probe_vectors_file(texts: list[str], model: str) -> Path:
    """
    Where the vectors of these probes under this model are shipped: the name carries a digest of the texts, so a
    change of the probes is never read with another's vectors.

    :param texts: The probes.
    :param model: The embedding model's name.
    :returns: The file's path (it may not exist).
    """
    digest = hashlib.sha256("\n".join(texts).encode("utf-8")).hexdigest()[:16]
    return PROBE_VECTORS_DIR / f"{model}-{len(texts)}-{digest}.npy"


def shipped_probe_vectors(
    texts: list[str], embed_queries: Callable[[list[str]], np.ndarray], model: str
) -> np.ndarray | None:
    """
    The probes' vectors as shipped, when the model in use still gives them: embedding 200 probes is 5 % of an index
    run of knowledge/, embedding two of them to check is 1 ‰.

    :param texts: The probes.
    :param embed_queries: The lookup embedder's query encoder.
    :param model: Its name.
    :returns: The vectors, or None when none are shipped for these probes and this model, the file is unreadable, or
        the model embeds the first two probes otherwise (another version of it: a cosine similarity below
        `PROBE_AGREEMENT`).
    """
    path = probe_vectors_file(texts, model)
    try:
        vectors = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError):
        return None
    if vectors.dtype != np.float32 or vectors.ndim != 2 or len(vectors) != len(texts):
        return None
    check = embed_probes(texts[:2], embed_queries)
    if check.shape[1] != vectors.shape[1] or not agrees(check, vectors[:2]):
        return None
    return vectors


def agrees(computed: np.ndarray, shipped: np.ndarray) -> bool:
    """
    :param computed: Probe vectors as the model in use gives them.
    :param shipped: The same probes' shipped vectors.
    :returns: Whether every pair's cosine similarity reaches `PROBE_AGREEMENT` (the same model, whatever the CPU).
    """
    norms = np.linalg.norm(computed, axis=1) * np.linalg.norm(shipped, axis=1)
    cosines = np.einsum("ij,ij->i", computed, shipped) / np.where(norms > 0, norms, 1.0)
    return bool(np.all(cosines >= PROBE_AGREEMENT))


def compute_statistics(
    batches: Iterable[Sequence[tuple[str, list[float], list[str]]]],
    embed_queries: Callable[[list[str]], np.ndarray],
    embedding_model: str,
    probes: int = NOISE_PROBES,
) -> CollectionStatistics:
    """
    Count the language centroids, the noise ceiling and the BM25 term counts over every chunk, a batch at a time.

    :param batches: The active chunks as batches of `(text, vector, terms)`; the language is read from the text, the
        terms are its BM25 terms (`tokenize`).
    :param embed_queries: The lookup embedder's query encoder (texts to unit vectors).
    :param embedding_model: Its name, stored so a model change is noticed.
    :param probes: Number of noise probes.
    :returns: The statistics (similarities on the normalized 0-1 scale, for unit vectors on every metric).
    """
    texts = noise_probes(probes)
    probe_vectors = _probe_vectors(texts, embed_queries, embedding_model)
    best = np.full(len(probe_vectors), -1.0, dtype=np.float32)
    sums: dict[str, np.ndarray] = {}
    counts: dict[str, int] = {}
    df: Counter[str] = Counter()
    for batch in batches:
        if not batch:
            continue
        vectors = _unit(np.asarray([vector for _, vector, _ in batch], dtype=np.float32))
        best = np.maximum(best, (vectors @ probe_vectors.T).max(axis=0))
        for (text, _, terms), vector in zip(batch, vectors, strict=True):
            language = script_language(text)
            sums[language] = sums.get(language, 0.0) + vector
            counts[language] = counts.get(language, 0) + 1
            df.update(set(terms))
    total = sum(counts.values())
    noise = (1 + best) / 2  # cosine to the normalized scale of `components.core.scores`
    by_script: dict[str, list[float]] = {}
    for text, value in zip(texts, noise, strict=True):
        by_script.setdefault(script_language(text), []).append(float(value))
    return CollectionStatistics(
        embedding_model=embedding_model,
        chunks=total,
        language_chunks=counts,
        language_centroids={lang: (sums[lang] / counts[lang]).round(6).tolist() for lang in counts},
        noise_probes=len(texts) if total else 0,
        noise_similarity={lang: _levels(values) for lang, values in by_script.items() if lang} if total else {},
        term_counts=TermCounts(chunks=total, df=dict(sorted(df.items()))),
    )


def _levels(values: list[float]) -> dict[str, float]:
    array = np.asarray(values)
    return {
        "p50": round(float(np.quantile(array, 0.5)), 4),
        "p90": round(float(np.quantile(array, 0.9)), 4),
        "p95": round(float(np.quantile(array, 0.95)), 4),
        "max": round(float(array.max()), 4),
    }


def language_offsets(
    query: Sequence[float],
    query_language: str,
    vectors: Mapping[str, Sequence[float] | np.ndarray],
    languages: dict[str, str],
    statistics: CollectionStatistics | None,
    weight: float,
) -> dict[str, float]:
    """
    How much of each chunk's similarity to a query comes from language alone, on the normalized scale.

    Both sides are centered on their language: the similarity a ranking should use is `(q - w c_q)·(x - w c_x)`
    instead of `q·x`, where `c_q` is the centroid of the query's language (the collection's when it has no chunks in
    it) and `c_x` that of the chunk's. The difference, halved to the normalized scale, is the offset:
    `w (q·c_x + c_q·x - w c_q·c_x) / 2`, less the offset of a chunk on the query language's centroid (a constant
    per query, so rank scores stay near similarities). It takes out both halves of the embedder's same-language
    bias — the query leaning to its language's chunks, and generic chunks leaning to every query of their language.

    :param query: The query vector.
    :param query_language: Its language (`script_language`).
    :param vectors: The chunks' vectors, by chunk id.
    :param languages: The chunks' languages, by chunk id.
    :param statistics: The collection's statistics (None: no offsets).
    :param weight: `w`, 0 (off) to 1 (full centering).
    :returns: Offset per chunk id; empty unless the collection is multilingual (`is_multilingual`).
    """
    if statistics is None or weight == 0 or not is_multilingual(statistics):
        return {}
    centroids = {lang: np.asarray(c, dtype=np.float32) for lang, c in statistics.language_centroids.items()}
    overall: np.ndarray = np.sum(
        [centroids[lang] * statistics.language_chunks[lang] for lang in centroids], axis=0
    ) / max(1, statistics.chunks)
    q = _unit(np.asarray([query], dtype=np.float32))[0]
    c_q = centroids.get(query_language, overall)

    if not vectors:
        return {}

    def centroid_term(c_x: np.ndarray) -> float:  # q·c_x - w c_q·c_x: one value per chunk language
        return float(q @ c_x - weight * (c_q @ c_x))

    def offset(centroid_part: float, c_q_x: float) -> float:
        return weight * (centroid_part + c_q_x) / 2

    # measured from a chunk lying on the query's own language centroid, so that rank scores stay near similarities
    reference = offset(centroid_term(c_q), float(c_q @ (c_q / (np.linalg.norm(c_q) or 1.0))))
    ids = list(vectors)
    # c_q·x for every chunk in one product; the centroid part once per language
    toward_query = _unit(np.asarray([vectors[i] for i in ids], dtype=np.float32)) @ c_q
    parts = {lang: centroid_term(centroids.get(lang, overall)) for lang in {languages.get(i, "") for i in ids}}
    return {
        chunk_id: offset(parts[languages.get(chunk_id, "")], c_q_x) - reference
        for chunk_id, c_q_x in zip(ids, toward_query.tolist(), strict=True)
    }


def is_multilingual(statistics: CollectionStatistics | None) -> bool:
    """
    :param statistics: A collection's statistics.
    :returns: Whether at least two languages have `MIN_LANGUAGE_CHUNKS` chunks (language balancing applies).
    """
    if statistics is None:
        return False
    return sum(n >= MIN_LANGUAGE_CHUNKS for n in statistics.language_chunks.values()) >= 2
