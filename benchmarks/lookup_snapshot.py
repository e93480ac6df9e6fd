"""Write every lookup result of an eval set to one JSON file, so two versions of the code can be diffed.

    python benchmarks/lookup_snapshot.py knowledge --data-dir data/eval/knowledge --out before.json
    python benchmarks/lookup_snapshot.py knowledge --data-dir data/eval/knowledge --out after.json
    diff before.json after.json

Run-dependent fields (trace id, latencies, timestamps) are left out; everything else of the `LookupResult` is kept.
The data folder must already be indexed (`lookup-knowledge eval DATASET_DIR` or `index` does that).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from pipelines import load_pipeline, lookup
from pipelines.measure.evaluation import load_eval_set

RUN_DEPENDENT = {"traceId", "latencyMs", "stageMs", "started_at"}


def stable(value: Any) -> Any:
    """`value` without its run-dependent fields (trace id, latencies), at any depth: what two runs can compare."""
    if isinstance(value, dict):
        return {k: stable(v) for k, v in value.items() if k not in RUN_DEPENDENT}
    if isinstance(value, list):
        return [stable(v) for v in value]
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", help="folder with eval.jsonl (a dataset folder or a knowledge folder)")
    parser.add_argument("--data-dir", required=True, help="the indexed data folder")
    parser.add_argument("--out", required=True, help="JSON file to write")
    parser.add_argument("--pipeline", default=None, help="pipeline YAML (default: pipelines.yaml)")
    args = parser.parse_args()
    queries = load_eval_set(Path(args.dataset) / "eval.jsonl")
    with tempfile.TemporaryDirectory() as traces:  # never add rows to the data folder's own trace database
        kwargs: dict[str, Any] = {"data_dir": args.data_dir, "trace_db_url": f"sqlite:///{traces}/traces.db"}
        pipeline = load_pipeline(args.pipeline, **kwargs) if args.pipeline else load_pipeline(**kwargs)
        results = {q.qid: stable(lookup(pipeline, q.query)) for q in queries}
    Path(args.out).write_text(json.dumps(results, ensure_ascii=False, indent=1, sort_keys=True) + "\n", "utf-8")
    print(f"{len(results)} lookups written to {args.out}")


if __name__ == "__main__":
    main()
