"""Dify's External Knowledge API (`POST /retrieval`) on a `LookupResult`: the request, the records, the errors.

Dify sends `{knowledge_id, query, retrieval_setting: {top_k, score_threshold}, metadata_condition?}` and expects
`{"records": [{content, score, title, metadata}]}`, or `{"error_code": int, "error_msg": str}` with a non-200 status.
This module holds that contract and the mapping onto one lookup; the HTTP side is `pipelines.entrypoints.rest_api`.

- **Records.** One record per evidence block, in the result's order: `content` the chunk, `title` the document
  title, `score` the block's `similarity` (the normalized dense similarity, 0-1, comparable across lookups; the
  block's rank `score` is only comparable within one lookup, so it goes into `metadata` as `rank_score`).
  `metadata` (always an object) carries `source`, `title`, `breadcrumb`, `similarity`, `rank_score`, `category`,
  `doc_id`, `evidence_key`, `keywords`, `entities` and `trace_id`.
- **retrieval_setting.** Blocks whose similarity is below `score_threshold` are dropped, then at most `top_k` are
  kept (the lookup itself returns at most its deduper's `max_blocks`, 6 as shipped).
- **metadata_condition.** Matched literally, in Python, on the returned blocks (never pasted into a Milvus
  expression): fields `category`, `source`, `title`, `breadcrumb`, `doc_id`, `keywords`, `entities` (the last two
  from the document's frontmatter); operators `contains`, `not contains`, `start with`, `end with`, `is`, `is not`,
  `in`, `not in`, `empty`, `not empty`, compared case-insensitively (casefolded). A condition naming several fields
  holds when it holds for any of them (a `not ...` operator: when the positive one holds for none); on a list field
  (`keywords`) a positive operator holds when it holds for any element. Dify's numeric and date operators have
  nothing to compare here: like an unknown field, they are a 400.
- **knowledge_id.** `lookup-knowledge` or the collection's name (`knowledge_chunks` as shipped); anything else is
  Dify's 2001 (404).
- **found=false** is `{"records": []}` (200), as Dify asks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "DEFAULT_KNOWLEDGE_ID",
    "ERROR_CODES",
    "METADATA_FIELDS",
    "OPERATORS",
    "DifyError",
    "MetadataCondition",
    "MetadataFilter",
    "RetrievalRequest",
    "RetrievalResponse",
    "compile_filter",
    "records",
]

#: The knowledge id Dify's "External Knowledge ID" is set to (the collection's name works too).
DEFAULT_KNOWLEDGE_ID = "lookup-knowledge"

#: `error_code` → (HTTP status, what it means). Dify documents 1001, 1002 and 2001; the others are ours, each the
#: HTTP status followed by a 1.
ERROR_CODES: dict[int, tuple[int, str]] = {
    1001: (403, "Invalid Authorization header format. Expected 'Bearer <api-key>' format."),
    1002: (403, "Authorization failed"),
    2001: (404, "The knowledge does not exist"),
    4001: (
        400,
        "invalid request: not JSON, not an object, not the documented shape, or an unsupported metadata_condition",
    ),
    4031: (403, "Origin header not served (DNS-rebinding protection)"),
    4151: (415, "Content-Type is not application/json"),
    4131: (413, "request body too large"),
    4211: (421, "Host header not served (DNS-rebinding protection)"),
    4221: (422, "the lookup rejected the query (empty, control characters only, over 2,000 characters)"),
    5001: (500, "internal error"),
    5031: (503, "the lookup failed: knowledge store unreachable or nothing indexed"),
}

#: The metadata fields a condition may name: where each comes from.
METADATA_FIELDS: dict[str, str] = {
    "category": "the document's category (frontmatter)",
    "source": "the document's path in the knowledge folder",
    "title": "the document's title",
    "breadcrumb": "the section's headings",
    "doc_id": "the document's id",
    "keywords": "the document's keywords (frontmatter, a list)",
    "entities": "the document's entities (frontmatter, a list)",
}

_LIST_FIELDS = ("keywords", "entities")


def _contains(actual: str, value: str) -> bool:
    return value in actual


def _starts(actual: str, value: str) -> bool:
    return actual.startswith(value)


def _ends(actual: str, value: str) -> bool:
    return actual.endswith(value)


def _equals(actual: str, value: str) -> bool:
    return actual == value


#: Operator → (positive operator it negates or None, the test on one casefolded string, what its value must be).
OPERATORS: dict[str, tuple[str | None, Callable[[str, str], bool] | None, Literal["text", "list", "none"]]] = {
    "contains": (None, _contains, "text"),
    "start with": (None, _starts, "text"),
    "end with": (None, _ends, "text"),
    "is": (None, _equals, "text"),
    "in": (None, _equals, "list"),
    "empty": (None, None, "none"),
    "not contains": ("contains", None, "text"),
    "is not": ("is", None, "text"),
    "not in": ("in", None, "list"),
    "not empty": ("empty", None, "none"),
}


class _Request(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")


class RetrievalSetting(_Request):
    """How many records, and how similar."""

    top_k: int = Field(ge=1, description="Most records to return.")
    score_threshold: float = Field(ge=0.0, le=1.0, description="Lowest `score` (similarity, 0-1) returned.")


class Condition(_Request):
    """One metadata condition."""

    name: str | list[str] = Field(description="The metadata field, or fields (the condition holds for any).")
    comparison_operator: str = Field(description=f"One of {', '.join(OPERATORS)}.")
    # checked by `compile_filter`, which names what each operator takes
    value: Any = Field(default=None, description="Text (a list for `in`/`not in`); not needed for `empty`/`not empty`.")


class MetadataCondition(_Request):
    """Dify's metadata filter."""

    logical_operator: Literal["and", "or"] = "and"
    conditions: list[Condition] = Field(default_factory=list)


