"""`benchmarks/build_supersession.py`: supersession cases built from an eval set, and how `eval` scores them."""

from __future__ import annotations

import sys

from pipelines.measure.evaluation import Answer, EvalQuery, load_eval_set, supersession_stats
from tests.conftest import KNOWLEDGE_DIR, REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
import build_supersession  # the benchmark script, importable once its folder is on the path


class TestBuildSupersession:
    def test_a_successor_with_one_fact_changed_and_the_old_page_marked(self, tmp_path):
        counts = build_supersession.build(KNOWLEDGE_DIR, tmp_path / "out", documents=3)
        assert counts["documents"] == 3 and counts["queries"] >= 3
        queries = load_eval_set(tmp_path / "out" / "eval.jsonl")
        assert {q.type for q in queries} == {"supersession"}
        for query in queries:
            [old] = query.superseded
            assert query.expected == [f"{old}-v2"]
        olds = sorted((tmp_path / "out" / "knowledge").rglob("*-v2.md"))
        assert len(olds) == 3
        for new in olds:
            old = new.with_name(new.name.replace("-v2.md", ".md"))
            old_text, new_text = old.read_text(encoding="utf-8"), new.read_text(encoding="utf-8")
            assert "status: superseded\nsuperseded_by: " in old_text and "status: superseded" not in new_text
            old_body, new_body = build_supersession._split(old_text)[1], build_supersession._split(new_text)[1]
            changed = [(a, b) for a, b in zip(old_body.split("\n"), new_body.split("\n"), strict=True) if a != b]
            assert len(changed) == 1  # one fact: one line, one number raised by one
        # the same command gives the same files
        again = build_supersession.build(KNOWLEDGE_DIR, tmp_path / "again", documents=3)
        assert again == counts
        assert (tmp_path / "again" / "eval.jsonl").read_text() == (tmp_path / "out" / "eval.jsonl").read_text()

    def test_eval_counts_superseded_pages_first_and_returned(self):
        judged = [
            EvalQuery("1", "q1", ["a-v2"], [], superseded=("a",)),
            EvalQuery("2", "q2", ["b-v2"], [], superseded=("b",)),
            EvalQuery("3", "q3", ["c"], []),
        ]
        answers = {
            "good": [Answer([], True, ["a-v2"]), Answer([], True, ["b-v2", "x"]), Answer([], True, ["c"])],
            "bad": [Answer([], True, ["a", "a-v2"]), Answer([], False, []), Answer([], True, ["c"])],
        }
        stats = supersession_stats(answers, judged)
        assert stats == {
            "queries": 2,
            "configs": {
                "good": {"superseded_first_rate": 0.0, "successor_first_rate": 1.0, "superseded_returned_rate": 0.0},
                "bad": {"superseded_first_rate": 0.5, "successor_first_rate": 0.0, "superseded_returned_rate": 0.5},
            },
        }
        assert supersession_stats(answers, judged[2:]) is None
