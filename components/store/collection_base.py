"""What the parts of a `KnowledgeCollection` share: names, the description cache, and the version rule."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from components.store.milvus_chunk_store import CollectionDescription, MilvusChunkStore

DENSE_PATHS = ("haystack", "sdk")
#: what Milvus answers for a search of a collection that does not exist (any more)
COLLECTION_NOT_FOUND = 100
LEXICAL_SOURCES = ("auto", "milvus", "local")
#: the BM25 search `prepare_lexical` runs so that Milvus has its BM25 index ready before the first lookup
WARM_UP_QUERY = "index"
#: the metadata key the BM25 index files record per chunk, so that a search filtered by category stays in-process
CATEGORY_KEY = "category"


def category_of(filters: dict[str, Any] | None) -> str | None:
    """The category of a filter on the chunk's category alone (what the retriever's attempts use), else None."""
    if filters and filters.get("field") == f"meta.{CATEGORY_KEY}" and filters.get("operator") == "==":
        value = filters.get("value")
        return value if isinstance(value, str) else None
    return None


def _ids_of(filters: dict[str, Any], operator: str) -> list[str] | None:
    value = filters.get("value")
    if filters.get("field") == "id" and filters.get("operator") == operator and isinstance(value, list):
        return [str(v) for v in value]
    return None


@dataclass(frozen=True)
class Scope:
    """What an in-process BM25 index applies itself: a category, chunks to keep, chunks to leave out (None: any)."""

    category: str | None = None
    ids: list[str] | None = None
    excluded: list[str] | None = None


def scope_of(filters: dict[str, Any] | None) -> Scope | None:
    """
    Read a retriever's filter as a `Scope`: a category, ids `in` and ids `not in`, each at most once, ANDed.

    :param filters: The retriever's Haystack filters.
    :returns: The scope, or None for a filter of any other shape.
    """
    if not filters:
        return Scope()
    parts = filters.get("conditions") if filters.get("operator") == "AND" else [filters]
    found: dict[str, Any] = {}
    for part in parts or [None]:
        if not isinstance(part, dict):
            return None
        for name, value in (
            ("category", category_of(part)),
            ("ids", _ids_of(part, "in")),
            ("excluded", _ids_of(part, "not in")),
        ):
            if value is not None and name not in found:
                found[name] = value
                break
        else:
            return None
    return Scope(**found)


#: between a collection's configured name and the number of a rebuild that wrote a new collection of its family
REBUILD_MARK = "__r"


#: descriptions of existing collections, shared by every `KnowledgeCollection` of this process: several components
#: read one collection (the retriever, the language balance, the sidecar, health), and Milvus Lite reads every segment
#: whole to answer whether a collection exists and counts every row to describe its index (2.5 s and 0.5 s at 100k
#: chunks), so each collection is asked once per index version
_DESCRIPTIONS: dict[tuple[str, str, int], CollectionDescription] = {}
_DESCRIPTIONS_LOCK = threading.Lock()


def shared_description(
    uri: str, collection_name: str, index_version: int, store: MilvusChunkStore
) -> CollectionDescription | None:
    """The collection's description, asked of the store once per (store, collection, index version) in the process."""
    key = (uri, collection_name, index_version)
    with _DESCRIPTIONS_LOCK:
        if key in _DESCRIPTIONS:
            return _DESCRIPTIONS[key]
    if not store.exists():
        return None  # not cached: whoever creates it is seen at the next call
    found = store.describe()
    with _DESCRIPTIONS_LOCK:
        _DESCRIPTIONS[key] = found
    return found


def forget_descriptions(uri: str, names: Sequence[str]) -> None:
    """Forget what is known of some collections of a store (dropped, or found missing), whatever the index version."""
    with _DESCRIPTIONS_LOCK:
        for key in [k for k in _DESCRIPTIONS if k[0] == uri and k[1] in names]:
            del _DESCRIPTIONS[key]


def is_active(meta: dict[str, Any], active: Mapping[str, str]) -> bool:
    """A chunk of its document's active version, or one without a version (written by another tool)."""
    return not meta.get("doc_version") or active.get(meta.get("source", "")) == meta["doc_version"]


class CollectionMismatchError(ValueError):
    """The existing collection does not have the schema the configuration asks for."""
