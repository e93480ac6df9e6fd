from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from haystack import Pipeline, component
from sqlmodel import Session, select

from components.trace.trace_store import ToolInvocation, TraceStore
from pipelines.entrypoints.cli import main
from pipelines.loading import parse_override
from pipelines.measure.bench import (
    FRAMEWORK,
    StageTimer,
    index_throughput_by_format,
    parse_scales,
    run_bench,
    store_label,
)
from pipelines.settings import Deployment

pytestmark = pytest.mark.integration


class TestRunBench:
    def test_times_every_contender_on_the_same_collection(self, tiny_kb: Path, tmp_path: Path):
        queries = ["disk full on a node", "退款多久到账", "Pro plan API access"]
        (tiny_kb / "eval.jsonl").write_text("\n".join(json.dumps({"query": q}) for q in queries), encoding="utf-8")
        figures = run_bench(tiny_kb, rounds=1, data_dir=tmp_path / "data", cold_start_runs=1)
        assert (figures["documents"], figures["queries"], figures["rounds"]) == (3, 3, 1)
        assert set(figures["latency_ms"]) == {
            "bare_haystack",
            "lookup_pipeline",
            "lookup_pipeline_milvus_bm25",
            "lookup_pipeline_without_sidecar",
        }
        for timing in figures["latency_ms"].values():
            assert 0 < timing["p50"] <= timing["p90"] <= timing["p95"]
        lookup, bare = figures["latency_ms"]["lookup_pipeline"]["p50"], figures["latency_ms"]["bare_haystack"]["p50"]
        assert figures["p50_ratio_lookup_to_bare"] == pytest.approx(lookup / bare, abs=0.01)
        assert figures["p50_ratio_milvus_bm25_to_lookup"] > 0
        assert figures["p50_ratio_sidecar_off_to_no_sidecar"] > 0
        # a ratio per group of queries: those answered by one attempt, those where the unfiltered retry ran
        assert figures["lookup_overhead_ratio"] > 0
        assert (figures["retry_overhead_ratio"] is None) == (figures["queries_retried"] == 0)
        assert 0 < figures["index_throughput_ratio"] < 2
        assert figures["embedders"] == ["multilingual-e5-small", "use-multilingual-v3"]
        assert figures["cold_start_s"] == figures["cold_start_runs_s"][0] > 0
        assert 100 < figures["ask_peak_rss_mb"] < 4000  # one fresh `ask` process: models, pipeline, Milvus Lite
        assert figures["configuration"]["queries"] == 3 and figures["units"]["latency"] == "ms"
        assert figures["configuration"]["store"].startswith("Milvus Lite (embedded); ")
        for moment in ("load_average_at_start", "load_average_at_end"):  # how busy the machine was around the run
            assert len(figures["configuration"][moment]) == 3 and min(figures["configuration"][moment]) >= 0
        # the category filter timed on its own (ties between categories go to the first name)
        filtered = figures["filtered_retrieval"]
        assert filtered["category"] == "alerts"
        timings = filtered["latency_ms"]
        assert set(timings) == {"filtered", "unfiltered"} and all(t["p50"] > 0 for t in timings.values())
        ratio = timings["filtered"]["p50"] / timings["unfiltered"]["p50"]
        assert filtered["p50_ratio_filtered_to_unfiltered"] == pytest.approx(ratio, abs=0.01)

    def test_stages_account_for_the_lookup(self, tiny_kb: Path, tmp_path: Path):
        (tiny_kb / "eval.jsonl").write_text(json.dumps({"query": "disk full on a node"}), encoding="utf-8")
        figures = run_bench(tiny_kb, rounds=2, data_dir=tmp_path / "data", cold_start_runs=0)
        stages = figures["stages_ms"]
        components = ("embedder", "crosslingual_embedder", "retriever", "reranker", "gate", "recorder", FRAMEWORK)
        assert all(stages[name] > 0 for name in components)
        dense = sum(ms for name, ms in stages.items() if name.startswith("retriever.") and name.endswith(".dense"))
        lexical = sum(ms for name, ms in stages.items() if name.startswith("retriever.") and name.endswith(".lexical"))
        assert 0 < dense < stages["retriever"] and lexical > 0
        # the retriever's own stages happen inside its run; the components and the framework make up the lookup
        whole = sum(ms for name, ms in stages.items() if "." not in name)
        assert whole == pytest.approx(figures["latency_ms"]["lookup_pipeline"]["p50"], rel=0.35)
        assert "cold_start_s" not in figures

    def test_compared_configuration_is_timed_beside_the_shipped_one(self, tiny_kb: Path, tmp_path: Path):
        (tiny_kb / "eval.jsonl").write_text(json.dumps({"query": "disk full on a node"}), encoding="utf-8")
        compare = {
            "retriever": {"top_k": 5},
            "fusion": {"lexical_normalization": "best"},
            "recorder": {"tool_name": "compared"},
        }
        figures = run_bench(tiny_kb, rounds=1, data_dir=tmp_path / "data", compare=compare, cold_start_runs=0)
        assert figures["compared_overrides"] == compare
        lookup, compared = (figures["latency_ms"][n]["p50"] for n in ("lookup_pipeline", "lookup_pipeline_compared"))
        assert figures["p50_ratio_lookup_to_compared"] == pytest.approx(lookup / compared, abs=0.01)
        # the compared contender really ran with the overrides: its lookups are traced under its own tool name
        trace_url = Deployment.resolve(tmp_path / "data").trace_db_url
        with Session(TraceStore(trace_url).engine) as session:
            tools = session.exec(select(ToolInvocation.tool_name)).all()
        assert tools.count("compared") == 2  # one warm-up and one timed lookup
        assert tools.count("lookup_knowledge") == 6  # three shipped-pipeline contenders, the same two each

    def test_unknown_component_in_compare_is_rejected(self, tiny_kb: Path, tmp_path: Path):
        (tiny_kb / "eval.jsonl").write_text(json.dumps({"query": "disk full"}), encoding="utf-8")
        with pytest.raises(ValueError, match="retrievr"):
            run_bench(
                tiny_kb, rounds=1, data_dir=tmp_path / "data", compare={"retrievr": {"top_k": 5}}, cold_start_runs=0
            )


