"""Dify's External Knowledge API (`POST /retrieval`) on a `LookupResult`: the request, the records, the errors.

Dify sends `{knowledge_id, query, retrieval_setting: {top_k, score_threshold}, metadata_condition?}` and expects
`{"records": [{content, score, title, metadata}]}`, or `{"error_code": int, "error_msg": str}` with a non-200 status.
Dify turns any non-200 answer into an empty result without showing an error, so every request shape Dify's own client
code builds (langgenius/dify `api/services/external_knowledge_service.py`, `core/rag/entities/metadata_entities.py`) is
accepted as Dify means it: `top_k: null` (Dify's default when the app sets none), `metadata_condition.conditions:
null` and `logical_operator: null` (no condition; `and`), a condition `name` as a string or a list, an `in` value as
a comma-separated string (Dify splits it so itself), numbers and timestamps as values.

- **Records.** One record per evidence block, in the result's order: `content` the chunk, `title` the document
  title, `score` the block's similarity made non-increasing down the list (each record's score is at most the one
  above it, since Dify re-sorts records by `score`: a higher-ranked record never has a lower score, and a
  `score_threshold` can only cut the list's tail). `metadata` (always an object) carries `document_id` (Dify's
  identity of a document: our `doc_id`), `source`, `title`, `breadcrumb`, `similarity` (the block's own), `rank_score`,
  `category`, `doc_id`, `evidence_key`, `citation`, `keywords`, `entities` and `trace_id`.
- **retrieval_setting.** Records whose `score` is below `score_threshold` are dropped, then at most `top_k` are kept
  (`DEFAULT_TOP_K` when Dify sends none; the lookup itself returns at most its deduper's `max_blocks`).
- **metadata_condition.** Fields: `category`, `source`, `title`, `breadcrumb`, `doc_id`, `document_id`, `keywords`,
  `tags`, `entities`, the fields the indexing declared filterable, and Dify's built-in `document_name` (the file name
  or the title) and `upload_date`/`last_update_date` (the page's `updated` day). Operators: text ones (`contains`,
  `not contains`, `start with`, `end with`, `is`, `is not`, `in`, `not in`, `empty`, `not empty`, casefolded), number
  ones (`=`, `≠`, `>`, `<`, `≥`, `≤`, on declared fields holding numbers) and time ones (`before`, `after`, on the
  update day; a value in epoch seconds or ISO 8601). A condition naming several fields holds when it holds for any
  of them (a `not ...` operator: when the positive one holds for none); on a list field a positive operator holds
  when it holds for any element. Conditions on document fields are resolved against the knowledge index first, and
  the lookup runs strictly within the matching documents (`filters: {"source": [...]}`), so that a match further
  down is found instead of an empty page; every condition is then also checked on each record. Anything else (an
  unknown field, `uploader`, an operator on a field it cannot compare) is a 400 naming what is supported, before
  any lookup; never pasted into a Milvus expression.
- **knowledge_id.** `lookup-knowledge` or the collection's name (`knowledge_chunks` as shipped); anything else is
  Dify's 2001 (404).
- **found=false**, or conditions that match no document, is `{"records": []}` (200), as Dify asks.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from components.core.frontmatter import day_of

__all__ = [
    "DEFAULT_KNOWLEDGE_ID",
    "DEFAULT_TOP_K",
    "ERROR_CODES",
    "METADATA_FIELDS",
    "OPERATORS",
    "DifyError",
    "MetadataCondition",
    "MetadataFilter",
    "RetrievalRequest",
    "RetrievalResponse",
    "compile_filter",
    "document_metadata",
    "matching_sources",
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

#: The metadata fields a condition may name (besides the declared filterable fields): where each comes from.
METADATA_FIELDS: dict[str, str] = {
    "category": "the document's category (frontmatter)",
    "source": "the document's path in the knowledge folder",
    "title": "the document's title",
    "breadcrumb": "the section's headings (of the record: checked on the records only)",
    "doc_id": "the document's id",
    "document_id": "the document's id (Dify's name for it)",
    "keywords": "the document's keywords and tags (frontmatter, a list)",
    "tags": "the same as keywords",
    "entities": "the document's entities (frontmatter, a list)",
    "document_name": "Dify's built-in field: the document's file name, or its title",
    "upload_date": "Dify's built-in field: the day the page says it was updated (frontmatter `updated`, ...)",
    "last_update_date": "the same as upload_date",
}
#: the fields only a record has: a condition on one is checked on the records, never resolved to documents
_RECORD_FIELDS = ("breadcrumb",)
#: the fields holding a day
_DAY_FIELDS = ("upload_date", "last_update_date")
#: filter keys of a lookup that are no metadata field
_LOOKUP_ONLY_KEYS = {"source_prefix", "updated_after"}
#: records when Dify sends `top_k: null`
DEFAULT_TOP_K = 6


def _contains(actual: str, value: str) -> bool:
    return value in actual


def _starts(actual: str, value: str) -> bool:
    return actual.startswith(value)


def _ends(actual: str, value: str) -> bool:
    return actual.endswith(value)


def _equals(actual: str, value: str) -> bool:
    return actual == value


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _compare(op: Callable[[float, float], bool]) -> Callable[[str, str], bool]:
    def test(actual: str, value: str) -> bool:
        left, right = _number(actual), _number(value)
        return left is not None and right is not None and op(left, right)

    return test


def _before(actual: str, value: str) -> bool:
    return bool(actual) and actual < value


def _after(actual: str, value: str) -> bool:
    return bool(actual) and actual > value


Kind = Literal["text", "list", "none", "number", "day"]

#: Operator → (positive operator it negates or None, the test on one casefolded string, what its value must be).
OPERATORS: dict[str, tuple[str | None, Callable[[str, str], bool] | None, Kind]] = {
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
    "=": (None, _compare(lambda a, b: a == b), "number"),
    "≠": ("=", None, "number"),
    ">": (None, _compare(lambda a, b: a > b), "number"),
    "<": (None, _compare(lambda a, b: a < b), "number"),
    "≥": (None, _compare(lambda a, b: a >= b), "number"),
    "≤": (None, _compare(lambda a, b: a <= b), "number"),
    "before": (None, _before, "day"),
    "after": (None, _after, "day"),
}


class _Request(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")


class RetrievalSetting(_Request):
    """How many records, and how similar."""

    top_k: int | None = Field(default=None, ge=1, description=f"Most records to return (null: {DEFAULT_TOP_K}).")
    score_threshold: float | None = Field(
        default=None, ge=0.0, le=1.0, description="Lowest `score` (0-1) returned (null: no threshold)."
    )


class Condition(_Request):
    """One metadata condition."""

    name: str | list[str] = Field(description="The metadata field, or fields (the condition holds for any).")
    comparison_operator: str = Field(description=f"One of {', '.join(OPERATORS)}.")
    # checked by `compile_filter`, which names what each operator takes
    value: Any = Field(default=None, description="Text, a list or a comma-separated string for `in`, a number, a time.")


class MetadataCondition(_Request):
    """Dify's metadata filter (Dify sends `logical_operator` and `conditions` as null when the app sets none)."""

    logical_operator: Literal["and", "or"] | None = "and"
    conditions: list[Condition] | None = None


