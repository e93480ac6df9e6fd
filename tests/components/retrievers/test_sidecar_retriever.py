from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from haystack.core.serialization import component_from_dict, component_to_dict

from components.core.citation import chunk_ids
from components.retrievers.sidecar_retriever import SidecarRetriever
from components.store.knowledge_collection import KnowledgeCollection
from components.store.knowledge_index import KnowledgeIndex
from components.store.lexical import lexical_text
from components.store.milvus_chunk_store import MilvusChunkStore
from components.store.schema import CollectionSchema
from tests.conftest import index_tiny_kb

ROW_KEYS = {
    "evidence_key",
    "doc_id",
    "source",
    "title",
    "breadcrumb",
    "category",
    "rank",
    "preview",
    "score_label",
    "score",
    "raw_score",
    "score_semantics",
    "path",
}


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    return index_tiny_kb(tmp_path_factory.mktemp("sidecar"))


def collection_of(data_dir: Path, **kwargs) -> KnowledgeCollection:
    return KnowledgeCollection(
        uri=str(data_dir / "milvus.db"), index_path=str(data_dir / "knowledge_index.json"), **kwargs
    )


@pytest.fixture
def make_sidecar(data_dir):
    made: list[SidecarRetriever] = []

    def make(collection: dict | None = None, **kwargs) -> SidecarRetriever:
        sidecar = SidecarRetriever(collection_of(data_dir, **(collection or {})), **{"enabled": True, **kwargs})
        made.append(sidecar)
        return sidecar

    yield make
    for sidecar in made:
        sidecar.close()


