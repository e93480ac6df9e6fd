from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from datetime import date
from typing import Any

from haystack import component, logging

from components.core.access import reader_groups
from components.core.citation import chunk_ids
from components.core.frontmatter import day_of
from components.core.frozen import FrozenList
from components.store.knowledge_index import CachedKnowledgeIndex, IndexedDocument, KnowledgeIndex

logger = logging.getLogger(__name__)

#: the keys every knowledge base can be filtered on (besides the fields its indexing declares filterable)
BUILT_IN_KEYS = ("category", "tags", "keywords", "source", "source_prefix", "updated_after", "status", "access")
#: the store filter of filters that match no document: the retriever searches nothing (never without the filter)
MATCHES_NOTHING: dict[str, Any] = {"field": "id", "operator": "in", "value": []}
#: the statuses whose pages are not evidence unless asked for
DEFAULT_HIDDEN_STATUSES = ["draft", "archived"]
#: the status of a page that sets none
CURRENT = "current"
#: how many existing values a report names per key when a filter matches nothing
AVAILABLE_VALUES = 20
#: the hidden chunk lists kept: one per set of statuses asked for and set of caller groups
_HIDDEN_LISTS = 32


def _wanted(key: str, value: Any) -> list[str]:
    """A filter value as the casefolded strings any of which must match; raises for anything else."""
    items = value if isinstance(value, list) else [value]
    if not items or not all(isinstance(v, str | int | float) and not isinstance(v, bool) for v in items):
        msg = f"filters.{key} must be a string or a non-empty list of strings, not {value!r}"
        raise ValueError(msg)
    wanted = [str(v).strip().casefold() for v in items if str(v).strip()]
    if not wanted:
        msg = f"filters.{key} is empty; give a value, or leave the key out"
        raise ValueError(msg)
    return wanted


