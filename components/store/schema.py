"""The knowledge collection's schema: one definition for the writer, the retrievers, the sidecar and eval.

The default is the Java original's: a VARCHAR primary key `id`, the chunk text `content`, a FLOAT_VECTOR `vector`
and a JSON `metadata` column. Where Milvus has full-text search (2.5+ and Milvus Lite), a new collection also gets
`lexical` (the chunk's BM25 terms) and `sparse` (filled from it by Milvus' BM25 function). A new collection also
gets `crosslingual`, each chunk's vector from a model aligned across languages (use-multilingual-v3), read only to
rank answers in another language than the query's, and `category`, a copy of each chunk's `metadata["category"]` in
a column of its own: Milvus Lite evaluates a JSON path filter row by row in Python (a category-filtered search took
9 s at 100k chunks), a column filter in one vectorized pass. Names, dimension, metric
and index are configurable, so a collection created by another tool with that schema is used as it is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields, replace
from typing import Any

METRICS = ("L2", "IP", "COSINE")
#: What a raw Milvus score means, per metric.
SEMANTICS = {"L2": "l2_distance", "COSINE": "cosine_similarity", "IP": "inner_product"}
_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: The document meta key the cross-lingual embedder fills and the writer moves into `crosslingual_field`.
CROSSLINGUAL_META_KEY = "crosslingual_embedding"
#: use-multilingual-v3, the model whose vectors bridge languages (pipelines/indexing.yaml `crosslingual_embedder`)
CROSSLINGUAL_DIMENSION = 512
#: the category column's capacity (Milvus' largest VARCHAR); a longer category is filtered on the JSON metadata
CATEGORY_MAX_BYTES = 65_535


_LITERAL_ESCAPES = str.maketrans({"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"})


def string_literal(value: str) -> str:
    r"""
    Quote a value as a Milvus expression string literal.

    User text only ever reaches an expression through this function, so it is matched literally. Milvus' grammar
    knows the escapes `\\`, `\"`, `\n`, `\r`, `\t` and no `\u`: those five are escaped, every other character
    (control characters, emoji, any script) is passed as itself. A lone surrogate cannot travel over gRPC; it is
    matched as its backslash escape, the form the trace store keeps.

    :param value: Any string.
    :returns: A double-quoted literal.
    """
    text = str(value)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", errors="backslashreplace").decode("utf-8")
    return '"' + text.translate(_LITERAL_ESCAPES) + '"'


def validate_metric(metric_type: str) -> None:
    """
    Check a metric name.

    :param metric_type: `L2`, `IP` or `COSINE`.
    :raises ValueError: If the metric is not supported.
    """
    if metric_type not in METRICS:
        msg = f"metric_type={metric_type!r} is not supported; use one of {list(METRICS)}"
        raise ValueError(msg)


#: gRPC options of every connection: a server that went away and came back is reached again within a second. gRPC's
#: default reconnect backoff grows to 120 s, and a new channel shares the old one's subchannel (and its backoff), so
#: without these a restarted Milvus stays "connection refused" for minutes
RECONNECT_GRPC_OPTIONS = {
    "grpc.initial_reconnect_backoff_ms": 100,
    "grpc.min_reconnect_backoff_ms": 100,
    "grpc.max_reconnect_backoff_ms": 1_000,
    "grpc.use_local_subchannel_pool": 1,
}

#: gRPC options of a connection to Milvus Lite: its server keeps gRPC's default ping policy (one ping per 5 minutes
#: without calls), so pymilvus' 10 s keep-alive pings get an idle connection dropped (GOAWAY too_many_pings) after
#: about half a minute; a local server needs no keep-alive
LITE_GRPC_OPTIONS = {"grpc.keepalive_time_ms": 600_000, "grpc.keepalive_permit_without_calls": 0}


def client_options(uri: str) -> dict[str, Any]:
    """
    Extra `MilvusClient` arguments for a URI: `RECONNECT_GRPC_OPTIONS`, and `LITE_GRPC_OPTIONS` for Milvus Lite.

    :param uri: A Milvus URI.
    :returns: Keyword arguments for `MilvusClient`.
    """
    lite = LITE_GRPC_OPTIONS if is_lite_uri(uri) else {}
    return {"grpc_options": {**RECONNECT_GRPC_OPTIONS, **lite}}


def is_lite_uri(uri: str) -> bool:
    """
    Tell whether a URI names a Milvus Lite database file rather than a server.

    :param uri: A Milvus URI.
    :returns: True for a local `.db` path.
    """
    return not re.match(r"^[a-z][a-z0-9+.-]*:", uri)  # not http://, https://, tcp:// nor unix:


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
    lexical_field: str = "lexical"
    sparse_field: str = "sparse"
    crosslingual_field: str = "crosslingual"
    crosslingual_dimension: int = CROSSLINGUAL_DIMENSION
    category_field: str = "category"

    @classmethod
    def from_attributes(cls, owner: object) -> CollectionSchema:
        """
        Build and validate the schema from an object's attributes of the same names (a component's init parameters).

        Attributes that are missing or None keep the schema's defaults.

        :param owner: An object with some of the attributes `collection_name`, `dimension`, `metric_type`, ...
        :returns: The schema.
        :raises ValueError: Naming the bad parameter and the fix.
        """
        given = {f.name: getattr(owner, f.name, None) for f in fields(cls)}
        schema = cls(**{name: value for name, value in given.items() if value is not None})
        schema.validate()
        return schema

    def with_values(self, **changes: Any) -> CollectionSchema:
        """
        Return a validated copy with some values changed.

        :param changes: Field values.
        :returns: The new schema.
        """
        schema = replace(self, **changes)
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
        if self.crosslingual_field and not _KEY.match(self.crosslingual_field):
            msg = (
                f"crosslingual_field={self.crosslingual_field!r} must be an identifier, or '' for a collection "
                "without cross-lingual vectors"
            )
            raise ValueError(msg)
        if self.category_field and not _KEY.match(self.category_field):
            msg = (
                f"category_field={self.category_field!r} must be an identifier (the metadata key it copies), or '' "
                "for a collection that filters on the JSON metadata column"
            )
            raise ValueError(msg)
        if self.crosslingual_dimension < 1:
            msg = (
                f"crosslingual_dimension={self.crosslingual_dimension!r} must be positive; use the cross-lingual "
                f"embedder's dimension ({CROSSLINGUAL_DIMENSION} for use-multilingual-v3)"
            )
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
