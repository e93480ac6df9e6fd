from __future__ import annotations

import shutil
import uuid
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import yaml

from components.converters import markdown_knowledge_converter
from components.core.embedding_backends import get_backend
from components.store.knowledge_collection import KnowledgeCollection
from components.store.knowledge_index import KnowledgeIndex
from components.store.lexical import Bm25ChunkIndex
from components.store.vector_table import VectorTable
from pipelines import load_pipeline, lookup
from pipelines.indexing import KnowledgeIndexer
from pipelines.settings import DEFAULT_INDEXING_PIPELINE, Deployment

pytestmark = pytest.mark.integration


def versions_by_source(indexer: KnowledgeIndexer) -> dict[str, set[str]]:
    found: dict[str, set[str]] = defaultdict(set)
    for row in indexer.collection.store.scan_metadata():
        found[row["source"]].add(row["doc_version"])
    return dict(found)


def top_content(indexer: KnowledgeIndexer, query: str) -> str:
    vector = get_backend("multilingual-e5-small").embed_queries([query])[0].tolist()
    return indexer.collection.store.search(vector, top_k=1)[0]["content"]


class TestKnowledgeIndexer:
    full_text = True  # Milvus Lite has BM25 full-text search; the Milvus 2.3 server of the server tier has not

    @pytest.fixture
    def indexer(self, tmp_path: Path, milvus_uri_for):
        deployment = Deployment.resolve(tmp_path / "data", milvus_uri=milvus_uri_for(tmp_path))
        collection = f"kb_{uuid.uuid4().hex[:12]}"
        idx = KnowledgeIndexer(deployment, component_params={"writer": {"collection": {"collection_name": collection}}})
        yield idx
        idx.collection.drop()
        idx.close()

    def test_first_run_indexes_everything_with_full_metadata(self, indexer, tiny_kb):
        summary = indexer.index(tiny_kb, progress=False)
        assert (summary.files, summary.indexed, summary.skipped, summary.failed) == (3, 3, 0, 0)
        assert summary.chunks == indexer.collection.store.count() > 3
        assert summary.characters > 0 and summary.chars_per_second > 0
        rows = indexer.collection.store.client.query(
            indexer.collection.schema.collection_name,
            filter='metadata["doc_id"] == "payments-refund"',
            output_fields=["*"],
        )
        meta = rows[0]["metadata"]
        for key in ("source", "doc_id", "title", "breadcrumb", "category", "keywords", "chunk_index", "total_chunks"):
            assert key in meta, key
        assert meta["source"] == "payments/refund.md" and meta["category"] == "payments"
        assert meta["breadcrumb"].startswith("退款处理流程 > ")
        assert sorted(r["metadata"]["chunk_index"] for r in rows) == list(range(meta["total_chunks"]))
        index = KnowledgeIndex.load(indexer.deployment.index_path)
        assert {d.doc_id for d in index.documents} == {"alerts-disk", "payments-refund", "faq-plans"}
        assert next(d for d in index.documents if d.doc_id == "alerts-disk").entities == ["node_exporter"]

    def test_bm25_runs_in_milvus_where_it_can_and_follows_re_indexing(self, indexer, tiny_kb):
        summary = indexer.index(tiny_kb, progress=False)
        store = indexer.collection.store
        assert store.full_text_fields() == (("lexical", "sparse") if self.full_text else None)
        assert summary.bm25 == ("milvus" if self.full_text else "in-process")
        path = tiny_kb / "alerts/disk.md"
        path.write_text(path.read_text().replace("seven days", "three days, and page the storage team"))
        indexer.index(tiny_kb, progress=False)
        reader = KnowledgeCollection(uri=indexer.collection.uri, index_path=str(indexer.deployment.index_path))
        try:
            pairs, where = reader.lexical_search("page the storage team", 3)
            chinese, _ = reader.lexical_search("退款多久到账", 1)
            contents = {r["id"]: r["content"] for r in store.get_rows([pairs[0][0], chinese[0][0]])}
        finally:
            reader.close()
        assert where == ("milvus" if self.full_text else "local")
        assert "page the storage team" in contents[pairs[0][0]]
        assert "退款" in contents[chinese[0][0]]

    def test_unchanged_files_are_not_re_embedded(self, indexer, tiny_kb, monkeypatch):
        indexer.index(tiny_kb, progress=False)
        backend = get_backend("multilingual-e5-small")
        monkeypatch.setattr(backend, "embed_passages", lambda texts: pytest.fail("re-embedded an unchanged file"))
        before = indexer.deployment.index_path.stat().st_mtime_ns
        summary = indexer.index(tiny_kb, progress=False)
        assert (summary.indexed, summary.skipped, summary.chunks, summary.characters) == (0, 3, 0, 0)
        assert indexer.deployment.index_path.stat().st_mtime_ns == before  # running lookups reload nothing

    def test_a_page_made_by_another_pipeline_is_indexed_again(self, indexer, tiny_kb):
        # an upgrade, or an edit to indexing.yaml, changes what pages become: unchanged files must not keep old chunks
        indexer.index(tiny_kb, progress=False)
        name = indexer.collection.schema.collection_name
        edited = KnowledgeIndexer(
            indexer.deployment,
            component_params={"writer": {"collection": {"collection_name": name}}, "chunker": {"max_chars": 600}},
        )
        paced = KnowledgeIndexer(
            indexer.deployment,
            component_params={"writer": {"collection": {"collection_name": name}}, "embedder": {"batch_size": 7}},
        )
        try:
            assert edited.digest != indexer.digest
            assert paced.digest == indexer.digest  # how fast it embeds is not what it makes
            summary = edited.index(tiny_kb, progress=False)
            assert (summary.indexed, summary.skipped) == (3, 0)
            assert edited.index(tiny_kb, progress=False).indexed == 0  # the same pipeline again: nothing to do
            index = KnowledgeIndex.load(indexer.deployment.index_path)
            assert {d.pipeline for d in index.documents} == {edited.digest}
            # an index written before digests were recorded: each page once more
            index.documents[0].pipeline = ""
            index.save(indexer.deployment.index_path)
            assert edited.index(tiny_kb, progress=False).indexed == 1
        finally:
            edited.close()
            paced.close()

    def test_changed_file_replaces_its_chunks(self, indexer, tiny_kb):
        indexer.index(tiny_kb, progress=False)
        path = tiny_kb / "alerts/disk.md"
        path.write_text(path.read_text().replace("seven days", "three days, and page the storage team"))
        summary = indexer.index(tiny_kb, progress=False)
        assert (summary.indexed, summary.skipped) == (1, 2)
        versions = versions_by_source(indexer)
        active = KnowledgeIndex.load(indexer.deployment.index_path).active_versions()
        assert versions["alerts/disk.md"] == {active["alerts/disk.md"]}
        assert "page the storage team" in top_content(indexer, "delete core dumps")

    def test_embedding_failure_keeps_the_old_chunks(self, indexer, tiny_kb, monkeypatch):
        indexer.index(tiny_kb, progress=False)
        before = versions_by_source(indexer)
        path = tiny_kb / "alerts/disk.md"
        path.write_text(path.read_text().replace("seven days", "NEW TEXT"))

        def broken(texts):
            raise RuntimeError("embedding model crashed")

        monkeypatch.setattr(get_backend("multilingual-e5-small"), "embed_passages", broken)
        summary = indexer.index(tiny_kb, progress=False)
        assert summary.failed == 1 and "embedding model crashed" in summary.failures[0]["reason"]
        assert versions_by_source(indexer) == before
        assert "seven days" in top_content(indexer, "delete core dumps older than")
        monkeypatch.undo()
        assert indexer.index(tiny_kb, progress=False).indexed == 1

    def test_write_failure_cleans_partial_chunks_and_keeps_the_old(self, indexer, tiny_kb, monkeypatch):
        indexer.index(tiny_kb, progress=False)
        before = versions_by_source(indexer)
        count_before = indexer.collection.store.count()
        path = tiny_kb / "alerts/disk.md"
        path.write_text(path.read_text() + "\n## Escalation\n\nCall the storage on-call after one hour.\n")
        real_insert = indexer.collection.store.insert

        def half_then_fail(rows):
            real_insert(rows[: len(rows) // 2 or 1])
            raise ConnectionError("milvus went away mid-write")

        monkeypatch.setattr(indexer.collection.store, "insert", half_then_fail)
        summary = indexer.index(tiny_kb, progress=False)
        assert summary.failed == 1 and "milvus went away" in summary.failures[0]["reason"]
        assert versions_by_source(indexer) == before
        assert indexer.collection.store.count() == count_before
        assert (
            KnowledgeIndex.load(indexer.deployment.index_path).active_versions()["alerts/disk.md"]
            in before["alerts/disk.md"]
        )

    def test_leftovers_of_a_failed_cleanup_are_removed_by_the_next_run(self, indexer, tiny_kb, monkeypatch):
        indexer.index(tiny_kb, progress=False)
        path = tiny_kb / "alerts/disk.md"
        path.write_text(path.read_text() + "\n## Escalation\n\nCall the storage on-call after one hour.\n")
        real_insert = indexer.collection.store.insert

        def half_then_fail(rows):
            real_insert(rows[: len(rows) // 2 or 1])
            raise ConnectionError("write failed")

        def delete_fails(ids):
            raise ConnectionError("delete failed too")

        monkeypatch.setattr(indexer.collection.store, "insert", half_then_fail)
        monkeypatch.setattr(indexer.collection.store, "delete_ids", delete_fails)
        indexer.index(tiny_kb, progress=False)
        monkeypatch.undo()
        assert len(versions_by_source(indexer)["alerts/disk.md"]) == 2  # the partial new version is left over
        summary = indexer.index(tiny_kb, progress=False)
        assert summary.indexed == 1 and summary.stale_chunks_removed > 0
        active = KnowledgeIndex.load(indexer.deployment.index_path).active_versions()
        assert versions_by_source(indexer)["alerts/disk.md"] == {active["alerts/disk.md"]}
        entry = KnowledgeIndex.load(indexer.deployment.index_path).by_source()["alerts/disk.md"]
        rows = [r for r in indexer.collection.store.scan_metadata() if r["source"] == "alerts/disk.md"]
        assert len(rows) == entry.chunks

    def test_deleted_file_loses_its_chunks(self, indexer, tiny_kb):
        indexer.index(tiny_kb, progress=False)
        (tiny_kb / "faq/plans.md").unlink()
        summary = indexer.index(tiny_kb, progress=False)
        assert summary.deleted == 1 and summary.stale_chunks_removed > 0
        assert "faq/plans.md" not in versions_by_source(indexer)
        assert "faq/plans.md" not in KnowledgeIndex.load(indexer.deployment.index_path).active_versions()

    def test_malformed_file_is_reported_and_the_rest_indexed(self, indexer, tiny_kb):
        (tiny_kb / "broken.md").write_text("---\ntitle: [oops\n---\n# x\n\ny", encoding="utf-8")
        summary = indexer.index(tiny_kb, progress=False)
        assert (summary.files, summary.indexed, summary.failed) == (4, 3, 1)
        assert summary.failures[0]["source"] == "broken.md"
        assert "not valid YAML" in summary.failures[0]["reason"]

    def test_rebuild_re_embeds_everything(self, indexer, tiny_kb):
        first = indexer.index(tiny_kb, progress=False)
        again = indexer.index(tiny_kb, rebuild=True, progress=False)
        assert again.indexed == 3 and again.chunks == first.chunks == indexer.collection.store.count()

    def test_a_rebuild_fills_a_new_collection_and_drops_the_old_once_switched(self, indexer, tiny_kb):
        indexer.retire_after_s = 0
        indexer.index(tiny_kb, progress=False)
        family = indexer.collection.family()
        before = KnowledgeIndex.load(indexer.deployment.index_path)
        indexer.index(tiny_kb, rebuild=True, progress=False)
        after = KnowledgeIndex.load(indexer.deployment.index_path)
        assert before.collection_name == family and after.collection_name.startswith(f"{family}__r")
        assert after.configured_collection == family
        names = set(indexer.collection.store.list_collections())
        assert after.collection_name in names and before.collection_name not in names
        # a reader that names the configured collection reads the new one, and a plain run finds nothing to do
        reader = KnowledgeCollection(uri=indexer.collection.uri, index_path=str(indexer.deployment.index_path))
        try:
            reader.warm_up()
            assert reader.schema.collection_name == after.collection_name and reader.count() == after.documents[
                0
            ].chunks + sum(d.chunks for d in after.documents[1:])
        finally:
            reader.close()
        assert indexer.index(tiny_kb, progress=False).skipped == 3

    def test_a_batch_that_fails_is_run_again_file_by_file(self, indexer, tiny_kb, monkeypatch):
        chunker = indexer.pipeline.get_component("chunker")
        run = chunker.run

        def fails_on_refunds(documents):
            if any(doc.meta["source"] == "payments/refund.md" for doc in documents):
                raise RuntimeError("chunker broke on this file")
            return run(documents=documents)

        monkeypatch.setattr(chunker, "run", fails_on_refunds)
        summary = indexer.index(tiny_kb, progress=False)
        assert summary.indexed == 2
        assert [(f["source"], "chunker broke on this file" in f["reason"]) for f in summary.failures] == [
            ("payments/refund.md", True)
        ]

    def test_missing_folder_is_a_clear_error(self, indexer, tmp_path):
        with pytest.raises(FileNotFoundError, match="does not exist"):
            indexer.index(tmp_path / "nope", progress=False)

    def test_dimension_mismatch_is_rejected(self, tmp_path):
        with pytest.raises(ValueError, match=r"dimension 384, the embedder.s model .use-multilingual-v3. makes 512"):
            KnowledgeIndexer(
                Deployment.resolve(tmp_path), component_params={"embedder": {"model": "use-multilingual-v3"}}
            )

    def test_the_run_writes_the_active_chunks_vectors_beside_the_index(self, indexer, tiny_kb):
        folder = indexer.deployment.index_path.parent

        def table_matches_the_store() -> str:
            name = KnowledgeIndex.load(indexer.deployment.index_path).statistics.vector_table
            table = VectorTable.open(folder, name)
            active = KnowledgeIndex.load(indexer.deployment.index_path).active_versions()
            ids = [r["id"] for r in indexer.collection.store.scan_metadata() if active[r["source"]] == r["doc_version"]]
            fields = indexer.collection.vector_fields()  # both where the collection has the cross-lingual field
            assert len(table) == len(ids) and set(table.fields) == set(fields) and fields[0] == "vector"
            stored = indexer.collection.store.get_vectors(ids, fields)
            for field in fields:
                read = table.vectors(ids, field)
                assert all(read[i].tolist() == np.asarray(stored[field][i], np.float32).tolist() for i in ids)
            assert sorted(p.name for p in folder.glob("knowledge_vectors-*")) == [name]  # earlier tables removed
            return name

        _index_an_edit_and_compare(indexer, tiny_kb, table_matches_the_store)

    def test_the_run_writes_a_bm25_index_of_the_active_chunks_beside_the_index(self, indexer, tiny_kb):
        folder = indexer.deployment.index_path.parent

        def index_matches_the_store() -> str:
            index = KnowledgeIndex.load(indexer.deployment.index_path)
            name, active = index.statistics.bm25_index, index.active_versions()
            rows = [
                r
                for r in indexer.collection.store.scan_metadata(keys=None, with_content=True)
                if active[r["metadata"]["source"]] == r["metadata"]["doc_version"]
            ]
            written = Bm25ChunkIndex.open(folder, name)
            built = Bm25ChunkIndex.build(
                [r["id"] for r in rows], [r["content"] for r in rows], [r["metadata"]["category"] for r in rows]
            )
            assert sorted(str(i) for i in written.ids) == sorted(r["id"] for r in rows)
            for query, category in [("disk full", None), ("退款多久到账", None), ("退款多久到账", "payments")]:
                assert written.search(query, 5, category) == built.search(query, 5, category)
            assert written.search("退款", 5, "payments") and not written.search("退款", 5, "none such")
            assert sorted(p.name for p in folder.glob("knowledge_bm25-*")) == [name]  # earlier ones removed
            return name

        _index_an_edit_and_compare(indexer, tiny_kb, index_matches_the_store)

    @pytest.mark.parametrize("missing", ["vector_table", "bm25_index"])
    def test_an_index_without_a_table_or_bm25_index_gets_them_at_the_next_run_without_re_embedding(
        self, indexer, tiny_kb, monkeypatch, missing
    ):
        indexer.index(tiny_kb, progress=False)
        index = KnowledgeIndex.load(indexer.deployment.index_path)
        folder = indexer.deployment.index_path.parent
        path = folder / getattr(index.statistics, missing)
        path.unlink() if path.is_file() else shutil.rmtree(path)
        setattr(index.statistics, missing, None)  # as written before it existed
        index.save(indexer.deployment.index_path)
        monkeypatch.setattr(
            get_backend("multilingual-e5-small"), "embed_passages", lambda texts: pytest.fail("re-embedded")
        )
        indexer.index(tiny_kb, progress=False)
        statistics = KnowledgeIndex.load(indexer.deployment.index_path).statistics
        assert (
            statistics.vector_table
            and len(VectorTable.open(folder, statistics.vector_table)) == indexer.collection.count()
        )
        assert (
            statistics.bm25_index
            and len(Bm25ChunkIndex.open(folder, statistics.bm25_index)) == indexer.collection.count()
        )

    def test_a_copied_data_folder_is_the_same_store(self, indexer, tiny_kb, tmp_path, monkeypatch, milvus_uri_for):
        indexer.index(tiny_kb, progress=False)
        expected = versions_by_source(indexer)
        indexer.close()
        copy = tmp_path / "elsewhere" / "data"  # a backup restored, a volume mounted at another path
        shutil.copytree(indexer.deployment.data_dir, copy)
        name = indexer.collection.schema.collection_name
        moved = KnowledgeIndexer(
            Deployment.resolve(copy, milvus_uri=milvus_uri_for(tmp_path / "elsewhere")),
            component_params={"writer": {"collection": {"collection_name": name}}},
        )
        monkeypatch.setattr(
            get_backend("multilingual-e5-small"), "embed_passages", lambda texts: pytest.fail("re-embedded")
        )
        try:
            summary = moved.index(tiny_kb, progress=False)
            assert (summary.indexed, summary.skipped, summary.deleted) == (0, 3, 0)
            assert versions_by_source(moved) == expected
        finally:
            moved.close()

    def test_vectors_in_store_match_the_embedder(self, indexer, tiny_kb):
        indexer.index(tiny_kb, progress=False)
        s = indexer.collection.store
        row = s.client.query(s.schema.collection_name, filter="", limit=1, output_fields=["*"])[0]
        assert np.isclose(np.linalg.norm(row["vector"]), 1.0, atol=1e-3)


def _index_an_edit_and_compare(indexer: KnowledgeIndexer, kb: Path, written_file: Callable[[], str]) -> None:
    """Index, edit one document, index again: `written_file` checks each run's file and names it; it must change."""
    indexer.index(kb, progress=False)
    first = written_file()
    path = kb / "alerts/disk.md"
    path.write_text(path.read_text().replace("seven days", "three days, and page the storage team"))
    indexer.index(kb, progress=False)
    assert written_file() != first  # the superseded version's chunks are not in the new file


def _edited_indexing_yaml(tmp_path: Path, edit: Callable[[dict], None]) -> Path:
    data = yaml.safe_load(DEFAULT_INDEXING_PIPELINE.read_text(encoding="utf-8"))
    edit(data)
    path = tmp_path / "indexing.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def _rename(data: dict, names: dict[str, str]) -> None:
    data["components"] = {names.get(k, k): v for k, v in data["components"].items()}
    for connection in data["connections"]:
        for end in ("sender", "receiver"):
            node, _, socket = connection[end].partition(".")
            connection[end] = f"{names.get(node, node)}.{socket}"


class TestIndexingPipelineShape:
    """The indexing pipeline is routing -> converters -> cleaning -> chunking -> embedding -> writing, in its YAML."""

    def test_files_of_a_type_no_converter_takes_are_listed_hidden_ones_left_out(self, tmp_path, tiny_kb):
        (tiny_kb / "deck.pptx").write_bytes(b"PK\x03\x04 slides")
        (tiny_kb / "_category_.yml").write_text(
            "label: Alerts\n", encoding="utf-8"
        )  # no partial: no converter takes it
        (tiny_kb / "alerts" / "answers.jsonl").write_text('{"a": 1}\n', encoding="utf-8")
        (tiny_kb / ".draft.md").write_text("# Hidden\n\ntext", encoding="utf-8")
        (tiny_kb / ".git").mkdir()
        (tiny_kb / ".git" / "config").write_text("[core]", encoding="utf-8")
        indexer = KnowledgeIndexer(Deployment.resolve(tmp_path / "data"))
        try:
            summary = indexer.index(tiny_kb, progress=False)
        finally:
            indexer.close()
        assert (summary.files, summary.indexed, summary.failed) == (3, 3, 0)
        assert summary.unsupported == [
            {"source": "_category_.yml", "type": ".yml"},
            {"source": "alerts/answers.jsonl", "type": ".jsonl"},
            {
                "source": "deck.pptx",
                "type": "application/vnd.openxmlformats-officedocument.presentationml.presentation",
            },
        ]

    def test_a_damaged_pdf_or_word_file_is_a_failure_with_its_reason_and_keeps_what_was_indexed(
        self, tmp_path, tiny_kb
    ):
        real = Path(__file__).resolve().parents[1] / "fixtures" / "real_docs"
        (tiny_kb / "manuals").mkdir()
        shutil.copy(real / "pdf" / "docling-multi_page.pdf", tiny_kb / "manuals" / "history.pdf")
        (tiny_kb / "manuals" / "policy.docx").write_bytes(b"PK\x03\x04 no zip")
        indexer = KnowledgeIndexer(Deployment.resolve(tmp_path / "data"))
        try:
            first = indexer.index(tiny_kb, progress=False)
            kept = versions_by_source(indexer)["manuals/history.pdf"]
            (tiny_kb / "manuals" / "history.pdf").write_bytes(b"%PDF-1.4\n truncated in transit")
            second = indexer.index(tiny_kb, progress=False)
            after = versions_by_source(indexer)
        finally:
            indexer.close()
        assert [(f["source"], f["reason"].split(" (")[0]) for f in first.failures] == [
            ("manuals/policy.docx", "not a readable .docx file")
        ]
        reasons = {f["source"]: f["reason"] for f in second.failures}
        assert reasons["manuals/history.pdf"].startswith("not a readable PDF")
        assert after["manuals/history.pdf"] == kept and len(after) == 4  # the old version still answers

    def test_a_format_is_added_by_one_converter_and_a_yaml_edit(self, tmp_path, tiny_kb):
        (tiny_kb / "faq").mkdir(exist_ok=True)
        (tiny_kb / "faq" / "parking.csv").write_text(
            "topic,answer\nvisitor parking,Visitor parking is on level minus two; the gate code is 4711.\n",
            encoding="utf-8",
        )

        def add_csv(data: dict) -> None:
            data["components"]["router"]["init_parameters"]["mime_types"].append("text/csv")
            data["components"]["csv"] = {
                "type": "haystack.components.converters.csv.CSVToDocument",
                "init_parameters": {},
            }
            data["connections"] += [
                {"sender": "router.text/csv", "receiver": "csv.sources"},
                {"sender": "csv.documents", "receiver": "joiner.documents"},
            ]

        deployment = Deployment.resolve(tmp_path / "data")
        indexer = KnowledgeIndexer(deployment, pipeline_path=_edited_indexing_yaml(tmp_path, add_csv))
        try:
            summary = indexer.index(tiny_kb, progress=False)
        finally:
            indexer.close()
        assert (summary.indexed, summary.failed, summary.unsupported) == (4, 0, [])
        entry = KnowledgeIndex.load(deployment.index_path).by_source()["faq/parking.csv"]
        assert (entry.doc_id, entry.chunks) == ("faq/parking.csv", 1)
        result = lookup(load_pipeline(data_dir=deployment.data_dir), "what is the gate code of the visitor parking?")
        assert result["found"] and result["evidenceBlocks"][0]["source"] == "faq/parking.csv"

    def test_the_parts_are_found_by_what_they_take_and_give_not_by_their_names(self, tmp_path, tiny_kb):
        names = {"router": "files", "markdown": "md", "writer": "store_writer", "embedder": "e5"}
        path = _edited_indexing_yaml(tmp_path, lambda data: _rename(data, names))
        indexer = KnowledgeIndexer(Deployment.resolve(tmp_path / "data"), pipeline_path=path)
        try:
            summary = indexer.index(tiny_kb, progress=False)
        finally:
            indexer.close()
        assert (summary.indexed, summary.failed) == (3, 0) and summary.chunks > 3 and summary.characters > 0

    def test_a_pipeline_without_a_writer_is_refused_naming_it(self, tmp_path):
        def drop_writer(data: dict) -> None:
            del data["components"]["writer"]
            data["connections"] = [c for c in data["connections"] if not c["receiver"].startswith("writer.")]

        with pytest.raises(ValueError, match="writer to a knowledge store"):
            KnowledgeIndexer(
                Deployment.resolve(tmp_path / "data"), pipeline_path=_edited_indexing_yaml(tmp_path, drop_writer)
            )

    def test_the_l0_statistics_come_from_what_was_written_no_file_is_read_again(self, tmp_path, tiny_kb, monkeypatch):
        deployment = Deployment.resolve(tmp_path / "data")
        indexer = KnowledgeIndexer(deployment)
        try:
            indexer.index(tiny_kb, progress=False)
            (tiny_kb / "faq" / "plans.md").write_text(
                (tiny_kb / "faq" / "plans.md").read_text(encoding="utf-8") + "\nThe Team plan adds single sign-on.\n",
                encoding="utf-8",
            )
            parsed: list[str] = []
            real = markdown_knowledge_converter.parse_knowledge_file

            def counted(data, source, *args):
                parsed.append(source)
                return real(data, source, *args)

            monkeypatch.setattr(markdown_knowledge_converter, "parse_knowledge_file", counted)
            again = indexer.index(tiny_kb, progress=False)
        finally:
            indexer.close()
        assert again.indexed == 1 and parsed == ["faq/plans.md"]  # the unchanged files were not parsed again
        incremental = KnowledgeIndex.load(deployment.index_path).term_categories
        fresh = Deployment.resolve(tmp_path / "fresh")
        other = KnowledgeIndexer(fresh)
        try:
            other.index(tiny_kb, progress=False)
        finally:
            other.close()
        assert incremental == KnowledgeIndex.load(fresh.index_path).term_categories
        assert incremental["disk full"] == {"alerts": 1}  # a hint term, counted from the store's chunks


class TestIncludesAndPartials:
    def test_a_hugo_headless_bundle_is_partials_that_pages_include_from_the_sites_includes_folder(self, tmp_path):
        # Kubernetes' layout: content/<lang>/includes is a headless bundle; pages include its files by name
        kb = tmp_path / "kb"
        (kb / "includes").mkdir(parents=True)
        (kb / "tasks" / "tools" / "included").mkdir(parents=True)
        (kb / "includes" / "index.md").write_text("---\nheadless: true\n---\n", encoding="utf-8")
        (kb / "includes" / "prereqs.md").write_text("You need a cluster and kubectl.\n", encoding="utf-8")
        (kb / "tasks" / "tools" / "included" / "_index.md").write_text("+++\nheadless = true\n+++\n", encoding="utf-8")
        (kb / "tasks" / "tools" / "included" / "verify.md").write_text("Run kubectl version.\n", encoding="utf-8")
        (kb / "tasks" / "tools" / "install.md").write_text(
            '# Install\n\n{{< include "prereqs.md" >}}\n\n{{< include "included/verify.md" >}}\n', encoding="utf-8"
        )
        indexer = KnowledgeIndexer(Deployment.resolve(tmp_path / "data"))
        try:
            summary = indexer.index(kb, progress=False)
            store = indexer.collection
            [page] = store.chunks_of(store.active_versions())
        finally:
            indexer.close()
        assert (summary.indexed, summary.warnings) == (1, [])
        assert {n["source"] for n in summary.not_indexed} == {
            "includes/index.md",
            "includes/prereqs.md",
            "tasks/tools/included/_index.md",
            "tasks/tools/included/verify.md",
        }
        assert page.content == "You need a cluster and kubectl.\n\nRun kubectl version."

    def test_a_mintlify_sites_snippets_are_partials_its_pages_import_from_the_sites_root(self, tmp_path):
        # Mintlify's layout: docs.json at the site's root, shared MDX in snippets/, imported as "/snippets/x.mdx"
        site = tmp_path / "kb" / "docs"
        (site / "snippets").mkdir(parents=True)
        (site / "components").mkdir()
        (site / "docs.json").write_text('{"name": "Docs"}', encoding="utf-8")
        (site / "snippets" / "icons-optional.mdx").write_text("Set `icon` to any Font Awesome name.\n")
        (site / "components" / "badge.mdx").write_text(
            '---\ntitle: Badge\n---\nimport IconsOptional from "/snippets/icons-optional.mdx";\n\n'
            "Badges label things.\n\n<IconsOptional />\n",
            encoding="utf-8",
        )
        indexer = KnowledgeIndexer(Deployment.resolve(tmp_path / "data"))
        try:
            summary = indexer.index(tmp_path / "kb", progress=False)
            store = indexer.collection
            [page] = store.chunks_of(store.active_versions())
        finally:
            indexer.close()
        assert (summary.indexed, summary.warnings) == (1, [])
        assert [n["source"] for n in summary.not_indexed] == ["docs/snippets/icons-optional.mdx"]
        assert {u["source"] for u in summary.unsupported} == {"docs/docs.json"}
        assert page.content == "Badges label things.\n\nSet `icon` to any Font Awesome name."

    def test_a_page_another_page_includes_is_no_page_of_its_own_while_it_is_included(self, tmp_path):
        # mdBook: a chapter includes a fragment that is no chapter (`{{#include arg-watcher.md}}`)
        kb = tmp_path / "kb"
        (kb / "cli").mkdir(parents=True)
        (kb / "cli" / "arg-watcher.md").write_text("#### --watcher\n\nThe watcher polls for changes.\n")
        build = kb / "cli" / "build.md"
        including = "# The build command\n\nBuilds the book.\n\n{{#include arg-watcher.md}}\n"
        build.write_text(including, encoding="utf-8")
        (kb / "a.md").write_text("# A\n\nAlpha.\n\n{{#include b.md}}\n", encoding="utf-8")  # a cycle: both stay
        (kb / "b.md").write_text("# B\n\nBeta.\n\n{{#include a.md}}\n", encoding="utf-8")
        # a page showing one line of another, and a staff-only page showing all of it: it stays a page
        (kb / "setup.md").write_text("# Setup\n\nRun make install.\n\n## Trouble\n\nDelete the cache.\n")
        (kb / "quick.md").write_text("# Quick\n\n{{#include setup.md:3}}\n", encoding="utf-8")
        (kb / "runbook.md").write_text("---\naccess: [staff]\n---\n# Runbook\n\n{{#include setup.md}}\n")
        indexer = KnowledgeIndexer(Deployment.resolve(tmp_path / "data"))
        try:
            first = indexer.index(kb, progress=False)
            first_sources = set(versions_by_source(indexer))
            build.write_text("# The build command\n\nBuilds the book.\n", encoding="utf-8")
            second = indexer.index(kb, progress=False)
            second_sources = set(versions_by_source(indexer))
            build.write_text(including, encoding="utf-8")
            third = indexer.index(kb, progress=False)
            store = indexer.collection
            chunks = store.chunks_of(store.active_versions())
        finally:
            indexer.close()
        reason = "included by cli/build.md: its text is indexed there"
        assert first.not_indexed == [{"source": "cli/arg-watcher.md", "reason": reason}]
        assert first_sources == {"cli/build.md", "a.md", "b.md", "setup.md", "quick.md", "runbook.md"}
        assert first.failures == []
        assert second.not_indexed == [] and second_sources == first_sources | {"cli/arg-watcher.md"}
        assert third.not_indexed == first.not_indexed and third.indexed == 1
        assert {c.meta["source"] for c in chunks} == first_sources  # the fragment's own chunks are gone again
        assert any("The watcher polls for changes." in c.content for c in chunks if c.meta["source"] == "cli/build.md")

    def test_an_edited_include_indexes_the_pages_that_include_it_and_the_partial_is_no_page(self, tmp_path):
        kb = tmp_path / "kb"
        (kb / "_common").mkdir(parents=True)
        (kb / "guide").mkdir()
        (kb / "_common" / "brew.md").write_text("Install the tool with brew install alpha.\n", encoding="utf-8")
        include = '{{% include "/_common/brew.md" %}}'
        for name in ("mac", "linux"):
            text = f"---\ntitle: {name}\n---\n# {name}\n\n## Homebrew\n\n{include}\n"
            (kb / "guide" / f"{name}.md").write_text(text, encoding="utf-8")
        (kb / "guide" / "other.md").write_text("# Other\n\nNothing included here.\n", encoding="utf-8")
        deployment = Deployment.resolve(tmp_path / "data")
        indexer = KnowledgeIndexer(deployment)
        try:
            first = indexer.index(kb, progress=False)
            (kb / "_common" / "brew.md").write_text("Install the tool with brew install beta.\n", encoding="utf-8")
            second = indexer.index(kb, progress=False)
            third = indexer.index(kb, progress=False)
            store = indexer.collection
            texts = {
                c.meta["source"]: c.content for c in store.chunks_of(store.active_versions()) if "brew" in c.content
            }
        finally:
            indexer.close()
        assert (first.indexed, first.not_indexed) == (
            3,
            [{"source": "_common/brew.md", "reason": first.not_indexed[0]["reason"]}],
        )
        assert (second.indexed, second.skipped, third.indexed) == (2, 1, 0)
        assert texts == {
            "guide/mac.md": "Install the tool with brew install beta.",
            "guide/linux.md": "Install the tool with brew install beta.",
        }
        entry = KnowledgeIndex.load(deployment.index_path).by_source()["guide/mac.md"]
        assert list(entry.includes) == ["_common/brew.md"]

    def test_a_sphinx_include_is_read_in_its_page_and_its_edit_indexes_the_page_again(self, tmp_path):
        # Flask's docs/changes.rst: `.. include:: ../CHANGES.rst`; the changelog is no page of its own
        kb = tmp_path / "kb"
        (kb / "proj" / "docs").mkdir(parents=True)
        changelog = kb / "proj" / "CHANGES.rst"
        changelog.write_text("Version 2.0\n-----------\n\nThe run command is async.\n", encoding="utf-8")
        (kb / "proj" / "docs" / "changes.rst").write_text("Changes\n=======\n\n.. include:: ../CHANGES.rst\n")
        (kb / "proj" / "docs" / "usage.rst").write_text("Usage\n=====\n\nCall run.\n", encoding="utf-8")
        deployment = Deployment.resolve(tmp_path / "data")
        indexer = KnowledgeIndexer(deployment)
        try:
            first = indexer.index(kb, progress=False)
            changelog.write_text("Version 2.1\n-----------\n\nThe run command is sync again.\n", encoding="utf-8")
            second = indexer.index(kb, progress=False)
            store = indexer.collection
            chunks = store.chunks_of(store.active_versions())
        finally:
            indexer.close()
        reason = "included by proj/docs/changes.rst: its text is indexed there"
        assert (first.indexed, first.not_indexed, first.failures) == (
            2,
            [{"source": "proj/CHANGES.rst", "reason": reason}],
            [],
        )
        assert (second.indexed, second.skipped) == (1, 1)  # the page that includes it; usage.rst as it was
        [page] = [c for c in chunks if c.meta["source"] == "proj/docs/changes.rst"]
        assert page.content.endswith("The run command is sync again.") and "Version 2.1" in page.meta["breadcrumb"]
        assert {c.meta["source"] for c in chunks} == {"proj/docs/changes.rst", "proj/docs/usage.rst"}
        entry = KnowledgeIndex.load(deployment.index_path).by_source()["proj/docs/changes.rst"]
        assert list(entry.includes) == ["proj/CHANGES.rst"]

    def test_a_sphinx_include_created_after_its_page_indexes_the_page_again(self, tmp_path):
        kb = tmp_path / "kb"
        (kb / "proj" / "docs").mkdir(parents=True)
        (kb / "proj" / "docs" / "changes.rst").write_text("Changes\n=======\n\nNews.\n\n.. include:: ../CHANGES.rst\n")
        indexer = KnowledgeIndexer(Deployment.resolve(tmp_path / "data"))
        try:
            first = indexer.index(kb, progress=False)
            (kb / "proj" / "CHANGES.rst").write_text("Version 2.0\n-----------\n\nThe run command is async.\n")
            second = indexer.index(kb, progress=False)
            store = indexer.collection
            chunks = store.chunks_of(store.active_versions())
        finally:
            indexer.close()
        assert [w["reason"] for w in first.warnings] == [
            "include not resolved: ../CHANGES.rst (not found under the knowledge root)"
        ]
        assert (second.indexed, second.warnings) == (1, [])
        assert [n["source"] for n in second.not_indexed] == ["proj/CHANGES.rst"]
        assert {c.meta["source"] for c in chunks} == {"proj/docs/changes.rst"}
        assert any("The run command is async." in c.content for c in chunks)

    def test_a_sphinx_sites_txt_pages_are_read_as_restructuredtext_with_its_epilog(self, tmp_path):
        # Django's docs: `source_suffix = '.txt'` and substitutions every page gets from `rst_epilog`
        kb = tmp_path / "kb"
        (kb / "site" / "docs").mkdir(parents=True)
        (kb / "notes").mkdir()
        conf = 'source_suffix = ".txt"\nrst_epilog = """\n.. |users| replace:: :ref:`django-users <users-list>`\n"""\n'
        (kb / "site" / "docs" / "conf.py").write_text(conf, encoding="utf-8")
        (kb / "site" / "docs" / "help.txt").write_text(
            "Getting help\n============\n\nAsk on |users| about ``manage.py``.\n\n.. note:: Search first.\n"
        )
        (kb / "notes" / "plain.txt").write_text("Getting help\n============\n\nAsk a colleague.\n")  # no site
        indexer = KnowledgeIndexer(Deployment.resolve(tmp_path / "data"))
        try:
            summary = indexer.index(kb, progress=False)
            store = indexer.collection
            chunks = {c.meta["source"]: c for c in store.chunks_of(store.active_versions())}
        finally:
            indexer.close()
        assert (summary.indexed, summary.failures, summary.warnings) == (2, [], [])
        page = chunks["site/docs/help.txt"]
        assert page.meta["markup"] == "rst" and page.meta["breadcrumb"] == "Getting help"
        assert page.content == "Ask on django-users about `manage.py`.\n\nSearch first."
        assert "markup" not in chunks["notes/plain.txt"].meta or chunks["notes/plain.txt"].meta["markup"] != "rst"
        assert "============" in chunks["notes/plain.txt"].content  # plain text stays as written
        entry = KnowledgeIndex.load(Deployment.resolve(tmp_path / "data").index_path).by_source()["site/docs/help.txt"]
        assert list(entry.includes) == ["site/docs/conf.py"]  # an edit of the epilog indexes the page again

    def test_a_sphinx_conf_py_created_or_mended_after_indexing_indexes_the_pages_that_use_it(self, tmp_path):
        kb = tmp_path / "kb"
        (kb / "docs" / "syntax").mkdir(parents=True)
        (kb / "docs" / "syntax" / "roles.md").write_text("# Roles\n\nWrite a {{role}} inline.\n", encoding="utf-8")
        (kb / "docs" / "plain.md").write_text("# Plain\n\nNo substitution here.\n", encoding="utf-8")
        deployment = Deployment.resolve(tmp_path / "data")
        indexer = KnowledgeIndexer(deployment)

        def page_text() -> str:
            store = indexer.collection
            return next(c.content for c in store.chunks_of(store.active_versions()) if "inline" in c.content)

        try:
            first = indexer.index(kb, progress=False)
            before = page_text()
            (kb / "docs" / "conf.py").write_text("myst_substitutions = {\n", encoding="utf-8")  # created, broken
            created = indexer.index(kb, progress=False)
            still = page_text()
            (kb / "docs" / "conf.py").write_text('myst_substitutions = {"role": "MyST role"}\n', encoding="utf-8")
            mended = indexer.index(kb, progress=False)
            after = page_text()
            quiet = indexer.index(kb, progress=False)
        finally:
            indexer.close()
        assert first.indexed == 2 and before == "Write a {{role}} inline."
        assert (created.indexed, still) == (1, before)  # the page, not plain.md, which uses no substitution
        assert (mended.indexed, after) == (1, "Write a MyST role inline.")
        assert quiet.indexed == 0
        entry = KnowledgeIndex.load(deployment.index_path).by_source()["docs/syntax/roles.md"]
        assert list(entry.includes) == ["docs/conf.py", "docs/syntax/conf.py"]  # a nearer one would win