class RetrievalRequest(_Request):
    """The body Dify posts to `/retrieval` (other fields are ignored)."""

    knowledge_id: str = Field(description=f"`{DEFAULT_KNOWLEDGE_ID}` or the collection's name.")
    query: str = Field(description="The user's query (1 to 2,000 characters).")
    retrieval_setting: RetrievalSetting
    metadata_condition: MetadataCondition | None = None


class Record(BaseModel):
    """One record: an evidence block."""

    content: str
    score: float = Field(description="The block's similarity, 0-1.")
    title: str
    metadata: dict[str, Any]


class RetrievalResponse(BaseModel):
    """What `/retrieval` answers with 200."""

    records: list[Record]


class DifyError(BaseModel):
    """An error, in Dify's shape."""

    error_code: int
    error_msg: str


@dataclass(frozen=True)
class _Test:
    fields: tuple[str, ...]
    negate: bool
    test: Callable[[str, str], bool] | None  # None: `empty`
    values: tuple[str, ...]

    def holds(self, metadata: Mapping[str, Any]) -> bool:
        hit = any(self._holds_on(metadata.get(field)) for field in self.fields)
        return hit != self.negate

    def _holds_on(self, actual: Any) -> bool:
        items = [str(v).casefold() for v in actual] if isinstance(actual, list) else [str(actual or "").casefold()]
        if self.test is None:
            return not any(items)
        test = self.test
        return any(test(item, value) for item in items for value in self.values)


@dataclass(frozen=True)
class MetadataFilter:
    """A compiled `metadata_condition`: `matches(metadata)` says whether a record is kept."""

    tests: tuple[_Test, ...] = ()
    any_of: bool = False

    def matches(self, metadata: Mapping[str, Any]) -> bool:
        """
        Whether a record's metadata satisfies the condition.

        :param metadata: The record's `metadata`.
        :returns: True when kept (always, without conditions).
        """
        if not self.tests:
            return True
        results = (t.holds(metadata) for t in self.tests)
        return any(results) if self.any_of else all(results)


