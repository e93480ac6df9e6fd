"""BM25 terms for English and Chinese, their statistics, and the in-process BM25 index.

English is lowercased, split into words, stop words dropped and Snowball-stemmed (PyStemmer); Chinese runs are
split into overlapping character bigrams (measured better than jieba words on Chinese legal text). `tokenize` makes
the terms stored in the collection for BM25 inside Milvus (`lexical_text`) and searched there; `Bm25ChunkIndex` is
BM25 in-process: the index run writes one beside the knowledge index file, and lookups memory-map it.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import uuid
from collections import Counter
from collections.abc import Collection, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import Stemmer

from components.core.text_matching import CJK

_TOKEN = re.compile(rf"[a-z0-9]+|{CJK.pattern}+")
_STOP = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "for",
        "from",
        "has",
        "have",
        "how",
        "i",
        "in",
        "is",
        "it",
        "its",
        "of",
        "on",
        "or",
        "that",
        "the",
        "this",
        "to",
        "was",
        "what",
        "when",
        "where",
        "which",
        "who",
        "why",
        "will",
        "with",
        "do",
        "does",
        "did",
        "can",
        "could",
        "should",
        "would",
        "we",
        "you",
        "your",
        "our",
        "they",
        "their",
        "there",
        "then",
        "than",
        "so",
        "if",
        "not",
        "no",
        "yes",
        "about",
        "into",
        "over",
        "after",
        "before",
    ]
)
_STEMMER = Stemmer.Stemmer("english")
# Milvus' BM25 parameters (Milvus Lite applies these whatever the index says); the in-process index uses the same
K1 = 1.5
B = 0.75
#: how the index run's BM25 index folders are named, in the folder of the knowledge index file
BM25_PREFIX = "knowledge_bm25-"
_CHUNKS_FILE = "chunks.npy"  # the index's chunk ids and categories, in its order
_NO_TERM = "\x00"  # the one term of a chunk without any, so that it is counted and never matches
# Milvus' VARCHAR limit: the lexical field holds at most this many bytes of terms
LEXICAL_MAX_BYTES = 65535


def tokenize(text: str) -> list[str]:
    """
    Split a text into BM25 terms.

    :param text: English, Chinese or mixed text.
    :returns: Stemmed English words (stop words removed) and Chinese character bigrams.
    """
    words: list[str] = []
    for run in _TOKEN.findall(text.casefold()):
        if CJK.match(run):
            words.extend(run[i : i + 2] for i in range(max(1, len(run) - 1)))
        elif run not in _STOP:
            words.append(run)
    latin = [w for w in words if not CJK.match(w)]
    stems = iter(_STEMMER.stemWords(latin))
    return [next(stems) if not CJK.match(w) else w for w in words]


def lexical_text(text: str) -> str:
    """
    Turn a text into the BM25 terms stored in (and searched on) the collection's lexical field.

    :param text: A chunk or a query.
    :returns: Space-separated terms (English stems, Chinese character bigrams), cut to fit the field.
    """
    terms = " ".join(tokenize(text))
    data = terms.encode()
    if len(data) <= LEXICAL_MAX_BYTES:
        return terms
    return data[:LEXICAL_MAX_BYTES].decode(errors="ignore").rsplit(" ", 1)[0]


class TermStatistics:
    """
    Document frequencies of BM25 terms over a set of chunks, and the largest BM25 score a query can reach there.

    A chunk's BM25 score divided by the query's `ideal_score` says how much of the query it matches (0 to 1), on
    the same scale for every query, which the best hit's score does not: a query whose best hit matches one rare
    word out of ten gets a small lexical bonus instead of a full one. IDF is Milvus' (and bm25s'):
    `log(1 + (N - df + 0.5) / (df + 0.5))`; a term no chunk has gets the IDF of df 0, so unmatched words lower the
    ratio.

    ### Usage example

    ```python
    stats = TermStatistics(tokenize(t) for t in ["disk full on /var", "disk quota"])
    print(stats.ideal_score(tokenize("disk full")))  # (idf(disk) + idf(full)) * (K1 + 1)
    ```
    """

    def __init__(self, chunk_terms: Iterable[Sequence[str]]) -> None:
        """
        Count, for every term, the chunks that contain it.

        :param chunk_terms: Each chunk's terms (`tokenize`).
        """
        self.chunks = 0
        self.df: Counter[str] = Counter()
        for terms in chunk_terms:
            self.chunks += 1
            self.df.update(set(terms))

    @classmethod
    def from_counts(cls, chunks: int, df: dict[str, int]) -> TermStatistics:
        """
        Statistics counted before (`TermCounts` stored with the index).

        :param chunks: Number of chunks counted.
        :param df: Chunks per term.
        :returns: The statistics.
        """
        statistics = cls(())
        statistics.chunks, statistics.df = chunks, Counter(df)
        return statistics

    def idf(self, term: str) -> float:
        """
        :param term: A BM25 term.
        :returns: Its inverse document frequency.
        """
        df = self.df.get(term, 0)
        return math.log(1 + (self.chunks - df + 0.5) / (df + 0.5))

    def ideal_score(self, query_terms: Sequence[str]) -> float:
        """
        The BM25 score (Milvus' scale, which includes the factor k1 + 1) of a chunk matching every query term as
        strongly as BM25 allows.

        :param query_terms: The query's terms (`tokenize`).
        :returns: The sum of the distinct terms' IDF times (k1 + 1); 0.0 without terms.
        """
        return sum(self.idf(t) for t in set(query_terms)) * (K1 + 1)


class Bm25Corpus:
    """
    Chunks' BM25 terms collected one chunk at a time, as term numbers, for a `Bm25ChunkIndex`.

    An index run reads every chunk once, in batches; each chunk's terms (`tokenize`, counted once for the term
    statistics too) are kept as numbers into one vocabulary (a list of shared integers per chunk), not as strings,
    until the index is built.

    ### Usage example

    ```python
    corpus = Bm25Corpus()
    corpus.add("c1", tokenize("disk full on /var"), "alerts")
    index = corpus.index()
    ```
    """

    def __init__(self) -> None:
        self.ids: list[str] = []
        self.categories: list[str] = []
        self._vocab: dict[str, int] = {}
        self._chunks: list[list[int]] = []

    def __len__(self) -> int:
        return len(self.ids)

    def add(self, chunk_id: str, terms: Sequence[str], category: str = "") -> None:
        """
        Add one chunk.

        :param chunk_id: Its id.
        :param terms: Its BM25 terms (`tokenize`); a chunk without any is still counted, and never matches.
        :param category: Its category (`meta.category`), for searches filtered by one.
        """
        vocab = self._vocab
        self._chunks.append([vocab.setdefault(t, len(vocab)) for t in terms or [_NO_TERM]])
        self.ids.append(chunk_id)
        self.categories.append(category)

    def statistics(self) -> TermStatistics:
        """:returns: The chunks' term statistics."""
        terms = {number: term for term, number in self._vocab.items()}
        statistics = TermStatistics(())
        statistics.chunks = len(self._chunks)
        statistics.df = Counter(terms[n] for chunk in self._chunks for n in set(chunk) if terms[n] != _NO_TERM)
        return statistics

    def index(self) -> Bm25ChunkIndex:
        """:returns: The BM25 index of the chunks added."""
        import bm25s  # only in-process BM25 needs it

        bm25 = bm25s.BM25(k1=K1, b=B)
        if self._chunks:
            bm25.index((self._chunks, self._vocab), show_progress=False)
        return Bm25ChunkIndex(self.ids, bm25, np.asarray(self.categories, dtype=str))


