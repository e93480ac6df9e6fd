"""What Haystack's copy of a component's inputs costs, per kind of input a lookup passes on (issue 15).

    python benchmarks/haystack_copies.py [--runs 200]

`Pipeline.run` deep-copies every input of every component before it runs it (`_deepcopy_with_exceptions`): lists,
tuples, sets and dicts element by element, anything else with `copy.deepcopy`. Every element is first checked
against Haystack's `Component` protocol (a runtime-checkable `Protocol`, whose `isinstance` is slow), so a value costs
in proportion to its number of leaves: a query vector is 384 or 512 of them, a trace dict a few hundred, while a
`Document` is one leaf copied by `copy.deepcopy`. Prints the median microseconds of each copy, and the same value
copied by `copy.deepcopy` alone, side by side in one run, next to the same values as the read-only `FrozenList` /
`FrozenDict` our components hand on (D56), whose copy is the value itself.
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

from haystack import Document
from haystack.core.pipeline.utils import _deepcopy_with_exceptions

from components.core.frozen import FrozenDict, FrozenList


def _median_us(copier: Callable[[Any], Any], value: Any, runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        copier(value)
        times.append((time.perf_counter() - started) * 1e6)
    return round(statistics.median(times), 1)


def _inputs() -> dict[str, Any]:
    rng = random.Random(15)
    meta = {"source": "alerts/disk-full.md", "title": "Disk full", "category": "alerts", "keywords": ["disk", "df"]}
    trace = {"attempts": [{"name": "unfiltered", "stage_ms": {"dense": 1.0, "lexical": 2.0}, "raw_hits": 120}] * 2}
    documents = [Document(content="x" * 800, meta=dict(meta)) for _ in range(60)]
    return {
        "query vector (384 floats, e5)": [rng.random() for _ in range(384)],
        "query vector (512 floats, USE)": [rng.random() for _ in range(512)],
        "60 candidate Documents": documents,
        "60 candidate Documents, FrozenList": FrozenList(documents),
        "a retrieval trace (nested dict)": trace,
        "a retrieval trace, FrozenDict": FrozenDict(trace),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    figures: dict[str, dict[str, float]] = {}
    for name, value in _inputs().items():
        haystack = _median_us(_deepcopy_with_exceptions, value, args.runs)
        stdlib = _median_us(copy.deepcopy, value, args.runs)
        figures[name] = {"haystack_us": haystack, "deepcopy_us": stdlib, "ratio": round(haystack / stdlib, 1)}
    print(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
