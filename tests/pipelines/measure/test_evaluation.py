from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from pipelines.entrypoints.cli import main
from pipelines.measure.evaluation import (
    EvalQuery,
    _Observed,
    document_ranking,
    evaluate,
    load_eval_set,
    score_rankings,
    scores_by_type,
    sidecar_stats,
)
from pipelines.settings import DEFAULT_LOOKUP_PIPELINE

EVAL_LINES = [
    {
        "qid": "q1",
        "query": "disk usage above 90 percent on a node",
        "expected_doc_ids": ["alerts-disk"],
        "gold_categories": ["alerts"],
        "type": "English",
    },
    {
        "qid": "q2",
        "query": "退款多久原路退回",
        "expected_doc_ids": ["payments-refund"],
        "gold_categories": ["payments"],
        "type": "Chinese",
    },
    {
        "qid": "q3",
        "query": "price of the basic subscription plan",
        "expected_doc_ids": ["faq-plans"],
        "gold_categories": ["product-faq"],
    },
    {"qid": "q4", "query": "who won the football match", "expected_doc_ids": [], "gold_categories": []},
]


class TestScoreRankings:
    def test_hand_checked_metrics(self):
        scores = score_rankings([["a", "b", "c"], ["x", "y"]], [["b"], ["a", "y"]])
        ndcg_q1 = 1 / math.log2(3)
        ndcg_q2 = (1 / math.log2(3)) / (1 + 1 / math.log2(3))
        assert scores["ndcg@10"] == pytest.approx((ndcg_q1 + ndcg_q2) / 2, abs=1e-6)
        assert scores["recall@10"] == pytest.approx((1 + 0.5) / 2)
        assert scores["mrr@10"] == pytest.approx((0.5 + 0.5) / 2)

    def test_cutoffs_apply(self):
        ranking = [[f"d{i}" for i in range(12)]]
        assert score_rankings(ranking, [["d6"]])["recall@5"] == 0.0
        assert score_rankings(ranking, [["d6"]])["recall@10"] == 1.0
        assert score_rankings(ranking, [["d11"]])["recall@10"] == 0.0
        assert score_rankings(ranking, [["d11"]])["mrr@10"] == 0.0

    def test_per_type_breakdown(self):
        judged = [
            EvalQuery("q1", "a", ["a"], [], type="single"),
            EvalQuery("q2", "b", ["b"], [], type="multi"),
            EvalQuery("q3", "c", ["c"], [], type="single"),
            EvalQuery("q4", "d", ["d"], []),  # untyped: in no group
        ]
        rankings = {"pipeline": [["a"], ["x", "b"], ["x"], ["d"]], "dense": [["x"], ["b"], ["c"], ["d"]]}
        assert scores_by_type(judged, rankings) == {
            "multi": {"queries": 1, "ndcg@10": {"pipeline": round(1 / math.log2(3), 4), "dense": 1.0}},
            "single": {"queries": 2, "ndcg@10": {"pipeline": 0.5, "dense": 0.5}},
        }
        assert scores_by_type(judged[3:], {"pipeline": [["d"]]}) == {}

    def test_document_ranking_counts_the_best_chunk(self):
        assert document_ranking(["a", "a", "b", "a", "c"]) == ["a", "b", "c"]
        assert document_ranking([f"d{i}" for i in range(20)], cutoff=3) == ["d0", "d1", "d2"]


