"""Filter values reach Milvus only as literals: hostile values match exactly themselves, on Lite and a server."""

from __future__ import annotations

import uuid

import pytest

from components.store.json_metadata_document_store import json_filter_expression
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
    name = f"f_{uuid.uuid4().hex[:10]}"
    schema = CollectionSchema(name, dimension=dimension, crosslingual_field="", lexical_field="", sparse_field="")
    store = MilvusChunkStore(uri, schema, consistency_level="Strong")
    store.ensure_collection()
    rows = [
        {"id": f"r{i}", "content": f"row {i}", "vector": [1.0, 0.0, 0.0, 0.0], "metadata": {"category": value}}
        for i, value in enumerate(HOSTILE)
    ]
    rows.append(
        {"id": "escaped", "content": "e", "vector": [1.0, 0.0, 0.0, 0.0], "metadata": {"category": "sur\\udcff"}}
    )
    store.insert(rows)
    store.flush()
    return store


def _category(store: MilvusChunkStore, value: str, operator: str = "==") -> list[str]:
    expr = json_filter_expression({"field": "meta.category", "operator": operator, "value": value}, store.schema)
    return sorted(h["metadata"]["category"] for h in store.search([1.0, 0.0, 0.0, 0.0], 50, expr=expr))


def _check(store: MilvusChunkStore) -> None:
    for value in HOSTILE:
        assert _category(store, value) == [value], repr(value)
        others = _category(store, value, "!=")
        assert value not in others and len(others) == len(HOSTILE), repr(value)
    # a lone surrogate cannot be sent; it matches its escaped form (how the trace store keeps such text)
    assert _category(store, SURROGATE) == ["sur\\udcff"]
    assert _category(store, "no such category") == []


class TestFilters:
    @pytest.mark.integration
    def test_hostile_values_match_literally_on_milvus_lite(self, tmp_path):
        store = _store(str(tmp_path / "milvus.db"))
        try:
            _check(store)
        finally:
            store.close()

    @pytest.mark.milvus_server
    def test_hostile_values_match_literally_on_a_milvus_server(self, milvus_server):
        store = _store(milvus_server.uri)
        try:
            _check(store)
        finally:
            store.drop()
            store.close()
