"""`KnowledgeStore`: the one interface through which every component and the service read and write knowledge chunks.

The retriever, the rankers and the sidecar read through it; the chunk writer and the indexer write through it; the
service asks it for health. `KnowledgeCollection` (a Milvus collection: Milvus Lite by default, or a server) is the
implementation shipped. Another store plugs in as a class with these methods, named in the YAML where the collection
is: `deserialize_store_inplace` builds it only from the deserialization allowlist's modules, and only when it has
this interface.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
from haystack import Document
from haystack.core.errors import DeserializationError
from haystack.core.serialization import import_class_by_name

from components.store.collection_statistics import CollectionStatistics
from components.store.collection_writes import WriteReport
from components.store.lexical import TermStatistics
from components.store.schema import CollectionSchema

#: this project's stores, which always load (the rest go through Haystack's deserialization allowlist)
OWN_STORES = "components.store."


@runtime_checkable
class KnowledgeStore(Protocol):
    """What the pipelines need of a store of knowledge chunks: reads, writes, and what `index` counted."""

    uri: str
    index_path: str

    @property
    def schema(self) -> CollectionSchema:
        """The collection's schema (names, dimension, metric, optional fields)."""

    def to_dict(self) -> dict[str, Any]:
        """Serialize the store's configuration (never a secret's value)."""

    def warm_up(self) -> None:
        """Connect, and check the store against its configuration."""

    def close(self) -> None:
        """Release the connection."""

    def connect(self, path: str) -> None:
        """Open a dense search path (`haystack` or `sdk`) now rather than at the first search."""

    def prepare_lexical(self, source: str = "auto", statistics: bool = False) -> str:
        """Read now what the first BM25 search would wait for; the path BM25 will take."""

    # -- what `index` recorded
    def index_version(self) -> int:
        """The current index version (0 before anything was indexed)."""

    def active_versions(self) -> Mapping[str, str]:
        """The active version of every document, by source."""

    def statistics(self) -> CollectionStatistics | None:
        """What the index run counted (noise ceilings, languages), or None."""

    def term_statistics(self, source: str = "auto") -> TermStatistics:
        """BM25 term statistics of the collection."""

    # -- reads
    def exists(self) -> bool:
        """Whether the collection exists."""

    def count(self) -> int:
        """How many chunks it holds."""

    def dense_search(
        self, vector: list[float], top_k: int, filters: dict[str, Any] | None = None, path: str = "sdk"
    ) -> list[Document]:
        """Vector search: `score` the normalized similarity, meta `raw_score`, `score_semantics`, `retrieval_path`."""

    def lexical_search(
        self, query: str, top_k: int, filters: dict[str, Any] | None = None, source: str = "auto"
    ) -> tuple[list[tuple[str, float]], str]:
        """BM25 search: `(chunk_id, bm25)` pairs, best first, and the path that ran."""

    def with_lexical(
        self,
        hits: list[Document],
        pairs: list[tuple[str, float]],
        query: str,
        vector: list[float],
        source: str = "auto",
    ) -> list[Document]:
        """Dense hits joined with a BM25 search's: BM25 facts in meta, the chunks only BM25 found scored."""

    def fetch_scored(self, ids: list[str], vector: list[float]) -> list[Document]:
        """Chunks by id, scored against a query vector as the dense search would (normalized similarity)."""

    def fetch(self, ids: list[str]) -> list[Document]:
        """Chunks by id, without vectors."""

    def scan(self, keys: tuple[str, ...] = ("source", "doc_version"), with_content: bool = False) -> list[dict]:
        """Every chunk's id and some metadata keys."""

    def vector_fields(self, dense: bool = True, crosslingual: bool = True) -> list[str]:
        """The vector fields the collection has (dense first)."""

    def candidate_vectors(self, ids: list[str], fields: Sequence[str]) -> dict[str, dict[str, Any]]:
        """Stored vectors of some chunks, per field, in the order asked."""

    def drop_superseded(
        self, docs: list[Document], searched_under: Mapping[str, str] | None = None
    ) -> tuple[list[Document], int]:
        """Keep, per document, the chunks of one version; how many were dropped."""

    def chunks_of(self, versions: Mapping[str, str]) -> list[Document]:
        """The stored chunks of some document versions, with their vectors, as the writer takes them."""

    # -- writes
    def create_if_missing(self) -> None:
        """Create the collection with its schema if it does not exist."""

    def write_documents(self, documents: Iterable[Document]) -> WriteReport:
        """Insert embedded chunks, all or nothing per document."""

    def remove_stale(self, active: Mapping[str, str]) -> int:
        """Delete every chunk whose document version is not the active one; how many."""

    def flush(self) -> None:
        """Make what was written searchable at full speed."""

    def has_crosslingual(self) -> bool:
        """Whether the collection holds cross-lingual vectors."""

    def full_text_field(self) -> str:
        """The field the store's own BM25 runs on, or "" when BM25 runs in-process."""

    def family(self) -> str:
        """The configured name, of which a rebuild writes new collections."""

    def rebuild_target(self) -> KnowledgeStore:
        """A new, empty store of this one's family and configuration, for a rebuild to fill beside it."""

    def drop(self) -> None:
        """Drop the collection and everything in it."""

    def drop_collections(self, names: Sequence[str]) -> list[str]:
        """Drop other collections of the same store (e.g. the one a rebuild replaced); the names dropped."""

    def compute_statistics(
        self,
        embed_queries: Callable[[list[str]], np.ndarray],
        embedding_model: str,
        active: dict[str, str],
        folder: str | Path | None = None,
        texts: dict[str, list[tuple[int, str]]] | None = None,
    ) -> CollectionStatistics:
        """Count the statistics over the active chunks (and write the vector table and BM25 index into `folder`)."""


def deserialize_store_inplace(init_parameters: dict[str, Any], key: str = "collection") -> None:
    """
    Turn a serialized store among a component's init parameters into the object, in place.

    Like Haystack's `deserialize_document_store_in_init_params_inplace`: this project's stores
    (`components.store.*`) always load; any other class only from a module on Haystack's deserialization allowlist
    (what `Pipeline.from_dict(..., allowed_modules=...)` and `HAYSTACK_DESERIALIZATION_ALLOWLIST` allow), and only
    when it has the `KnowledgeStore` interface.

    :param init_parameters: A component's serialized init parameters.
    :param key: The parameter holding the store.
    :raises DeserializationError: If the type is not allowed, cannot be imported, or is not a store.
    """
    value = init_parameters.get(key)
    if not isinstance(value, dict):
        return
    type_name = str(value.get("type", ""))
    module_name, _, class_name = type_name.rpartition(".")
    try:
        if module_name.startswith(OWN_STORES):
            cls = getattr(importlib.import_module(module_name), class_name)
        else:
            cls = import_class_by_name(type_name)  # the allowlist decides
    except (ImportError, AttributeError, ValueError) as err:
        msg = f"{key} type {type_name!r} cannot be imported: {err}"
        raise DeserializationError(msg) from err
    missing = [name for name in _INTERFACE if not callable(getattr(cls, name, None))]
    if missing:
        more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        msg = f"{key} type {type_name!r} is not a KnowledgeStore: it has no {', '.join(missing[:3])}{more}"
        raise DeserializationError(msg)
    init_parameters[key] = cls.from_dict(value)


#: the methods a store class must have (`KnowledgeStore`'s)
_INTERFACE = (
    *(name for name in dir(KnowledgeStore) if not name.startswith("_") and callable(getattr(KnowledgeStore, name))),
    "from_dict",
)