class RetrievalRequest(_Request):
    """The body Dify posts to `/retrieval` (other fields are ignored)."""

    knowledge_id: str = Field(description=f"`{DEFAULT_KNOWLEDGE_ID}` or the collection's name.")
    query: str = Field(description="The user's query (1 to 2,000 characters).")
    retrieval_setting: RetrievalSetting
    metadata_condition: MetadataCondition | None = None


class Record(BaseModel):
    """One record: an evidence block."""

    content: str
    score: float = Field(description="The block's similarity, made non-increasing down the records (0-1).")
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
    """A compiled `metadata_condition`: `matches(metadata)` says whether a record (or a document) is kept."""

    tests: tuple[_Test, ...] = ()
    any_of: bool = False

    def matches(self, metadata: Mapping[str, Any]) -> bool:
        """
        Whether metadata satisfies the condition.

        :param metadata: A record's `metadata`, or a document's (`document_metadata`).
        :returns: True when kept (always, without conditions).
        """
        if not self.tests:
            return True
        results = (t.holds(metadata) for t in self.tests)
        return any(results) if self.any_of else all(results)

    @property
    def on_documents(self) -> bool:
        """Whether it has conditions and they name document fields only (so documents can be chosen up front)."""
        return bool(self.tests) and not any(f in _RECORD_FIELDS for t in self.tests for f in t.fields)


