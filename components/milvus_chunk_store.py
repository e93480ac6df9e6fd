"""Access to the knowledge collection through pymilvus, with the original schema.

The schema is the Java original's: a VARCHAR primary key `id`, the chunk text `content`, a FLOAT_VECTOR
`vector` and a JSON `metadata` column. Field names, dimension, metric and index are configurable, so a
collection created by another tool with that schema is used as it is. Where the Milvus version supports it
(2.5+ and Milvus Lite), the collection also gets full-text search inside Milvus: a `lexical` VARCHAR holding the
chunk's BM25 terms and a `sparse` field that Milvus' BM25 function fills from it.
"""

from __future__ import annotations

import json
import logging as stdlib_logging
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from haystack import logging
from pymilvus import DataType, Function, FunctionType, MilvusClient, MilvusException

from components.bm25_index import K1, B, tokenize

logger = logging.getLogger(__name__)


class _DropLiteIteratorNoise(stdlib_logging.Filter):
    """Milvus Lite lacks the AllocTimestamp call that query iterators try first; the fallback is correct."""

    def filter(self, record: stdlib_logging.LogRecord) -> bool:
        message = record.getMessage()
        return "mvccTs" not in message and "Method not implemented" not in message


for _name in ("pymilvus.client.iterator.query_iterator", "grpc._server"):
    stdlib_logging.getLogger(_name).addFilter(_DropLiteIteratorNoise())

METRICS = ("L2", "IP", "COSINE")
_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_DELETE_BATCH = 500
_LEXICAL_MAX_BYTES = 65535
# The terms are made by `components.bm25_index.tokenize` (English stems, Chinese character bigrams) and joined by
# spaces, so Milvus only has to split on whitespace: its built-in analyzers alone measured worse
# (benchmarks/milvus_analyzers.py: jieba nDCG@10 0.685 vs 0.728 on gitlab_handbook; `standard` cannot split Chinese).
_LEXICAL_ANALYZER = {"tokenizer": "standard"}
# The in-process fallback's k1 and b, so both rank alike. Milvus Lite 3.2.2 ignores these index parameters, but its
# own BM25 was measured to rank exactly like k1 1.5 / b 0.75 (and unlike k1 1.2), so the two agree there as well.
_BM25_PARAMS = {"bm25_k1": K1, "bm25_b": B}


def string_literal(value: str) -> str:
    """
    Quote a value as a Milvus expression string literal, escaping quotes and backslashes.

    User text only ever reaches an expression through this function, so it is matched literally.

    :param value: Any string.
    :returns: A double-quoted literal.
    """
    return json.dumps(str(value), ensure_ascii=False)


def validate_metric(metric_type: str) -> None:
    """
    Check a metric name.

    :param metric_type: `L2`, `IP` or `COSINE`.
    :raises ValueError: If the metric is not supported.
    """
    if metric_type not in METRICS:
        msg = f"metric_type={metric_type!r} is not supported; use one of {list(METRICS)}"
        raise ValueError(msg)


def is_lite_uri(uri: str) -> bool:
    """
    Tell whether a URI names a Milvus Lite database file rather than a server.

    :param uri: A Milvus URI.
    :returns: True for a local `.db` path.
    """
    return not re.match(r"^[a-z]+://", uri)


