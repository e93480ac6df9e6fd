"""The knowledge collection through pymilvus: create it, write and delete rows, scan, search, full-text search.

The schema (`components.store.schema.CollectionSchema`) is the Java original's, plus the full-text fields where
Milvus supports them (2.5+ and Milvus Lite): a `lexical` VARCHAR holding the chunk's BM25 terms and a `sparse` field
that Milvus' BM25 function fills from it; and a second vector field, `crosslingual`, for ranking across languages.
"""

from __future__ import annotations

import logging as stdlib_logging
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from haystack import logging
from pymilvus import DataType, Function, FunctionType, MilvusClient, MilvusException

from components.store.lexical import K1, LEXICAL_MAX_BYTES, B
from components.store.lite_host import LiteHostLease
from components.store.schema import CATEGORY_MAX_BYTES, CollectionSchema, client_options, is_lite_uri, string_literal

logger = logging.getLogger(__name__)


class _DropLiteIteratorNoise(stdlib_logging.Filter):
    """Milvus Lite lacks the AllocTimestamp call that query iterators try first; the fallback is correct."""

    def filter(self, record: stdlib_logging.LogRecord) -> bool:
        message = record.getMessage()
        return "mvccTs" not in message and "Method not implemented" not in message


for _name in ("pymilvus.client.iterator.query_iterator", "grpc._server"):
    stdlib_logging.getLogger(_name).addFilter(_DropLiteIteratorNoise())

_DELETE_BATCH = 500
#: pymilvus raises code 2 ("Fail connecting to server") when the channel is gone
_UNAVAILABLE = 2
#: Milvus answers 101 ("collection ... is in state 'released'") when a restarted server has not loaded it again
NOT_LOADED = 101
# The terms are made by `components.store.lexical.tokenize` (English stems, Chinese character bigrams) and joined by
# spaces, so Milvus only has to split on whitespace: its built-in analyzers alone measured worse
# (benchmarks/milvus_analyzers.py: jieba nDCG@10 0.685 vs 0.728 on gitlab_handbook; `standard` cannot split Chinese).
_LEXICAL_ANALYZER = {"tokenizer": "standard"}
# The in-process fallback's k1 and b, so both rank alike. Milvus Lite 3.2.2 ignores these index parameters, but its
# own BM25 was measured to rank exactly like k1 1.5 / b 0.75 (and unlike k1 1.2), so the two agree there as well.
_BM25_PARAMS = {"bm25_k1": K1, "bm25_b": B}


@dataclass(frozen=True)
class CollectionDescription:
    """What an existing collection is, as Milvus describes it."""

    fields: dict[str, DataType]
    dimension: int | None  # of the configured vector field, None when it has none
    metric_type: str | None  # of the vector field's index, None when it has none
    full_text: tuple[str, str] | None  # (text field, sparse field) of its BM25 function
    vector_index: dict[str, Any] | None = None  # the vector field's index as Milvus describes it


