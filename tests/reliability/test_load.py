"""Load: threads sharing one pipeline get what the same calls get one at a time (the full run: benchmarks/load.py)."""

from __future__ import annotations

import sys

import pytest

from tests.conftest import REPO_ROOT, index_tiny_kb

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
from load import identical_report, identical_to_serial, make_plan

pytestmark = pytest.mark.integration

# questions on the tiny knowledge base (English, Chinese, across languages) and one it does not cover
QUERIES = [
    "disk usage above 90 percent on a node",
    "how do I free space when the disk is full?",
    "退款多久到账",
    "how long does a refund take?",
    "how much does the Pro plan cost?",
    "What is the capital of Australia?",
]


class TestLoad:
    def test_each_session_belongs_to_one_thread_and_mixes_with_others(self):
        plan = make_plan(threads=4, lookups=8, sessions=8, queries=QUERIES)
        assert plan == make_plan(threads=4, lookups=8, sessions=8, queries=QUERIES)
        owners: dict[str, set[int]] = {}
        for calls in plan:
            for call in calls:
                owners.setdefault(call.session, set()).add(call.thread)
        assert len(owners) == 8 and all(len(threads) == 1 for threads in owners.values())
        assert all(len({call.session for call in calls}) == 2 for calls in plan)
        assert sorted(call.index for calls in plan for call in calls) == list(range(32))

    def test_threads_give_the_serial_results_and_one_row_per_call(self, tmp_path):
        """4 threads x 8 lookups on one pipeline, 8 sessions, against the same calls one at a time."""
        data = index_tiny_kb(tmp_path)
        plan = make_plan(threads=4, lookups=8, sessions=8, queries=QUERIES)
        figures = identical_to_serial(data, plan, tmp_path / "runs")
        report = identical_report(figures)
        assert figures["errors"] == 0 and figures["error_results"] == 0, report
        assert figures["calls"] == 32 and figures["rows"] == 32 and figures["one_row_per_call"], report
        assert figures["statuses"].get("already_returned", 0) > 0, report  # session memory in play: order matters
        assert figures["mismatches"] == 0, report
