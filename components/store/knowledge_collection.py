"""`KnowledgeCollection`: one Milvus collection of knowledge chunks, the store every component reads and writes.

It implements `KnowledgeStore` (`components/store/knowledge_store.py`), the one interface the retriever, the
rankers, the sidecar, the chunk writer, the indexer and the service use. Its jobs live in one module each: the schema
(`schema.py`), the reads (`collection_reads.py`: dense search on either path, BM25 inside Milvus or in-process,
chunks and vectors by id), the writes (`collection_writes.py`: creating, filling, cleaning, dropping, counting the
statistics), and here the configuration, the connection, the active document versions and one cache of what is
derived from the collection, keyed by the index version. Milvus is named nowhere else outside `components/store/`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from types import MappingProxyType
from typing import Any

from haystack import default_from_dict, default_to_dict, logging
from haystack.utils import Secret

from components.core.environment import MILVUS_TOKEN
from components.store.collection_base import (
    DENSE_PATHS,
    LEXICAL_SOURCES,
    REBUILD_MARK,
    CollectionMismatchError,
    shared_description,
)
from components.store.collection_reads import CollectionReads
from components.store.collection_statistics import CollectionStatistics
from components.store.collection_writes import CollectionWrites, WriteReport
from components.store.knowledge_index import CachedKnowledgeIndex, IndexVersionCache
from components.store.lexical import Bm25ChunkIndex
from components.store.milvus_chunk_store import CollectionDescription, MilvusChunkStore
from components.store.schema import CollectionSchema
from components.store.vector_table import VectorTable

logger = logging.getLogger(__name__)

__all__ = [
    "DENSE_PATHS",
    "LEXICAL_SOURCES",
    "CollectionMismatchError",
    "KnowledgeCollection",
    "WriteReport",
]


class KnowledgeCollection(CollectionReads, CollectionWrites):
    """
    One Milvus collection of knowledge chunks: its schema, its connection, and every way of reading and writing it.

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
        token: Secret | None = Secret.from_env_var(MILVUS_TOKEN.name, strict=False),  # noqa: B008 - Haystack's idiom
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

    def family(self) -> str:
        """
        :returns: The configured collection name, of which a rebuild writes new collections (`<family>__r<n>`).
        """
        name = self.collection_name or CollectionSchema().collection_name
        family, mark, number = name.rpartition(REBUILD_MARK)
        return family if mark and family and number.isdigit() else name

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
        found = shared_description(self.uri, wanted.collection_name, self.index_version(), self.store)
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

    def statistics(self) -> CollectionStatistics | None:
        """
        The collection's statistics (language centroids, noise ceiling) as the last index run recorded them.

        :returns: The statistics, or None for a collection indexed before they existed or by another tool.
        """
        return self._versions.get()[0].statistics

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

    def active_versions(self) -> Mapping[str, str]:
        """
        The active version per source, as the knowledge index file says now (read once per index version).

        :returns: Source to version (read-only); empty before anything was indexed.
        """
        return self._cache.get("active_versions", lambda: MappingProxyType(self._versions.get()[0].active_versions()))
