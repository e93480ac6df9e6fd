"""Sweep pipeline parameters on one labelled dataset (tune here, then confirm on another set).

Usage: python benchmarks/sweep.py DATASET_DIR --data-dir D --param fusion.lexical_weight=0,0.05,0.1 [--param ...]

Every combination of the listed values runs the `pipeline` config of `lookup-knowledge eval` on the whole
dataset (never on chosen queries); the table shows nDCG@10, Recall@10 and the L0 statistics per combination.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipelines.loading import parse_override
from pipelines.measure.evaluation import evaluate


def _parse(spec: str) -> tuple[str, str, list]:
    key, _, values = spec.partition("=")
    overrides = [parse_override(f"{key}={value}") for value in values.split(",")]
    component, param, _ = overrides[0]
    return component, param, [value for _, _, value in overrides]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dataset")
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--param", action="append", default=[], help="component.param=v1,v2,...")
    args = parser.parse_args()
    grid = [_parse(p) for p in args.param]
    for combo in itertools.product(*[values for _, _, values in grid]):
        params: dict[str, dict] = {}
        for (component, param, _), value in zip(grid, combo, strict=True):
            params.setdefault(component, {})[param] = value
        report = evaluate(
            args.dataset, data_dir=args.data_dir, component_params=params, progress=False, baselines=False
        )
        metrics, l0 = report["configs"]["pipeline"], report["l0"]
        print(
            json.dumps(params),
            f"ndcg@10={metrics['ndcg@10']:.4f} recall@10={metrics['recall@10']:.4f} "
            f"filter_rate={l0['filter_rate']:.3f} filter_precision={l0['filter_precision']} "
            f"retry_rate={l0['retry_rate']:.3f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
