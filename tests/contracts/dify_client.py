"""Requests as Dify's own client code builds them, to replay against `POST /retrieval`.

Written after langgenius/dify (`api/core/rag/entities/metadata_entities.py`, and
`ExternalDatasetService.fetch_external_knowledge_retrieval` in `api/services/external_knowledge_service.py`), read on
2026-12-05: Dify keeps an app's retrieval settings in a dict whose `top_k` may be missing (then it sends null), sends
`score_threshold` 0.0 unless the threshold is switched on, and dumps its `MetadataCondition` model, whose
`logical_operator` and `conditions` may be None, whose condition `name` is one string and whose `value` is a string, a
list, a number or None. The models below have the same fields, types and defaults, so `model_dump()` gives what Dify
sends; nothing of Dify's code is copied.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel

ComparisonOperator = Literal[
    "contains",
    "not contains",
    "start with",
    "end with",
    "is",
    "is not",
    "empty",
    "not empty",
    "in",
    "not in",
    "=",
    "≠",
    ">",
    "<",
    "≥",
    "≤",
    "before",
    "after",
]


class DifyCondition(BaseModel):
    """One condition, as Dify's model has it."""

    name: str
    comparison_operator: ComparisonOperator
    value: str | Sequence[str] | Sequence[int] | Sequence[float] | int | float | None = None


class DifyMetadataCondition(BaseModel):
    """The metadata filter, as Dify's model has it (both fields may be None)."""

    logical_operator: Literal["and", "or"] | None = "and"
    conditions: list[DifyCondition] | None = None


def dify_request(
    query: str,
    knowledge_id: str = "lookup-knowledge",
    retrieval: dict[str, Any] | None = None,
    metadata_condition: DifyMetadataCondition | None = None,
) -> dict[str, Any]:
    """
    The JSON body Dify posts for one retrieval.

    :param query: The user's query.
    :param knowledge_id: The External Knowledge ID the app was connected with.
    :param retrieval: The app's external retrieval settings (`top_k`, `score_threshold_enabled`, `score_threshold`),
        any of them missing as Dify allows.
    :param metadata_condition: The app's metadata filter, or None.
    :returns: The body.
    """
    settings = retrieval or {}
    enabled = settings.get("score_threshold_enabled") or False
    return {
        "retrieval_setting": {
            "top_k": settings.get("top_k"),
            "score_threshold": settings.get("score_threshold", 0.0) if enabled else 0.0,
        },
        "query": query,
        "knowledge_id": knowledge_id,
        "metadata_condition": metadata_condition.model_dump() if metadata_condition else None,
    }
