"""`KnowledgeCollection`: everything about one Milvus collection of knowledge chunks, for every component that uses it.

The writer creates and fills it; the retriever, the sidecar and eval read it. One object owns the schema, the
connection (pymilvus for the `sdk` path, milvus-haystack for the `haystack` path), dense search on either path,
BM25 inside Milvus or in-process (on the index run's BM25 index file), the collection's term statistics, the rule
that only a document's active version is ever returned, and one cache of what is derived from the collection, keyed
by the index version.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import fields, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeVar

import numpy as np
from haystack import Document, default_from_dict, default_to_dict, logging
from haystack.utils import Secret
from haystack.utils.filters import document_matches_filter
from milvus_haystack import MilvusEmbeddingRetriever
from pymilvus import MilvusException

from components.core.fusion import BEST_KEY, BM25_KEY, IDEAL_KEY
from components.core.scores import normalized_similarity, raw_from_normalized
from components.store.collection_statistics import CollectionStatistics, compute_statistics
from components.store.json_metadata_document_store import (
    JsonMetadataMilvusDocumentStore,
    json_filter_expression,
)
from components.store.knowledge_index import CachedKnowledgeIndex, IndexVersionCache
from components.store.lexical import Bm25ChunkIndex, Bm25Corpus, TermStatistics, lexical_text, tokenize
from components.store.milvus_chunk_store import NOT_LOADED, CollectionDescription, MilvusChunkStore
from components.store.schema import CROSSLINGUAL_META_KEY, SEMANTICS, CollectionSchema, client_options
from components.store.vector_table import VectorTable, table_rows

logger = logging.getLogger(__name__)

T = TypeVar("T")

DENSE_PATHS = ("haystack", "sdk")
#: what Milvus answers for a search of a collection that does not exist (any more)
COLLECTION_NOT_FOUND = 100
LEXICAL_SOURCES = ("auto", "milvus", "local")
#: the BM25 search `prepare_lexical` runs so that Milvus has its BM25 index ready before the first lookup
WARM_UP_QUERY = "index"
#: the metadata key the BM25 index files record per chunk, so that a search filtered by category stays in-process
CATEGORY_KEY = "category"


def _category_of(filters: dict[str, Any] | None) -> str | None:
    """The category of a filter on the chunk's category alone (what the retriever's attempts use), else None."""
    if filters and filters.get("field") == f"meta.{CATEGORY_KEY}" and filters.get("operator") == "==":
        value = filters.get("value")
        return value if isinstance(value, str) else None
    return None


#: between a collection's configured name and the number of a rebuild that wrote a new collection of its family
REBUILD_MARK = "__r"


#: descriptions of existing collections, shared by every `KnowledgeCollection` of this process: several components
#: read one collection (the retriever, the language balance, the sidecar, health), and Milvus Lite reads every segment
#: whole to answer whether a collection exists and counts every row to describe its index (2.5 s and 0.5 s at 100k
#: chunks), so each collection is asked once per index version
_DESCRIPTIONS: dict[tuple[str, str, int], CollectionDescription] = {}
_DESCRIPTIONS_LOCK = threading.Lock()


def _shared_description(
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


def _forget_descriptions(uri: str, names: Sequence[str]) -> None:
    """Forget what is known of some collections of a store (dropped, or found missing), whatever the index version."""
    with _DESCRIPTIONS_LOCK:
        for key in [k for k in _DESCRIPTIONS if k[0] == uri and k[1] in names]:
            del _DESCRIPTIONS[key]


def _is_active(meta: dict[str, Any], active: Mapping[str, str]) -> bool:
    """A chunk of its document's active version, or one without a version (written by another tool)."""
    return not meta.get("doc_version") or active.get(meta.get("source", "")) == meta["doc_version"]


class CollectionMismatchError(ValueError):
    """The existing collection does not have the schema the configuration asks for."""


def deserialize_collection_inplace(init_parameters: dict[str, Any], key: str = "collection") -> None:
    """
    Turn a serialized `KnowledgeCollection` among a component's init parameters into the object, in place.

    Like Haystack's `deserialize_secrets_inplace`: the component names the one class it accepts there, so the
    type string in the YAML is checked against it instead of being imported by name.

    :param init_parameters: A component's serialized init parameters.
    :param key: The parameter holding the collection.
    """
    value = init_parameters.get(key)
    if isinstance(value, dict):
        init_parameters[key] = KnowledgeCollection.from_dict(value)


