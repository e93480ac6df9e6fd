from __future__ import annotations

from typing import Any

from haystack import Document
from haystack.errors import FilterError
from milvus_haystack import MilvusDocumentStore

from components.store.lite_host import LiteHostLease
from components.store.schema import CATEGORY_MAX_BYTES, CollectionSchema, is_lite_uri, string_literal

_COMPARISONS = ("==", "!=", ">", ">=", "<", "<=")


def _literal(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return string_literal(value)
    msg = f"unsupported filter value {value!r}; use a string, number or boolean"
    raise FilterError(msg)


def _column_value(value: Any) -> bool:
    """Whether a category fits the category column: a string of 1 to `CATEGORY_MAX_BYTES` UTF-8 bytes."""
    if not isinstance(value, str):
        return False
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:  # a lone surrogate: the JSON metadata keeps it as its backslash escape
        return False
    return 0 < size <= CATEGORY_MAX_BYTES


def category_column_value(meta: dict[str, Any], schema: CollectionSchema) -> str:
    """
    The category column's value for a chunk: its metadata value under the copied key when that is a string.

    :param meta: The chunk's metadata.
    :param schema: The collection schema (`category_field` names both the key and the column).
    :returns: The value, or `""` when the key is missing or holds no string the column can hold.
    """
    value = meta.get(schema.category_field)
    return str(value) if _column_value(value) else ""


def _id_expression(operator: Any, value: Any, schema: CollectionSchema) -> str:
    """A filter on the primary key: `in` (or `not in`) a list of ids, read by Milvus on the key column."""
    if operator not in ("in", "not in") or not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        msg = f"a filter on 'id' takes operator 'in' or 'not in' and a list of ids, not {operator!r} with {value!r}"
        raise FilterError(msg)
    if not value:
        msg = "a filter on 'id' needs at least one id (a filter that matches nothing is never sent to the store)"
        raise FilterError(msg)
    return f"({schema.id_field} {operator} [{', '.join(_literal(v) for v in value)}])"


def json_filter_expression(filters: dict[str, Any] | None, schema: CollectionSchema) -> str:
    """
    Translate Haystack filters on `meta.<key>` into a Milvus expression on the JSON metadata column.

    Supports the comparison operators, `in` / `not in` (expanded to `==` / `!=` chains, since Milvus Lite refuses `in`
    on JSON paths), `id` `in` or `not in` a list of chunk ids (the primary key) and AND / OR / NOT. Values are always
    quoted literals, never pasted text. Equality with a non-empty string on the key the schema's `category_field` copies
    reads that column instead of the JSON path: the same rows match (the column holds `""` where the key is missing or
    holds no string it can hold), and Milvus Lite filters a column in one vectorized pass but a JSON path row by row.

    :param filters: Haystack filters, or None.
    :param schema: The collection schema (names the metadata column, and the category column where the collection
        has one: else its `category_field` must be `""`).
    :returns: The expression ("" for no filter).
    :raises FilterError: For an unsupported field, operator or value.
    """
    if not filters:
        return ""
    if "conditions" in filters:
        operator = filters.get("operator")
        if not filters["conditions"]:
            msg = f"logical operator {operator!r} needs at least one condition"
            raise FilterError(msg)
        parts = [json_filter_expression(c, schema) for c in filters["conditions"]]
        if operator == "NOT":
            return f"not ({' and '.join(parts)})"
        if operator in ("AND", "OR"):
            return "(" + f" {operator.lower()} ".join(parts) + ")"
        msg = f"unsupported logical operator {operator!r}"
        raise FilterError(msg)
    field, operator, value = filters.get("field", ""), filters.get("operator"), filters.get("value")
    if field == "id":
        return _id_expression(operator, value, schema)
    if not field.startswith("meta."):
        msg = f"filter field {field!r} must start with 'meta.' (or be 'id', the chunk's primary key)"
        raise FilterError(msg)
    key = schema.json_key(field[5:])
    values = value if operator == "in" and isinstance(value, list) else [value]
    if field[5:] == schema.category_field and operator in ("==", "in") and all(_column_value(v) for v in values):
        key = schema.category_field
    if operator in _COMPARISONS:
        return f"({key} {operator} {_literal(value)})"
    if operator in ("in", "not in") and isinstance(value, list) and value:
        joiner, op = (" or ", "==") if operator == "in" else (" and ", "!=")
        return "(" + joiner.join(f"{key} {op} {_literal(v)}" for v in value) + ")"
    msg = f"unsupported filter operator {operator!r} with value {value!r}"
    raise FilterError(msg)


class JsonMetadataMilvusDocumentStore(MilvusDocumentStore):
    """
    milvus-haystack's `MilvusDocumentStore` for collections that keep metadata in one JSON column.

    The stock store cannot filter inside a JSON field (`meta.category` becomes `category == ...`) and returns the
    column nested as `meta["metadata"]`. This subclass translates `meta.<key>` filters to `metadata["<key>"]`
    expressions and flattens the column into `Document.meta`; search, score mapping and parsing stay milvus-haystack's.

    ### Usage example

    ```python
    store = JsonMetadataMilvusDocumentStore(
        connection_args={"uri": "data/milvus.db"}, collection_name="knowledge_chunks", text_field="content",
        index_params={"metric_type": "L2", "index_type": "AUTOINDEX", "params": {}},
    )
    ```
    """

    def __init__(
        self,
        *,
        metadata_field: str = "metadata",
        category_field: str = "",
        vector_index: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """
        Open the store (this connects, as `MilvusDocumentStore` does).

        :param metadata_field: The JSON metadata column.
        :param category_field: A column of the collection that copies the metadata key of the same name
            (`CollectionSchema.category_field`), which equality filters on that key read; `""` for none.
        :param vector_index: The vector field's index as `MilvusClient.describe_index` returned it, when the caller
            has just described it (None: the store describes it).
        :param kwargs: `MilvusDocumentStore` arguments.
        """
        self.vector_index = dict(vector_index) if vector_index else None
        # a Milvus Lite folder is opened by its host process, which every process shares (`lite_host`)
        connection_args = kwargs.get("connection_args")
        self._lease: LiteHostLease | None = None
        if connection_args and is_lite_uri(str(connection_args.get("uri", ""))):
            self._lease = LiteHostLease.acquire(connection_args["uri"])
            kwargs["connection_args"] = {**connection_args, "uri": self._lease.uri}
        # opening describes the vector index three times, and Milvus Lite counts every row of the collection for
        # each (0.5 s at 100k chunks): the index found first is remembered
        self._described_index = self.vector_index
        super().__init__(**kwargs)
        if self._lease is not None:
            self.connection_args = connection_args  # serialized as given: the folder, not this host's socket
        self.metadata_field = metadata_field
        self.category_field = category_field
        CollectionSchema(metadata_field=metadata_field, category_field=category_field).validate()
        self._schema = CollectionSchema(
            collection_name=self.collection_name,
            id_field=self._primary_field,
            content_field=self._text_field,
            vector_field=self._vector_field,
            metadata_field=metadata_field,
            category_field=category_field,
        )

    def close(self) -> None:
        """Close the connection, and give back the lease on a Milvus Lite folder's host (it may stop then)."""
        self.client.close()
        if self._lease is not None:
            self._lease.release()
            self._lease = None

    def to_dict(self) -> dict[str, Any]:
        """
        Serialize the store, including `metadata_field`, `category_field` and `vector_index`.

        :returns: The serialized store.
        """
        data = super().to_dict()
        data["init_parameters"]["metadata_field"] = self.metadata_field
        data["init_parameters"]["category_field"] = self.category_field
        data["init_parameters"]["vector_index"] = self.vector_index
        return data

    def _get_index(self) -> dict[str, Any] | None:
        if self._described_index is None:
            self._described_index = super()._get_index()
        return self._described_index

    def _flatten(self, docs: list[Document]) -> list[Document]:
        for doc in docs:
            nested = doc.meta.pop(self.metadata_field, None) or {}
            doc.meta.update(nested)
        return docs

    def filter_documents(self, filters: dict[str, Any] | None = None) -> list[Document]:
        """
        Return the documents matching `meta.<key>` filters on the JSON metadata column, meta flattened.

        :param filters: Haystack filters.
        :returns: The matching documents (without vectors).
        """
        if not self._collection_exists:
            return []
        iterator = self.client.query_iterator(
            self.collection_name,
            batch_size=1000,
            filter=json_filter_expression(filters, self._schema),
            output_fields=[self._primary_field, self._text_field, self.metadata_field],
        )
        docs: list[Document] = []
        try:
            while batch := iterator.next():
                docs.extend(self._parse_document(dict(row)) for row in batch)
        finally:
            iterator.close()
        return self._flatten(docs)

    def _embedding_retrieval(
        self,
        query_embedding: list[float],
        filters: dict[str, Any] | None = None,
        top_k: int = 10,
        query_text: str | None = None,
    ) -> list[Document]:
        if not self._collection_exists:
            return []
        res = self.client.search(
            self.collection_name,
            data=[query_embedding],
            anns_field=self._vector_field,
            search_params=self.search_params,
            limit=top_k,
            filter=json_filter_expression(filters, self._schema),
            output_fields=[self._primary_field, self._text_field, self.metadata_field],
            partition_names=self.partition_names,
        )
        return self._flatten(self._parse_search_result(res, distance_to_score_fn=self._select_score_fn()))

    def _parse_document(self, data: dict) -> Document:
        data.setdefault(self._vector_field, [])  # not Document.embedding: evidence needs no vectors
        return super()._parse_document(data)
