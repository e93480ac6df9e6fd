from __future__ import annotations

import pytest
from pymilvus import MilvusException

from components.store.milvus_chunk_store import MilvusChunkStore
from components.store.schema import CollectionSchema

pytestmark = pytest.mark.integration


@pytest.fixture
def store(tmp_path):
    s = MilvusChunkStore(str(tmp_path / "milvus.db"), CollectionSchema("chunks", dimension=4, crosslingual_field=""))
    s.ensure_collection()
    rows = [
        {"id": f"r{i}", "content": f"row {i}", "vector": [float(i == j) for j in range(4)], "metadata": {}}
        for i in range(4)
    ]
    s.insert(rows)
    s.flush()
    yield s
    s.close()


def _fail_once(store: MilvusChunkStore, code: int) -> list[int]:
    calls: list[int] = []
    client = store.client
    real = client.search

    def flaky(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise MilvusException(code=code, message="Fail connecting to server on 127.0.0.1:1")
        return real(*args, **kwargs)

    client.search = flaky  # type: ignore[method-assign]
    return calls


class TestMilvusChunkStore:
    def test_a_dropped_connection_is_opened_again_once(self, store):
        calls = _fail_once(store, code=2)
        first_client = store.client
        hits = store.search([1.0, 0.0, 0.0, 0.0], 2)
        assert hits[0]["id"] == "r0"
        assert len(calls) == 1  # the failing client was replaced, the search ran on a new one
        assert store.client is not first_client

    def test_other_errors_are_not_retried(self, store):
        calls = _fail_once(store, code=1)
        with pytest.raises(MilvusException):
            store.search([1.0, 0.0, 0.0, 0.0], 2)
        assert len(calls) == 1
