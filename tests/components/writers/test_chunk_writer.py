from __future__ import annotations

import copy
import datetime
import uuid
from pathlib import Path

import pytest
from haystack import Document
from haystack.core.serialization import component_from_dict, component_to_dict

from components.store.knowledge_collection import KnowledgeCollection
from components.store.lexical import lexical_text
from components.writers.chunk_writer import ChunkWriter

DIM = 4
CUSTOM_FIELDS = {"id_field": "pk", "content_field": "text", "vector_field": "emb", "metadata_field": "meta_json"}


def unit(i: int) -> list[float]:
    vec = [0.0] * DIM
    vec[i % DIM] = 1.0
    return vec


def chunk(source: str, version: str, index: int, text: str | None = None, **meta) -> Document:
    return Document(
        id=f"{source}@{version}#{index}",
        content=text or f"{source} {version} chunk {index}",
        embedding=unit(index),
        meta={"source": source, "doc_version": version, "chunk_index": index, **meta},
    )


@pytest.fixture(scope="module")
def db_uri(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("writer") / "data" / "milvus.db")


@pytest.fixture
def make_writer(db_uri):
    made: list[ChunkWriter] = []

    def make(**kwargs) -> ChunkWriter:
        params = {
            "uri": db_uri,
            "index_path": str(Path(db_uri).parent / "no_index.json"),
            "collection_name": f"chunks_{uuid.uuid4().hex[:12]}",
            "dimension": DIM,
            "crosslingual_field": "",  # the cross-lingual vectors have tests of their own
            **CUSTOM_FIELDS,
        }
        params.update(kwargs)
        writer = ChunkWriter(KnowledgeCollection(**params))
        made.append(writer)
        return writer

    yield make
    for writer in made:
        try:
            writer.collection.drop()
        finally:
            writer.close()


def name_of(writer: ChunkWriter) -> str:
    return writer.collection.schema.collection_name


def rows(writer: ChunkWriter) -> dict[str, dict]:
    """Every row of the writer's collection, keyed by primary key, read with a separate client."""
    store, id_field = writer.collection.store, writer.collection.schema.id_field
    store.flush()
    store.load()
    found = store.client.query(name_of(writer), filter=f'{id_field} != ""', output_fields=["*"])
    return {row[id_field]: row for row in found}