class TestSidecarRetriever:
    def test_init_defaults(self):
        sidecar = SidecarRetriever()
        assert (sidecar.enabled, sidecar.retriever, sidecar.model) == (False, "bm25", "multilingual-e5-small")
        assert (sidecar.mode, sidecar.lexical_source) == ("sdk", "auto")
        assert sidecar.collection.uri == "data/milvus.db"
        assert (sidecar.top_k, sidecar.timeout_ms, sidecar.preview_chars) == (10, 2000, 120)

    @pytest.mark.parametrize(
        ("kwargs", "match"),
        [
            ({"retriever": "sparse"}, "retriever='sparse'"),
            ({"mode": "auto"}, "mode='auto'"),
            ({"lexical_source": "elastic"}, "lexical_source='elastic'"),
            ({"model": "bge-m3"}, "model='bge-m3'"),
            ({"top_k": 0}, "top_k=0"),
            ({"timeout_ms": 0}, "timeout_ms=0"),
            ({"preview_chars": -1}, "preview_chars=-1"),
        ],
    )
    def test_invalid_init(self, kwargs, match):
        with pytest.raises(ValueError, match=match):
            SidecarRetriever(**kwargs)

    def test_to_dict_from_dict_keeps_every_parameter(self):
        collection = KnowledgeCollection(uri="http://127.0.0.1:19530", collection_name="kb_other")
        params = {
            "enabled": True,
            "retriever": "hybrid",
            "mode": "haystack",
            "lexical_source": "local",
            "model": "use-multilingual-v3",
            "top_k": 5,
            "timeout_ms": 500,
            "preview_chars": 40,
        }
        data = component_to_dict(SidecarRetriever(collection, **params), "sidecar")
        assert data["init_parameters"] == {"collection": collection.to_dict(), **params}
        restored = component_from_dict(SidecarRetriever, data, "sidecar")
        assert {name: getattr(restored, name) for name in params} == params
        assert restored.collection.to_dict() == collection.to_dict()

    def test_off_returns_at_once_and_connects_to_nothing(self, tmp_path):
        sidecar = SidecarRetriever(KnowledgeCollection(uri=str(tmp_path / "nowhere" / "milvus.db")))
        sidecar.warm_up()
        assert sidecar.run(query="disk full", main_ranking=["a.md#0"]) == {
            "sidecar": {"enabled": False, "status": "off"}
        }
        assert not (tmp_path / "nowhere").exists()

    def test_comparison_of_two_rankings(self):
        report = SidecarRetriever._compare(["a#0", "b#0", "c#0"], ["c#0", "a#0", "d#0"])
        assert report == {
            "main_count": 3,
            "sidecar_count": 3,
            "overlap": 2,
            "overlap_ratio": 0.6667,
            "rank_shifts": [
                {"evidence_key": "c#0", "main_rank": 3, "sidecar_rank": 1, "shift": 2},
                {"evidence_key": "a#0", "main_rank": 1, "sidecar_rank": 2, "shift": -1},
            ],
            "only_in_main": ["b#0"],
            "only_in_sidecar": ["d#0"],
        }
        assert SidecarRetriever._compare([], [])["overlap_ratio"] == 0.0

    @pytest.mark.integration
    def test_empty_query_is_skipped(self, make_sidecar):
        report = make_sidecar().run(query="  ", main_ranking=[])["sidecar"]
        assert (report["status"], report["rows"], report["comparison"]) == ("skipped", [], None)

    @pytest.mark.integration
    def test_bm25_rows_are_normalized_and_compared(self, make_sidecar):
        main = ["payments/refund.md#1", "faq/plans.md#0", "payments/refund.md#1"]
        report = make_sidecar(preview_chars=8).run(query="退款多久到账", main_ranking=main)["sidecar"]
        assert (report["status"], report["error"], report["retriever"]) == ("ok", None, "bm25")
        top = report["rows"][0]
        assert set(top) == ROW_KEYS
        assert top["source"] == "payments/refund.md" and top["category"] == "payments"
        assert top["title"] == "退款处理流程" and top["breadcrumb"].startswith("退款处理流程")
        assert top["rank"] == 1 and top["score_label"] == "bm25" and top["score"] > 0
        assert (top["score_semantics"], top["path"], top["raw_score"]) == (
            "bm25",
            "local",
            top["score"],
        )  # the index run's BM25 file
        assert len(top["preview"]) <= 9
        keys = [r["evidence_key"] for r in report["rows"]]
        assert all(k.startswith("payments/refund.md#") for k in keys)  # BM25 finds no English chunk for it
        assert report["comparison"]["only_in_main"] == ["faq/plans.md#0"]
        assert report["comparison"]["main_count"] == 2  # repeated keys count once
        assert main == ["payments/refund.md#1", "faq/plans.md#0", "payments/refund.md#1"]

    @pytest.mark.integration
    @pytest.mark.parametrize("retriever", ["bm25", "dense", "hybrid"])
    def test_hidden_chunks_are_left_out_of_the_comparison(self, make_sidecar, data_dir, retriever):
        everything = make_sidecar(retriever=retriever).run(query="退款多久到账")["sidecar"]
        assert "payments/refund.md" in {r["source"] for r in everything["rows"]}  # found when nothing is hidden
        refund = KnowledgeIndex.load(data_dir / "knowledge_index.json").by_source()["payments/refund.md"]
        hidden = chunk_ids(refund.source, refund.doc_version, refund.chunks)
        kept = make_sidecar(retriever=retriever).run(query="退款多久到账", hidden=hidden)["sidecar"]
        assert kept["status"] == "ok" and (kept["rows"] or retriever == "bm25")  # BM25: no other Chinese page
        assert "payments/refund.md" not in {r["source"] for r in kept["rows"]}

    @pytest.mark.integration
    def test_bm25_on_the_in_process_index(self, make_sidecar):
        in_milvus = make_sidecar().run(query="退款多久到账")["sidecar"]
        local = make_sidecar(lexical_source="local").run(query="退款多久到账")["sidecar"]
        assert {r["path"] for r in local["rows"]} == {"local"}
        assert [r["evidence_key"] for r in local["rows"]] == [r["evidence_key"] for r in in_milvus["rows"]]

    @pytest.mark.integration
    def test_bm25_rows_skip_superseded_chunk_versions(self, tmp_path):
        data = index_tiny_kb(tmp_path)
        store = MilvusChunkStore(str(data / "milvus.db"), CollectionSchema())
        try:
            store.insert(
                [
                    {
                        "id": "alerts/disk.md@old#9",
                        "content": "zebra stripes, an older version of the runbook",
                        "vector": [1.0] + [0.0] * 383,
                        "metadata": {"source": "alerts/disk.md", "doc_version": "old", "chunk_index": 9},
                        "category": "",
                        "lexical": lexical_text("zebra stripes, an older version of the runbook"),
                        "crosslingual": [1.0] + [0.0] * 511,
                    }
                ]
            )
            store.flush()
            assert store.full_text_search(lexical_text("zebra stripes"), "sparse", top_k=3)  # it is there
        finally:
            store.close()
        sidecar = SidecarRetriever(collection_of(data), enabled=True)
        try:
            report = sidecar.run(query="zebra stripes")["sidecar"]
        finally:
            sidecar.close()
        assert report["status"] == "ok"
        assert "alerts/disk.md#9" not in [r["evidence_key"] for r in report["rows"]]

    @pytest.mark.integration
    @pytest.mark.parametrize("mode", ["sdk", "haystack"])
    def test_dense_rows_carry_normalized_similarity_and_their_path(self, make_sidecar, mode):
        report = make_sidecar(retriever="dense", mode=mode, top_k=3).run(query="disk is full on a node")["sidecar"]
        assert report["status"] == "ok" and len(report["rows"]) == 3
        assert report["mode"] == mode
        assert report["rows"][0]["source"] == "alerts/disk.md"
        assert {(r["path"], r["score_semantics"]) for r in report["rows"]} == {(mode, "l2_distance")}
        scores = [r["score"] for r in report["rows"]]
        assert scores == sorted(scores, reverse=True) and all(0 < s <= 1 for s in scores)
        assert report["comparison"]["only_in_sidecar"] == [r["evidence_key"] for r in report["rows"]]

    @pytest.mark.integration
    def test_the_two_vector_store_modes_agree(self, make_sidecar):
        """The comparison a user runs before switching modes: same retrieval, framework path vs SDK path."""
        query = "how long does a refund take"
        rows = {
            mode: make_sidecar(retriever="hybrid", mode=mode, top_k=5).run(query=query)["sidecar"]["rows"]
            for mode in ("haystack", "sdk")
        }
        assert rows["sdk"] and [r["evidence_key"] for r in rows["sdk"]] == [r["evidence_key"] for r in rows["haystack"]]
        assert [r["score"] for r in rows["sdk"]] == pytest.approx([r["score"] for r in rows["haystack"]], abs=1e-3)
        assert rows["sdk"][0]["score_label"] == "normalized similarity + lexical bonus"
        hybrid_keys = [r["evidence_key"] for r in rows["sdk"]]
        report = make_sidecar(retriever="hybrid", top_k=5).run(query=query, main_ranking=hybrid_keys)["sidecar"]
        assert report["comparison"]["overlap_ratio"] == 1.0
        assert all(shift["shift"] == 0 for shift in report["comparison"]["rank_shifts"])

    @pytest.mark.integration
    def test_another_collection(self, make_sidecar, data_dir):
        report = make_sidecar(collection={"collection_name": "no_such_collection"}).run(query="disk full")["sidecar"]
        assert report["collection"] == "no_such_collection"
        assert report["status"] == "failed" and "no_such_collection" in report["error"]
        assert (report["rows"], report["comparison"]) == ([], None)

    @pytest.mark.integration
    def test_a_failed_initialization_is_the_status_of_every_comparison(self, make_sidecar):
        sidecar = make_sidecar(collection={"metric_type": "COSINE"})  # the collection is L2
        sidecar.warm_up()  # never raises
        for _ in range(2):
            report = sidecar.run(query="disk full")["sidecar"]
            assert report["status"] == "failed"
            assert report["error"].startswith("initialization failed: CollectionMismatchError")
            assert "'L2'" in report["error"] and "'COSINE'" in report["error"]

    @pytest.mark.integration
    def test_slow_comparison_is_reported_as_timeout(self, make_sidecar, monkeypatch):
        sidecar = make_sidecar(timeout_ms=50)
        monkeypatch.setattr(sidecar, "_retrieve", lambda query, hidden: time.sleep(1) or [])
        started = time.perf_counter()
        report = sidecar.run(query="disk full")["sidecar"]
        assert time.perf_counter() - started < 0.9
        assert report["status"] == "timeout" and "50 ms" in report["error"]

    @pytest.mark.integration
    def test_a_hung_comparison_does_not_slow_the_next_lookups(self, make_sidecar, monkeypatch):
        sidecar = make_sidecar(timeout_ms=100)
        release = threading.Event()
        monkeypatch.setattr(sidecar, "_retrieve", lambda query, hidden: release.wait(10) and [])
        try:
            assert sidecar.run(query="disk full")["sidecar"]["status"] == "timeout"
            started = time.perf_counter()
            report = sidecar.run(query="disk full")["sidecar"]
            assert time.perf_counter() - started < 0.05  # no second wait behind the hung one
            assert (report["status"], report["error"]) == ("skipped", "the previous comparison is still running")
        finally:
            release.set()
        deadline = time.monotonic() + 5
        while sidecar._pending is not None and not sidecar._pending.done() and time.monotonic() < deadline:
            time.sleep(0.01)
        monkeypatch.setattr(sidecar, "_retrieve", lambda query, hidden: [])
        assert sidecar.run(query="disk full")["sidecar"]["status"] == "ok"  # once it ends, comparisons resume
