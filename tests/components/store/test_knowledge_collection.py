from __future__ import annotations

import json
import os
import uuid
from dataclasses import asdict, replace
from pathlib import Path

import pytest
from haystack import Document
from haystack.utils import Secret

from components.core.embedding_backends import get_backend
from components.store.collection_base import WARM_UP_QUERY
from components.store.knowledge_collection import CollectionMismatchError, KnowledgeCollection
from components.store.knowledge_index import KnowledgeIndex
from components.store.lexical import TermStatistics, lexical_text, tokenize
from components.store.schema import CollectionSchema
from components.writers.chunk_writer import ChunkWriter
from tests.conftest import index_tiny_kb

CATEGORY = "meta.category"
CUSTOM_FIELDS = {"id_field": "pk", "content_field": "text", "vector_field": "emb", "metadata_field": "meta_json"}


def embed(query: str) -> list[float]:
    return get_backend("multilingual-e5-small").embed_queries([query])[0].tolist()


def category_is(value: str) -> dict:
    return {"field": CATEGORY, "operator": "==", "value": value}


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    """The tiny knowledge base indexed once into Milvus Lite for the whole module."""
    return index_tiny_kb(tmp_path_factory.mktemp("collection"))


@pytest.fixture
def make_collection(data_dir):
    made: list[KnowledgeCollection] = []

    def make(**kwargs) -> KnowledgeCollection:
        params = {"uri": str(data_dir / "milvus.db"), "index_path": str(data_dir / "knowledge_index.json")}
        collection = KnowledgeCollection(**{**params, **kwargs})
        made.append(collection)
        return collection

    yield make
    for collection in made:
        collection.close()


def write_chunks(data_dir: Path, name: str, texts: list[str], **schema) -> None:
    """A collection of its own with one chunk per text (unit vectors along the first axis)."""
    collection = KnowledgeCollection(
        uri=str(data_dir / "milvus.db"),
        index_path=str(data_dir / "none.json"),
        collection_name=name,
        **{"crosslingual_field": "", **schema},
    )
    writer = ChunkWriter(collection)
    try:
        collection.drop()
        writer.run(
            documents=[
                Document(
                    id=f"{name}/{i}.md@v1#0",
                    content=text,
                    embedding=[1.0] + [0.0] * ((schema.get("dimension") or 384) - 1),
                    meta={"source": f"{name}/{i}.md", "chunk_index": 0, "category": "misc"},
                )
                for i, text in enumerate(texts)
            ]
        )
        collection.store.flush()
    finally:
        writer.close()