class TestChunkWriter:
    def test_init_defaults(self):
        writer = ChunkWriter()
        collection = writer.collection
        assert collection.uri == "data/milvus.db"
        assert (collection.dimension, collection.metric_type) == (384, "L2")  # a new collection gets the original's
        schema = collection.schema
        assert schema.collection_name == "knowledge_chunks"
        assert schema.index_type == "AUTOINDEX"
        assert (schema.id_field, schema.content_field) == ("id", "content")
        assert (schema.vector_field, schema.metadata_field) == ("vector", "metadata")
        assert (schema.lexical_field, schema.sparse_field) == ("lexical", "sparse")
        assert (schema.crosslingual_field, schema.crosslingual_dimension) == ("crosslingual", 512)

    def test_init_does_not_connect(self, tmp_path):
        ChunkWriter(KnowledgeCollection(uri=str(tmp_path / "nowhere" / "milvus.db")))
        assert not (tmp_path / "nowhere").exists()

    def test_to_dict_from_dict_keeps_the_collection(self):
        collection = KnowledgeCollection(
            uri="http://127.0.0.1:19530",
            collection_name="kb_other",
            dimension=512,
            metric_type="COSINE",
            index_type="HNSW",
            lexical_field="terms",
            sparse_field="terms_bm25",
            **CUSTOM_FIELDS,
        )
        data = component_to_dict(ChunkWriter(collection), "writer")
        assert data["init_parameters"]["collection"] == collection.to_dict()
        restored = component_from_dict(ChunkWriter, data, "writer")
        assert restored.collection.to_dict() == collection.to_dict()
        assert restored.collection.schema == collection.schema

    def test_to_dict_does_not_store_a_token(self, monkeypatch):
        monkeypatch.setenv("MILVUS_TOKEN", "s3cret-token")
        data = component_to_dict(ChunkWriter(), "writer")
        assert "s3cret-token" not in repr(data)
        assert data["init_parameters"]["collection"]["init_parameters"]["token"]["env_vars"] == ["MILVUS_TOKEN"]

    def test_lexical_text_is_stems_and_bigrams_cut_to_fit_the_field(self):
        assert lexical_text("Disks are running FULL") == "disk run full"
        assert lexical_text("退款到账") == "退款 款到 到账"
        huge = lexical_text("退款到账" * 20000)
        assert len(huge.encode()) <= 65535
        assert set(huge.split()) == {"退款", "款到", "到账", "账退"}  # cut between terms, never inside one
        assert lexical_text("") == ""

    @pytest.mark.integration
    def test_warm_up_creates_the_configured_schema(self, make_writer):
        writer = make_writer(metric_type="COSINE")
        writer.warm_up()
        writer.warm_up()  # idempotent
        client = writer.collection.store.client
        assert client.has_collection(name_of(writer))
        fields = {f["name"]: f for f in client.describe_collection(name_of(writer))["fields"]}
        assert set(fields) == {"pk", "text", "emb", "meta_json", "lexical", "sparse", "category"}
        assert fields["pk"].get("is_primary") is True
        assert fields["emb"]["params"]["dim"] == DIM
        names = client.list_indexes(name_of(writer))
        indexes = [client.describe_index(name_of(writer), index_name=n) for n in names]
        assert {i["field_name"]: i["metric_type"] for i in indexes} == {"emb": "COSINE", "sparse": "BM25"}
        assert writer.collection.full_text_field() == "sparse"

    @pytest.mark.integration
    def test_full_text_fields_can_be_turned_off(self, make_writer):
        writer = make_writer(lexical_field="", sparse_field="")
        writer.run(documents=[chunk("a.md", "v1", 0)])
        fields = {f["name"] for f in writer.collection.store.client.describe_collection(name_of(writer))["fields"]}
        assert fields == {"pk", "text", "emb", "meta_json", "category"}
        assert writer.collection.full_text_field() == ""
        assert set(rows(writer)["a.md@v1#0"]) == fields

    @pytest.mark.integration
    def test_rows_are_found_by_milvus_full_text_search(self, make_writer):
        writer = make_writer()
        writer.run(
            documents=[
                chunk("alerts/disk.md", "v1", 0, text="Disks running full: clean the logs"),
                chunk("payments/refund.md", "v1", 0, text="退款在审核通过后七个工作日内原路退回。"),
            ]
        )
        writer.collection.store.flush()
        english = writer.collection.store.full_text_search(lexical_text("disk is full"), "sparse", top_k=5)
        chinese = writer.collection.store.full_text_search(lexical_text("退款多久退回"), "sparse", top_k=5)
        assert [pk for pk, _ in english] == ["alerts/disk.md@v1#0"]  # stems: disks -> disk
        assert [pk for pk, _ in chinese] == ["payments/refund.md@v1#0"]  # character bigrams
        assert english[0][1] > 0 and chinese[0][1] > 0

    @pytest.mark.integration
    def test_run_writes_rows_with_the_configured_fields(self, make_writer):
        writer = make_writer()
        docs = [
            chunk("alerts/disk.md", "v1", 0, title="Disk Full", keywords=["disk", "inode"], category="alerts"),
            chunk("alerts/disk.md", "v1", 1, title="Disk Full", keywords=["disk", "inode"], category="alerts"),
            chunk("payments/refund.md", "v7", 0, text="退款在审核通过后七个工作日内原路退回。"),  # no category
        ]
        out = writer.run(documents=docs)
        assert out["written"] == 3
        assert out["failures"] == []
        written = sorted(out["documents_written"], key=lambda d: d["source"])
        assert [{k: d[k] for k in ("source", "doc_version", "chunks")} for d in written] == [
            {"source": "alerts/disk.md", "doc_version": "v1", "chunks": 2},
            {"source": "payments/refund.md", "doc_version": "v7", "chunks": 1},
        ]
        assert written[0]["meta"] == docs[0].meta  # the document's fields, for the knowledge index
        stored = rows(writer)
        assert set(stored) == {d.id for d in docs}
        for doc in docs:
            row = stored[doc.id]
            assert set(row) == {"pk", "text", "emb", "meta_json", "lexical", "sparse", "category"}
            assert row["category"] == doc.meta.get("category", "")  # the JSON metadata's, in a column of its own
            assert row["lexical"] == lexical_text(doc.content)
            assert row["sparse"]  # filled by Milvus' BM25 function, not by the writer
            assert row["text"] == doc.content
            assert [float(x) for x in row["emb"]] == pytest.approx(doc.embedding)
            assert row["meta_json"] == doc.meta
        assert stored["alerts/disk.md@v1#0"]["meta_json"]["keywords"] == ["disk", "inode"]

    @pytest.mark.integration
    def test_crosslingual_vectors_go_to_their_own_field_not_the_metadata(self, make_writer):
        writer = make_writer(crosslingual_field="bridge", crosslingual_dimension=3)
        doc = chunk("a.md", "v1", 0, crosslingual_embedding=[0.0, 0.6, 0.8])
        assert writer.run(documents=[doc])["written"] == 1
        row = rows(writer)[doc.id]
        assert [float(x) for x in row["bridge"]] == pytest.approx([0.0, 0.6, 0.8])
        assert "crosslingual_embedding" not in row["meta_json"]
        assert "crosslingual_embedding" in doc.meta  # the input is not mutated
        assert writer.collection.crosslingual_vectors([doc.id, "missing"]) == {doc.id: pytest.approx([0.0, 0.6, 0.8])}

    @pytest.mark.integration
    @pytest.mark.parametrize("vector", [None, [1.0, 0.0]])
    def test_missing_crosslingual_vector_fails_only_that_document(self, make_writer, vector):
        writer = make_writer(crosslingual_field="bridge", crosslingual_dimension=3)
        good = chunk("good.md", "v1", 0, crosslingual_embedding=[1.0, 0.0, 0.0])
        bad = chunk("bad.md", "v1", 0, **({"crosslingual_embedding": vector} if vector else {}))
        out = writer.run(documents=[good, bad])
        assert out["written"] == 1
        assert [f["source"] for f in out["failures"]] == ["bad.md"]
        assert "crosslingual_embedder" in out["failures"][0]["reason"]
        assert set(rows(writer)) == {good.id}

    @pytest.mark.integration
    def test_a_collection_without_the_field_ignores_crosslingual_vectors(self, make_writer):
        writer = make_writer()  # crosslingual_field ''
        doc = chunk("a.md", "v1", 0, crosslingual_embedding=[1.0, 0.0, 0.0])
        assert writer.run(documents=[doc])["written"] == 1
        assert "crosslingual_embedding" not in rows(writer)[doc.id]["meta_json"]
        assert writer.collection.crosslingual_vectors([doc.id]) == {}
        assert writer.collection.has_crosslingual() is False

    @pytest.mark.integration
    def test_written_rows_are_searchable_by_vector_and_json_metadata(self, make_writer):
        writer = make_writer()
        writer.run(documents=[chunk("a.md", "v1", 0, category="alerts"), chunk("b.md", "v1", 1, category="faq")])
        writer.collection.store.flush()
        hits = writer.collection.store.search(unit(1), top_k=5, expr='meta_json["category"] == "alerts"')
        assert [h["id"] for h in hits] == ["a.md@v1#0"]
        hits = writer.collection.store.search(unit(1), top_k=5)
        assert hits[0]["id"] == "b.md@v1#1"
        assert hits[0]["metadata"]["source"] == "b.md"

    @pytest.mark.integration
    def test_metadata_that_is_not_json_is_stored_as_text(self, make_writer):
        writer = make_writer()
        doc = chunk("a.md", "v1", 0, updated=datetime.date(2024, 1, 2))
        before = copy.deepcopy(doc.meta)
        out = writer.run(documents=[doc])
        assert out["written"] == 1 and out["failures"] == []
        assert rows(writer)[doc.id]["meta_json"]["updated"] == "2024-01-02"
        assert doc.meta == before  # the input keeps its date

    @pytest.mark.integration
    def test_document_without_source_is_grouped_by_its_id(self, make_writer):
        writer = make_writer()
        doc = Document(id="loose-1", content="no source", embedding=unit(0), meta={})
        out = writer.run(documents=[doc])
        assert out["written"] == 1
        assert out["documents_written"] == [{"source": "loose-1", "doc_version": None, "chunks": 1, "meta": {}}]
        assert rows(writer)["loose-1"]["text"] == "no source"

    @pytest.mark.integration
    @pytest.mark.parametrize("bad_embedding", [[1.0, 0.0], [0.0] * (DIM + 1), None])
    def test_wrong_embedding_fails_only_that_document(self, make_writer, bad_embedding):
        writer = make_writer()
        bad = Document(
            id="bad.md@v1#1",
            content="bad",
            embedding=bad_embedding,
            meta={"source": "bad.md", "doc_version": "v1", "chunk_index": 1},
        )
        docs = [chunk("bad.md", "v1", 0), bad, chunk("good.md", "v2", 0), chunk("good.md", "v2", 1)]
        out = writer.run(documents=docs)
        assert out["written"] == 2
        assert [{k: d[k] for k in ("source", "doc_version", "chunks")} for d in out["documents_written"]] == [
            {"source": "good.md", "doc_version": "v2", "chunks": 2}
        ]
        assert [f["source"] for f in out["failures"]] == ["bad.md"]
        assert "dimension" in out["failures"][0]["reason"]
        stored = rows(writer)
        assert set(stored) == {"good.md@v2#0", "good.md@v2#1"}  # not even the valid chunk of bad.md

    @pytest.mark.integration
    def test_failed_insert_leaves_nothing_of_that_document(self, make_writer, monkeypatch):
        writer = make_writer()
        writer.warm_up()
        real_insert = writer.collection.store.insert

        def half_then_fail(batch):
            if batch[0]["meta_json"]["source"] == "broken.md":
                real_insert(batch[:1])
                raise ConnectionError("milvus went away")
            real_insert(batch)

        monkeypatch.setattr(writer.collection.store, "insert", half_then_fail)
        docs = [chunk("broken.md", "v1", i) for i in range(3)] + [chunk("fine.md", "v1", 0)]
        out = writer.run(documents=docs)
        assert out["written"] == 1
        assert out["failures"] == [{"source": "broken.md", "reason": "write failed: milvus went away"}]
        assert set(rows(writer)) == {"fine.md@v1#0"}

    @pytest.mark.integration
    def test_documents_share_inserts_up_to_the_row_cap_never_splitting_one(self, make_writer, monkeypatch):
        writer = make_writer()
        writer.warm_up()
        monkeypatch.setattr("components.store.collection_writes.ROWS_PER_INSERT", 3)
        real_insert = writer.collection.store.insert
        inserts: list[list[str]] = []

        def recording(batch):
            inserts.append([row["pk"] for row in batch])
            real_insert(batch)

        monkeypatch.setattr(writer.collection.store, "insert", recording)
        docs = [chunk("a.md", "v1", i) for i in range(2)] + [chunk("b.md", "v1", i) for i in range(2)]
        docs += [chunk("c.md", "v1", 0)] + [chunk("big.md", "v1", i) for i in range(5)]
        out = writer.run(documents=docs)
        assert out["written"] == 10 and out["failures"] == []
        assert [d["source"] for d in out["documents_written"]] == ["a.md", "b.md", "c.md", "big.md"]
        assert inserts == [
            ["a.md@v1#0", "a.md@v1#1"],
            ["b.md@v1#0", "b.md@v1#1", "c.md@v1#0"],
            [f"big.md@v1#{i}" for i in range(5)],
        ]
        assert set(rows(writer)) == {doc.id for doc in docs}

    @pytest.mark.integration
    def test_a_failed_shared_insert_costs_only_the_document_that_fails_alone(self, make_writer, monkeypatch):
        writer = make_writer()
        writer.warm_up()
        real_insert = writer.collection.store.insert

        def fails_with_broken(batch):
            real_insert(batch[:2])  # part of the request lands before it fails
            if any(row["meta_json"]["source"] == "broken.md" for row in batch):
                raise ConnectionError("milvus went away")
            real_insert(batch[2:])

        monkeypatch.setattr(writer.collection.store, "insert", fails_with_broken)
        docs = [chunk("fine.md", "v1", i) for i in range(2)] + [chunk("broken.md", "v1", i) for i in range(3)]
        docs += [chunk("also-fine.md", "v1", 0)]
        out = writer.run(documents=docs)
        assert out["written"] == 3
        assert [d["source"] for d in out["documents_written"]] == ["fine.md", "also-fine.md"]
        assert out["failures"] == [{"source": "broken.md", "reason": "write failed: milvus went away"}]
        assert set(rows(writer)) == {"fine.md@v1#0", "fine.md@v1#1", "also-fine.md@v1#0"}

    @pytest.mark.integration
    def test_a_shared_insert_that_cannot_be_cleaned_up_fails_all_its_documents(self, make_writer, monkeypatch):
        writer = make_writer()
        writer.warm_up()
        calls: list[int] = []

        def fail(batch):
            calls.append(len(batch))
            raise ConnectionError("down")

        def delete_fails(ids):
            raise ConnectionError("delete failed too")

        monkeypatch.setattr(writer.collection.store, "insert", fail)
        monkeypatch.setattr(writer.collection.store, "delete_ids", delete_fails)
        out = writer.run(documents=[chunk("a.md", "v1", 0), chunk("b.md", "v1", 0)])
        assert calls == [2]  # not written again one by one: leftovers of the first try would stay beside them
        assert out["written"] == 0 and out["documents_written"] == []
        assert [f["source"] for f in out["failures"]] == ["a.md", "b.md"]

    @pytest.mark.integration
    def test_failed_cleanup_is_still_reported_not_raised(self, make_writer, monkeypatch):
        writer = make_writer()
        writer.warm_up()

        def fail(*args, **kwargs):
            raise ConnectionError("down")

        monkeypatch.setattr(writer.collection.store, "insert", fail)
        monkeypatch.setattr(writer.collection.store, "delete_ids", fail)
        out = writer.run(documents=[chunk("a.md", "v1", 0)])
        assert out["written"] == 0 and out["documents_written"] == []
        assert [f["source"] for f in out["failures"]] == ["a.md"]

    @pytest.mark.integration
    def test_new_version_is_written_next_to_the_old(self, make_writer):
        writer = make_writer()
        writer.run(documents=[chunk("a.md", "v1", 0), chunk("a.md", "v1", 1)])
        writer.run(documents=[chunk("a.md", "v2", 0)])
        versions = sorted(r["meta_json"]["doc_version"] for r in rows(writer).values())
        assert versions == ["v1", "v1", "v2"]

    def test_empty_input_writes_nothing(self, tmp_path):
        writer = ChunkWriter(KnowledgeCollection(uri=str(tmp_path / "data" / "milvus.db"), dimension=DIM))
        out = writer.run(documents=[])
        assert out == {"written": 0, "documents_written": [], "failures": []}
        writer.close()

    @pytest.mark.integration
    def test_inputs_are_not_mutated(self, make_writer):
        writer = make_writer()
        docs = [chunk("a.md", "v1", 0, keywords=["x"]), chunk("b.md", "v1", 1)]
        before = [copy.deepcopy(d.to_dict()) for d in docs]
        writer.run(documents=docs)
        assert [d.to_dict() for d in docs] == before

    @pytest.mark.integration
    def test_remove_stale_deletes_only_inactive_versions(self, make_writer):
        writer = make_writer()
        writer.run(
            documents=[
                chunk("a.md", "v1", 0),
                chunk("a.md", "v1", 1),
                chunk("a.md", "v2", 0),
                chunk("b.md", "v1", 0),
                chunk("gone.md", "v1", 0),
            ]
        )
        foreign = {
            "pk": "foreign-1",
            "text": "written by another tool",
            "emb": unit(2),
            "meta_json": {"source": "a.md"},
            "category": "",
        }
        bare = {"pk": "foreign-2", "text": "no metadata at all", "emb": unit(3), "meta_json": {}, "category": ""}
        writer.collection.store.client.insert(name_of(writer), [foreign, bare])
        writer.collection.store.flush()

        removed = writer.remove_stale({"a.md": "v2", "b.md": "v1"})

        assert removed == 3
        assert set(rows(writer)) == {"a.md@v2#0", "b.md@v1#0", "foreign-1", "foreign-2"}
        assert writer.remove_stale({"a.md": "v2", "b.md": "v1"}) == 0

    @pytest.mark.integration
    def test_remove_stale_with_nothing_active_keeps_foreign_rows(self, make_writer):
        writer = make_writer()
        writer.run(documents=[chunk("a.md", "v1", 0)])
        writer.collection.store.client.insert(
            name_of(writer),
            [{"pk": "foreign", "text": "x", "emb": unit(1), "meta_json": {"source": "a.md"}, "category": ""}],
        )
        writer.collection.store.flush()
        assert writer.remove_stale({}) == 1
        assert set(rows(writer)) == {"foreign"}

    @pytest.mark.integration
    def test_remove_stale_does_not_mutate_active(self, make_writer):
        writer = make_writer()
        writer.run(documents=[chunk("a.md", "v1", 0)])
        active = {"a.md": "v2"}
        writer.remove_stale(active)
        assert active == {"a.md": "v2"}

    @pytest.mark.integration
    def test_default_schema_rows(self, db_uri):
        """With the default field names the row is the original's `{id, content, vector, metadata}`, plus ours."""
        collection = KnowledgeCollection(uri=db_uri, collection_name=f"plain_{uuid.uuid4().hex[:8]}", dimension=DIM)
        writer = ChunkWriter(collection)
        try:
            writer.run(documents=[chunk("a.md", "v1", 0, crosslingual_embedding=[1.0] + [0.0] * 511)])
            stored = rows(writer)
            assert set(stored["a.md@v1#0"]) == {
                "id",
                "content",
                "vector",
                "metadata",
                "lexical",
                "sparse",
                "crosslingual",
                "category",
            }
        finally:
            collection.drop()
            writer.close()
