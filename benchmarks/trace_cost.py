"""What recording costs a lookup: side by side with recording off, and with the trace database locked.

    python benchmarks/trace_cost.py [--rounds 3] [--json out.json]

Indexes `knowledge/` into a temporary folder, then runs its questions, in an order rotated query by query, through

- `recorded`: the lookup pipeline as shipped (one `tool_invocation` row per call, SQLite);
- `unrecorded`: the same pipeline without its `TraceRecorder` (the same YAML, the node removed);
- `locked`: the shipped pipeline recording into a SQLite database that another connection holds an exclusive lock
  on for the whole run (a long write of another process): the first lookup waits `timeout_s`, then rows go to the
  spool for `retry_after_s`, and the next attempt waits again.

Prints medians, the added median latency of recording, and the worst case while locked; the spooled rows are then
replayed and counted (one per locked call). Last, the store alone: `TraceStore.write` timed every 50 ms for 16 s
against a locked SQLite database (no lookup around it, so no other component's noise), its maximum and how many
writes waited at all.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from components.trace.trace_recorder import TraceRecorder
from components.trace.trace_store import ToolInvocation, TraceStore
from pipelines import load_pipeline, lookup, lookup_inputs
from pipelines.indexing import KnowledgeIndexer
from pipelines.loading import node_of_type
from pipelines.settings import REPO_ROOT, Deployment


def store_under_lock(root: Path, seconds: float = 16.0) -> dict[str, float]:
    """Time `TraceStore.write` alone while another connection holds the database's write lock."""
    db = root / "store-only.db"
    store = TraceStore(f"sqlite:///{db}", spool_path=str(root / "store-only.jsonl"))

    def row() -> ToolInvocation:
        return ToolInvocation(tool_name="bench", query="q", found=False, status="no_evidence", retrieval_layer="L1")

    store.write(row())
    holder = sqlite3.connect(db, timeout=0)
    holder.execute("BEGIN EXCLUSIVE")
    timings = []
    try:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            started = time.perf_counter()
            store.write(row())
            timings.append((time.perf_counter() - started) * 1000)
            time.sleep(0.05)
    finally:
        holder.rollback()
        holder.close()
    report = store.replay()
    store.close()
    return {
        "writes": len(timings),
        "max_ms": round(max(timings), 1),
        "p50_ms": round(statistics.median(timings), 2),
        "writes_over_10_ms": sum(t > 10 for t in timings),
        "rows_replayed": report.stored,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    kb = REPO_ROOT / "knowledge"
    queries = [json.loads(line)["query"] for line in (kb / "eval.jsonl").read_text(encoding="utf-8").splitlines()]
    root = Path(tempfile.mkdtemp(prefix="trace-cost-"))
    deployment = Deployment.resolve(root / "data")
    indexer = KnowledgeIndexer(deployment)
    indexer.index(kb, progress=False)
    indexer.close()

    recorded = load_pipeline(data_dir=deployment.data_dir)
    unrecorded = load_pipeline(data_dir=deployment.data_dir)
    recorder_name, _ = node_of_type(unrecorded, TraceRecorder)
    unrecorded.remove_component(recorder_name)
    locked_db = root / "locked.db"
    locked = load_pipeline(
        data_dir=deployment.data_dir,
        trace_db_url=f"sqlite:///{locked_db}",
        component_params={recorder_name: {"spool_path": str(root / "locked_spool.jsonl")}},
    )

    def run_unrecorded(query: str) -> None:
        inputs = lookup_inputs(recorded, query)
        inputs.pop(recorder_name)
        unrecorded.run(inputs)

    runners = {
        "recorded": lambda q: lookup(recorded, q),
        "unrecorded": run_unrecorded,
        "locked": lambda q: lookup(locked, q),
    }
    for query in queries[:3]:  # warm every path (and create the locked database) before timing
        for run in runners.values():
            run(query)
    holder = sqlite3.connect(locked_db, timeout=0)
    holder.execute("BEGIN EXCLUSIVE")
    names = list(runners)
    timings: dict[str, list[float]] = {name: [] for name in names}
    try:
        for round_no in range(args.rounds):
            for i, query in enumerate(queries):
                shift = (i + round_no) % len(names)
                for name in names[shift:] + names[:shift]:
                    started = time.perf_counter()
                    runners[name](query)
                    timings[name].append((time.perf_counter() - started) * 1000)
    finally:
        holder.rollback()
        holder.close()
    _, locked_recorder = node_of_type(locked, TraceRecorder)
    replay = TraceStore(f"sqlite:///{locked_db}", spool_path=str(root / "locked_spool.jsonl")).replay()
    medians = {name: statistics.median(values) for name, values in timings.items()}
    figures = {
        "queries": len(queries),
        "rounds": args.rounds,
        "timeout_s": locked_recorder.timeout_s,
        "retry_after_s": locked_recorder.retry_after_s,
        "p50_ms": {name: round(value, 1) for name, value in medians.items()},
        "max_ms": {name: round(max(values), 1) for name, values in timings.items()},
        "p50_added_by_recording_ms": round(medians["recorded"] - medians["unrecorded"], 1),
        "p50_ratio_recorded_to_unrecorded": round(medians["recorded"] / medians["unrecorded"], 3),
        "locked_max_ms": round(max(timings["locked"]), 1),
        "locked_max_added_ms": round(max(timings["locked"]) - medians["unrecorded"], 1),
        "locked_p50_added_ms": round(medians["locked"] - medians["unrecorded"], 1),
        "locked_calls": len(timings["locked"]),
        "locked_rows_replayed": replay.stored,
        "store_only_locked": store_under_lock(root),
    }
    print(json.dumps(figures, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