def _compile_condition(index: int, condition: Condition) -> _Test:
    where = f"metadata_condition.conditions[{index}]"
    names = [condition.name] if isinstance(condition.name, str) else list(condition.name)
    unknown = [n for n in names if n not in METADATA_FIELDS]
    if not names or unknown:
        msg = (
            f"{where}.name {unknown or names!r}: filter on {', '.join(METADATA_FIELDS)} "
            "(the metadata of this knowledge base)"
        )
        raise ValueError(msg)
    operator = condition.comparison_operator
    if operator not in OPERATORS:
        msg = (
            f"{where}.comparison_operator {operator!r} is not supported: this knowledge base's metadata are text, use "
            f"one of {', '.join(repr(o) for o in OPERATORS)}"
        )
        raise ValueError(msg)
    positive, test, kind = OPERATORS[operator]
    if positive is not None:
        _, test, kind = OPERATORS[positive]
    return _Test(tuple(names), positive is not None, test, _values(where, operator, kind, condition.value))


def _values(where: str, operator: str, kind: str, value: Any) -> tuple[str, ...]:
    if kind == "none":
        return ()
    if kind == "text" and isinstance(value, str) and value:
        return (value.casefold(),)
    if kind == "list" and isinstance(value, str) and value:
        return (value.casefold(),)
    if kind == "list" and isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return tuple(v.casefold() for v in value)
    wanted = "a non-empty string" if kind == "text" else "a non-empty list of strings"
    msg = f"{where}.value must be {wanted} for {operator!r}, not {value!r}"
    raise ValueError(msg)


def compile_filter(condition: MetadataCondition | None) -> MetadataFilter:
    """
    Check a `metadata_condition` and compile it, before any lookup runs.

    :param condition: From the request (None: no filter).
    :returns: The filter.
    :raises ValueError: For an unknown field, an unsupported operator or a value of the wrong kind, naming what is
        supported.
    """
    if condition is None:
        return MetadataFilter()
    tests = tuple(_compile_condition(i, c) for i, c in enumerate(condition.conditions))
    return MetadataFilter(tests, any_of=condition.logical_operator == "or")


def _record(block: Mapping[str, Any], trace_id: Any, documents: Mapping[str, Any]) -> dict[str, Any]:
    document = documents.get(block.get("source", ""))
    metadata = {
        "source": block.get("source", ""),
        "title": block.get("title", ""),
        "breadcrumb": block.get("breadcrumb", ""),
        "similarity": block.get("similarity"),
        "rank_score": block.get("score"),
        "category": block.get("category", ""),
        "doc_id": block.get("docId", ""),
        "evidence_key": block.get("evidenceKey", ""),
        "keywords": list(getattr(document, "keywords", None) or []),
        "entities": list(getattr(document, "entities", None) or []),
        "trace_id": trace_id,
    }
    return {
        "content": block.get("content", ""),
        "score": block.get("similarity"),
        "title": block.get("title", ""),
        "metadata": metadata,
    }


def records(
    result: Mapping[str, Any],
    setting: RetrievalSetting,
    metadata_filter: MetadataFilter,
    documents: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """
    The records of one lookup: its evidence blocks above `score_threshold` that match the filter, at most `top_k`.

    :param result: The `LookupResult` JSON (a found=false result has no blocks, so no records).
    :param setting: The request's `retrieval_setting`.
    :param metadata_filter: From `compile_filter`.
    :param documents: Indexed documents by source (their `keywords` and `entities`), e.g. `KnowledgeIndex.by_source()`.
    :returns: The records, in the result's order.
    """
    blocks: Iterable[Mapping[str, Any]] = result.get("evidenceBlocks") or []
    kept = []
    for block in blocks:
        record = _record(block, result.get("traceId"), documents or {})
        if float(record["score"] or 0.0) < setting.score_threshold or not metadata_filter.matches(record["metadata"]):
            continue
        kept.append(record)
        if len(kept) == setting.top_k:
            break
    return kept
