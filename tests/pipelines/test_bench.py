from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipelines.bench import run_bench

pytestmark = pytest.mark.integration


class TestRunBench:
    def test_times_every_contender_on_the_same_collection(self, tiny_kb: Path, tmp_path: Path):
        queries = ["disk full on a node", "退款多久到账", "Pro plan API access"]
        (tiny_kb / "eval.jsonl").write_text("\n".join(json.dumps({"query": q}) for q in queries), encoding="utf-8")
        figures = run_bench(tiny_kb, rounds=1, data_dir=tmp_path / "data")
        assert (figures["documents"], figures["queries"], figures["rounds"]) == (3, 3, 1)
        assert set(figures["latency_ms"]) == {
            "bare_haystack",
            "lookup_pipeline",
            "lookup_pipeline_local_bm25",
            "lookup_pipeline_without_sidecar",
        }
        for timing in figures["latency_ms"].values():
            assert 0 < timing["p50"] <= timing["p90"]
        lookup, bare = figures["latency_ms"]["lookup_pipeline"]["p50"], figures["latency_ms"]["bare_haystack"]["p50"]
        assert figures["p50_ratio_lookup_to_bare"] == pytest.approx(lookup / bare, abs=0.01)
        assert figures["p50_ratio_milvus_bm25_to_local_bm25"] > 0
        assert figures["p50_ratio_sidecar_off_to_no_sidecar"] > 0