def document_metadata(document: Any) -> dict[str, Any]:
    """
    A document's fields as conditions name them.

    :param document: An `IndexedDocument` (or anything with its attributes).
    :returns: The metadata: `category`, `source`, `title`, `doc_id`, `document_id`, `keywords`, `tags`, `entities`,
        `document_name`, `upload_date`, `last_update_date` and the declared fields.
    """
    source = str(getattr(document, "source", "") or "")
    title = str(getattr(document, "title", "") or "")
    doc_id = str(getattr(document, "doc_id", "") or source)
    keywords = list(getattr(document, "keywords", None) or [])
    updated = str(getattr(document, "updated", "") or "")
    return {
        **{k: list(v) for k, v in (getattr(document, "fields", None) or {}).items()},
        "category": str(getattr(document, "category", "") or ""),
        "source": source,
        "title": title,
        "doc_id": doc_id,
        "document_id": doc_id,
        "keywords": keywords,
        "tags": keywords,
        "entities": list(getattr(document, "entities", None) or []),
        "document_name": [name for name in (source.rsplit("/", 1)[-1], title) if name],
        "upload_date": updated,
        "last_update_date": updated,
    }


def _compile_condition(index: int, condition: Condition, declared: Collection[str]) -> _Test:
    where = f"metadata_condition.conditions[{index}]"
    names = [condition.name] if isinstance(condition.name, str) else list(condition.name)
    known = [*METADATA_FIELDS, *sorted(declared)]
    unknown = [n for n in names if n not in known]
    if not names or unknown:
        msg = f"{where}.name {unknown or names!r}: filter on {', '.join(known)} (the metadata of this knowledge base)"
        raise ValueError(msg)
    operator = condition.comparison_operator
    if operator not in OPERATORS:
        msg = f"{where}.comparison_operator {operator!r} is not supported: use one of {', '.join(map(repr, OPERATORS))}"
        raise ValueError(msg)
    positive, test, kind = OPERATORS[operator]
    if positive is not None:
        _, test, kind = OPERATORS[positive]
    _check_fields(where, operator, kind, names, declared)
    return _Test(tuple(names), positive is not None, test, _values(where, operator, kind, condition.value))


def _check_fields(where: str, operator: str, kind: str, names: list[str], declared: Collection[str]) -> None:
    """Number operators compare declared fields, time operators the update day; refuse them on anything else."""
    if kind == "number" and (wrong := [n for n in names if n not in declared]):
        msg = f"{where}: {operator!r} compares numbers, and {wrong} hold text; use a text operator such as 'is'"
        raise ValueError(msg)
    if kind == "day" and (wrong := [n for n in names if n not in _DAY_FIELDS]):
        msg = f"{where}: {operator!r} compares days, which only {', '.join(_DAY_FIELDS)} hold, not {wrong}"
        raise ValueError(msg)
    if kind not in ("day", "none") and any(n in _DAY_FIELDS for n in names):
        msg = f"{where}: {', '.join(_DAY_FIELDS)} are days: compare them with 'before' or 'after'"
        raise ValueError(msg)


