"""Filter values reach Milvus only as literals: hostile values match exactly themselves, on Lite and a server, and
match the same rows on the category column as on the JSON metadata."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from components.store.json_metadata_document_store import category_column_value, json_filter_expression
from components.store.milvus_chunk_store import MilvusChunkStore
from components.store.schema import CollectionSchema

HOSTILE = [
    'a"b',
    "back\\slash\\",
    '" or 1==1 or metadata["category"] == "',
    "x' or 1==1",
    "ops\x01",
    "tab\there",
    "line\nbreak",
    "cr\rx",
    "nul\x00z",
    "del\x7f",
    "rtl\u202eabc",
    "emoji 🚀🔥",
    "退款 / 到账时效",
    "\\u0041",
    "plain",
]
SURROGATE = "sur\udcff"


def _store(uri: str, dimension: int = 4) -> MilvusChunkStore:
    """A collection with the category column, every row's category both in it and in the JSON metadata."""
    name = f"f_{uuid.uuid4().hex[:10]}"
    schema = CollectionSchema(name, dimension=dimension, crosslingual_field="", lexical_field="", sparse_field="")
    store = MilvusChunkStore(uri, schema, consistency_level="Strong")
    store.ensure_collection()
    metadata = [{"category": value} for value in [*HOSTILE, "sur\\udcff"]] + [{}, {"category": 7}, {"category": ""}]
    rows = [
        {
            "id": f"r{i}",
            "content": f"row {i}",
            "vector": [1.0, 0.0, 0.0, 0.0],
            "metadata": meta,
            "category": category_column_value(meta, schema),
        }
        for i, meta in enumerate(metadata)
    ]
    store.insert(rows)
    store.flush()
    return store


def _json_path_only(store: MilvusChunkStore) -> MilvusChunkStore:
    """The same collection, filtered as one without the category column is (on its JSON metadata)."""
    return MilvusChunkStore(store.uri, store.schema.with_values(category_field=""), consistency_level="Strong")


def _category(store: MilvusChunkStore, value: Any, operator: str = "==") -> list[str]:
    expr = json_filter_expression({"field": "meta.category", "operator": operator, "value": value}, store.schema)
    return sorted(h["id"] for h in store.search([1.0, 0.0, 0.0, 0.0], 50, expr=expr))


def _check(store: MilvusChunkStore) -> None:
    for i, value in enumerate(HOSTILE):
        assert _category(store, value) == [f"r{i}"], repr(value)
        assert _category(store, [value, "no such category"], "in") == [f"r{i}"], repr(value)
        others = _category(store, value, "!=")
        assert f"r{i}" not in others and others, repr(value)
    # a lone surrogate cannot be sent; it matches its escaped form (how the trace store keeps such text)
    assert _category(store, SURROGATE) == [f"r{len(HOSTILE)}"]
    assert _category(store, "no such category") == []
    assert _category(store, 7) == [f"r{len(HOSTILE) + 2}"]


def _check_both_ways(store: MilvusChunkStore) -> None:
    """Every filter matches the same rows whether it reads the category column or the JSON metadata."""
    assert store.schema.category_field == "category"
    _check(store)
    json_only = _json_path_only(store)
    try:
        _check(json_only)
        for value in [*HOSTILE, SURROGATE, "", 7, "no such category"]:
            for operator in ("==", "!="):
                assert _category(store, value, operator) == _category(json_only, value, operator), repr(value)
    finally:
        json_only.close()


class TestFilters:
    @pytest.mark.integration
    def test_hostile_values_match_literally_on_milvus_lite(self, tmp_path):
        store = _store(str(tmp_path / "milvus.db"))
        try:
            _check_both_ways(store)
        finally:
            store.close()

    @pytest.mark.milvus_server
    def test_hostile_values_match_literally_on_a_milvus_server(self, milvus_server):
        store = _store(milvus_server.uri)
        try:
            _check_both_ways(store)
        finally:
            store.drop()
            store.close()
