"""The knowledge index file: per document its L0 hint fields and its active version.

Written by the indexing run next to the Milvus data (one JSON file per deployment), read by the
L0 hint provider (titles, keywords, categories, entities) and by the retriever, which only returns
chunks of a document's active version so that old and new chunks of one document are never mixed.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError

from components.core.access import can_read
from components.core.atomic_file import write_atomically
from components.core.text_matching import mentions_folded
from components.store.collection_statistics import CollectionStatistics

T = TypeVar("T")

#: the callers' views of one index kept (`KnowledgeIndex.readable_by`): one per distinct set of groups
_VIEWS = 64


class IndexedDocument(BaseModel):
    """One indexed knowledge document."""

    model_config = ConfigDict(extra="forbid")

    doc_id: str
    source: str
    title: str = ""
    category: str = ""
    keywords: list[str] = Field(default_factory=list)
    entities: list[str] = Field(default_factory=list)
    #: the day the page says it was last updated (`YYYY-MM-DD`, front matter), '' when it does not say
    updated: str = ""
    #: the page's values of the fields declared filterable (indexing.yaml `metadata.filterable_fields`)
    fields: dict[str, list[str]] = Field(default_factory=dict)
    #: its life (front matter): `draft`, `deprecated`, `superseded`, `archived` or '' (current); the page replacing
    #: it (an id or a source); the days it is valid from and until, and the day it was last reviewed ('' when unset)
    status: str = ""
    superseded_by: str = ""
    valid_from: str = ""
    valid_until: str = ""
    reviewed_at: str = ""
    #: the groups that may read it (front matter `access`, casefolded); empty: public (`components.core.access`)
    access: list[str] = Field(default_factory=list)
    doc_version: str
    #: what made its chunks (`pipelines.indexing.pipeline_digest`): another digest indexes it again ('' before it was
    #: recorded, so an index written before re-indexes every page once)
    pipeline: str = ""
    chunks: int = 0
    # the files its text includes (Hugo/Jekyll includes), by source, with the version each had when it was indexed:
    # an edit to one of them indexes the page again
    includes: dict[str, str] = Field(default_factory=dict)


class KnowledgeIndex(BaseModel):
    """All indexed documents of one deployment, and the store they were written to."""

    model_config = ConfigDict(extra="forbid")

    format_version: int = 1
    # a Milvus Lite file inside the data folder relative to the folder (it may move), any other URI as given
    milvus_uri: str = ""
    # the collection holding the active chunks: the configured name, or after a rebuild a new collection of its family
    # (`<configured>__r<n>`), written beside the old one and switched to when complete
    collection_name: str = ""
    # the name the indexing configuration gives it ("": `collection_name`, as written before rebuilds were staged)
    configured_collection: str = ""
    # the schema the collection was created with (`CollectionSchema` fields), so readers need not repeat it
    collection_schema: dict[str, str | int] = Field(default_factory=dict)
    embedding_model: str = ""
    documents: list[IndexedDocument] = Field(default_factory=list)
    # hint term (casefolded) -> category -> number of documents whose text or fields mention it
    term_categories: dict[str, dict[str, int]] = Field(default_factory=dict)
    # language centroids and the noise ceiling of the collection's active chunks, as of this index run
    statistics: CollectionStatistics | None = None
    # characters embedded per second by the last run that embedded enough to tell
    chars_per_second: float = 0.0
    # bytes on disk of the files that run indexed, per second of it: what an index run's estimate divides by (a
    # file's bytes are what can be counted before it is read; a site's comments and markup are not embedded)
    bytes_per_second: float = 0.0
    # what callers see of it, by their groups (`readable_by`): worked out once per index and set of groups
    _views: dict[frozenset[str], KnowledgeIndex] = PrivateAttr(default_factory=dict)
    _views_lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    @classmethod
    def load(cls, path: str | Path) -> KnowledgeIndex:
        """
        Read the index file; a missing file is an empty index.

        :param path: The JSON file.
        :returns: The index.
        :raises ValueError: If the file exists but is not a valid index.
        """
        path = Path(path)
        if not path.exists():
            return cls()
        try:
            return cls.model_validate_json(path.read_bytes())
        except ValidationError as err:
            problem = err.errors()[0]
            where = ".".join(str(part) for part in problem.get("loc", ())) or "the file"
            msg = (
                f"the knowledge index {path} is damaged ({where}: {problem.get('msg', 'invalid')}); "
                "`lookup-knowledge index` writes it again"
            )
            raise ValueError(msg) from None

    def save(self, path: str | Path) -> None:
        """
        Write the index atomically (a crash leaves the previous file intact).

        :param path: The JSON file.
        """
        text = self.model_dump_json(indent=1)
        write_atomically(Path(path), lambda out: out.write(text.encode("utf-8")))

    def configured_name(self) -> str:
        """
        :returns: The collection name the indexing configuration gave (the family of the active collection).
        """
        return self.configured_collection or self.collection_name

    def active_versions(self) -> dict[str, str]:
        """Return the active version per source."""
        return {doc.source: doc.doc_version for doc in self.documents}

    def by_source(self) -> dict[str, IndexedDocument]:
        """Return the documents keyed by source."""
        return {doc.source: doc for doc in self.documents}

    def __eq__(self, other: object) -> bool:
        # the fields: the views cached beside them (`readable_by`) are no part of what an index is
        if not isinstance(other, KnowledgeIndex):
            return NotImplemented
        return self.__dict__ == other.__dict__

    __hash__ = None  # type: ignore[assignment]  # mutable, as pydantic's models are

    @property
    def restricted(self) -> bool:
        """Whether some document is not public (has `access` groups)."""
        return self.readable_by(frozenset()) is not self

    def readable_by(self, groups: frozenset[str]) -> KnowledgeIndex:
        """
        The index as a caller with `groups` sees it: only the documents it may read (`components.core.access`).

        :param groups: The caller's normalized groups (`reader_groups`; empty: an anonymous caller).
        :returns: This index when the caller reads every document, else a view of it (cached: do not modify it).
        """
        with self._views_lock:
            view = self._views.get(groups)
        if view is not None:
            return view
        readable = [doc for doc in self.documents if can_read(doc.access, groups)]
        view = self if len(readable) == len(self.documents) else self.model_copy(update={"documents": readable})
        if view is not self:
            view._views = {groups: view}
            view._views_lock = threading.Lock()
        with self._views_lock:
            if len(self._views) >= _VIEWS:
                self._views.pop(next(iter(self._views)))
            self._views[groups] = view
        return view


_TITLE_PARTS = re.compile(r"\s+/\s+|\s*[:：|｜]\s*|\s+[-–—]\s+")


def hint_values(doc: IndexedDocument) -> list[tuple[str, str]]:
    """
    Return a document's L0 hint values with their kind: the title and its parts (a title such as
    `Job Families / Approval Flow` also yields `Job Families` and `Approval Flow`), keywords, entities, category.

    :param doc: The document.
    :returns: `(kind, value)` pairs, values stripped and non-empty.
    """
    titles = [doc.title, *(_TITLE_PARTS.split(doc.title) if doc.title else [])]
    pairs = [("title", t) for t in titles]
    pairs += [("keyword", k) for k in doc.keywords] + [("entity", e) for e in doc.entities]
    pairs.append(("category", doc.category))
    return [(kind, value.strip()) for kind, value in pairs if value and value.strip()]


def hint_terms(doc: IndexedDocument) -> set[str]:
    """
    Return a document's L0 hint terms (`hint_values`), casefolded.

    :param doc: The document.
    :returns: The terms.
    """
    return {value.casefold() for _, value in hint_values(doc)}


def _code_points(text: str) -> np.ndarray:
    """The distinct characters of a text, as sorted code points."""
    return np.unique(np.frombuffer(text.encode("utf-32-le", errors="surrogatepass"), dtype=np.uint32))


def term_category_counts(documents: list[IndexedDocument], bodies: Mapping[str, str]) -> dict[str, dict[str, int]]:
    """
    Count, for every hint term of the knowledge base, the documents per category that mention it.

    A document mentions a term when it is one of its hint fields or its text contains it (matched like a query).
    L0 uses these counts to tell category-specific terms from terms that occur everywhere. Only public documents are
    counted (every term is listed, a restricted document's too): the counts steer every caller's category filter, so
    they must not depend on what some callers may not read. A text is only searched
    for a term when it has every character of it (a table of which characters each text has): a term that no text
    could contain, such as most distinct titles of a large knowledge base, costs no search at all.

    :param documents: The active documents.
    :param bodies: Markdown body per source (documents without a body count their fields only).
    :returns: `{term: {category: documents}}`.
    """
    folded = [bodies.get(doc.source, "").casefold() for doc in documents]
    own: dict[str, list[int]] = {}
    for position, doc in enumerate(documents):
        for term in hint_terms(doc):
            own.setdefault(term, []).append(position)
    # which characters each text has (as code points): a text lacking one of a term's characters cannot mention it
    present = [_code_points(text) for text in folded]
    alphabet = np.unique(np.concatenate(present)) if present else np.zeros(0, dtype=np.uint32)
    has = np.zeros((len(alphabet), len(documents)), dtype=bool)
    for position, codes in enumerate(present):
        has[np.searchsorted(alphabet, codes), position] = True
    counts: dict[str, dict[str, int]] = {}
    restricted = {position for position, doc in enumerate(documents) if doc.access}
    for term, positions in own.items():
        mentioning = set(positions)
        codes = _code_points(term)
        if term and np.isin(codes, alphabet).all():
            candidates = np.flatnonzero(np.logical_and.reduce(has[np.searchsorted(alphabet, codes)], axis=0))
            mentioning.update(int(p) for p in candidates if mentions_folded(folded[p], term))
        per_category: dict[str, int] = {}
        for position in sorted(mentioning - restricted):
            category = documents[position].category
            per_category[category] = per_category.get(category, 0) + 1
        counts[term] = per_category
    return counts


class CachedKnowledgeIndex:
    """
    A knowledge index file read once and read again only when the file changes (another process re-indexed).

    ### Usage example

    ```python
    cache = CachedKnowledgeIndex("data/knowledge_index.json")
    index, changed = cache.get()
    ```
    """

    def __init__(self, path: str | Path) -> None:
        """
        :param path: The JSON file.
        """
        self.path = Path(path)
        self._index = KnowledgeIndex()
        self._mtime: int | None = None

    def signature(self) -> int:
        """
        Return a value that changes whenever the file changes (its modification time; 0 when missing).

        :returns: The signature.
        """
        return self.path.stat().st_mtime_ns if self.path.exists() else 0

    def get(self) -> tuple[KnowledgeIndex, bool]:
        """
        Return the current index and whether it changed since the previous call.

        :returns: `(index, changed)`; a missing file is an empty index.
        """
        mtime = self.signature()
        if mtime == self._mtime:
            return self._index, False
        self._index = _read_shared(self.path, mtime)
        self._mtime = mtime
        return self._index, True


#: index files parsed in this process, by path: (signature, index), the most recently read last
_parsed: dict[Path, tuple[int, KnowledgeIndex]] = {}
_parsed_lock = threading.Lock()
_PARSED_FILES = 8


def _read_shared(path: Path, signature: int) -> KnowledgeIndex:
    """
    The index file as read by whichever reader of this process read this version first.

    A lookup pipeline has several readers of one file (the L0 provider, the retriever's and the sidecar's
    collections), and parsing it costs 0.4 s at 10k documents; readers never modify what they read.
    """
    if not signature:  # no file: an empty index of its own
        return KnowledgeIndex.load(path)
    key = path.resolve()
    with _parsed_lock:
        cached = _parsed.get(key)
    if cached is not None and cached[0] == signature:
        return cached[1]
    index = KnowledgeIndex.load(path)
    with _parsed_lock:
        _parsed.pop(key, None)
        _parsed[key] = (signature, index)
        while len(_parsed) > _PARSED_FILES:
            del _parsed[next(iter(_parsed))]
    return index


class IndexVersionCache:
    """
    Values derived from the collection, computed once per index version and computed again after a re-index.

    The index version is the knowledge index file's signature: every indexing run that changes anything rewrites
    that file, so a value cached under one version (term statistics, the collection's description, an in-process
    BM25 index, a connection that must be reloaded) is never used against a newer collection. Thread-safe: a value
    is computed by one thread while the others wait for it.

    ### Usage example

    ```python
    cache = IndexVersionCache(CachedKnowledgeIndex("data/knowledge_index.json"))
    stats = cache.get("term_statistics", lambda: count_terms())
    ```
    """

    def __init__(self, index: CachedKnowledgeIndex, on_new_version: Callable[[], None] | None = None) -> None:
        """
        :param index: The knowledge index file whose signature is the version.
        :param on_new_version: Called (under the cache's lock) when the version changed, before anything is computed.
        """
        self.index = index
        self._on_new_version = on_new_version
        self._version: int | None = None
        self._values: dict[str, Any] = {}
        self._lock = threading.RLock()

    def get(self, name: str, compute: Callable[[], T]) -> T:
        """
        Return the value cached under `name` for the current index version, computing it if needed.

        :param name: What the value is, e.g. `term_statistics`.
        :param compute: Makes the value; an exception is raised to the caller and nothing is cached.
        :returns: The value.
        """
        with self._lock:
            version = self.index.signature()
            if version != self._version:
                self._values.clear()
                if self._on_new_version is not None:
                    self._on_new_version()
                self._version = version
            if name not in self._values:
                self._values[name] = compute()
            return self._values[name]

    def discard(self, name: str) -> None:
        """
        Forget one value (the next `get` of it computes again).

        :param name: The value's name.
        """
        with self._lock:
            self._values.pop(name, None)

    def clear(self) -> None:
        """Forget every value (the next `get` computes again)."""
        with self._lock:
            self._values.clear()
            self._version = None
