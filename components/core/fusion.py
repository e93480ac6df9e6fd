"""Hybrid fusion: a candidate's dense similarity plus a weighted, normalized BM25 score (one formula for all users)."""

from __future__ import annotations

from typing import Any

LEXICAL_NORMALIZATIONS = ("ideal", "best")

#: the meta keys the retriever sets on every candidate of an attempt whose BM25 search found something
BM25_KEY = "bm25"  # the chunk's raw BM25 score for the query (0.0 when BM25 did not find it)
IDEAL_KEY = "lexical_ideal"  # the largest BM25 score the query's terms can reach in the collection
BEST_KEY = "lexical_best"  # the best BM25 score of the attempt's BM25 search


def validate_normalization(lexical_normalization: str) -> None:
    """
    :param lexical_normalization: `ideal` or `best`.
    :raises ValueError: For any other value, naming the accepted ones.
    """
    if lexical_normalization not in LEXICAL_NORMALIZATIONS:
        msg = (
            f"lexical_normalization={lexical_normalization!r} is not supported; "
            f"use one of {list(LEXICAL_NORMALIZATIONS)}"
        )
        raise ValueError(msg)


def lexical_bonus(meta: dict[str, Any], weight: float, normalization: str) -> float | None:
    """
    What BM25 adds to a candidate's similarity: `weight * bm25 / norm`.

    :param meta: The candidate's metadata (`bm25`, `lexical_ideal`, `lexical_best` from the retriever).
    :param weight: The lexical weight (0: nothing is added).
    :param normalization: `ideal` divides by the largest score the query's terms can reach, so the bonus says how
        much of the query the chunk matches; `best` by the best hit's score, so the best lexical hit gets `weight`.
    :returns: The bonus, or None for a candidate without BM25 facts (BM25 off, or it found nothing, or the
        candidate comes from a source that gives no norm).
    """
    norm = meta.get(IDEAL_KEY if normalization == "ideal" else BEST_KEY)
    if BM25_KEY not in meta or norm is None:
        return None
    return weight * float(meta[BM25_KEY]) / float(norm) if norm > 0 else 0.0
