from __future__ import annotations

import copy
from pathlib import Path

import pytest
from haystack.errors import FilterError
from milvus_haystack import MilvusEmbeddingRetriever

from components.core.embedding_backends import get_backend
from components.store.json_metadata_document_store import (
    JsonMetadataMilvusDocumentStore,
    category_column_value,
    json_filter_expression,
)
from components.store.milvus_chunk_store import MilvusChunkStore
from components.store.schema import CollectionSchema
from tests.conftest import count_index_requests, index_tiny_kb

SCHEMA = CollectionSchema(category_field="")  # a collection without the category column: JSON paths only
COLUMN = CollectionSchema()  # with the category column
L2_INDEX = {"metric_type": "L2", "index_type": "AUTOINDEX", "params": {}}
TRICKY = ['a"b\\c', 'x" or metadata["category"] != "', "alerts", "退款"]
TRICKY_COLLECTION = "tricky_chunks"


def category(value, operator="=="):
    return {"field": "meta.category", "operator": operator, "value": value}


def open_store(uri: str, collection_name: str = "knowledge_chunks", **kwargs) -> JsonMetadataMilvusDocumentStore:
    return JsonMetadataMilvusDocumentStore(
        connection_args={"uri": uri},
        collection_name=collection_name,
        primary_field="id",
        text_field="content",
        vector_field="vector",
        index_params=L2_INDEX,
        consistency_level="Strong",
        **kwargs,
    )


def unit(i: int, dim: int = 4) -> list[float]:
    vec = [0.0] * dim
    vec[i % dim] = 1.0
    return vec


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    """The tiny knowledge base indexed once, plus a small collection whose categories contain quotes."""
    root = tmp_path_factory.mktemp("json-store")
    index_tiny_kb(root)
    store = MilvusChunkStore(
        str(root / "data" / "milvus.db"), CollectionSchema(TRICKY_COLLECTION, dimension=4, crosslingual_field="")
    )
    try:
        store.ensure_collection()
        store.insert(
            [
                {
                    "id": f"row{i}",
                    "content": f"row {i}",
                    "vector": unit(i),
                    "metadata": {"category": value, "rank": i, "hot": i % 2 == 0},
                    "category": value,
                }
                for i, value in enumerate(TRICKY)
            ]
            # the column and the JSON metadata disagree: tells which one a filter read
            + [
                {
                    "id": "split",
                    "content": "split",
                    "vector": unit(0),
                    "metadata": {"category": "in-json"},
                    "category": "in-column",
                }
            ]
        )
        store.flush()
    finally:
        store.close()
    return root / "data"


@pytest.fixture
def make_store(data_dir):
    made: list[JsonMetadataMilvusDocumentStore] = []

    def make(collection_name: str = "knowledge_chunks", **kwargs) -> JsonMetadataMilvusDocumentStore:
        store = open_store(str(data_dir / "milvus.db"), collection_name, **kwargs)
        made.append(store)
        return store

    yield make
    for store in made:
        store.client.close()


@pytest.fixture(scope="module")
def disk_vector() -> list[float]:
    return get_backend("multilingual-e5-small").embed_queries(["the disk is full"])[0].tolist()


