"""BM25 terms for English and Chinese, their statistics, and the in-process BM25 index.

English is lowercased, split into words, stop words dropped and Snowball-stemmed (PyStemmer); Chinese runs are
split into overlapping character bigrams (measured better than jieba words on Chinese legal text). `tokenize` makes
the terms stored in the collection for BM25 inside Milvus (`lexical_text`) and searched there; `Bm25ChunkIndex` is
the in-process fallback for a Milvus without full-text search.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence

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


class Bm25ChunkIndex:
    """
    A BM25 index over chunks, searched by query text.

    ### Usage example

    ```python
    index = Bm25ChunkIndex(["c1", "c2"], ["disk full on /var", "退款七个工作日内到账"])
    print(index.search("退款多久到账", top_k=1))  # [("c2", 1.23)]
    ```
    """

    def __init__(self, ids: Sequence[str], texts: Sequence[str]) -> None:
        """
        Build the index.

        :param ids: Chunk ids.
        :param texts: Chunk texts, aligned with `ids`.
        :raises ValueError: If the two lists differ in length.
        """
        if len(ids) != len(texts):
            msg = f"ids ({len(ids)}) and texts ({len(texts)}) must have the same length"
            raise ValueError(msg)
        import bm25s  # only the in-process fallback needs it (a collection with Milvus' own BM25 never does)

        self.ids = list(ids)
        self._bm25 = bm25s.BM25(k1=K1, b=B)
        corpus = [tokenize(t) or ["\x00"] for t in texts]
        self.statistics = TermStatistics(corpus)
        if self.ids:
            self._bm25.index(corpus, show_progress=False)

    def __len__(self) -> int:
        return len(self.ids)

    def search(self, query: str, top_k: int) -> list[tuple[str, float]]:
        """
        Return the best chunks for a query.

        :param query: Query text.
        :param top_k: Most results.
        :returns: `(chunk_id, bm25_score)` pairs, best first, positive scores only, on Milvus' scale (bm25s' score
            times k1 + 1), so both BM25 paths give the same numbers.
        """
        terms = tokenize(query)
        if not self.ids or not terms:
            return []
        k = min(top_k, len(self.ids))
        docs, scores = self._bm25.retrieve([terms], k=k, show_progress=False)
        return [
            (self.ids[int(i)], float(s) * (K1 + 1))
            for i, s in zip(docs[0], scores[0], strict=True)
            if s > 0 and np.isfinite(s)
        ]
