"""`benchmarks/served_concurrency.py` on a small scale: both phases through the real server, every figure counted."""

from __future__ import annotations

import sys

import pytest

from tests.conftest import REPO_ROOT, index_tiny_kb

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
import served_concurrency  # the benchmark script, importable once its folder is on the path

pytestmark = pytest.mark.integration


def test_both_phases_answer_every_call_alike_and_record_each_once(tmp_path):
    figures = served_concurrency.run(clients=3, calls=2, data_dir=index_tiny_kb(tmp_path))
    assert figures["calls"] == 6 and figures["error_count"] == 0
    assert figures["trace_rows"] == {"serial": 6, "concurrent": 6}
    assert figures["mismatches"] == 0 and figures["throughput_ratio"] > 0