class TestSidecarStats:
    @staticmethod
    def observed(main: list[tuple[str, str]], rows: list[tuple[str, str]] | None, status: str = "ok") -> _Observed:
        report = None
        if rows is not None:
            keys = [key for key, _ in rows]
            report = {
                "enabled": True,
                "retriever": "dense",
                "mode": "sdk",
                "collection": "kb",
                "status": status,
                "latency_ms": 5.0,
                "rows": [{"evidence_key": key, "doc_id": doc} for key, doc in rows],
                "comparison": {
                    "main_count": len(main),
                    "overlap_ratio": len({k for k, _ in main} & set(keys)) / len(keys) if keys else 0.0,
                }
                if status == "ok"
                else None,
            }
        return _Observed("", None, "unfiltered", report, main)

    def test_hand_checked_aggregate(self):
        judged = [EvalQuery("q1", "a", ["A"], []), EvalQuery("q2", "b", ["B"], []), EvalQuery("q3", "c", ["C"], [])]
        log = [
            # the sidecar finds A, which the main path's top 2 lacks
            self.observed([("x#0", "X"), ("y#0", "Y")], [("a#0", "A"), ("x#0", "X")]),
            # the main path finds B, which the sidecar lacks
            self.observed([("b#0", "B"), ("y#0", "Y")], [("y#0", "Y"), ("z#0", "Z")]),
            self.observed([("c#0", "C")], [], status="timeout"),
        ]
        stats = sidecar_stats(judged, log)
        assert stats == {
            "retriever": "dense",
            "mode": "sdk",
            "collection": "kb",
            "k": 2,
            "queries": 3,
            "status": {"ok": 2, "timeout": 1},
            "mean_overlap_at_k": 0.5,
            "sidecar_found_main_missed": 0.5,
            "main_found_sidecar_missed": 0.5,
            "latency_ms_p50": 5.0,
        }

    def test_no_sidecar_or_off_gives_none(self):
        judged = [EvalQuery("q1", "a", ["A"], [])]
        assert sidecar_stats(judged, [self.observed([("a#0", "A")], None)]) is None
        off = self.observed([("a#0", "A")], [])
        off.sidecar = {"enabled": False, "status": "off"}
        assert sidecar_stats(judged, [off]) is None


class TestLoadEvalSet:
    def test_reads_judged_and_unjudged(self, tmp_path):
        path = tmp_path / "eval.jsonl"
        path.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in EVAL_LINES) + "\n\n", encoding="utf-8")
        queries = load_eval_set(path)
        assert [q.qid for q in queries] == ["q1", "q2", "q3", "q4"]
        assert queries[3].expected == [] and queries[1].gold_categories == ["payments"]
        assert [q.type for q in queries] == ["English", "Chinese", "", ""]

    def test_malformed_line_names_the_line(self, tmp_path):
        path = tmp_path / "eval.jsonl"
        path.write_text(json.dumps(EVAL_LINES[0]) + "\n{not json\n", encoding="utf-8")
        with pytest.raises(ValueError, match=r"eval.jsonl:2"):
            load_eval_set(path)