class MilvusChunkStore:
    """
    A thin, reusable wrapper around `MilvusClient` for the knowledge collection.

    ### Usage example

    ```python
    store = MilvusChunkStore("data/milvus.db", CollectionSchema())
    store.ensure_collection()
    print(store.count())
    ```
    """

    def __init__(
        self, uri: str, schema: CollectionSchema, token: str | None = None, consistency_level: str = "Strong"
    ) -> None:
        """
        Create the wrapper; nothing is connected until first use.

        :param uri: A Milvus Lite `.db` path or a server URI such as `http://127.0.0.1:19530`.
        :param schema: The collection's names and parameters.
        :param token: Optional server token (never logged).
        :param consistency_level: Read consistency. `Strong` by default: pymilvus defaults to `Bounded`, under
            which a server may answer from before the latest writes.
        """
        schema.validate()
        self.uri = uri
        self.schema = schema
        self.consistency_level = consistency_level
        self._token = token
        self._client: MilvusClient | None = None
        self._lease: LiteHostLease | None = None
        self._loaded = False

    def endpoint(self) -> str:
        """
        The address to dial: a server URI as given; for a Milvus Lite folder, the folder's host (`lite_host`), which
        is started when none runs and which this store holds a lease on until `close`.

        :returns: The URI for `MilvusClient`.
        :raises LiteHostError: If a Milvus Lite folder's host cannot be started or reached.
        """
        if not is_lite_uri(self.uri):
            return self.uri
        if self._lease is None or not self._lease.held:
            Path(self.uri).parent.mkdir(parents=True, exist_ok=True)
            self._lease = LiteHostLease.acquire(self.uri)
        return self._lease.uri

    @property
    def client(self) -> MilvusClient:
        """The connected client (connects on first use; again when the folder's Milvus Lite host went away)."""
        if self._lease is not None and not self._lease.held:  # it ended: the next host is found or started
            self.close()
        if self._client is None:
            kwargs: dict[str, Any] = {"uri": self.endpoint(), **client_options(self.uri)}
            if self._token:
                kwargs["token"] = self._token
            self._client = MilvusClient(**kwargs)
        return self._client

    def _search(self, *args: Any, **kwargs: Any) -> Any:
        # a connection the server dropped (Milvus Lite's gRPC server answers bursts of keep-alive pings with
        # GOAWAY, a restarted server has a new channel) is opened again once before the search counts as failed;
        # a restarted server has forgotten that the collection was loaded
        try:
            return self.client.search(*args, **kwargs)
        except MilvusException as err:
            if err.code == _UNAVAILABLE:
                self.close()
            elif err.code == NOT_LOADED:
                self.unload()
            else:
                raise
            self.load()
            return self.client.search(*args, **kwargs)

    def close(self) -> None:
        """Release the connection (and the lease on a Milvus Lite folder's host)."""
        if self._client is not None:
            self._client.close()
        self._client = None
        self._loaded = False
        if self._lease is not None:
            self._lease.release()
            self._lease = None

    def exists(self) -> bool:
        """Tell whether the collection exists."""
        return bool(self.client.has_collection(self.schema.collection_name))

    def ensure_collection(self) -> bool:
        """
        Create the collection with the configured schema and indexes if it does not exist.

        With `lexical_field` and `sparse_field`, the collection gets a BM25 function from the first into the second;
        with `crosslingual_field`, a second vector field. A Milvus that cannot create one of them (BM25 before 2.5,
        several vector fields before 2.4) gets the collection without it: lexical retrieval then runs in-process, and
        answers in another language rank without the cross-lingual bonus.

        :returns: Whether the collection was created.
        """
        s = self.schema
        if self.exists():
            return False
        variants = [
            (full_text, crosslingual)
            for full_text in ((True, False) if s.sparse_field else (False,))
            for crosslingual in ((True, False) if s.crosslingual_field else (False,))
        ]
        for full_text, crosslingual in sorted(variants, key=lambda v: -(v[0] + v[1])):
            try:
                self._create(full_text=full_text, crosslingual=crosslingual)
                return True
            except MilvusException as err:
                if (full_text, crosslingual) == (False, False):
                    raise
                logger.warning(
                    "This Milvus cannot create {collection} with full-text search {full_text} and cross-lingual "
                    "vectors {crosslingual} ({error}); trying with less",
                    collection=s.collection_name,
                    full_text=full_text,
                    crosslingual=crosslingual,
                    error=err,
                )
                self.drop()  # a failed create may leave a collection without indexes
        return True

    def _create(self, full_text: bool, crosslingual: bool) -> None:
        s = self.schema
        schema = self.client.create_schema(auto_id=False, enable_dynamic_field=False)
        schema.add_field(s.id_field, DataType.VARCHAR, is_primary=True, max_length=512)
        schema.add_field(s.content_field, DataType.VARCHAR, max_length=65535)
        schema.add_field(s.vector_field, DataType.FLOAT_VECTOR, dim=s.dimension)
        schema.add_field(s.metadata_field, DataType.JSON)
        if s.category_field:
            # no default: a row written without it would silently fall out of every category filter
            schema.add_field(s.category_field, DataType.VARCHAR, max_length=CATEGORY_MAX_BYTES)
        index = self.client.prepare_index_params()
        # named after its field, so that one request describes it (`_vector_index`); a server names it otherwise
        index.add_index(
            field_name=s.vector_field, index_name=s.vector_field, index_type=s.index_type, metric_type=s.metric_type
        )
        if crosslingual:
            # read by id only (never searched), but Milvus loads no collection with an unindexed vector field: FLAT,
            # which keeps the vectors as they are, where a graph index would be built for nothing
            schema.add_field(s.crosslingual_field, DataType.FLOAT_VECTOR, dim=s.crosslingual_dimension)
            index.add_index(
                field_name=s.crosslingual_field, index_name=s.crosslingual_field, index_type="FLAT", metric_type="IP"
            )
        if full_text:
            schema.add_field(
                s.lexical_field,
                DataType.VARCHAR,
                max_length=LEXICAL_MAX_BYTES,
                default_value="",  # rows written by other tools need not know the field
                enable_analyzer=True,
                analyzer_params=_LEXICAL_ANALYZER,
            )
            schema.add_field(s.sparse_field, DataType.SPARSE_FLOAT_VECTOR)
            schema.add_function(
                Function(
                    name=f"{s.sparse_field}_bm25",
                    function_type=FunctionType.BM25,
                    input_field_names=[s.lexical_field],
                    output_field_names=[s.sparse_field],
                )
            )
            index.add_index(
                field_name=s.sparse_field,
                index_name=s.sparse_field,
                index_type="SPARSE_INVERTED_INDEX",
                metric_type="BM25",
                params=_BM25_PARAMS,
            )
        self.client.create_collection(s.collection_name, schema=schema, consistency_level=self.consistency_level)
        # not `create_collection(index_params=...)`: pymilvus then sleeps 0.5 s before it first asks whether each
        # index of the empty collection is built (1.5 s of a fresh index run of knowledge/); `load` waits for them
        self.client.create_index(s.collection_name, index, sync=False)
        self.load()
        logger.info(
            "Created Milvus collection {collection} (full-text search: {full_text}, cross-lingual vectors: "
            "{crosslingual})",
            collection=s.collection_name,
            full_text=full_text,
            crosslingual=crosslingual,
        )

    def full_text_fields(self) -> tuple[str, str] | None:
        """
        Find the collection's BM25 function.

        :returns: `(text_field, sparse_field)` of the BM25 function, or None when the collection has none (an
            older Milvus, or a collection created without one).
        """
        return _full_text(self.client.describe_collection(self.schema.collection_name))

    def describe(self) -> CollectionDescription:
        """
        Describe the existing collection: its fields, vector dimension, metric and BM25 function.

        :returns: The description.
        """
        s = self.schema
        description = self.client.describe_collection(s.collection_name)
        fields = {str(f["name"]): f["type"] for f in description.get("fields") or []}
        dimension = next(
            (int(f["params"]["dim"]) for f in description.get("fields") or [] if f["name"] == s.vector_field), None
        )
        index = self._vector_index()
        metric = str(index["metric_type"]) if index and index.get("metric_type") else None
        return CollectionDescription(
            fields=fields,
            dimension=dimension,
            metric_type=metric,
            full_text=_full_text(description),
            vector_index=index,
        )

    def _vector_index(self) -> dict[str, Any] | None:
        """
        The vector field's index, in one request where it is named after its field (as this store names it).

        Milvus Lite counts every row of the collection to describe an index (0.5 s at 100k chunks), so the indexes
        are listed only when the index has another name (created by another tool).
        """
        s = self.schema
        try:
            index = self.client.describe_index(s.collection_name, s.vector_field)
        except MilvusException:  # no index of that name, and several others (Milvus Lite answers with all of them)
            index = None
        if index is not None and index.get("field_name") == s.vector_field:
            return dict(index)
        names = self.client.list_indexes(s.collection_name, field_name=s.vector_field)
        index = self.client.describe_index(s.collection_name, names[0]) if names else None
        return dict(index) if index else None

    def drop(self) -> None:
        """Drop the collection if it exists."""
        if self.exists():
            self.client.drop_collection(self.schema.collection_name)
        self._loaded = False

    def list_collections(self) -> list[str]:
        """
        :returns: The names of every collection of the database.
        """
        return list(self.client.list_collections())

    def drop_named(self, name: str) -> None:
        """
        Drop another collection of the database, if it exists.

        :param name: Its name.
        """
        if self.client.has_collection(name):
            self.client.drop_collection(name)
        if name == self.schema.collection_name:
            self._loaded = False

    def load(self) -> None:
        """Load the collection for search (a new process must do this once)."""
        if not self._loaded:
            self.client.load_collection(self.schema.collection_name)
            self._loaded = True

    def unload(self) -> None:
        """Forget that the collection was loaded: the next read loads it again (it may have been re-created)."""
        self._loaded = False

    def insert(self, rows: list[dict[str, Any]]) -> None:
        """
        Insert rows of the form `{id, content, vector, metadata}` (keys are the configured field names).

        :param rows: The rows.
        """
        if rows:
            self.client.insert(self.schema.collection_name, rows)

    def delete_ids(self, ids: Iterable[str]) -> None:
        """
        Delete rows by primary key.

        :param ids: Primary keys.
        """
        pending = list(ids)
        for start in range(0, len(pending), _DELETE_BATCH):
            batch = pending[start : start + _DELETE_BATCH]
            expr = f"{self.schema.id_field} in [{', '.join(string_literal(i) for i in batch)}]"
            self.client.delete(self.schema.collection_name, filter=expr)

    def flush(self) -> None:
        """Persist pending writes (unflushed data is searched much more slowly by Milvus Lite)."""
        self.client.flush(self.schema.collection_name)

    def count(self) -> int:
        """Return the number of rows."""
        self.load()
        res = self.client.query(
            self.schema.collection_name,
            filter="",
            output_fields=["count(*)"],
            consistency_level=self.consistency_level,
        )
        return int(res[0]["count(*)"])

    def scan_metadata(
        self, keys: tuple[str, ...] | None = ("source", "doc_version"), with_content: bool = False
    ) -> list[dict[str, Any]]:
        """
        Return `{id, <keys>...}` (and `content`) for every row, never the vectors.

        :param keys: Metadata keys to return; None returns the whole metadata as `metadata`.
        :param with_content: Also return the chunk text as `content`.
        :returns: One dict per row.
        """
        rows: list[dict[str, Any]] = []
        for batch in self.iter_rows(with_content=with_content):
            for row in batch:
                meta = row["metadata"]
                item = {"id": row["id"]}
                item.update({"metadata": meta} if keys is None else {k: meta.get(k) for k in keys})
                if with_content:
                    item["content"] = row["content"]
                rows.append(item)
        return rows

    def iter_rows(
        self, with_content: bool = False, vector_fields: Sequence[str] = (), batch_size: int = 1000
    ) -> Iterator[list[dict[str, Any]]]:
        """
        Read every row, one batch at a time (memory stays at one batch whatever the collection's size).

        :param with_content: Also return the chunk text as `content`.
        :param vector_fields: Vector fields returned as `vectors`: `{field: vector}`.
        :param batch_size: Rows per batch.
        :returns: Batches of `{id, metadata[, content][, vectors]}`.
        """
        self.load()
        s = self.schema
        fields = [s.id_field, s.metadata_field]
        fields += [s.content_field] if with_content else []
        fields += list(vector_fields)
        iterator = self.client.query_iterator(
            s.collection_name,
            batch_size=batch_size,
            filter="",
            output_fields=fields,
            consistency_level=self.consistency_level,
        )
        try:
            while batch := iterator.next():
                yield [
                    {
                        "id": row[s.id_field],
                        "metadata": row.get(s.metadata_field) or {},
                        **({"content": row.get(s.content_field, "")} if with_content else {}),
                        **({"vectors": {f: list(row[f]) for f in vector_fields}} if vector_fields else {}),
                    }
                    for row in batch
                ]
        finally:
            iterator.close()

    def get_rows(self, ids: list[str], vector_fields: Sequence[str] = (), dense: bool = True) -> list[dict[str, Any]]:
        """
        Fetch rows by primary key, vectors included.

        :param ids: Primary keys.
        :param vector_fields: Other vector fields read in the same request.
        :param dense: Read the dense vector too (False: the caller has it; pymilvus decodes vectors float by float).
        :returns: `{id, content, metadata, vector, vectors}` per row found (`vector`: None without `dense`;
            `vectors`: `{field: vector}` of `vector_fields`).
        """
        if not ids:
            return []
        self.load()
        s = self.schema
        others = [f for f in vector_fields if f != s.vector_field]
        rows = self.client.get(
            s.collection_name,
            ids=ids,
            output_fields=[s.content_field, s.metadata_field, *([s.vector_field] if dense else []), *others],
            consistency_level=self.consistency_level,
        )
        return [
            {
                "id": row[s.id_field],
                "content": row.get(s.content_field, ""),
                "metadata": row.get(s.metadata_field) or {},
                "vector": list(row[s.vector_field]) if dense else None,
                "vectors": {f: list(row[f]) for f in vector_fields},
            }
            for row in rows
        ]

    def get_vectors(self, ids: list[str], fields: Sequence[str] = ()) -> dict[str, dict[str, list[float]]]:
        """
        Fetch only vectors of some rows, several vector fields in one request.

        :param ids: Primary keys.
        :param fields: The vector fields read (default: the schema's `vector_field`).
        :returns: Per field, the vector of every id found.
        """
        s = self.schema
        fields = list(fields or [s.vector_field])
        if not ids:
            return {field: {} for field in fields}
        self.load()
        rows = self.client.get(
            s.collection_name, ids=ids, output_fields=fields, consistency_level=self.consistency_level
        )
        return {field: {row[s.id_field]: list(row[field]) for row in rows} for field in fields}

    def search(self, vector: list[float], top_k: int, expr: str = "") -> list[dict[str, Any]]:
        """
        Vector search with an optional filter expression.

        :param vector: The query vector.
        :param top_k: Number of hits.
        :param expr: A filter expression built only with `string_literal` for values.
        :returns: Hits as `{id, distance, content, metadata}`.
        """
        self.load()
        s = self.schema
        res = self._search(
            s.collection_name,
            data=[vector],
            anns_field=s.vector_field,
            limit=top_k,
            filter=expr,
            output_fields=[s.content_field, s.metadata_field],
            search_params={"metric_type": s.metric_type},
            consistency_level=self.consistency_level,
        )
        return [
            {
                "id": hit.get(s.id_field, hit.get("id")),
                "distance": float(hit["distance"]),
                "content": hit["entity"].get(s.content_field, ""),
                "metadata": hit["entity"].get(s.metadata_field) or {},
            }
            for hit in res[0]
        ]

    def full_text_search(self, text: str, sparse_field: str, top_k: int, expr: str = "") -> list[tuple[str, float]]:
        """
        BM25 search inside Milvus on the collection's full-text field.

        :param text: The query's terms, made like the indexed ones (`lexical_text`).
        :param sparse_field: The BM25 function's output field (from `full_text_fields`).
        :param top_k: Number of hits.
        :param expr: A filter expression built only with `string_literal` for values.
        :returns: `(id, bm25_score)` pairs, best first.
        """
        self.load()
        res = self._search(
            self.schema.collection_name,
            data=[text],
            anns_field=sparse_field,
            limit=top_k,
            filter=expr,
            output_fields=[],
            search_params={"metric_type": "BM25"},
            consistency_level=self.consistency_level,
        )
        # Milvus Lite reports BM25 scores negated (it ranks by ascending distance); the ranking is the same
        return [(str(hit.get(self.schema.id_field, hit.get("id"))), abs(float(hit["distance"]))) for hit in res[0]]


def _full_text(description: dict[str, Any]) -> tuple[str, str] | None:
    for fn in description.get("functions") or []:
        if _is_bm25(fn.get("type")) and fn.get("input_field_names") and fn.get("output_field_names"):
            return str(fn["input_field_names"][0]), str(fn["output_field_names"][0])
    return None


def _is_bm25(function_type: Any) -> bool:
    # describe_collection reports the type as the enum, its name or its number, depending on the server
    return function_type in (FunctionType.BM25, FunctionType.BM25.value, "BM25")
