from __future__ import annotations

import time
from pathlib import Path

import pytest
from haystack.core.serialization import component_from_dict, component_to_dict

from components.milvus_chunk_store import CollectionSchema, MilvusChunkStore, lexical_text
from components.sidecar_retriever import SidecarRetriever
from tests.conftest import index_tiny_kb


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    return index_tiny_kb(tmp_path_factory.mktemp("sidecar"))


@pytest.fixture
def make_sidecar(data_dir):
    made: list[SidecarRetriever] = []

    def make(**kwargs) -> SidecarRetriever:
        params = {
            "enabled": True,
            "uri": str(data_dir / "milvus.db"),
            "index_path": str(data_dir / "knowledge_index.json"),
            **kwargs,
        }
        sidecar = SidecarRetriever(**params)
        made.append(sidecar)
        return sidecar

    yield make
    for sidecar in made:
        sidecar.close()


class TestSidecarRetriever:
    def test_init_defaults(self):
        sidecar = SidecarRetriever()
        assert (sidecar.enabled, sidecar.retriever, sidecar.model) == (False, "bm25", "multilingual-e5-small")
        assert (sidecar.uri, sidecar.collection_name) == ("data/milvus.db", "knowledge_chunks")
        assert (sidecar.top_k, sidecar.timeout_ms, sidecar.preview_chars) == (10, 2000, 120)

    @pytest.mark.parametrize(
        ("kwargs", "match"),
        [
            ({"retriever": "sparse"}, "retriever='sparse'"),
            ({"model": "bge-m3"}, "model='bge-m3'"),
            ({"top_k": 0}, "top_k=0"),
            ({"timeout_ms": 0}, "timeout_ms=0"),
            ({"preview_chars": -1}, "preview_chars=-1"),
            ({"metric_type": "HAMMING"}, "metric_type='HAMMING'"),
            ({"collection_name": "bad-name"}, "collection_name='bad-name'"),
        ],
    )
    def test_invalid_init(self, kwargs, match):
        with pytest.raises(ValueError, match=match):
            SidecarRetriever(**kwargs)

    def test_to_dict_from_dict_keeps_every_parameter(self):
        params = {
            "enabled": True,
            "retriever": "dense",
            "model": "use-multilingual-v3",
            "uri": "http://127.0.0.1:19530",
            "index_path": "/srv/kb/knowledge_index.json",
            "collection_name": "kb_other",
            "metric_type": "COSINE",
            "top_k": 5,
            "timeout_ms": 500,
            "preview_chars": 40,
            "token_env_var": "OTHER_TOKEN",
        }
        data = component_to_dict(SidecarRetriever(**params), "sidecar")
        assert data["init_parameters"] == params
        restored = component_from_dict(SidecarRetriever, data, "sidecar")
        assert {name: getattr(restored, name) for name in params} == params

    def test_off_returns_at_once_and_connects_to_nothing(self, tmp_path):
        sidecar = SidecarRetriever(uri=str(tmp_path / "nowhere" / "milvus.db"))
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
        assert top["source"] == "payments/refund.md" and top["category"] == "payments"
        assert top["title"] == "退款处理流程" and top["breadcrumb"].startswith("退款处理流程")
        assert top["rank"] == 1 and top["score_label"] == "bm25" and top["score"] > 0
        assert len(top["preview"]) <= 9
        keys = [r["evidence_key"] for r in report["rows"]]
        assert all(k.startswith("payments/refund.md#") for k in keys)  # BM25 finds no English chunk for it
        assert report["comparison"]["only_in_main"] == ["faq/plans.md#0"]
        assert report["comparison"]["main_count"] == 2  # repeated keys count once
        assert main == ["payments/refund.md#1", "faq/plans.md#0", "payments/refund.md#1"]

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
                        "lexical": lexical_text("zebra stripes, an older version of the runbook"),
                    }
                ]
            )
            store.flush()
            assert store.full_text_search(lexical_text("zebra stripes"), "sparse", top_k=3)  # it is there
        finally:
            store.close()
        sidecar = SidecarRetriever(
            enabled=True, uri=str(data / "milvus.db"), index_path=str(data / "knowledge_index.json")
        )
        try:
            report = sidecar.run(query="zebra stripes")["sidecar"]
        finally:
            sidecar.close()
        assert report["status"] == "ok"
        assert "alerts/disk.md#9" not in [r["evidence_key"] for r in report["rows"]]

    @pytest.mark.integration
    def test_dense_rows_carry_normalized_similarity(self, make_sidecar):
        report = make_sidecar(retriever="dense", top_k=3).run(query="disk is full on a node")["sidecar"]
        assert report["status"] == "ok" and len(report["rows"]) == 3
        assert report["rows"][0]["source"] == "alerts/disk.md"
        scores = [r["score"] for r in report["rows"]]
        assert scores == sorted(scores, reverse=True) and all(0 < s <= 1 for s in scores)
        assert report["comparison"]["only_in_sidecar"] == [r["evidence_key"] for r in report["rows"]]

    @pytest.mark.integration
    def test_missing_collection_is_reported_as_failed(self, make_sidecar):
        report = make_sidecar(collection_name="no_such_collection").run(query="disk full")["sidecar"]
        assert report["status"] == "failed" and "no_such_collection" in report["error"]
        assert (report["rows"], report["comparison"]) == ([], None)

    @pytest.mark.integration
    def test_slow_comparison_is_reported_as_timeout(self, make_sidecar, monkeypatch):
        sidecar = make_sidecar(timeout_ms=50)
        monkeypatch.setattr(sidecar, "_retrieve", lambda query: time.sleep(1) or [])
        started = time.perf_counter()
        report = sidecar.run(query="disk full")["sidecar"]
        assert time.perf_counter() - started < 0.9
        assert report["status"] == "timeout" and "50 ms" in report["error"]
