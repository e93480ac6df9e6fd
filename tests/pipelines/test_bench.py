from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlmodel import Session, select

from components.trace.trace_store import ToolInvocation, TraceStore
from pipelines.bench import run_bench
from pipelines.cli import main
from pipelines.loading import parse_override
from pipelines.settings import Deployment

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

    def test_compared_configuration_is_timed_beside_the_shipped_one(self, tiny_kb: Path, tmp_path: Path):
        (tiny_kb / "eval.jsonl").write_text(json.dumps({"query": "disk full on a node"}), encoding="utf-8")
        compare = {"retriever": {"top_k": 5, "lexical_normalization": "best"}, "recorder": {"tool_name": "compared"}}
        figures = run_bench(tiny_kb, rounds=1, data_dir=tmp_path / "data", compare=compare)
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
            run_bench(tiny_kb, rounds=1, data_dir=tmp_path / "data", compare={"retrievr": {"top_k": 5}})


class TestParseOverride:
    @pytest.mark.parametrize(
        ("spec", "expected"),
        [
            ("retriever.top_k=30", ("retriever", "top_k", 30)),
            ("retriever.lexical_normalization=best", ("retriever", "lexical_normalization", "best")),
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