def _prefix(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        msg = f"filters.source_prefix must be a non-empty path prefix such as 'runbooks/', not {value!r}"
        raise ValueError(msg)
    return value.strip().removeprefix("./").lstrip("/").casefold()


def _day(value: Any) -> str:
    day = day_of(value)
    if not day:
        msg = f"filters.updated_after must be a date such as '2026-01-31' (ISO 8601), not {value!r}"
        raise ValueError(msg)
    return day


class _Test:
    """One key of the filters: which documents it keeps."""

    def __init__(self, key: str, value: Any) -> None:
        self.key = key
        self.value = value
        if key == "source_prefix":
            self.prefix = _prefix(value)
        elif key == "updated_after":
            self.day = _day(value)
        else:
            self.values = set(_wanted(key, value))

    def keeps(self, doc: IndexedDocument) -> bool:
        if self.key == "source_prefix":
            return doc.source.casefold().startswith(self.prefix)
        if self.key == "updated_after":
            return bool(doc.updated) and doc.updated >= self.day
        return any(v.casefold() in self.values for v in _values_of(doc, self.key))


def _values_of(doc: IndexedDocument, key: str) -> list[str]:
    if key == "source":
        return [doc.source]
    if key == "category":
        return [doc.category] if doc.category else []
    if key in ("tags", "keywords"):
        return doc.keywords
    if key == "status":
        return [doc.status or CURRENT]
    if key == "access":
        return doc.access
    return doc.fields.get(key, [])


def _top(values: Iterable[str]) -> list[dict[str, Any]]:
    counts = Counter(v for v in values if v)
    return [{"value": v, "documents": n} for v, n in counts.most_common(AVAILABLE_VALUES)]


def available_values(index: KnowledgeIndex, key: str) -> list[dict[str, Any]]:
    """
    The values one filter key has in the knowledge base, with how many documents have each (most common first).

    :param index: The knowledge index.
    :param key: A filter key.
    :returns: `[{"value", "documents"}]`: categories, tags, field values; for `source_prefix` the top folders; for
        `updated_after` the update days.
    """
    docs = index.documents
    if key == "source_prefix":
        return _top(d.source.split("/", 1)[0] + "/" if "/" in d.source else d.source for d in docs)
    if key == "updated_after":
        return _top(d.updated for d in docs)
    return _top(v for d in docs for v in _values_of(d, key))


@component
class DocumentFilterResolver:
    """
    Turns the filters an agent passes into the store filter of its documents' chunks, strictly, with a report.

    The filters are document fields: `category`, `tags` (or `keywords`), `source` (documents by path), `source_prefix`,
    `updated_after` (a day, inclusive) and the fields the indexing pipeline declared filterable
    (`KnowledgeMetadata.filterable_fields`). A list means any of its values; keys combine with AND; text is compared
    casefolded. They are resolved against the knowledge index, which lists every indexed document with its fields and
    version: the result is a filter on the chunks of the matching documents (their primary keys, which the index
    determines: `components.core.citation`), or on the category column when the category is the only key (a column
    filter, however large the category). The store applies it inside the query, so nothing outside the filters can come
    back, and the retriever never retries without it. When no document matches, `filters` is `MATCHES_NOTHING` (an empty
    list of ids), and the report says so and names the values that exist. Values are never pasted into an expression
    (the store quotes every literal). Whatever the filters, it also lists the chunks of pages that are not evidence by
    default (`hidden_statuses`, `draft` and `archived` as shipped, and pages whose `valid_from` lies ahead), which the
    retriever leaves out; `filters: {"status": "draft"}` asks for them.

    It is also where per-document access is enforced. A page whose front matter `access` names groups is read only by
    callers in one of them (`groups`; none: an anonymous caller, public pages only). The chunks of every page the
    caller may not read are in `hidden`, so the store leaves them out of every query; and filters, their match counts
    and the values a report names are worked out on the pages the caller may read, so that nothing tells a caller of a
    page it may not see.

    ### Usage example

    ```python
    from components.query.document_filter_resolver import DocumentFilterResolver

    resolver = DocumentFilterResolver(index_path="data/knowledge_index.json")
    out = resolver.run(filters={"category": "alerts", "updated_after": "2026-01-01"})
    print(out["filter_report"]["documents"], out["error"])
    ```
    """

    def __init__(
        self,
        index_path: str = "data/knowledge_index.json",
        category_key: str = "category",
        hidden_statuses: list[str] | None = None,
    ) -> None:
        """
        Create the resolver.

        :param index_path: The knowledge index file the indexing run writes.
        :param category_key: The chunk metadata key (and column) a category-only filter applies to.
        :param hidden_statuses: Front matter statuses whose pages are not evidence unless a lookup asks for them by
            `filters.status` (default `draft`, `archived`); pages not valid yet (`valid_from` after today) neither.
        :raises ValueError: If a parameter is empty.
        """
        for name, value in (("index_path", index_path), ("category_key", category_key)):
            if not value:
                msg = f"{name}={value!r} must be non-empty; use e.g. 'data/knowledge_index.json' and 'category'"
                raise ValueError(msg)
        statuses = list(hidden_statuses if hidden_statuses is not None else DEFAULT_HIDDEN_STATUSES)
        if not all(isinstance(v, str) and v.strip() for v in statuses):
            msg = f"hidden_statuses={hidden_statuses!r} must be a list of statuses such as ['draft', 'archived']"
            raise ValueError(msg)
        self.index_path = index_path
        self.category_key = category_key
        self.hidden_statuses = statuses
        self._cache = CachedKnowledgeIndex(index_path)
        self._hidden_cache: dict[tuple[Any, ...], FrozenList[str]] = {}
        self._hidden_index: KnowledgeIndex | None = None

    def _index(self) -> KnowledgeIndex:
        return self._cache.get()[0]

    @staticmethod
    def filterable_keys(index: KnowledgeIndex) -> list[str]:
        """
        :param index: The knowledge index.
        :returns: The keys a lookup may filter on: the built-in ones and the declared fields its documents set.
        """
        declared = sorted({name for doc in index.documents for name in doc.fields})
        return [*BUILT_IN_KEYS, *(name for name in declared if name not in BUILT_IN_KEYS)]

    def _tests(self, filters: Mapping[str, Any], index: KnowledgeIndex) -> list[_Test]:
        if not isinstance(filters, Mapping):
            msg = f"filters must be an object of filter keys, not {type(filters).__name__}"
            raise ValueError(msg)
        keys = self.filterable_keys(index)
        unknown = sorted(str(k) for k in filters if k not in keys)
        if unknown:
            msg = (
                f"filters has no key {', '.join(repr(k) for k in unknown)}: filter on {', '.join(keys)} "
                "(list_facets shows their values)"
            )
            raise ValueError(msg)
        return [_Test(str(key), value) for key, value in filters.items() if value is not None]

    def _store_filter(self, tests: list[_Test], matched: list[IndexedDocument]) -> dict[str, Any]:
        if len(tests) == 1 and tests[0].key == "category":
            categories = sorted({d.category for d in matched})
            field = f"meta.{self.category_key}"
            if len(categories) == 1:
                return {"field": field, "operator": "==", "value": categories[0]}
            return {"field": field, "operator": "in", "value": categories}
        ids = [cid for d in matched for cid in chunk_ids(d.source, d.doc_version, d.chunks)]
        return {"field": "id", "operator": "in", "value": ids}

    def _hidden(self, index: KnowledgeIndex, tests: list[_Test], groups: frozenset[str]) -> FrozenList[str]:
        """The chunks of pages that are not evidence: a hidden status, not valid yet, or not readable by the caller."""
        asked = next((t.values for t in tests if t.key == "status"), set())
        hidden = frozenset({s.casefold() for s in self.hidden_statuses} - asked)
        # the same for every lookup until the index or the day changes: worked out once per statuses and groups
        today = date.today().isoformat()
        key = (hidden, today, groups if index.restricted else frozenset())
        if self._hidden_index is not index:
            self._hidden_cache, self._hidden_index = {}, index
        chunks = self._hidden_cache.get(key)
        if chunks is None:
            readable = {id(d) for d in index.readable_by(groups).documents} if index.restricted else None
            chunks = FrozenList(
                cid
                for d in index.documents
                if d.status in hidden
                or (d.valid_from and d.valid_from > today)
                or (readable is not None and id(d) not in readable)
                for cid in chunk_ids(d.source, d.doc_version, d.chunks)
            )
            if len(self._hidden_cache) >= _HIDDEN_LISTS:
                self._hidden_cache.pop(next(iter(self._hidden_cache)))
            self._hidden_cache[key] = chunks
        return chunks  # read-only: handed to every receiver as it is, however many chunks it names

    @component.output_types(
        filters=dict[str, Any] | None, filter_report=dict[str, Any] | None, error=str, hidden=FrozenList[str]
    )
    def run(self, filters: dict[str, Any] | None = None, groups: list[str] | None = None) -> dict[str, Any]:
        """
        Resolve the filters of one lookup, for one caller.

        :param filters: The agent's filters (None or empty: none).
        :param groups: The caller's access groups (None or empty: an anonymous caller, who reads public pages only;
            `*`: every page).
        :returns: `filters`: the store filter (None without filters; `MATCHES_NOTHING` when they match no document);
            `filter_report`:
            None without filters, else `requested` (as given), `documents` and `chunks` matched, and when none
            matched `available` (per key, the values that exist, with their document counts); `error`: '' or why
            the filters were refused (an unknown key, a value of the wrong kind), naming what is accepted; `hidden`: the
            chunks of pages that are not evidence (a hidden status the filters do not ask for, not valid yet, or not
            readable by the caller), which the retriever leaves out of every attempt.
        """
        index = self._index()
        readers = reader_groups(groups)
        if not filters:
            return {"filters": None, "filter_report": None, "error": "", "hidden": self._hidden(index, [], readers)}
        visible = index.readable_by(readers)
        try:
            tests = self._tests(filters, index)
        except ValueError as err:
            hidden = self._hidden(index, [], readers)
            return {"filters": None, "filter_report": None, "error": str(err), "hidden": hidden}
        hidden = self._hidden(index, tests, readers)
        matched = [d for d in visible.documents if all(t.keeps(d) for t in tests)]
        report: dict[str, Any] = {
            "requested": {t.key: t.value for t in tests},
            "documents": len(matched),
            "chunks": sum(d.chunks for d in matched),
        }
        if not matched or not report["chunks"]:
            report["available"] = {t.key: available_values(visible, t.key) for t in tests}
            logger.info("Filters {filters} match no indexed document", filters=report["requested"])
            return {"filters": MATCHES_NOTHING, "filter_report": report, "error": "", "hidden": hidden}
        return {"filters": self._store_filter(tests, matched), "filter_report": report, "error": "", "hidden": hidden}