class TestJsonFilterExpression:
    def test_no_filter_is_empty(self):
        assert json_filter_expression(None, SCHEMA) == ""
        assert json_filter_expression({}, SCHEMA) == ""

    def test_equality_on_a_metadata_key(self):
        assert json_filter_expression(category("x"), SCHEMA) == '(metadata["category"] == "x")'

    @pytest.mark.parametrize("operator", ["!=", ">", ">=", "<", "<="])
    def test_comparison_operators(self, operator):
        expr = json_filter_expression({"field": "meta.chunk_index", "operator": operator, "value": 2}, SCHEMA)
        assert expr == f'(metadata["chunk_index"] {operator} 2)'

    def test_numbers_and_booleans_are_literals(self):
        assert json_filter_expression({"field": "meta.score", "operator": ">", "value": 0.5}, SCHEMA) == (
            '(metadata["score"] > 0.5)'
        )
        assert json_filter_expression({"field": "meta.hot", "operator": "==", "value": True}, SCHEMA) == (
            '(metadata["hot"] == true)'
        )
        assert json_filter_expression({"field": "meta.hot", "operator": "==", "value": False}, SCHEMA) == (
            '(metadata["hot"] == false)'
        )

    def test_quotes_and_backslashes_are_escaped(self):
        expr = json_filter_expression(category('a"b\\c'), SCHEMA)
        assert expr == r'(metadata["category"] == "a\"b\\c")'

    def test_expression_syntax_in_a_value_stays_inside_the_literal(self):
        expr = json_filter_expression(category('alerts" or metadata["category"] != "x'), SCHEMA)
        assert expr == r'(metadata["category"] == "alerts\" or metadata[\"category\"] != \"x")'

    def test_non_ascii_values_are_kept(self):
        assert json_filter_expression(category("退款"), SCHEMA) == '(metadata["category"] == "退款")'

    def test_in_expands_to_an_or_chain(self):
        expr = json_filter_expression(category(["a", "b", "c"], "in"), SCHEMA)
        assert expr == '(metadata["category"] == "a" or metadata["category"] == "b" or metadata["category"] == "c")'

    def test_not_in_expands_to_an_and_chain(self):
        expr = json_filter_expression(category(["a", "b"], "not in"), SCHEMA)
        assert expr == '(metadata["category"] != "a" and metadata["category"] != "b")'

    def test_logical_operators(self):
        a, b = category("a"), {"field": "meta.chunk_index", "operator": ">=", "value": 1}
        assert json_filter_expression({"operator": "AND", "conditions": [a, b]}, SCHEMA) == (
            '((metadata["category"] == "a") and (metadata["chunk_index"] >= 1))'
        )
        assert json_filter_expression({"operator": "OR", "conditions": [a, b]}, SCHEMA) == (
            '((metadata["category"] == "a") or (metadata["chunk_index"] >= 1))'
        )
        assert json_filter_expression({"operator": "NOT", "conditions": [a]}, SCHEMA) == (
            'not ((metadata["category"] == "a"))'
        )

    def test_nested_logic(self):
        filters = {
            "operator": "AND",
            "conditions": [
                category("a"),
                {"operator": "OR", "conditions": [category("b"), category("c")]},
            ],
        }
        assert json_filter_expression(filters, SCHEMA) == (
            '((metadata["category"] == "a") and ((metadata["category"] == "b") or (metadata["category"] == "c")))'
        )

    def test_uses_the_schema_metadata_column(self):
        schema = CollectionSchema(metadata_field="meta_json", category_field="")
        assert json_filter_expression(category("x"), schema) == '(meta_json["category"] == "x")'

    @pytest.mark.parametrize(
        ("filters", "match"),
        [
            ({"field": "category", "operator": "==", "value": "x"}, "must start with 'meta.'"),
            ({"field": "content", "operator": "==", "value": "x"}, "must start with 'meta.'"),
            (category("x", "like"), "unsupported filter operator"),
            (category([], "in"), "unsupported filter operator"),
            (category("x", "in"), "unsupported filter operator"),
            (category(None), "unsupported filter value"),
            (category(["x"]), "unsupported filter value"),
            ({"operator": "XOR", "conditions": [category("x")]}, "unsupported logical operator"),
        ],
    )
    def test_unsupported_filters_raise_filter_error(self, filters, match):
        with pytest.raises(FilterError, match=match):
            json_filter_expression(filters, SCHEMA)

    def test_ids_are_a_primary_key_list_with_quoted_literals(self):
        filters = {"field": "id", "operator": "in", "value": ["a1", 'b" or id != "']}
        assert json_filter_expression(filters, SCHEMA) == r'(id in ["a1", "b\" or id != \""])'
        both = {"operator": "AND", "conditions": [category("x"), filters]}
        assert json_filter_expression(both, SCHEMA).startswith('((metadata["category"] == "x") and (id in [')

    @pytest.mark.parametrize(
        ("value", "operator", "match"),
        [([], "in", "needs at least one id"), ("a1", "in", "list of ids"), (["a1"], "==", "operator 'in'")],
    )
    def test_an_id_filter_that_is_no_id_list_is_refused(self, value, operator, match):
        with pytest.raises(FilterError, match=match):
            json_filter_expression({"field": "id", "operator": operator, "value": value}, SCHEMA)

    @pytest.mark.parametrize("field", ['meta.a"]', "meta.a b", "meta.", 'meta.x"] == "y" or metadata["z'])
    def test_odd_metadata_keys_raise(self, field):
        with pytest.raises((FilterError, ValueError)):
            json_filter_expression({"field": field, "operator": "==", "value": "v"}, SCHEMA)

    def test_category_equality_reads_the_category_column(self):
        assert json_filter_expression(category("x"), COLUMN) == '(category == "x")'
        assert (
            json_filter_expression(category(["a", "退款"], "in"), COLUMN) == '(category == "a" or category == "退款")'
        )
        assert json_filter_expression(category('a"b\\c'), COLUMN) == r'(category == "a\"b\\c")'

    @pytest.mark.parametrize(
        ("filters", "expected"),
        [
            (category("x", "!="), '(metadata["category"] != "x")'),  # a missing key matches no comparison
            (category(["a"], "not in"), '(metadata["category"] != "a")'),
            (category(""), '(metadata["category"] == "")'),  # the column's "" also stands for a missing key
            (category(7), '(metadata["category"] == 7)'),
            (category(["a", 7], "in"), '(metadata["category"] == "a" or metadata["category"] == 7)'),
            (category("sur\udcff"), r'(metadata["category"] == "sur\\udcff")'),  # never sent in the column
            (category("x" * 65_536), '(metadata["category"] == "' + "x" * 65_536 + '")'),  # longer than the column
            ({"field": "meta.title", "operator": "==", "value": "x"}, '(metadata["title"] == "x")'),
        ],
    )
    def test_everything_else_reads_the_json_metadata(self, filters, expected):
        assert json_filter_expression(filters, COLUMN) == expected

    @pytest.mark.parametrize(
        ("meta", "expected"),
        [
            ({"category": "alerts"}, "alerts"),
            ({"category": "退款 / 到账"}, "退款 / 到账"),
            ({}, ""),
            ({"category": None}, ""),
            ({"category": 7}, ""),
            ({"category": ["a"]}, ""),
            ({"category": "sur\udcff"}, ""),
            ({"category": "x" * 65_536}, ""),
        ],
    )
    def test_category_column_value(self, meta, expected):
        assert category_column_value(meta, COLUMN) == expected

    def test_filters_are_not_mutated(self):
        filters = {"operator": "AND", "conditions": [category(["a", "b"], "in"), {"operator": "NOT", "conditions": []}]}
        filters["conditions"][1]["conditions"].append(category("c"))
        original = copy.deepcopy(filters)
        json_filter_expression(filters, SCHEMA)
        assert filters == original


