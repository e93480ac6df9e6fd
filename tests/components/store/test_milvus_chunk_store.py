from __future__ import annotations

import uuid

import pytest
from pymilvus import DataType, MilvusClient, MilvusException
from pymilvus.client.grpc_handler import GrpcHandler

from components.store.milvus_chunk_store import MilvusChunkStore
from components.store.schema import CollectionSchema
from tests.conftest import count_index_requests

pytestmark = pytest.mark.integration


@pytest.fixture
def store(tmp_path):
    s = MilvusChunkStore(str(tmp_path / "milvus.db"), CollectionSchema("chunks", dimension=4, crosslingual_field=""))
    s.ensure_collection()
    rows = [
        {
            "id": f"r{i}",
            "content": f"row {i}",
            "vector": [float(i == j) for j in range(4)],
            "metadata": {},
            "category": "",
        }
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

    def test_lite_connections_send_no_idle_keepalive_pings(self, tmp_path, monkeypatch):
        """Milvus Lite's server drops a connection that pings every 10 s while idle (GOAWAY too_many_pings)."""
        import components.store.milvus_chunk_store as module

        seen: list[dict] = []
        monkeypatch.setattr(module, "MilvusClient", lambda **kwargs: seen.append(kwargs) or object())
        MilvusChunkStore(str(tmp_path / "m.db"), CollectionSchema("c", dimension=4)).client  # noqa: B018
        MilvusChunkStore("http://127.0.0.1:19530", CollectionSchema("c", dimension=4)).client  # noqa: B018
        assert seen[0]["grpc_options"]["grpc.keepalive_permit_without_calls"] == 0
        assert seen[0]["grpc_options"]["grpc.keepalive_time_ms"] >= 300_000  # the server's minimum ping interval
        assert "grpc.keepalive_time_ms" not in seen[1]["grpc_options"]  # a server keeps pymilvus' keep-alive
        for options in (seen[0]["grpc_options"], seen[1]["grpc_options"]):  # a restarted server is found again at once
            assert options["grpc.max_reconnect_backoff_ms"] <= 1_000 and options["grpc.use_local_subchannel_pool"] == 1

    def test_describe_asks_for_the_vector_index_once(self, store, monkeypatch):
        """Milvus Lite counts every row to describe an index: 0.5 s a request at 100k chunks."""
        calls = count_index_requests(monkeypatch)
        found = store.describe()
        assert found.metric_type == store.schema.metric_type
        assert found.vector_index is not None
        assert found.vector_index["field_name"] == "vector"
        assert found.dimension == 4
        assert calls == {"describe_index": 1}

    @pytest.mark.parametrize("tier", ["lite", pytest.param("server", marks=pytest.mark.milvus_server)])
    def test_an_index_named_otherwise_is_found(self, request, tmp_path, tier):
        """A collection made by another tool, its vector index named neither after the field nor by us."""
        uri = request.getfixturevalue("milvus_server").uri if tier == "server" else str(tmp_path / "milvus.db")
        name = f"other_{uuid.uuid4().hex[:8]}"
        lease_holder = MilvusChunkStore(uri, CollectionSchema())  # a Milvus Lite folder is served by its host
        client = MilvusClient(uri=lease_holder.endpoint())
        schema = client.create_schema(auto_id=False, enable_dynamic_field=False)
        schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=64)
        schema.add_field("content", DataType.VARCHAR, max_length=1024)
        schema.add_field("vector", DataType.FLOAT_VECTOR, dim=4)
        schema.add_field("metadata", DataType.JSON)
        index = client.prepare_index_params()
        index.add_index(field_name="vector", index_name="embedding_idx", index_type="AUTOINDEX", metric_type="IP")
        client.create_collection(name, schema=schema, index_params=index)
        store = MilvusChunkStore(uri, CollectionSchema(name, dimension=4, crosslingual_field=""))
        try:
            found = store.describe()
            assert found.metric_type == "IP"
            assert found.vector_index is not None
            assert found.vector_index["field_name"] == "vector"
        finally:
            store.close()
            client.drop_collection(name)
            client.close()
            lease_holder.close()

    def test_the_crosslingual_vectors_get_no_graph_index_and_rows_come_with_the_vectors_asked_for(self, tmp_path):
        """
        They are read by id, never searched: a graph index would be built (about 8 s per 20k vectors) for nothing.
        (The test tier's 2.3 server takes one vector field per collection: it gets no cross-lingual vectors.)
        """
        store = MilvusChunkStore(str(tmp_path / "milvus.db"), CollectionSchema("cross", dimension=4))
        try:
            store.ensure_collection()
            crosslingual = [[0.0] * 512 for _ in range(3)]
            for i, vector in enumerate(crosslingual):
                vector[i] = 1.0
            store.insert(
                [
                    {
                        "id": f"r{i}",
                        "content": f"row {i}",
                        "vector": [float(i == j) for j in range(4)],
                        "metadata": {},
                        "category": "",
                        "crosslingual": crosslingual[i],
                    }
                    for i in range(3)
                ]
            )
            store.flush()
            name = store.schema.collection_name
            assert store.client.describe_index(name, "crosslingual")["index_type"] == "FLAT"
            assert store.describe().vector_index["index_type"] == store.schema.index_type
            rows = store.get_rows(["r2", "r0"], vector_fields=["crosslingual"])
            assert {r["id"]: r["vectors"]["crosslingual"][:3] for r in rows} == {
                "r2": [0.0, 0.0, 1.0],
                "r0": [1.0, 0.0, 0.0],
            }
            (bare,) = store.get_rows(["r1"], dense=False)
            assert (bare["content"], bare["vector"], bare["vectors"]) == ("row 1", None, {})
        finally:
            store.drop()
            store.close()

    def test_creating_a_collection_does_not_wait_on_its_indexes(self, tmp_path, monkeypatch):
        """pymilvus sleeps 0.5 s per index before it asks whether the empty collection's index is built."""

        def no_waiting(*args, **kwargs):
            raise AssertionError("waited for an index of an empty collection")

        monkeypatch.setattr(GrpcHandler, "wait_for_creating_index", no_waiting)
        store = MilvusChunkStore(str(tmp_path / "milvus.db"), CollectionSchema("fresh", dimension=4))
        try:
            assert store.ensure_collection()
            assert store.describe().metric_type == store.schema.metric_type
            assert store.client.get_load_state("fresh")["state"].name == "Loaded"
        finally:
            store.close()