class KnowledgeCollection:
    """
    One Milvus collection of knowledge chunks: its schema, its connection, and every way of reading it.

    Dense search runs on the `haystack` path (milvus-haystack's `MilvusEmbeddingRetriever` over a store that reads
    the JSON metadata column) or the `sdk` path (pymilvus); both return Documents whose `score` is the normalized
    similarity in [0, 1] and whose meta carries the raw score, what it means and the path. BM25 runs inside Milvus on
    the collection's full-text field, or in-process: on the BM25 index the index run wrote beside the index file,
    or on one built from the collection's chunks where Milvus has no full-text field. Chunks of a superseded
    document version are dropped by `drop_superseded`. Everything derived from the collection (its description,
    term statistics, the in-process BM25 index, the haystack store) is cached per index version: a re-index by
    another process is picked up at the next call.

    `dimension` and `metric_type` may be left unset (None) to take them from the existing collection; when set they
    must match it (checked in `warm_up`). A new collection is created with them (default 384 and `L2`).

    ### Usage example

    ```python
    from components.store.knowledge_collection import KnowledgeCollection

    collection = KnowledgeCollection(uri="data/milvus.db", index_path="data/knowledge_index.json")
    collection.warm_up()
    hits = collection.dense_search(vector, top_k=5, path="sdk")
    pairs, path = collection.lexical_search("disk full", top_k=5)
    ```
    """

    def __init__(
        self,
        uri: str = "data/milvus.db",
        index_path: str = "data/knowledge_index.json",
        collection_name: str | None = None,
        dimension: int | None = None,
        metric_type: str | None = None,
        index_type: str | None = None,
        id_field: str | None = None,
        content_field: str | None = None,
        vector_field: str | None = None,
        metadata_field: str | None = None,
        lexical_field: str | None = None,
        sparse_field: str | None = None,
        crosslingual_field: str | None = None,
        crosslingual_dimension: int | None = None,
        category_field: str | None = None,
        token: Secret | None = Secret.from_env_var("MILVUS_TOKEN", strict=False),  # noqa: B008 - Haystack's idiom
        consistency_level: str = "Strong",
    ) -> None:
        """
        Describe the collection; nothing connects until `warm_up` (or the first read).

        Every schema parameter left unset (None) takes the value the collection was indexed with (recorded in the
        knowledge index file by `lookup-knowledge index`), else the original's default (`knowledge_chunks`, 384,
        `L2`, `AUTOINDEX`, fields `id`, `content`, `vector`, `metadata`, `lexical`, `sparse`, `crosslingual` of
        512). So the indexing pipeline defines the schema and the lookup pipeline only says where the collection is.

        :param uri: Milvus Lite `.db` path or a server URI such as `http://127.0.0.1:19530`.
        :param index_path: The knowledge index file (active document versions and the recorded schema; its
            signature is the index version).
        :param collection_name: The collection.
        :param dimension: Vector dimension. When set, it must match an existing collection's.
        :param metric_type: `L2`, `COSINE` or `IP`. When set, it must match an existing collection's.
        :param index_type: Vector index of a new collection, e.g. `AUTOINDEX`, `FLAT`, `IVF_FLAT`, `HNSW`.
        :param id_field: Primary key field.
        :param content_field: Text field.
        :param vector_field: Vector field.
        :param metadata_field: JSON metadata field.
        :param lexical_field: Text field of a new collection holding each chunk's BM25 terms; `""` (with
            `sparse_field` `""`) creates no full-text search in Milvus. An existing collection keeps its schema.
        :param sparse_field: Sparse field of a new collection that Milvus' BM25 function fills from `lexical_field`.
        :param crosslingual_field: Second vector field of a new collection: each chunk's vector from a model aligned
            across languages, which ranks answers written in another language than the query; `""` creates none.
            A collection without it (indexed before it existed, or by another tool) is read without it.
        :param crosslingual_dimension: That field's dimension (512, use-multilingual-v3's).
        :param category_field: Column of a new collection copying each chunk's metadata value under the key of the
            same name (`category`), which category filters read instead of the JSON metadata; `""` creates none. A
            collection without it is filtered on the JSON metadata (slow at scale on Milvus Lite).
        :param token: Milvus server token (a Haystack `Secret`, by default the `MILVUS_TOKEN` environment variable
            when it is set); never serialized as a value, never logged.
        :param consistency_level: Read consistency. `Strong` by default: pymilvus defaults to `Bounded`, under
            which a server may answer from before the latest writes.
        :raises ValueError: If `uri` is empty or a name or parameter is invalid.
        """
        if not uri:
            msg = "uri='' must name a Milvus Lite .db path or a server URI such as http://127.0.0.1:19530"
            raise ValueError(msg)
        self.uri = uri
        self.index_path = index_path
        self.collection_name = collection_name
        self.dimension = dimension
        self.metric_type = metric_type
        self.index_type = index_type
        self.id_field = id_field
        self.content_field = content_field
        self.vector_field = vector_field
        self.metadata_field = metadata_field
        self.lexical_field = lexical_field
        self.sparse_field = sparse_field
        self.crosslingual_field = crosslingual_field
        self.crosslingual_dimension = crosslingual_dimension
        self.category_field = category_field
        self.token = token
        self.consistency_level = consistency_level
        self._schema = CollectionSchema.from_attributes(self)  # validates what is set
        self._versions = CachedKnowledgeIndex(index_path)
        self._cache = IndexVersionCache(self._versions, on_new_version=self._forget_connection_state)
        self._store: MilvusChunkStore | None = None

    def to_dict(self) -> dict[str, Any]:
        """
        Serialize the collection's configuration (the token as its environment variable, never its value).

        :returns: The serialized collection.
        """
        return default_to_dict(
            self,
            uri=self.uri,
            index_path=self.index_path,
            collection_name=self.collection_name,
            dimension=self.dimension,
            metric_type=self.metric_type,
            index_type=self.index_type,
            id_field=self.id_field,
            content_field=self.content_field,
            vector_field=self.vector_field,
            metadata_field=self.metadata_field,
            lexical_field=self.lexical_field,
            sparse_field=self.sparse_field,
            crosslingual_field=self.crosslingual_field,
            crosslingual_dimension=self.crosslingual_dimension,
            category_field=self.category_field,
            token=self.token,
            consistency_level=self.consistency_level,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> KnowledgeCollection:
        """
        Deserialize a collection.

        :param data: From `to_dict`.
        :returns: The collection.
        """
        return default_from_dict(cls, data)

    # --- connection and schema ------------------------------------------------------------------------------

    @property
    def schema(self) -> CollectionSchema:
        """
        The schema. Before `warm_up`: what is set, else the defaults; after: as resolved against the knowledge
        index file and the collection itself (dimension and metric as Milvus reports them).
        """
        return self._schema

    @property
    def store(self) -> MilvusChunkStore:
        """The pymilvus view of the collection (the `sdk` path, and every write), connected on first use."""
        if self._store is None:
            token = self.token.resolve_value() if self.token is not None else None
            self._store = MilvusChunkStore(self.uri, self._schema, token, self.consistency_level)
        return self._store

    def warm_up(self) -> None:
        """
        Connect and, when the collection exists, check it against the configuration. Idempotent.

        :raises CollectionMismatchError: If the collection's metric, dimension or fields differ from the
            configuration (the message names both).
        """
        self.description()

    def close(self) -> None:
        """Release the connections and forget what was cached."""
        if self._store is not None:
            self._store.close()
        self._store = None
        self._cache.clear()

    def _forget_connection_state(self) -> None:
        # a re-index may have dropped and re-created the collection: load it again, rebuild the haystack store
        if self._store is not None:
            self._store.unload()

    def create_if_missing(self) -> None:
        """
        Create the collection with the configured schema if it does not exist, then check it (`warm_up`).

        :raises CollectionMismatchError: If an existing collection differs from the configuration.
        """
        if self.store.ensure_collection():
            self._cache.clear()
        self.warm_up()

    def drop(self) -> None:
        """Drop the collection if it exists (everything cached about it is forgotten)."""
        self.store.drop()
        _forget_descriptions(self.uri, [self._schema.collection_name])
        self._cache.clear()

    def family(self) -> str:
        """
        :returns: The configured collection name, of which a rebuild writes new collections (`<family>__r<n>`).
        """
        name = self.collection_name or CollectionSchema().collection_name
        family, mark, number = name.rpartition(REBUILD_MARK)
        return family if mark and family and number.isdigit() else name

    def rebuild_target(self) -> KnowledgeCollection:
        """
        A new, empty collection of this one's family and configuration, for a rebuild to fill beside the active one
        (which lookups keep reading until the index file names the new one).

        :returns: The collection, not yet created (its writer's `warm_up` creates it).
        """
        taken = set(self.store.list_collections())
        number = time.time_ns() // 1_000_000
        while f"{self.family()}{REBUILD_MARK}{number}" in taken:
            number += 1
        data = self.to_dict()
        data["init_parameters"]["collection_name"] = f"{self.family()}{REBUILD_MARK}{number}"
        return KnowledgeCollection.from_dict(data)

    def drop_collections(self, names: Sequence[str]) -> list[str]:
        """
        Drop other collections of the same database (e.g. the one a rebuild replaced), those that exist.

        :param names: Their names.
        :returns: The names dropped.
        """
        existing = set(self.store.list_collections())
        dropped = [name for name in names if name in existing]
        for name in dropped:
            self.store.drop_named(name)
        if dropped:
            _forget_descriptions(self.uri, dropped)
            self._cache.clear()
        return dropped

    def index_version(self) -> int:
        """
        :returns: The current index version (the knowledge index file's signature; 0 before anything was indexed).
        """
        return self._versions.signature()

    def description(self) -> CollectionDescription | None:
        """
        Describe the existing collection, checked against the configuration (cached per index version).

        :returns: The description, or None when the collection does not exist yet.
        :raises CollectionMismatchError: If the collection differs from the configuration.
        """
        found = self._cache.get("description", self._describe)
        if found is None:  # not there yet: ask again next time, whoever creates it
            self._cache.discard("description")
        return found

    def _configured(self) -> CollectionSchema:
        """The schema asked for: what is set here, else what the collection was indexed with, else the defaults."""
        index, _ = self._versions.get()
        names = [f.name for f in fields(CollectionSchema)]
        recorded = {k: v for k, v in index.collection_schema.items() if k in names}
        explicit = {name: getattr(self, name) for name in names if getattr(self, name) is not None}
        if self.collection_name is not None and index.collection_name:
            if self.collection_name == index.configured_name():
                # the configured name's active collection: after a rebuild, a new one of its family
                explicit["collection_name"] = index.collection_name
            elif self.collection_name != index.collection_name:
                recorded = {}  # the index file describes another collection
        return CollectionSchema(**{**recorded, **explicit})

    def _describe(self) -> CollectionDescription | None:
        wanted = self._configured()
        wanted.validate()
        self._schema = wanted
        self.store.schema = wanted
        found = _shared_description(self.uri, wanted.collection_name, self.index_version(), self.store)
        if found is None:
            return None
        problems = []
        for option, configured, actual in (
            ("metric_type", self.metric_type, found.metric_type),
            ("dimension", self.dimension, found.dimension),
        ):
            if configured is not None and actual is not None and configured != actual:
                problems.append(f"{option} is {actual!r} in the collection but {configured!r} in the configuration")
        missing = [
            f"{option}={name!r}"
            for option, name in (
                ("id_field", wanted.id_field),
                ("content_field", wanted.content_field),
                ("vector_field", wanted.vector_field),
                ("metadata_field", wanted.metadata_field),
            )
            if name not in found.fields
        ]
        if missing:
            problems.append(f"the collection has no field {', '.join(missing)} (its fields: {sorted(found.fields)})")
        if problems:
            msg = (
                f"collection {wanted.collection_name!r} at {self.uri} does not match the configuration: "
                f"{'; '.join(problems)}. Set the configuration to the collection's values (or leave dimension and "
                "metric_type unset to take them from the collection), or re-create it with `lookup-knowledge index "
                "--rebuild`."
            )
            raise CollectionMismatchError(msg)
        self._schema = wanted.with_values(
            metric_type=found.metric_type or wanted.metric_type, dimension=found.dimension or wanted.dimension
        )
        self.store.schema = self._schema
        return found

    def exists(self) -> bool:
        """
        :returns: Whether the collection exists.
        """
        return self.description() is not None

    def _require(self) -> CollectionDescription:
        description = self.description()
        if description is None:
            msg = f"collection {self._schema.collection_name!r} does not exist; run `lookup-knowledge index` first"
            raise LookupError(msg)
        return description

    def crosslingual_vectors(self, ids: list[str]) -> dict[str, list[float]]:
        """
        Fetch the cross-lingual vectors of some chunks.

        :param ids: Chunk ids.
        :returns: Vector per id found; empty when the collection has no cross-lingual field.
        """
        fields = self.vector_fields(dense=False, crosslingual=True)
        return self.store.get_vectors(ids, fields)[fields[0]] if fields and ids else {}

    def vector_fields(self, dense: bool = True, crosslingual: bool = True) -> list[str]:
        """
        The vector fields to read with candidates (for `dense_search` and `fetch_scored`).

        :param dense: The dense (`vector_field`) vectors.
        :param crosslingual: The cross-lingual vectors, where the collection has the field.
        :returns: The field names, dense first.
        """
        s = self._schema
        crosslingual = crosslingual and bool(s.crosslingual_field) and s.crosslingual_field in self._require().fields
        return [f for f, wanted in ((s.vector_field, dense), (s.crosslingual_field, crosslingual)) if wanted]

    def has_crosslingual(self) -> bool:
        """
        :returns: Whether the collection has its cross-lingual vector field (False when it does not exist yet).
        """
        return self._has_field(self._schema.crosslingual_field)

    def has_category_column(self) -> bool:
        """
        :returns: Whether the collection has its category column (False when it does not exist yet).
        """
        return self._has_field(self._schema.category_field)

    def _has_field(self, field: str) -> bool:
        description = self.description()
        return bool(field) and description is not None and field in description.fields

    def _filter_schema(self) -> CollectionSchema:
        """The schema filter expressions are built on: without the category column where the collection lacks it."""
        return self._schema if self.has_category_column() else self._schema.with_values(category_field="")

    def full_text_field(self) -> str:
        """
        :returns: The sparse output field of the collection's BM25 function, or `""` when it has none.
        """
        full_text = self._require().full_text
        return full_text[1] if full_text else ""

    # --- dense search ---------------------------------------------------------------------------------------

    def _haystack_retriever(self) -> MilvusEmbeddingRetriever:
        description = self._require()
        s = self._schema
        connection: dict[str, Any] = {"uri": self.store.endpoint(), **client_options(self.uri)}
        if self.token is not None and self.token.resolve_value():
            connection["token"] = self.token
        store = JsonMetadataMilvusDocumentStore(
            metadata_field=s.metadata_field,
            category_field=self._filter_schema().category_field,
            vector_index=description.vector_index,
            connection_args=connection,
            collection_name=s.collection_name,
            primary_field=s.id_field,
            text_field=s.content_field,
            vector_field=s.vector_field,
            index_params={"metric_type": s.metric_type, "index_type": s.index_type, "params": {}},
            consistency_level=self.consistency_level,
        )
        # no init filters: the retriever's `filters or self.filters` must never re-apply an old filter
        return MilvusEmbeddingRetriever(document_store=store, filters=None)

    def _cached_haystack_retriever(self) -> MilvusEmbeddingRetriever:
        return self._cache.get("haystack_retriever", self._haystack_retriever)

    def connect(self, path: str) -> None:
        """
        Open a dense search path now rather than at the first search.

        :param path: `haystack` or `sdk`.
        :raises LookupError: If the collection does not exist.
        """
        if path == "haystack":
            self._cached_haystack_retriever()
        else:
            self._require()
            self.store.load()

    def dense_search(
        self,
        vector: list[float],
        top_k: int,
        filters: dict[str, Any] | None = None,
        path: str = "sdk",
    ) -> list[Document]:
        """
        Vector search.

        :param vector: The query vector.
        :param top_k: Number of hits.
        :param filters: Haystack filters on `meta.<key>` (values are always quoted literals, never pasted text).
        :param path: `haystack` (milvus-haystack) or `sdk` (pymilvus).
        :returns: Documents, best first: `score` is the normalized similarity, meta has `raw_score`,
            `score_semantics` and `retrieval_path`.
        :raises ValueError: For an unknown path.
        :raises LookupError: If the collection does not exist.
        """
        if path not in DENSE_PATHS:
            msg = f"path={path!r} is not a dense search path; use one of {list(DENSE_PATHS)}"
            raise ValueError(msg)
        search = self._search_haystack if path == "haystack" else self._search_sdk
        return self._again_if_replaced(lambda: search(vector, top_k, filters))

    def _again_if_replaced(self, call: Callable[[], T]) -> T:
        """
        Run a search; when its collection is gone because a rebuild replaced it between the index file's switch and
        this search, describe the collection the index now names and run it once more.
        """
        try:
            return call()
        except MilvusException as err:
            if err.code != COLLECTION_NOT_FOUND:
                raise
            _forget_descriptions(self.uri, [self._schema.collection_name])
            self._cache.clear()
            return call()

    def _search_haystack(self, vector: list[float], top_k: int, filters: dict[str, Any] | None) -> list[Document]:
        self.store.endpoint()  # a Milvus Lite host that went away is replaced (the retriever dials the same socket)
        retriever = self._cached_haystack_retriever()
        metric = self._schema.metric_type
        try:
            found = retriever.run(query_embedding=vector, filters=filters, top_k=top_k)["documents"]
        except MilvusException as err:
            if err.code != NOT_LOADED:
                raise
            self.store.unload()  # a restarted server forgot that it was loaded
            self.store.load()
            found = retriever.run(query_embedding=vector, filters=filters, top_k=top_k)["documents"]
        semantics = SEMANTICS[metric]
        out = []
        for doc in found:  # the retriever's Documents are this search's own: completed in place, not copied
            similarity = float(doc.score or 0.0)
            doc.meta.update(
                raw_score=raw_from_normalized(similarity, metric), score_semantics=semantics, retrieval_path="haystack"
            )
            clipped = min(1.0, max(0.0, similarity))
            out.append(doc if doc.score == clipped else replace(doc, score=clipped))
        return out

    def _search_sdk(self, vector: list[float], top_k: int, filters: dict[str, Any] | None) -> list[Document]:
        self._require()
        metric = self._schema.metric_type
        expr = json_filter_expression(filters, self._filter_schema())
        hits = self.store.search(vector, top_k=top_k, expr=expr)
        return [
            Document(
                id=hit["id"],
                content=hit["content"],
                score=normalized_similarity(hit["distance"], metric),
                meta={
                    **hit["metadata"],
                    "raw_score": hit["distance"],
                    "score_semantics": SEMANTICS[metric],
                    "retrieval_path": "sdk",
                },
            )
            for hit in hits
        ]

    def fetch_scored(self, ids: list[str], vector: list[float]) -> list[Document]:
        """
        Fetch chunks by id and score them against a query vector, as Milvus would (for chunks found another way).

        :param ids: Chunk ids.
        :param vector: The query vector.
        :returns: Documents with the normalized similarity as `score` and `raw_score`, `score_semantics` in meta;
            ids that do not exist are left out.
        """
        table = self.vector_table()
        dense_field = self._schema.vector_field
        table = table if table is not None and dense_field in table.fields else None
        rows = self.store.get_rows(ids, dense=table is None)
        if not rows:
            return []
        metric = self._schema.metric_type
        query = np.asarray(vector, dtype=np.float32)
        stored = np.asarray(
            [r["vector"] for r in rows] if table is None else self._dense_vectors([r["id"] for r in rows], table),
            dtype=np.float32,
        )
        raw = ((stored - query) ** 2).sum(axis=1) if metric == "L2" else stored @ query
        return [
            Document(
                id=row["id"],
                content=row["content"],
                score=normalized_similarity(float(value), metric),
                meta={
                    **row["metadata"],
                    "raw_score": float(value),
                    "score_semantics": SEMANTICS[metric],
                },
            )
            for row, value in zip(rows, raw, strict=True)
        ]

    def _dense_vectors(self, ids: list[str], table: VectorTable) -> list[Any]:
        """
        The dense vectors of `ids` from the index run's table, those it lacks from Milvus.

        The table holds every chunk of its index version, and a chunk id names its version: a chunk it lacks was
        written after the table (by a re-index under way).
        """
        found: dict[str, Any] = table.vectors(ids, self._schema.vector_field)
        missing = [i for i in ids if i not in found]
        if missing:
            found.update(self.store.get_vectors(missing)[self._schema.vector_field])
        return [found[i] for i in ids]

    def with_lexical(
        self,
        hits: list[Document],
        pairs: list[tuple[str, float]],
        query: str,
        vector: list[float],
        source: str = "auto",
    ) -> list[Document]:
        """
        Join a BM25 search's hits to a dense search's: every chunk's BM25 facts, and the chunks only BM25 found.

        Each chunk gets, in meta, its raw BM25 score `bm25` (0 when BM25 did not find it), the largest score the
        query's terms can reach in this collection `lexical_ideal` (from its term statistics), the search's best score
        `lexical_best`, and `lexical_coverage` = bm25 / lexical_ideal (at most 1: how much of the query it matches).
        The chunks only BM25 found are fetched and scored against the query vector (`fetch_scored`), with
        `retrieval_path` `bm25` and their `similarity`.

        :param hits: The dense hits (their meta is completed in place: they are the search's own).
        :param pairs: `lexical_search`'s `(chunk_id, bm25)` pairs, best first.
        :param query: The query text.
        :param vector: The query vector.
        :param source: The `lexical_source` the pairs came from (its term statistics are used).
        :returns: The dense hits, then the chunks only BM25 found; `hits` itself when BM25 found nothing.
        """
        if not pairs:
            return hits
        ideal = self.term_statistics(source).ideal_score(tokenize(query))
        best = pairs[0][1]
        bm25 = dict(pairs)
        dense = {d.id for d in hits}
        lexical_only = self.fetch_scored([cid for cid in bm25 if cid not in dense], vector)
        for doc in lexical_only:
            doc.meta.update(retrieval_path="bm25", similarity=doc.score)
        joined = hits + lexical_only
        for doc in joined:
            score = bm25.get(doc.id, 0.0)
            coverage = round(min(1.0, score / ideal), 4) if ideal > 0 else 0.0
            doc.meta.update({BM25_KEY: score, IDEAL_KEY: ideal, BEST_KEY: best, "lexical_coverage": coverage})
        return joined

    def candidate_vectors(self, ids: list[str], fields: Sequence[str]) -> dict[str, dict[str, Any]]:
        """
        Stored vectors of some chunks: from the index run's vector table, from the collection for any it lacks.

        :param ids: Chunk ids.
        :param fields: Vector fields of the collection (`vector_fields()`).
        :returns: Per field, the vector of every id found (a float32 array from the table, a list from the store).
        """
        table = self.vector_table()
        vectors: dict[str, dict[str, Any]] = {}
        for field in fields:
            found: dict[str, Any] = (
                dict(table.vectors(ids, field)) if table is not None and field in table.fields else {}
            )
            missing = [i for i in ids if i not in found]  # written after the table (an index run under way)
            if missing:
                found.update(self.store.get_vectors(missing, [field])[field])
            vectors[field] = {i: found[i] for i in ids if i in found}  # in the order asked, wherever each came from
        return vectors

    def chunks_of(self, versions: Mapping[str, str]) -> list[Document]:
        """
        The stored chunks of some document versions, with their vectors, as the writer takes them (to carry them
        into another collection).

        :param versions: Source to version.
        :returns: The chunks: `embedding` the dense vector, the cross-lingual one (where stored) in meta
            `CROSSLINGUAL_META_KEY`.
        """
        ids = [
            row["id"]
            for row in self.scan(keys=("source", "doc_version"))
            if versions.get(row["source"] or "") == row["doc_version"]
        ]
        s = self._schema
        fields = self.vector_fields(dense=False, crosslingual=True)
        chunks = []
        for row in self.store.get_rows(ids, vector_fields=fields):
            meta = dict(row["metadata"])
            if s.crosslingual_field in row["vectors"]:
                meta[CROSSLINGUAL_META_KEY] = row["vectors"][s.crosslingual_field]
            chunks.append(Document(id=row["id"], content=row["content"], embedding=row["vector"], meta=meta))
        return chunks

    def fetch(self, ids: list[str]) -> list[Document]:
        """
        Fetch chunks by id, without vectors.

        :param ids: Chunk ids.
        :returns: Documents in the order of `ids`; ids that do not exist are left out.
        """
        rows = {r["id"]: r for r in self.store.get_rows(ids, dense=False)}
        return [Document(id=i, content=rows[i]["content"], meta=rows[i]["metadata"]) for i in ids if i in rows]

    # --- lexical search -------------------------------------------------------------------------------------

    def _built_index(self) -> tuple[Bm25ChunkIndex, dict[str, dict[str, Any]], TermStatistics]:
        """In-process BM25 over every row of the collection, with each row's metadata and the term statistics."""
        rows = self.store.scan_metadata(keys=None, with_content=True)
        corpus = Bm25Corpus()
        for row in rows:
            corpus.add(row["id"], tokenize(row["content"]), str(row["metadata"].get(CATEGORY_KEY, "")))
        return corpus.index(), {r["id"]: r["metadata"] for r in rows}, corpus.statistics()

    def _local_index(self) -> Bm25ChunkIndex:
        """The index run's BM25 index file, else one built from the collection (once per index version)."""
        return self.bm25_index() or self._cache.get("local_bm25", self._built_index)[0]

    def _lexical_path(self, source: str) -> str:
        if source not in LEXICAL_SOURCES:
            msg = f"lexical_source={source!r} is not supported; use one of {list(LEXICAL_SOURCES)}"
            raise ValueError(msg)
        if source == "local" or (source == "auto" and self.bm25_index() is not None):
            return "local"
        if self.full_text_field():
            return "milvus"
        if source == "milvus":
            msg = (
                f"collection {self._schema.collection_name!r} has no BM25 full-text field; re-index it "
                "(`lookup-knowledge index --rebuild`) on Milvus 2.5+ or Milvus Lite, or set lexical_source to auto "
                "or local"
            )
            raise LookupError(msg)
        return "local"

    def lexical_search(
        self, query: str, top_k: int, filters: dict[str, Any] | None = None, source: str = "auto"
    ) -> tuple[list[tuple[str, float]], str]:
        """
        BM25 search, inside Milvus or in-process.

        :param query: The query text.
        :param top_k: Most hits.
        :param filters: Haystack filters on `meta.<key>`.
        :param source: `milvus` (the collection's BM25 full-text field), `local` (in-process: the index run's BM25
            index file, else an index built from the collection's chunks once per index version) or `auto` (local
            with the index file, else milvus when the collection has the field, else local).
        :returns: `(chunk_id, bm25_score)` pairs, best first, and the path that ran (`milvus` or `local`).
        :raises LookupError: If `source` is `milvus` and the collection has no full-text field, or the collection
            does not exist.
        """
        path = self._lexical_path(source)
        if path == "milvus":
            terms = lexical_text(query)
            if not terms:
                return [], path
            return self._again_if_replaced(
                lambda: self.store.full_text_search(
                    terms,
                    self.full_text_field(),
                    top_k=top_k,
                    expr=json_filter_expression(filters, self._filter_schema()),
                )
            ), path
        category = _category_of(filters)
        if filters is None or category is not None:
            return self._local_index().search(query, top_k, category=category), path
        # any other filter: the built index, which has every chunk's metadata to test it on
        index, metadata, _ = self._cache.get("local_bm25", self._built_index)
        pairs = index.search(query, top_k=top_k * 5)
        pairs = [(cid, s) for cid, s in pairs if document_matches_filter(filters, Document(meta=metadata[cid]))]
        return pairs[:top_k], path

    def prepare_lexical(self, source: str = "auto", statistics: bool = False) -> str:
        """
        Read now what the first lexical search would otherwise wait for: the in-process index, or term statistics,
        and Milvus' own BM25 index (Milvus Lite builds each segment's at its first search: seconds at 100k chunks).
        Once per index version: `Pipeline.run` warms every component up before every run.

        :param source: The lexical source, as for `lexical_search`.
        :param statistics: Also count the term statistics (needed to normalize BM25 by the query's ideal score).
        :returns: The path lexical searches take (`milvus` or `local`).
        """
        path = self._lexical_path(source)
        if path == "local":
            self._local_index()
        if statistics:
            self.term_statistics(source)
        if path == "milvus":
            self._cache.get("milvus_bm25_warmed", lambda: self.lexical_search(WARM_UP_QUERY, 1, source="milvus"))
        return path

    def term_statistics(self, source: str = "auto") -> TermStatistics:
        """
        BM25 term statistics of the collection's chunks: as the index run counted them, else (an index written
        before they were stored, or by another tool) counted here once per index version; those of the built index
        when lexical searches use it.

        :param source: The lexical source in use; with the in-process index the statistics come from it.
        :returns: The statistics.
        """
        if self._lexical_path(source) == "local" and self.bm25_index() is None:
            return self._cache.get("local_bm25", self._built_index)[2]
        return self._cache.get("term_statistics", self._count_terms)

    def _count_terms(self) -> TermStatistics:
        statistics = self.statistics()
        if statistics is not None and statistics.term_counts is not None:  # counted by the index run
            return statistics.term_counts.term_statistics()
        rows = self.store.scan_metadata(keys=(), with_content=True)
        return TermStatistics(tokenize(r["content"]) for r in rows)

    # --- statistics ---------------------------------------------------------------------------------------------

    def statistics(self) -> CollectionStatistics | None:
        """
        The collection's statistics (language centroids, noise ceiling) as the last index run recorded them.

        :returns: The statistics, or None for a collection indexed before they existed or by another tool.
        """
        return self._versions.get()[0].statistics

    def compute_statistics(
        self,
        embed_queries: Callable[[list[str]], np.ndarray],
        embedding_model: str,
        active: dict[str, str],
        folder: str | Path | None = None,
    ) -> CollectionStatistics:
        """
        Count the statistics over the collection's active chunks (one pass over the rows, a batch at a time).

        :param embed_queries: The lookup embedder's query encoder.
        :param embedding_model: Its name.
        :param active: The active version per source; rows of other versions are left out, rows without a
            version (written by another tool) counted.
        :param folder: Also write, into this folder, the active chunks' vectors (every vector field) as a
            `VectorTable` file and their BM25 index (`Bm25ChunkIndex.save`), named in the statistics' `vector_table`
            and `bm25_index` (None: neither).
        :returns: The statistics.
        """
        s = self._schema
        fields = self.vector_fields(dense=True, crosslingual=True) if folder is not None else [s.vector_field]
        dimensions = {s.vector_field: s.dimension, s.crosslingual_field: s.crosslingual_dimension}
        parts: list[np.ndarray] = []
        corpus = Bm25Corpus()

        def batches() -> Iterator[list[tuple[str, list[float], list[str]]]]:
            for rows in self.store.iter_rows(with_content=True, vector_fields=fields):
                kept = [row for row in rows if _is_active(row["metadata"], active)]
                batch = [(row["content"], row["vectors"][s.vector_field], tokenize(row["content"])) for row in kept]
                if folder is not None and kept:
                    parts.append(
                        table_rows([(row["id"], row["vectors"]) for row in kept], {f: dimensions[f] for f in fields})
                    )
                    for row, (_, _, terms) in zip(kept, batch, strict=True):
                        corpus.add(row["id"], terms, str(row["metadata"].get(CATEGORY_KEY, "")))
                yield batch

        statistics = compute_statistics(batches(), embed_queries, embedding_model)
        if folder is not None and parts:
            statistics.vector_table = VectorTable.write(folder, parts)
            statistics.bm25_index = corpus.index().save(folder)
        return statistics

    def vector_table(self) -> VectorTable | None:
        """
        The active chunks' vectors as the index run wrote them, opened once per index version.

        :returns: The table, or None when the index names none, or its file is missing or damaged (logged: lookups
            then read the vectors from Milvus with each search, as before tables existed).
        """
        return self._cache.get("vector_table", self._open_vector_table)

    def _open_vector_table(self) -> VectorTable | None:
        statistics = self.statistics()
        if statistics is None or not statistics.vector_table:
            return None
        try:
            return VectorTable.open(Path(self.index_path).parent, statistics.vector_table)
        except ValueError as err:
            logger.warning("Reading vectors from Milvus instead of the vector table: {error}", error=err)
            return None

    def bm25_index(self) -> Bm25ChunkIndex | None:
        """
        The active chunks' BM25 index as the index run wrote it, opened once per index version.

        :returns: The index, or None when the index names none, or it is missing or damaged (logged: lexical
            searches then run inside Milvus, or on an index built from the collection, as before index files existed).
        """
        return self._cache.get("bm25_index", self._open_bm25_index)

    def _open_bm25_index(self) -> Bm25ChunkIndex | None:
        index = self._versions.get()[0]
        statistics = index.statistics
        if statistics is None or not statistics.bm25_index or index.collection_name != self._schema.collection_name:
            return None  # none written, or written for another collection than this one
        try:
            return Bm25ChunkIndex.open(Path(self.index_path).parent, statistics.bm25_index)
        except ValueError as err:
            logger.warning("Not using the index run's BM25 index: {error}", error=err)
            return None

    # --- versions and scans ---------------------------------------------------------------------------------

    def active_versions(self) -> Mapping[str, str]:
        """
        The active version per source, as the knowledge index file says now (read once per index version).

        :returns: Source to version (read-only); empty before anything was indexed.
        """
        return self._cache.get("active_versions", lambda: MappingProxyType(self._versions.get()[0].active_versions()))

    def drop_superseded(
        self, docs: list[Document], searched_under: Mapping[str, str] | None = None
    ) -> tuple[list[Document], int]:
        """
        Keep, per document, the chunks of one version: the active one, else the one active when the search began.

        A re-index by another process can switch versions while a search runs: a search that began before the new
        chunks were written finds only the old ones, which the index no longer names. With `searched_under` (the
        `active_versions` read before the search) such a document keeps its old version instead of vanishing from
        the result; a document whose new version was found keeps only that one. Rows without a version (written by
        another tool) are kept.

        :param docs: Retrieved chunks with `source` and `doc_version` in their meta.
        :param searched_under: The active versions when the search began (None: only the current ones count).
        :returns: The kept chunks and how many were dropped.
        """
        active = self.active_versions()
        if not active:
            return docs, 0
        searched = searched_under or {}
        found = {(d.meta.get("source", ""), d.meta.get("doc_version")) for d in docs}
        # only the found documents' sources: the index may name 10k documents, a lookup finds a few dozen chunks
        kept_version = {}
        for source, _ in found:
            current = active.get(source)
            if current is not None and ((source, current) in found or source not in searched):
                kept_version[source] = current
            elif source in searched:
                kept_version[source] = searched[source]
        kept = [d for d in docs if _is_active(d.meta, kept_version)]
        return kept, len(docs) - len(kept)

    def scan(self, keys: tuple[str, ...] = ("source", "doc_version"), with_content: bool = False) -> list[dict]:
        """
        Every row's id and some metadata keys, never the vectors.

        :param keys: Metadata keys to return.
        :param with_content: Also return the chunk text as `content`.
        :returns: `{id, <keys>...}` per row.
        """
        self._require()
        return self.store.scan_metadata(keys=keys, with_content=with_content)

    def count(self) -> int:
        """
        :returns: The number of rows (0 when the collection does not exist).
        """
        return self.store.count() if self.exists() else 0