class TestKnowledgeCollection:
    # --- init, validation, serialization ---------------------------------------------------------------------

    def test_init_defaults(self):
        collection = KnowledgeCollection()
        assert (collection.uri, collection.index_path) == ("data/milvus.db", "data/knowledge_index.json")
        unset = ("collection_name", "dimension", "metric_type", "index_type", "id_field", "content_field")
        assert all(getattr(collection, name) is None for name in unset)  # taken from the index, else defaults
        assert collection.schema == CollectionSchema()
        assert collection.token == Secret.from_env_var("MILVUS_TOKEN", strict=False)
        assert collection.consistency_level == "Strong"

    def test_init_does_not_connect(self, tmp_path):
        KnowledgeCollection(uri=str(tmp_path / "nowhere" / "milvus.db"))
        assert not (tmp_path / "nowhere").exists()

    @pytest.mark.parametrize(
        ("kwargs", "match"),
        [
            ({"uri": ""}, "uri=''"),
            ({"metric_type": "HAMMING"}, "metric_type='HAMMING'"),
            ({"id_field": "1bad"}, "id_field='1bad'"),
            ({"content_field": "has space"}, "content_field='has space'"),
            ({"vector_field": 'v"'}, "vector_field="),
            ({"metadata_field": "meta-json"}, "metadata_field='meta-json'"),
            ({"collection_name": "bad-name"}, "collection_name='bad-name'"),
            ({"dimension": 0}, "dimension=0"),
            ({"dimension": -3}, "dimension=-3"),
            ({"lexical_field": "bad-name"}, "lexical_field='bad-name'"),
            ({"sparse_field": ""}, "go together"),
            ({"lexical_field": ""}, "go together"),
            ({"category_field": "cat-egory"}, "category_field='cat-egory'"),
        ],
    )
    def test_invalid_init(self, kwargs, match):
        with pytest.raises(ValueError, match=match):
            KnowledgeCollection(**kwargs)

    def test_to_dict_from_dict_keeps_every_parameter(self):
        params = {
            "uri": "http://127.0.0.1:19530",
            "index_path": "/srv/kb/knowledge_index.json",
            "collection_name": "kb_other",
            "dimension": 512,
            "metric_type": "COSINE",
            "index_type": "HNSW",
            "lexical_field": "terms",
            "sparse_field": "terms_bm25",
            "crosslingual_field": "bridge",
            "crosslingual_dimension": 256,
            "category_field": "area",
            "consistency_level": "Bounded",
            **CUSTOM_FIELDS,
        }
        collection = KnowledgeCollection(**params, token=Secret.from_env_var("OTHER_TOKEN"))
        data = collection.to_dict()
        assert data["type"] == "components.store.knowledge_collection.KnowledgeCollection"
        assert data["init_parameters"] == {
            **params,
            "token": {"type": "env_var", "env_vars": ["OTHER_TOKEN"], "strict": True},
        }
        restored = KnowledgeCollection.from_dict(data)
        assert restored.to_dict() == data
        assert restored.schema == collection.schema

    def test_the_token_is_never_serialized(self, monkeypatch):
        monkeypatch.setenv("MILVUS_TOKEN", "s3cret-token")
        data = KnowledgeCollection().to_dict()
        assert "s3cret-token" not in repr(data)
        assert data["init_parameters"]["token"] == {"type": "env_var", "env_vars": ["MILVUS_TOKEN"], "strict": False}
        with pytest.raises(ValueError, match="Cannot serialize token-based secret"):
            KnowledgeCollection(token=Secret.from_token("inline")).to_dict()

    # --- the schema: recorded by `index`, checked against the collection ------------------------------------

    @pytest.mark.integration
    def test_schema_comes_from_what_index_recorded(self, make_collection, data_dir):
        collection = make_collection()
        collection.warm_up()
        recorded = KnowledgeIndex.load(data_dir / "knowledge_index.json").collection_schema
        assert recorded == asdict(collection.schema)
        assert (collection.schema.metric_type, collection.schema.dimension) == ("L2", 384)

    @pytest.mark.integration
    def test_a_custom_schema_recorded_by_index_needs_no_configuration(self, make_collection, data_dir, tmp_path):
        name = f"custom_{uuid.uuid4().hex[:8]}"
        write_chunks(data_dir, name, ["zebra crossing at night"], dimension=384, metric_type="IP", **CUSTOM_FIELDS)
        index_path = tmp_path / "knowledge_index.json"
        schema = CollectionSchema(collection_name=name, metric_type="IP", **CUSTOM_FIELDS)
        KnowledgeIndex(collection_name=name, collection_schema=asdict(schema)).save(index_path)
        collection = make_collection(index_path=str(index_path))  # names nothing but where
        hits = collection.dense_search([1.0] + [0.0] * 383, 3, path="sdk")
        assert [d.content for d in hits] == ["zebra crossing at night"]
        assert collection.schema == schema
        assert hits[0].meta["score_semantics"] == "inner_product"
        assert hits[0].score == pytest.approx(1.0, abs=1e-4)

    @pytest.mark.integration
    def test_unset_metric_and_dimension_are_taken_from_the_collection(self, make_collection, data_dir):
        name = f"cos_{uuid.uuid4().hex[:8]}"
        write_chunks(data_dir, name, ["a", "b"], dimension=8, metric_type="COSINE")
        collection = make_collection(collection_name=name, index_path=str(data_dir / "none.json"))
        collection.warm_up()
        assert (collection.schema.metric_type, collection.schema.dimension) == ("COSINE", 8)

    @pytest.mark.integration
    @pytest.mark.parametrize(
        ("kwargs", "names"),
        [
            ({"metric_type": "COSINE"}, ("metric_type is 'L2' in the collection but 'COSINE' in the configuration",)),
            ({"dimension": 512}, ("dimension is 384 in the collection but 512 in the configuration",)),
            ({"metric_type": "IP", "dimension": 8}, ("'L2'", "'IP'", "384", "8")),
            ({"content_field": "body"}, ("content_field='body'", "its fields")),
        ],
    )
    def test_warm_up_fails_when_the_collection_differs_from_the_configuration(self, make_collection, kwargs, names):
        collection = make_collection(**kwargs)
        with pytest.raises(CollectionMismatchError) as raised:
            collection.warm_up()
        for name in names:
            assert name in str(raised.value)
        assert "knowledge_chunks" in str(raised.value)

    @pytest.mark.integration
    def test_a_missing_collection_is_not_an_error_until_it_is_read(self, make_collection):
        collection = make_collection(collection_name=f"missing_{uuid.uuid4().hex[:8]}")
        collection.warm_up()  # the store may be indexed later
        assert collection.exists() is False
        assert collection.count() == 0
        for path in ("sdk", "haystack"):
            with pytest.raises(LookupError, match="run `lookup-knowledge index` first"):
                collection.dense_search(embed("disk"), 3, path=path)
        with pytest.raises(LookupError, match="does not exist"):
            collection.lexical_search("disk", 3)

    @pytest.mark.integration
    def test_a_collection_created_later_is_found_without_a_restart(self, make_collection, data_dir):
        name = f"later_{uuid.uuid4().hex[:8]}"
        collection = make_collection(collection_name=name, index_path=str(data_dir / "none.json"))
        assert collection.exists() is False
        write_chunks(data_dir, name, ["zebra"])
        assert collection.exists() is True
        assert collection.count() == 1

    # --- dense search -----------------------------------------------------------------------------------------

    @pytest.mark.integration
    @pytest.mark.parametrize("filters", [None, category_is("payments")])
    def test_both_dense_paths_return_the_same_hits_on_one_scale(self, make_collection, filters):
        collection = make_collection()
        vector = embed("退款多久到账")
        sdk = collection.dense_search(vector, 5, filters, path="sdk")
        hay = collection.dense_search(vector, 5, filters, path="haystack")
        assert sdk and [d.id for d in sdk] == [d.id for d in hay]
        for a, b in zip(sdk, hay, strict=True):
            assert a.score == pytest.approx(b.score, abs=1e-4)
            assert (a.meta["retrieval_path"], b.meta["retrieval_path"]) == ("sdk", "haystack")
            assert a.meta["score_semantics"] == b.meta["score_semantics"] == "l2_distance"
        if filters:
            assert {d.meta["category"] for d in sdk} == {"payments"}

    @pytest.mark.integration
    @pytest.mark.parametrize("category_field", ["category", ""])
    def test_category_filters_find_the_same_chunks_with_and_without_the_category_column(
        self, make_collection, data_dir, category_field
    ):
        """A collection indexed before the column existed (or created without it) is filtered on its JSON metadata."""
        name = f"cat_{category_field or 'none'}"
        write_chunks(data_dir, name, ["disk alert", "refund", "plan"], category_field=category_field)
        collection = make_collection(collection_name=name, index_path=str(data_dir / "none.json"))
        assert collection.has_category_column() is bool(category_field)
        vector = [1.0] + [0.0] * 383
        for path in ("sdk", "haystack"):
            assert len(collection.dense_search(vector, 10, category_is("misc"), path=path)) == 3
            assert collection.dense_search(vector, 10, category_is("other"), path=path) == []
        if category_field:  # the writer filled the column from each chunk's metadata
            rows = collection.store.client.query(name, filter="", output_fields=["category"], limit=10)
            assert [row["category"] for row in rows] == ["misc"] * 3

    def test_an_unknown_dense_path_is_rejected(self):
        with pytest.raises(ValueError, match="path='bm25'"):
            KnowledgeCollection().dense_search([0.0], 1, path="bm25")

    @pytest.mark.integration
    def test_fetch_scored_matches_what_milvus_reports(self, make_collection):
        collection = make_collection()
        vector = embed("disk full on a node")
        hits = collection.dense_search(vector, 3, path="sdk")
        scored = {d.id: d for d in collection.fetch_scored([d.id for d in hits] + ["no-such-id"], vector)}
        assert set(scored) == {d.id for d in hits}
        for hit in hits:
            assert scored[hit.id].score == pytest.approx(hit.score, abs=1e-4)
            assert scored[hit.id].meta["raw_score"] == pytest.approx(hit.meta["raw_score"], abs=1e-3)
        assert [d.id for d in collection.fetch([hits[1].id, "no-such-id", hits[0].id])] == [hits[1].id, hits[0].id]

    @pytest.mark.integration
    def test_fetch_scored_reads_dense_vectors_from_the_table_the_rest_from_milvus(self, make_collection, monkeypatch):
        """pymilvus decodes a vector float by float: chunks found by BM25 are scored on the index run's table."""
        collection = make_collection()
        table = collection.vector_table()
        assert table is not None and "vector" in table.fields
        vector = embed("disk full on a node")
        ids = [d.id for d in collection.dense_search(vector, 4, path="sdk")]
        requested: list[list[str]] = []
        client_get = collection.store.client.get

        def recording_get(*args, **kwargs):
            requested.append(list(kwargs["output_fields"]))
            return client_get(*args, **kwargs)

        monkeypatch.setattr(collection.store.client, "get", recording_get)
        from_table = collection.fetch_scored(ids, vector)
        assert requested == [["content", "metadata"]]

        def scored(docs):
            return [(d.id, d.score, d.meta["raw_score"], d.content) for d in docs]

        vectors = table.vectors
        monkeypatch.setattr(table, "vectors", lambda chunk_ids, field: vectors(chunk_ids[1:], field))
        partly = collection.fetch_scored(ids, vector)  # the first chunk's vector comes from Milvus
        assert requested[-1] == ["vector"]
        monkeypatch.setattr(collection, "vector_table", lambda: None)
        from_milvus = collection.fetch_scored(ids, vector)
        assert requested[-1] == ["content", "metadata", "vector"]
        assert scored(from_table) == scored(partly) == scored(from_milvus)
        assert [d.id for d in from_table] == ids

    # --- versions -----------------------------------------------------------------------------------------------

    @pytest.mark.integration
    def test_drop_superseded_keeps_active_versions_and_foreign_rows(self, make_collection, data_dir, tmp_path):
        index = KnowledgeIndex.load(data_dir / "knowledge_index.json")
        index.by_source()["faq/plans.md"].doc_version = "newer"
        index.save(tmp_path / "knowledge_index.json")
        collection = make_collection(index_path=str(tmp_path / "knowledge_index.json"))
        docs = collection.dense_search(embed("subscription plan price"), 10, path="sdk")
        foreign = Document(id="x", content="written by another tool", meta={"source": "faq/plans.md"})
        kept, dropped = collection.drop_superseded([*docs, foreign])
        assert dropped == sum(d.meta["source"] == "faq/plans.md" for d in docs) > 0
        assert foreign in kept and all(d.meta.get("doc_version") != "newer" for d in kept)

    @pytest.mark.integration
    def test_drop_superseded_keeps_the_version_active_when_the_search_began(self, make_collection, data_dir, tmp_path):
        before = KnowledgeIndex.load(data_dir / "knowledge_index.json").active_versions()
        index = KnowledgeIndex.load(data_dir / "knowledge_index.json")
        index.by_source()["faq/plans.md"].doc_version = "newer"  # the switch, after the search found the old chunks
        index.save(tmp_path / "knowledge_index.json")
        collection = make_collection(index_path=str(tmp_path / "knowledge_index.json"))
        docs = collection.dense_search(embed("subscription plan price"), 10, path="sdk")
        old = [d for d in docs if d.meta["source"] == "faq/plans.md"]
        assert old and collection.drop_superseded(docs, before) == (docs, 0)
        new = [replace(d, id=f"{d.id}-new", meta={**d.meta, "doc_version": "newer"}) for d in old[:1]]
        kept, dropped = collection.drop_superseded([*docs, *new], before)  # the new version found too: only it
        assert dropped == len(old) and [d for d in kept if d.meta["source"] == "faq/plans.md"] == new

    @pytest.mark.integration
    def test_active_versions_are_read_once_per_index_version(self, make_collection, data_dir, tmp_path):
        path = tmp_path / "knowledge_index.json"
        index = KnowledgeIndex.load(data_dir / "knowledge_index.json")
        index.save(path)
        collection = make_collection(index_path=str(path))
        active = collection.active_versions()
        assert (
            collection.active_versions() is active and active["faq/plans.md"] == index.active_versions()["faq/plans.md"]
        )
        with pytest.raises(TypeError):
            active["faq/plans.md"] = "changed by a caller"  # type: ignore[index]
        index.by_source()["faq/plans.md"].doc_version = "newer"
        index.save(path)
        os.utime(path, ns=(1, path.stat().st_mtime_ns + 1_000_000))
        assert collection.active_versions()["faq/plans.md"] == "newer"

    # --- lexical search: inside Milvus or in-process ----------------------------------------------------------

    @pytest.mark.integration
    @pytest.mark.parametrize("query", ["Pro plan API access seats", "退款多久到账", "disk full node"])
    def test_milvus_and_in_process_bm25_rank_alike(self, make_collection, query):
        collection = make_collection()
        in_milvus, path = collection.lexical_search(query, 5, source="milvus")
        in_process, local = collection.lexical_search(query, 5, source="local")
        assert (path, local) == ("milvus", "local")
        assert in_milvus, query
        assert [cid for cid, _ in in_milvus] == [cid for cid, _ in in_process]
        # the in-process index reports Milvus' scale (bm25s times k1 + 1), so the ideal-score ratio is path-free
        assert [s for _, s in in_milvus] == pytest.approx([s for _, s in in_process], rel=0.02)

    @pytest.mark.integration
    def test_milvus_and_in_process_bm25_agree_on_length_normalization(self, make_collection, data_dir):
        """Chunks of very different lengths: the two paths only agree if k1 and b are the same on both."""
        filler = " ".join(f"filler{i}" for i in range(120))
        texts = ["zebra crossing", f"zebra crossing {filler}", f"zebra zebra crossing {filler} {filler}"]
        write_chunks(data_dir, "lengths", texts)
        collection = make_collection(collection_name="lengths", index_path=str(data_dir / "none.json"))
        ratios = {}
        for source in ("milvus", "local"):
            pairs, _ = collection.lexical_search("zebra", 3, source=source)
            ratios[source] = {cid: score / pairs[0][1] for cid, score in pairs}
        assert set(ratios["milvus"]) == set(ratios["local"]) == {f"lengths/{i}.md@v1#0" for i in range(3)}
        assert ratios["milvus"] == pytest.approx(ratios["local"], rel=0.02)
        assert min(ratios["local"].values()) < 0.8  # length normalization really separates them

    @pytest.mark.integration
    @pytest.mark.parametrize("source", ["milvus", "local"])
    def test_bm25_respects_the_filters(self, make_collection, source):
        collection = make_collection()
        filtered, _ = collection.lexical_search("plan seats and seven days", 5, category_is("alerts"), source=source)
        unfiltered, _ = collection.lexical_search("plan seats and seven days", 5, source=source)
        categories = {r["id"]: r["category"] for r in collection.scan(keys=("category",))}
        assert {categories[cid] for cid, _ in filtered} == {"alerts"}
        assert {categories[cid] for cid, _ in unfiltered} == {"alerts", "product-faq"}

    @pytest.mark.integration
    def test_query_without_terms_finds_nothing_lexically(self, make_collection):
        assert make_collection().lexical_search("the of and ?!", 5, source="milvus") == ([], "milvus")

    @pytest.mark.integration
    def test_a_collection_without_full_text(self, make_collection, data_dir):
        write_chunks(data_dir, "plain_text", ["zebra crossing"], lexical_field="", sparse_field="")
        collection = make_collection(collection_name="plain_text", index_path=str(data_dir / "none.json"))
        assert collection.full_text_field() == ""
        assert collection.lexical_search("zebra", 3)[1] == "local"  # auto falls back to the in-process index
        with pytest.raises(LookupError, match="lexical_source"):
            collection.lexical_search("zebra", 3, source="milvus")
        assert collection.prepare_lexical("auto") == "local"

    def test_an_unknown_lexical_source_is_rejected(self):
        with pytest.raises(ValueError, match="lexical_source='elastic'"):
            KnowledgeCollection().lexical_search("disk", 3, source="elastic")

    @pytest.mark.integration
    def test_preparing_bm25_in_milvus_runs_a_search_so_the_first_lookup_does_not_build_its_index(
        self, make_collection, monkeypatch
    ):
        collection = make_collection()
        searches: list[str] = []
        search = collection.store.full_text_search

        def counted(text, *args, **kwargs):
            searches.append(text)
            return search(text, *args, **kwargs)

        monkeypatch.setattr(collection.store, "full_text_search", counted)
        assert collection.prepare_lexical("milvus") == "milvus"
        assert searches == [lexical_text(WARM_UP_QUERY)]
        assert collection.prepare_lexical("milvus") == "milvus"  # Pipeline.run warms up before every lookup
        assert len(searches) == 1
        assert collection.prepare_lexical("local") == "local" and len(searches) == 1  # in-process: no Milvus search

    @pytest.mark.integration
    def test_term_statistics_come_with_the_index_without_reading_the_chunks(self, make_collection, monkeypatch):
        collection = make_collection()
        rows = collection.store.scan_metadata(keys=(), with_content=True)
        counted = TermStatistics(tokenize(r["content"]) for r in rows)

        def no_scan(*args, **kwargs):
            raise AssertionError("term statistics read every chunk back")

        monkeypatch.setattr(collection.store, "scan_metadata", no_scan)
        stats = collection.term_statistics("milvus")
        assert stats.chunks == counted.chunks == len(rows) and stats.df == counted.df

    @pytest.mark.integration
    def test_an_index_without_term_counts_has_them_counted_from_the_collection(
        self, make_collection, data_dir, tmp_path
    ):
        index = KnowledgeIndex.load(data_dir / "knowledge_index.json")
        stored = index.statistics.term_counts
        index.statistics.term_counts = None  # as written before they were stored
        index.save(tmp_path / "knowledge_index.json")
        stats = make_collection(index_path=str(tmp_path / "knowledge_index.json")).term_statistics("milvus")
        assert stats.chunks == stored.chunks and stats.df == stored.df

    @pytest.mark.integration
    def test_an_index_with_negative_term_counts_is_refused_on_load(self, data_dir, tmp_path):
        data = json.loads((data_dir / "knowledge_index.json").read_text(encoding="utf-8"))
        df = data["statistics"]["term_counts"]["df"]
        df[next(iter(df))] = -1
        (tmp_path / "knowledge_index.json").write_text(json.dumps(data), encoding="utf-8")
        with pytest.raises(ValueError, match="greater than or equal to 0"):
            KnowledgeIndex.load(tmp_path / "knowledge_index.json")

    # --- one cache, keyed by the index version ----------------------------------------------------------------

    @pytest.mark.integration
    def test_derived_values_are_computed_once_per_index_version(self, make_collection, data_dir, tmp_path):
        index_path = tmp_path / "knowledge_index.json"
        KnowledgeIndex.load(data_dir / "knowledge_index.json").save(index_path)
        collection = make_collection(index_path=str(index_path))
        stats = collection.term_statistics("milvus")
        local = collection.term_statistics("local")
        assert collection.term_statistics("milvus") is stats and collection.term_statistics("local") is local
        assert stats.df == local.df and stats.chunks == local.chunks  # both paths count the same terms
        before = collection.index_version()
        index = KnowledgeIndex.load(index_path)
        index.embedding_model = "re-indexed"
        index.save(index_path)
        assert collection.index_version() != before
        assert collection.term_statistics("milvus") is not stats
        assert collection.term_statistics("local") is not local
