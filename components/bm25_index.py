"""In-process BM25 over chunk texts, for English and Chinese.

English is lowercased, split into words, stop words dropped and Snowball-stemmed (PyStemmer); Chinese runs are
split into overlapping character bigrams (measured better than jieba words on Chinese legal text). `tokenize` also
makes the terms stored in the collection for BM25 inside Milvus; `Bm25ChunkIndex` is the in-process fallback for a
Milvus without full-text search.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import bm25s
import numpy as np
import Stemmer

from components.text_matching import CJK

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
        self.ids = list(ids)
        self._bm25 = bm25s.BM25()
        if self.ids:
            self._bm25.index([tokenize(t) or ["\x00"] for t in texts], show_progress=False)

    def __len__(self) -> int:
        return len(self.ids)

    def search(self, query: str, top_k: int) -> list[tuple[str, float]]:
        """
        Return the best chunks for a query.

        :param query: Query text.
        :param top_k: Most results.
        :returns: `(chunk_id, bm25_score)` pairs, best first, positive scores only.
        """
        terms = tokenize(query)
        if not self.ids or not terms:
            return []
        k = min(top_k, len(self.ids))
        docs, scores = self._bm25.retrieve([terms], k=k, show_progress=False)
        return [
            (self.ids[int(i)], float(s)) for i, s in zip(docs[0], scores[0], strict=True) if s > 0 and np.isfinite(s)
        ]
