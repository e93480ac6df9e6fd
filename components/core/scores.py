"""One similarity scale for every metric and path, and the identities of a chunk and of its document."""

from __future__ import annotations

from typing import Any

from haystack import Document

#: the candidate meta key the retriever sets: whether the candidate's similarity reaches its evidence threshold (the
#: joiner after the rankers drops those that do not: ranking still sees every candidate an attempt found)
USABLE_KEY = "usable"


def normalized_similarity(raw: float, metric_type: str) -> float:
    """
    Map a raw Milvus score to one similarity scale in [0, 1], the same for every metric and path.

    For unit vectors, Milvus' L2 value is the squared distance `2 - 2cos`, so `1 - d/4` equals `(1 + cos) / 2`,
    the mapping milvus-haystack uses for COSINE and IP: one threshold means the same thing everywhere.

    :param raw: The raw score.
    :param metric_type: `L2`, `COSINE` or `IP`.
    :returns: The similarity, clipped to [0, 1].
    """
    value = 1 - raw / 4 if metric_type == "L2" else (raw + 1) / 2
    return min(1.0, max(0.0, value))


def raw_from_normalized(similarity: float, metric_type: str) -> float:
    """
    Invert milvus-haystack's score mapping to recover the raw metric value.

    :param similarity: A score mapped by milvus-haystack.
    :param metric_type: `L2`, `COSINE` or `IP`.
    :returns: The raw value.
    """
    return 4 * (1 - similarity) if metric_type == "L2" else 2 * similarity - 1


def similarity_of(doc: Document) -> float:
    """
    Return a candidate's normalized similarity, whatever was added to its score since (BM25 bonus, rule boosts).

    :param doc: A retrieved candidate, or a reranked one.
    :returns: `meta.similarity`, else the reranker's `meta.base_score`, else the score.
    """
    return float(doc.meta.get("similarity", doc.meta.get("base_score", doc.score or 0.0)))


def evidence_key(meta: dict[str, Any], fallback: str) -> str:
    """
    Return the chunk-level identity of a candidate: `source#chunk_index`.

    :param meta: The chunk metadata.
    :param fallback: Used when the chunk has no source (a collection written by another tool).
    :returns: The key.
    """
    source, index = meta.get("source"), meta.get("chunk_index")
    if source is None:
        return str(fallback)
    return f"{source}#{index}" if index is not None else str(source)


def document_key(meta: dict[str, Any], fallback: str) -> str:
    """
    Return the identity of the document a chunk belongs to: its `doc_id`, else its `source`.

    :param meta: The chunk metadata.
    :param fallback: Used when the chunk names neither (a collection written by another tool), e.g. its id.
    :returns: The key.
    """
    return str(meta.get("doc_id") or meta.get("source") or fallback)


def boost_reasons(meta: dict[str, Any]) -> list[str]:
    """
    Explain the rule boosts of a reranked candidate, e.g. `keyword:disk full (+0.02)`.

    :param meta: The candidate's metadata (the reranker's `boosts`).
    :returns: One reason per boost, in the reranker's order.
    """
    return [f"{b['signal']}:{b['value']} (+{b['weight']})" for b in meta.get("boosts", [])]