class TestScales:
    def test_each_scale_is_built_and_timed_in_a_process_of_its_own(self, tiny_kb: Path, tmp_path: Path):
        (tiny_kb / "eval.jsonl").write_text(json.dumps({"query": "disk full on a node"}), encoding="utf-8")
        figures = run_bench(tiny_kb, rounds=1, data_dir=tmp_path / "data", scales=[60, 30], cold_start_runs=0)
        assert list(figures["scales"]) == ["30", "60"]
        for size, scale in figures["scales"].items():
            assert scale["corpus"]["chunks"] == int(size)
            assert "not embedded" in scale["corpus"]["vectors"]
            assert scale["latency_ms"]["lookup_pipeline"]["p95"] > 0 and scale["stages_ms"]["embedder"] > 0
            assert scale["filtered_retrieval"]["latency_ms"]["filtered"]["p95"] > 0
            # the worker's own peak, not this process' (which holds the pool and two pipelines more)
            assert 100 < scale["peak_rss_mb"] < 4000
        p95 = [figures["scales"][n]["latency_ms"]["lookup_pipeline"]["p95"] for n in ("60", "30")]
        assert figures["p95_ratio_100k_vs_1k"] == pytest.approx(p95[0] / p95[1], abs=0.01)
        assert figures["p95_ratio_scales"] == [30, 60]
        assert figures["peak_rss_mb"] == {n: figures["scales"][n]["peak_rss_mb"] for n in ("30", "60")}

    def test_a_size_that_is_not_a_number_of_chunks_is_refused(self, tiny_kb: Path, tmp_path: Path):
        assert parse_scales("1k, 10k,250") == [1000, 10000, 250]
        assert parse_scales("") is None
        for text in ("1k,ten", "0", "-5", "1.5k"):
            with pytest.raises(ValueError, match="not a number of chunks"):
                parse_scales(text)
        with pytest.raises(ValueError, match="scales"):
            run_bench(tiny_kb, rounds=1, data_dir=tmp_path / "data", scales=[0])

    def test_the_cli_reports_a_bad_scale_in_one_line_and_exits_2(self, capsys):
        assert main(["bench", "--scale", "1k,lots"]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("lookup-knowledge: --scale '1k,lots'") and "\n" not in err


class TestStoreLabel:
    def test_a_server_is_named_by_its_address_without_credentials(self):
        label = store_label("http://root:s3cret@127.0.0.1:19530")
        assert label.startswith("a Milvus server at http://127.0.0.1:19530 (MILVUS_URI); ")
        assert "s3cret" not in label and "root" not in label
        assert store_label("https://milvus.example.com").startswith("a Milvus server at https://milvus.example.com ")

    def test_a_lite_path_is_milvus_lite(self):
        assert store_label("/srv/kb/milvus.db").startswith("Milvus Lite (embedded); ")


class TestStageTimer:
    def test_each_component_run_is_timed_and_the_rest_is_the_framework(self):
        @component
        class Sleeper:
            def __init__(self, seconds: float) -> None:
                self.seconds = seconds

            @component.output_types(value=int)
            def run(self, value: int) -> dict:
                time.sleep(self.seconds)
                return {"value": value + 1}

        pipeline = Pipeline()
        pipeline.add_component("slow", Sleeper(0.05))
        pipeline.add_component("fast", Sleeper(0.0))
        pipeline.connect("slow.value", "fast.value")
        timer = StageTimer(pipeline)
        for _ in range(3):
            with timer.lookup():
                assert pipeline.run({"slow": {"value": 1}})["fast"]["value"] == 3
                time.sleep(0.02)  # outside every component: the framework's share
        stages = timer.stages_ms()
        assert list(stages) == ["slow", FRAMEWORK, "fast"]
        assert stages["slow"] >= 50 and 20 <= stages[FRAMEWORK] < 50 and stages["fast"] < 5

    def test_finer_stages_are_added_to_the_last_lookup(self):
        pipeline = Pipeline()
        timer = StageTimer(pipeline)
        with timer.lookup():
            pass
        timer.add({"retriever.unfiltered.dense": 4.0})
        timer.add({"retriever.unfiltered.dense": 1.0})
        assert timer.stages_ms()["retriever.unfiltered.dense"] == 5.0


class TestParseOverride:
    @pytest.mark.parametrize(
        ("spec", "expected"),
        [
            ("retriever.top_k=30", ("retriever", "top_k", 30)),
            ("fusion.lexical_normalization=best", ("fusion", "lexical_normalization", "best")),
            ("sidecar.enabled=true", ("sidecar", "enabled", True)),
        ],
    )
    def test_values_are_json_or_bare_strings(self, spec, expected):
        assert parse_override(spec) == expected

    @pytest.mark.parametrize("spec", ["top_k=30", "retriever.top_k", ".top_k=3", "retriever.=3"])
    def test_malformed_spec_is_rejected(self, spec):
        with pytest.raises(ValueError, match=r"component\.param=value"):
            parse_override(spec)

    def test_cli_reports_a_malformed_spec_in_one_line_and_exits_2(self, capsys):
        assert main(["bench", "--compare", "top_k=30"]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("lookup-knowledge: override 'top_k=30'") and "\n" not in err


class TestIndexThroughputByFormat:
    def test_each_type_is_indexed_on_its_own_and_timed_next_to_the_embedders(self, tmp_path: Path):
        folder = tmp_path / "docs"
        (folder / "site" / "_common").mkdir(parents=True)
        (folder / "site" / "_common" / "inc.md").write_text("Included install text.\n", encoding="utf-8")
        page = '# Install\n\n{{% include "/_common/inc.md" %}}\n\nMore words about installing the tool.\n'
        (folder / "site" / "install.md").write_text(page, encoding="utf-8")
        (folder / "notes.txt").write_text("Plain notes about the gate code 4711.\n" * 20, encoding="utf-8")
        (folder / "SOURCES.md").write_text("# where the files come from\n", encoding="utf-8")
        figures = index_throughput_by_format(folder, tmp_path / "work")
        assert set(figures) == {"markdown", "text"}  # no file of the other types: not timed
        assert (figures["markdown"]["files"], figures["text"]["files"]) == (1, 1)  # the partial is read, not indexed
        for name in ("markdown", "text"):
            assert figures[name]["chunks"] >= 1 and figures[name]["characters"] > 0
            assert 0 < figures[name]["index_throughput_ratio"] < 2