class Bm25ChunkIndex:
    """
    A BM25 index over chunks, searched by query text, built in memory or written by the index run and memory-mapped.

    Scores are on Milvus' scale, so the BM25 inside Milvus and this one give the same numbers. `lookup-knowledge
    index` writes one for the active chunks (`save`, a folder of a new name each run, recorded in the index file);
    lookups open it (`open`) and read only the postings of their query's terms. Built with `build`, it is the
    fallback for a collection without one and a Milvus without full-text search.

    ### Usage example

    ```python
    index = Bm25ChunkIndex.build(["c1", "c2"], ["disk full on /var", "退款七个工作日内到账"], ["alerts", "payments"])
    print(index.search("退款多久到账", top_k=1))  # [("c2", 1.23)]
    name = index.save("data")
    same = Bm25ChunkIndex.open("data", name)
    ```
    """

    def __init__(self, ids: Sequence[str] | np.ndarray, bm25: Any, categories: np.ndarray) -> None:
        """
        :param ids: Chunk ids, in the index's order.
        :param bm25: The `bm25s.BM25` index of their terms.
        :param categories: Each chunk's category, aligned with `ids`.
        :raises ValueError: If `ids` and `categories` differ in length.
        """
        if len(ids) != len(categories):
            msg = f"ids ({len(ids)}) and categories ({len(categories)}) must have the same length"
            raise ValueError(msg)
        self.ids = ids
        self._bm25 = bm25
        self._categories = categories
        self._masks: dict[str, np.ndarray] = {}

    @classmethod
    def build(cls, ids: Sequence[str], texts: Sequence[str], categories: Sequence[str] | None = None) -> Bm25ChunkIndex:
        """
        Build an index in memory.

        :param ids: Chunk ids.
        :param texts: Chunk texts, aligned with `ids`.
        :param categories: Chunk categories, aligned with `ids` (None: none).
        :returns: The index.
        :raises ValueError: If the lists differ in length.
        """
        if len(ids) != len(texts) or (categories is not None and len(categories) != len(ids)):
            msg = f"ids ({len(ids)}), texts ({len(texts)}) and categories must have the same length"
            raise ValueError(msg)
        corpus = Bm25Corpus()
        for n, (chunk_id, text) in enumerate(zip(ids, texts, strict=True)):
            corpus.add(chunk_id, tokenize(text), categories[n] if categories is not None else "")
        return corpus.index()

    def __len__(self) -> int:
        return len(self.ids)

    def search(
        self,
        query: str,
        top_k: int,
        category: str | None = None,
        ids: Collection[str] | None = None,
        excluded: Collection[str] | None = None,
    ) -> list[tuple[str, float]]:
        """
        Return the best chunks for a query.

        :param query: Query text.
        :param top_k: Most results.
        :param category: Only chunks of this category (None: all).
        :param ids: Only these chunks (None: all).
        :param excluded: Not these chunks (None: none left out).
        :returns: `(chunk_id, bm25_score)` pairs, best first, positive scores only, on Milvus' scale (bm25s' score
            times k1 + 1), so both BM25 paths give the same numbers.
        """
        if not len(self):
            return []
        terms = [t for t in tokenize(query) if t in self._bm25.vocab_dict]
        mask = self._mask(category) if category is not None else None
        for chosen, keep in ((ids, True), (excluded, False)):
            if chosen is None or (not keep and not chosen):
                continue
            member = np.isin(np.asarray(self.ids, dtype=str), np.asarray(list(chosen), dtype=str))
            part = (member if keep else ~member).astype(np.float32)
            mask = part if mask is None else mask * part
        if not terms or (mask is not None and not mask.any()):
            return []
        k = min(top_k, len(self))
        docs, scores = self._bm25.retrieve([terms], k=k, show_progress=False, weight_mask=mask)
        return [
            (str(self.ids[int(i)]), float(s) * (K1 + 1))
            for i, s in zip(docs[0], scores[0], strict=True)
            if s > 0 and np.isfinite(s)
        ]

    def _mask(self, category: str) -> np.ndarray:
        if category not in self._masks:  # a few categories per collection: one mask each, made once
            self._masks[category] = (self._categories == category).astype(np.float32)
        return self._masks[category]

    def save(self, folder: str | Path) -> str:
        """
        Write the index into a folder of a new name, atomically: a reader sees the whole index or none.

        :param folder: Where (the knowledge index file's folder).
        :returns: The index folder's name, to be recorded in the index file.
        :raises ValueError: If the index holds no chunks.
        """
        if not len(self):
            msg = "a BM25 index file needs at least one chunk"
            raise ValueError(msg)
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        name = f"{BM25_PREFIX}{uuid.uuid4().hex[:12]}"
        partial = folder / f".{name}.partial"
        self._bm25.save(str(partial), show_progress=False)
        columns = [("id", f"<U{_longest(self.ids)}"), ("category", f"<U{_longest(self._categories)}")]
        chunks = np.zeros(len(self), dtype=columns)
        chunks["id"], chunks["category"] = list(self.ids), list(self._categories)
        np.save(partial / _CHUNKS_FILE, chunks, allow_pickle=False)
        os.replace(partial, folder / name)
        return name

    @classmethod
    def open(cls, folder: str | Path, name: str) -> Bm25ChunkIndex:
        """
        Open an index the index run wrote (memory-mapped: a search reads its terms' postings from disk).

        :param folder: The knowledge index file's folder.
        :param name: The index folder's name as `save` returned it (the index file records it).
        :returns: The index.
        :raises ValueError: If the name is not a BM25 index's name in that folder, or the folder does not hold a
            readable one (missing, damaged, or its parts disagree).
        """
        path = Path(folder) / name
        fix = "run `lookup-knowledge index` to write it again"
        if Path(name).name != name or not name.startswith(BM25_PREFIX) or name.endswith(".partial"):
            msg = f"{name!r} is not the name of a BM25 index ({BM25_PREFIX}<id> in {folder})"
            raise ValueError(msg)
        if path.is_symlink() or not path.is_dir():
            msg = f"{path} is not a folder of the data folder holding a BM25 index; {fix}"
            raise ValueError(msg)
        import bm25s

        try:
            bm25 = bm25s.BM25.load(str(path), mmap=True, show_progress=False)
            chunks = np.load(path / _CHUNKS_FILE, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError, KeyError, TypeError, EOFError) as err:
            msg = f"{path} is not a readable BM25 index ({type(err).__name__}: {err}); {fix}"
            raise ValueError(msg) from err
        if chunks.ndim != 1 or set(chunks.dtype.names or ()) != {"id", "category"}:
            msg = f"{path / _CHUNKS_FILE} does not list the index's chunks; {fix}"
            raise ValueError(msg)
        if bm25.scores.get("num_docs") != len(chunks):
            msg = f"{path}: {len(chunks)} chunks listed for an index of {bm25.scores.get('num_docs')}; {fix}"
            raise ValueError(msg)
        return cls(chunks["id"], bm25, chunks["category"])

    @staticmethod
    def remove_others(folder: str | Path, keep: str | None) -> int:
        """
        Delete the BM25 indexes of earlier index runs (a reader that has one open keeps reading it).

        :param folder: The knowledge index file's folder.
        :param keep: The current index's name (None: delete every one); unfinished writes are deleted too.
        :returns: How many were deleted.
        """
        removed = 0
        for path in [*Path(folder).glob(f"{BM25_PREFIX}*"), *Path(folder).glob(f".{BM25_PREFIX}*.partial")]:
            if path.name != keep and path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
                removed += 1
        return removed


def _longest(values: Sequence[str] | np.ndarray) -> int:
    return max((len(str(v)) for v in values), default=1) or 1