@pytest.mark.integration
class TestEvaluate:
    @pytest.fixture
    def dataset(self, tmp_path, tiny_kb):
        folder = tiny_kb.parent
        (folder / "eval.jsonl").write_text(
            "\n".join(json.dumps(r, ensure_ascii=False) for r in EVAL_LINES), encoding="utf-8"
        )
        return folder

    def test_report_has_the_contracted_keys_and_reuses_the_index(self, dataset, tmp_path):
        data = tmp_path / "evaldata"
        report = evaluate(dataset, data_dir=data, progress=False)
        assert report["dataset"] == dataset.name
        assert (report["queries"], report["judged"], report["unjudged_left_out"]) == (4, 3, 1)
        assert set(report["configs"]) >= {"pipeline", "dense", "bm25"}
        for metrics in report["configs"].values():
            assert set(metrics) == {
                "ndcg@10",
                "recall@5",
                "recall@10",
                "mrr@10",
                "found_rate",
                "block_precision",
                "block_recall",
                "latency_ms_p50",
            }
            assert all(0 <= metrics[k] <= 1 for k in ("ndcg@10", "recall@5", "recall@10", "mrr@10"))
        assert report["configs"]["dense"]["recall@10"] == 1.0  # three documents: every one is in the top 10
        assert set(report["l0"]) >= {"filter_rate", "filter_precision", "retry_rate"}
        assert report["index"]["indexed"] == 3
        assert set(report["by_type"]) == {"English", "Chinese"}
        assert report["by_type"]["Chinese"]["queries"] == 1
        assert set(report["by_type"]["Chinese"]["ndcg@10"]) == set(report["configs"])
        again = evaluate(dataset, data_dir=data, progress=False)
        assert again["index"]["indexed"] == 0 and again["index"]["skipped"] == 3

    def test_a_pipeline_with_its_nodes_renamed_and_its_reranker_removed_is_measured(self, dataset, tmp_path):
        """Eval reads what a lookup records, not nodes it finds by class or by name."""
        shipped = yaml.safe_load(DEFAULT_LOOKUP_PIPELINE.read_text(encoding="utf-8"))
        names = {"retriever": "l1", "gate": "judge", "sidecar": "comparison"}

        def node(socket: str) -> str:
            name, _, port = socket.partition(".")
            return f"{names.get(name, name)}.{port}"

        def edited(drop_reranker: bool) -> Path:
            components = {names.get(k, k): v for k, v in shipped["components"].items()}
            connections = [
                {"sender": node(c["sender"]), "receiver": node(c["receiver"])} for c in shipped["connections"]
            ]
            if drop_reranker:  # no rule boosts at all: the joined candidates go to the gate as they are
                del components["reranker"]
                connections = [c for c in connections if "reranker." not in c["sender"] + c["receiver"]]
                connections.append({"sender": "joiner.documents", "receiver": "judge.documents"})
            path = tmp_path / f"edited-{drop_reranker}.yaml"
            path.write_text(yaml.safe_dump({**shipped, "components": components, "connections": connections}))
            return path

        data = tmp_path / "evaldata"
        report = evaluate(dataset, data_dir=data, progress=False, baselines=False)
        renamed = evaluate(dataset, data_dir=data, pipeline_path=edited(False), progress=False, baselines=False)
        unboosted = evaluate(dataset, data_dir=data, pipeline_path=edited(True), progress=False, baselines=False)

        def measured(r: dict) -> dict:
            return {k: v for k, v in r["configs"]["pipeline"].items() if k != "latency_ms_p50"}

        # the shipped rule boosts weigh 0: without the reranker the ranking, and so every figure, is the same
        assert measured(renamed) == measured(unboosted) == measured(report) and measured(report)["ndcg@10"] > 0
        assert renamed["l0"] == unboosted["l0"] == report["l0"]

    def test_cli_prints_a_table_and_writes_json_and_plot(self, dataset, tmp_path, capsys):
        out_json, out_png = tmp_path / "r.json", tmp_path / "r.png"
        code = main(
            [
                "eval",
                str(dataset),
                "--data-dir",
                str(tmp_path / "d"),
                "--json",
                str(out_json),
                "--plot",
                str(out_png),
                "--quiet",
            ]
        )
        assert code == 0
        table = capsys.readouterr().out
        assert "ndcg@10" in table and "bm25" in table and "dense" in table and "pipeline" in table
        assert "nDCG@10 on Chinese (1 queries): pipeline" in table
        report = json.loads(out_json.read_text())
        assert {"dataset", "queries", "judged", "configs", "l0"} <= set(report)
        assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    def test_sidecar_reports_are_aggregated_over_the_set(self, dataset, tmp_path, capsys):
        code = main(
            [
                "eval",
                str(dataset),
                "--data-dir",
                str(tmp_path / "d"),
                "--json",
                str(tmp_path / "r.json"),
                "--quiet",
                "--set",
                "sidecar.enabled=true",
                "--set",
                "sidecar.retriever=dense",
                "--set",
                "sidecar.mode=haystack",
            ]
        )
        assert code == 0
        side = json.loads((tmp_path / "r.json").read_text())["sidecar"]
        assert (side["retriever"], side["mode"], side["queries"]) == ("dense", "haystack", 3)
        assert side["status"] == {"ok": 3}
        assert 0 < side["mean_overlap_at_k"] <= 1
        # three documents, and both sides return all of them: neither can find one the other missed
        assert side["sidecar_found_main_missed"] == side["main_found_sidecar_missed"] == 0.0
        assert "Sidecar (dense haystack on" in capsys.readouterr().out

    def test_without_the_sidecar_there_is_no_aggregate(self, dataset, tmp_path):
        assert evaluate(dataset, data_dir=tmp_path / "d", progress=False, baselines=False)["sidecar"] is None

    def test_a_malformed_override_is_one_line_and_exit_2(self, dataset, tmp_path, capsys):
        assert main(["eval", str(dataset), "--data-dir", str(tmp_path / "d"), "--set", "sidecar=true"]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("lookup-knowledge: override 'sidecar=true'") and "\n" not in err

    def test_missing_eval_file_is_a_clear_error(self, tmp_path, capsys):
        assert main(["eval", str(tmp_path), "--data-dir", str(tmp_path / "d")]) == 2
        assert "eval.jsonl" in capsys.readouterr().err