@dataclass(frozen=True)
class CollectionSchema:
    """Names and parameters of the knowledge collection."""

    collection_name: str = "knowledge_chunks"
    dimension: int = 384
    metric_type: str = "L2"
    index_type: str = "AUTOINDEX"
    id_field: str = "id"
    content_field: str = "content"
    vector_field: str = "vector"
    metadata_field: str = "metadata"
    lexical_field: str = ""
    sparse_field: str = ""

    @classmethod
    def from_attributes(cls, owner: object) -> CollectionSchema:
        """
        Build and validate the schema from an object's attributes of the same names (a component's init parameters).

        :param owner: An object with some of the attributes `collection_name`, `dimension`, `metric_type`, ...
        :returns: The schema; attributes the object lacks keep their defaults.
        :raises ValueError: Naming the bad parameter and the fix.
        """
        schema = cls(**{f.name: getattr(owner, f.name) for f in fields(cls) if hasattr(owner, f.name)})
        schema.validate()
        return schema

    def validate(self) -> None:
        """
        Check every name and parameter.

        :raises ValueError: Naming the bad parameter and the fix.
        """
        validate_metric(self.metric_type)
        if self.dimension < 1:
            msg = f"dimension={self.dimension!r} must be positive; use the embedder's dimension (384 for e5-small)"
            raise ValueError(msg)
        for name in ("collection_name", "id_field", "content_field", "vector_field", "metadata_field"):
            value = getattr(self, name)
            if not _KEY.match(value):
                msg = f"{name}={value!r} must be a letter or '_' followed by letters, digits or '_'"
                raise ValueError(msg)
        for name in ("lexical_field", "sparse_field"):
            value = getattr(self, name)
            if value and not _KEY.match(value):
                msg = f"{name}={value!r} must be an identifier, or '' for no full-text search in Milvus"
                raise ValueError(msg)
        if bool(self.lexical_field) != bool(self.sparse_field):
            msg = (
                f"lexical_field={self.lexical_field!r} and sparse_field={self.sparse_field!r} go together: "
                "set both for full-text search in Milvus, or both to ''"
            )
            raise ValueError(msg)

    def json_key(self, key: str) -> str:
        """
        Return the expression that reads one key of the JSON metadata column.

        :param key: A metadata key (identifier characters only).
        :returns: e.g. `metadata["category"]`.
        :raises ValueError: If the key is not a plain identifier.
        """
        if not _KEY.match(key):
            msg = f"metadata key {key!r} must be a plain identifier"
            raise ValueError(msg)
        return f"{self.metadata_field}[{string_literal(key)}]"


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
        self._loaded = False

    @property
    def client(self) -> MilvusClient:
        """The connected client (connects on first use)."""
        if self._client is None:
            if is_lite_uri(self.uri):
                Path(self.uri).parent.mkdir(parents=True, exist_ok=True)
            kwargs: dict[str, Any] = {"uri": self.uri}
            if self._token:
                kwargs["token"] = self._token
            self._client = MilvusClient(**kwargs)
        return self._client

    def close(self) -> None:
        """Release the connection."""
        if self._client is not None:
            self._client.close()
        self._client = None
        self._loaded = False

    def exists(self) -> bool:
        """Tell whether the collection exists."""
        return bool(self.client.has_collection(self.schema.collection_name))

    def ensure_collection(self) -> None:
        """
        Create the collection with the configured schema and indexes if it does not exist.

        With `lexical_field` and `sparse_field`, the collection gets a BM25 function from the first into the second.
        A Milvus that cannot create one (before 2.5) gets the collection without them, and lexical retrieval then
        runs in-process.
        """
        s = self.schema
        if self.exists():
            return
        if s.sparse_field:
            try:
                self._create(full_text=True)
                return
            except MilvusException as err:
                logger.warning(
                    "This Milvus has no BM25 full-text search ({error}); creating {collection} without it, "
                    "so lexical retrieval falls back to the in-process index",
                    error=err,
                    collection=s.collection_name,
                )
                self.drop()  # a failed create may leave a collection without indexes
        self._create(full_text=False)

    def _create(self, full_text: bool) -> None:
        s = self.schema
        schema = self.client.create_schema(auto_id=False, enable_dynamic_field=False)
        schema.add_field(s.id_field, DataType.VARCHAR, is_primary=True, max_length=512)
        schema.add_field(s.content_field, DataType.VARCHAR, max_length=65535)
        schema.add_field(s.vector_field, DataType.FLOAT_VECTOR, dim=s.dimension)
        schema.add_field(s.metadata_field, DataType.JSON)
        index = self.client.prepare_index_params()
        index.add_index(field_name=s.vector_field, index_type=s.index_type, metric_type=s.metric_type)
        if full_text:
            schema.add_field(
                s.lexical_field,
                DataType.VARCHAR,
                max_length=_LEXICAL_MAX_BYTES,
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
                index_type="SPARSE_INVERTED_INDEX",
                metric_type="BM25",
                params=_BM25_PARAMS,
            )
        self.client.create_collection(
            s.collection_name, schema=schema, index_params=index, consistency_level=self.consistency_level
        )
        logger.info(
            "Created Milvus collection {collection} (full-text search: {full_text})",
            collection=s.collection_name,
            full_text=full_text,
        )

    def full_text_fields(self) -> tuple[str, str] | None:
        """
        Find the collection's BM25 function.

        :returns: `(text_field, sparse_field)` of the BM25 function, or None when the collection has none (an
            older Milvus, or a collection created without one).
        """
        description = self.client.describe_collection(self.schema.collection_name)
        for fn in description.get("functions") or []:
            if _is_bm25(fn.get("type")) and fn.get("input_field_names") and fn.get("output_field_names"):
                return str(fn["input_field_names"][0]), str(fn["output_field_names"][0])
        return None

    def drop(self) -> None:
        """Drop the collection if it exists."""
        if self.exists():
            self.client.drop_collection(self.schema.collection_name)
        self._loaded = False

    def load(self) -> None:
        """Load the collection for search (a new process must do this once)."""
        if not self._loaded:
            self.client.load_collection(self.schema.collection_name)
            self._loaded = True

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
        self, keys: tuple[str, ...] = ("source", "doc_version"), with_content: bool = False
    ) -> list[dict[str, Any]]:
        """
        Return `{id, <keys>...}` (and `content`) for every row, never the vectors.

        :param keys: Metadata keys to return.
        :param with_content: Also return the chunk text as `content`.
        :returns: One dict per row.
        """
        self.load()
        s = self.schema
        fields = [s.id_field, s.metadata_field] + ([s.content_field] if with_content else [])
        iterator = self.client.query_iterator(
            s.collection_name,
            batch_size=1000,
            filter="",
            output_fields=fields,
            consistency_level=self.consistency_level,
        )
        rows: list[dict[str, Any]] = []
        try:
            while batch := iterator.next():
                for row in batch:
                    meta = row.get(s.metadata_field) or {}
                    item = {"id": row[s.id_field], **{k: meta.get(k) for k in keys}}
                    if with_content:
                        item["content"] = row.get(s.content_field, "")
                    rows.append(item)
        finally:
            iterator.close()
        return rows

    def get_rows(self, ids: list[str]) -> list[dict[str, Any]]:
        """
        Fetch rows by primary key, vectors included.

        :param ids: Primary keys.
        :returns: `{id, content, metadata, vector}` per row found.
        """
        if not ids:
            return []
        self.load()
        s = self.schema
        rows = self.client.get(
            s.collection_name,
            ids=ids,
            output_fields=[s.content_field, s.metadata_field, s.vector_field],
            consistency_level=self.consistency_level,
        )
        return [
            {
                "id": row[s.id_field],
                "content": row.get(s.content_field, ""),
                "metadata": row.get(s.metadata_field) or {},
                "vector": list(row[s.vector_field]),
            }
            for row in rows
        ]

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
        res = self.client.search(
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
        res = self.client.search(
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


def lexical_text(text: str) -> str:
    """
    Turn a text into the BM25 terms stored in (and searched on) the collection's lexical field.

    :param text: A chunk or a query.
    :returns: Space-separated terms (English stems, Chinese character bigrams), cut to fit the field.
    """
    terms = " ".join(tokenize(text))
    data = terms.encode()
    if len(data) <= _LEXICAL_MAX_BYTES:
        return terms
    return data[:_LEXICAL_MAX_BYTES].decode(errors="ignore").rsplit(" ", 1)[0]


def _is_bm25(function_type: Any) -> bool:
    # describe_collection reports the type as the enum, its name or its number, depending on the server
    return function_type in (FunctionType.BM25, FunctionType.BM25.value, "BM25")


def token_from_env(var: str | None) -> str | None:
    """
    Read a Milvus token from an environment variable, so that it never sits in YAML.

    :param var: The variable name, or None.
    :returns: The token, or None.
    """
    return os.environ.get(var) if var else None