class TestJsonMetadataMilvusDocumentStore:
    @pytest.mark.integration
    def test_init_defaults_and_custom_metadata_field(self, make_store):
        store = make_store()
        assert store.metadata_field == "metadata"
        assert store.collection_name == "knowledge_chunks"
        assert store._collection_exists
        custom = make_store(metadata_field="meta_json")
        assert custom.metadata_field == "meta_json"

    @pytest.mark.integration
    def test_to_dict_from_dict_keeps_metadata_field(self, make_store):
        data = make_store(metadata_field="meta_json").to_dict()
        assert data["type"].endswith("JsonMetadataMilvusDocumentStore")
        restored = JsonMetadataMilvusDocumentStore.from_dict(data)
        try:
            assert isinstance(restored, JsonMetadataMilvusDocumentStore)
            assert restored.collection_name == "knowledge_chunks"
            assert restored.metadata_field == "meta_json"
        finally:
            restored.client.close()

    @pytest.mark.integration
    def test_opening_describes_the_vector_index_once(self, make_store, monkeypatch):
        """The stock store describes it three times while opening; Milvus Lite counts every row each time."""
        calls = count_index_requests(monkeypatch)
        store = make_store()
        assert calls == {"list_indexes": 1, "describe_index": 1}
        assert (
            store.search_params["metric_type"]
            == store.client.describe_index("knowledge_chunks", "vector")["metric_type"]
        )

    @pytest.mark.integration
    def test_a_described_index_is_not_described_again(self, make_store, monkeypatch):
        described = make_store().client.describe_index("knowledge_chunks", "vector")
        calls = count_index_requests(monkeypatch)
        store = make_store(vector_index=described)
        assert not calls
        assert store.vector_index == described
        assert store.search_params["metric_type"] == described["metric_type"]
        restored = JsonMetadataMilvusDocumentStore.from_dict(store.to_dict())
        try:
            assert restored.vector_index == described
        finally:
            restored.client.close()

    @pytest.mark.integration
    def test_retrieval_flattens_the_metadata_column(self, make_store, disk_vector):
        docs = MilvusEmbeddingRetriever(document_store=make_store(), top_k=10).run(query_embedding=disk_vector)[
            "documents"
        ]
        assert {d.meta["source"] for d in docs} == {"alerts/disk.md", "payments/refund.md", "faq/plans.md"}
        for doc in docs:
            assert "metadata" not in doc.meta
            assert {"source", "category", "chunk_index", "doc_version"} <= set(doc.meta)
            assert doc.embedding is None  # vectors are not fetched
            assert 0.0 <= doc.score <= 1.0
        assert docs[0].meta["source"] == "alerts/disk.md"

    @pytest.mark.integration
    @pytest.mark.parametrize("value", ["alerts", "payments", "product-faq"])
    def test_category_filter_returns_only_that_category(self, make_store, disk_vector, value):
        docs = MilvusEmbeddingRetriever(document_store=make_store(), top_k=10).run(
            query_embedding=disk_vector, filters=category(value)
        )["documents"]
        assert docs
        assert {d.meta["category"] for d in docs} == {value}

    @pytest.mark.integration
    def test_in_and_not_filters_run_on_milvus(self, make_store, disk_vector):
        retriever = MilvusEmbeddingRetriever(document_store=make_store(), top_k=10)
        docs = retriever.run(query_embedding=disk_vector, filters=category(["alerts", "payments"], "in"))["documents"]
        assert {d.meta["category"] for d in docs} == {"alerts", "payments"}
        docs = retriever.run(
            query_embedding=disk_vector, filters={"operator": "NOT", "conditions": [category("alerts")]}
        )["documents"]
        assert {d.meta["category"] for d in docs} == {"payments", "product-faq"}

    @pytest.mark.integration
    @pytest.mark.parametrize("value", TRICKY)
    def test_tricky_values_match_exactly_one_row(self, make_store, value):
        store = make_store(TRICKY_COLLECTION)
        docs = store._embedding_retrieval(unit(0), filters=category(value), top_k=10)
        assert [d.meta["category"] for d in docs] == [value]
        assert docs[0].id == f"row{TRICKY.index(value)}"

    @pytest.mark.integration
    def test_category_field_filters_on_the_column(self, make_store):
        column = make_store(TRICKY_COLLECTION, category_field="category")
        assert column.to_dict()["init_parameters"]["category_field"] == "category"
        assert [d.id for d in column._embedding_retrieval(unit(0), filters=category("in-column"))] == ["split"]
        assert column._embedding_retrieval(unit(0), filters=category("in-json")) == []
        json_only = make_store(TRICKY_COLLECTION)
        assert [d.id for d in json_only._embedding_retrieval(unit(0), filters=category("in-json"))] == ["split"]
        for value in TRICKY:
            ids = [d.id for d in column._embedding_retrieval(unit(0), filters=category(value), top_k=10)]
            assert ids == [d.id for d in json_only._embedding_retrieval(unit(0), filters=category(value), top_k=10)]

    @pytest.mark.integration
    def test_number_and_boolean_filters_run_on_milvus(self, make_store):
        store = make_store(TRICKY_COLLECTION)
        docs = store._embedding_retrieval(
            unit(0),
            filters={
                "operator": "AND",
                "conditions": [
                    {"field": "meta.rank", "operator": ">=", "value": 1},
                    {"field": "meta.hot", "operator": "==", "value": True},
                ],
            },
            top_k=10,
        )
        assert [d.id for d in docs] == ["row2"]

    @pytest.mark.integration
    def test_value_that_matches_nothing_returns_nothing(self, make_store, disk_vector):
        docs = MilvusEmbeddingRetriever(document_store=make_store(), top_k=10).run(
            query_embedding=disk_vector, filters=category('alerts" or metadata["category"] != "x')
        )["documents"]
        assert docs == []

    @pytest.mark.integration
    def test_missing_collection_returns_nothing(self, make_store, disk_vector):
        store = make_store("no_such_collection")
        assert not store._collection_exists
        assert store._embedding_retrieval(disk_vector, filters=category("alerts")) == []
        assert not store.client.has_collection("no_such_collection")

    @pytest.mark.integration
    def test_filter_documents_uses_json_metadata(self, make_store):
        """The class docstring: `meta.<key>` filters become JSON-path expressions and metadata is flattened."""
        docs = make_store().filter_documents(category("alerts"))
        assert docs
        assert {d.meta["category"] for d in docs} == {"alerts"}
        assert all("metadata" not in d.meta for d in docs)

    @pytest.mark.integration
    def test_filters_and_query_are_not_mutated(self, make_store, disk_vector):
        filters = {"operator": "OR", "conditions": [category("alerts"), category(["payments"], "in")]}
        original_filters = copy.deepcopy(filters)
        vector = list(disk_vector)
        make_store()._embedding_retrieval(vector, filters=filters, top_k=5)
        assert filters == original_filters
        assert vector == disk_vector