def _day(value: Any) -> str:
    """A time value as a day: epoch seconds (or milliseconds) or ISO 8601."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = value / 1000 if value > 1e11 else value
        return datetime.fromtimestamp(seconds, UTC).date().isoformat()
    return day_of(value)


def _values(where: str, operator: str, kind: str, value: Any) -> tuple[str, ...]:
    if kind == "none":
        return ()
    if kind == "day":
        if day := _day(value):
            return (day,)
        msg = f"{where}.value must be a time (epoch seconds or ISO 8601) for {operator!r}, not {value!r}"
        raise ValueError(msg)
    if kind == "number":
        if isinstance(value, int | float | str) and not isinstance(value, bool) and _number(str(value)) is not None:
            return (str(value),)
        msg = f"{where}.value must be a number for {operator!r}, not {value!r}"
        raise ValueError(msg)
    if kind == "text" and isinstance(value, str) and value:
        return (value.casefold(),)
    if kind == "list" and isinstance(value, str) and value:
        # Dify splits such a string itself: "a.md,b.md" means either
        return tuple(part.strip().casefold() for part in value.split(",") if part.strip())
    if kind == "list" and isinstance(value, list) and value and all(isinstance(v, str | int | float) for v in value):
        return tuple(str(v).casefold() for v in value)
    wanted = "a non-empty string" if kind == "text" else "a non-empty list of strings (or a comma-separated string)"
    msg = f"{where}.value must be {wanted} for {operator!r}, not {value!r}"
    raise ValueError(msg)


def compile_filter(condition: MetadataCondition | None, declared: Collection[str] = ()) -> MetadataFilter:
    """
    Check a `metadata_condition` and compile it, before any lookup runs.

    :param condition: From the request (None, or no conditions: no filter).
    :param declared: The fields the indexing declared filterable (`KnowledgeService.filter_keys`).
    :returns: The filter.
    :raises ValueError: For an unknown field, an unsupported operator or a value of the wrong kind, naming what is
        supported.
    """
    if condition is None or not condition.conditions:
        return MetadataFilter()
    # the service's filter keys include the built-in ones: only the others are fields a page declares
    own = set(declared) - set(METADATA_FIELDS) - _LOOKUP_ONLY_KEYS
    tests = tuple(_compile_condition(i, c, own) for i, c in enumerate(condition.conditions))
    return MetadataFilter(tests, any_of=condition.logical_operator == "or")


def matching_sources(metadata_filter: MetadataFilter, documents: Mapping[str, Any]) -> list[str]:
    """
    The documents a filter on document fields keeps.

    :param metadata_filter: From `compile_filter` (`on_documents`).
    :param documents: Indexed documents by source (`KnowledgeService.documents`).
    :returns: Their sources, in the index's order.
    """
    return [source for source, doc in documents.items() if metadata_filter.matches(document_metadata(doc))]


def _record(block: Mapping[str, Any], trace_id: Any, documents: Mapping[str, Any], score: float) -> dict[str, Any]:
    document = documents.get(block.get("source", ""))
    known = document_metadata(document) if document is not None else {}
    doc_id = block.get("docId") or known.get("doc_id") or block.get("source", "")
    metadata = {
        **known,
        "document_id": doc_id,
        "source": block.get("source", ""),
        "title": block.get("title", ""),
        "breadcrumb": block.get("breadcrumb", ""),
        "similarity": block.get("similarity"),
        "rank_score": block.get("score"),
        "category": block.get("category", ""),
        "doc_id": doc_id,
        "evidence_key": block.get("evidenceKey", ""),
        "citation": block.get("citation", ""),
        "trace_id": trace_id,
    }
    return {"content": block.get("content", ""), "score": score, "title": block.get("title", ""), "metadata": metadata}


def records(
    result: Mapping[str, Any],
    setting: RetrievalSetting,
    metadata_filter: MetadataFilter,
    documents: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """
    The records of one lookup: its evidence blocks that match the filter and reach `score_threshold`, at most `top_k`.

    :param result: The `LookupResult` JSON (a found=false result has no blocks, so no records).
    :param setting: The request's `retrieval_setting`.
    :param metadata_filter: From `compile_filter`.
    :param documents: Indexed documents by source, e.g. `KnowledgeIndex.by_source()`.
    :returns: The records, in the result's order, their scores non-increasing.
    """
    blocks: Iterable[Mapping[str, Any]] = result.get("evidenceBlocks") or []
    threshold = setting.score_threshold or 0.0
    top_k = setting.top_k or DEFAULT_TOP_K
    kept: list[dict[str, Any]] = []
    ceiling = 1.0
    for block in blocks:
        # Dify orders records by score: each is capped by the one above, so our order is Dify's
        ceiling = min(ceiling, float(block.get("similarity") or 0.0))
        record = _record(block, result.get("traceId"), documents or {}, round(ceiling, 4))
        if record["score"] < threshold:
            break  # the rest score no higher
        if metadata_filter.matches(record["metadata"]):
            kept.append(record)
        if len(kept) == top_k:
            break
    return kept
