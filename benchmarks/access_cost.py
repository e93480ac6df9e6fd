"""What per-document access costs a lookup, on a scale collection, side by side in one process.

Three configurations, timed in rotation on the same collection and questions (`knowledge/eval.jsonl`):

- `unrestricted`: the collection as built, every page public, an anonymous caller: what a knowledge base that uses
  no access pays;
- `restricted, reader`: a share of the pages (the scale copies, never the judged originals) restricted to one group,
  and a caller of that group: nothing hidden;
- `restricted, anonymous`: the same pages, an anonymous caller: their chunks are left out of every store query
  (`id not in [...]`).

```bash
python benchmarks/access_cost.py --chunks 10000 --restricted-share 0.3 --rounds 3
```

The knowledge index file is swapped between the configurations (the pipeline reads it again when it changes), so
each block of questions runs on one configuration; blocks rotate every round.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from components.store.knowledge_index import KnowledgeIndex
from pipelines import load_pipeline, lookup
from pipelines.access import ANONYMOUS, Principal
from pipelines.measure import scale_corpus
from pipelines.settings import REPO_ROOT, Deployment

READER = Principal(name="reader", groups=("restricted",))


def _questions(knowledge: Path) -> list[str]:
    lines = (knowledge / "eval.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line)["query"] for line in lines if line.strip()]


def _restricted_copy(index: KnowledgeIndex, share: float) -> tuple[KnowledgeIndex, int]:
    """The index with `share` of its scale copies restricted (every k-th one), and how many chunks that hides."""
    copies = [d for d in index.documents if d.source.startswith("scale/")]
    step = max(1, round(1 / share)) if share > 0 else 0
    chosen = {d.source for i, d in enumerate(copies) if step and i % step == 0}
    documents = [d.model_copy(update={"access": ["restricted"]}) if d.source in chosen else d for d in index.documents]
    hidden = sum(d.chunks for d in documents if d.access)
    return index.model_copy(update={"documents": documents}), hidden


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--knowledge", default=str(REPO_ROOT / "knowledge"))
    parser.add_argument("--chunks", type=int, default=10000)
    parser.add_argument("--restricted-share", type=float, default=0.3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--data-dir", default=None, help="a scale collection to reuse (default: built in a temp dir)")
    args = parser.parse_args()
    data = Path(args.data_dir or tempfile.mkdtemp(prefix="access-cost-")) / "data"
    deployment = Deployment.resolve(data)
    if not deployment.index_path.exists():
        scale_corpus.main([args.knowledge, "--chunks", str(args.chunks), "--data-dir", str(data), "--quiet"])
    original = deployment.index_path.with_suffix(".unrestricted.json")
    if not original.exists():
        shutil.copyfile(deployment.index_path, original)
    restricted, hidden = _restricted_copy(KnowledgeIndex.load(original), args.restricted_share)
    restricted_path = deployment.index_path.with_suffix(".restricted.json")
    restricted.save(restricted_path)
    questions = _questions(Path(args.knowledge))
    pipeline = load_pipeline(data_dir=data)
    configurations = {
        "unrestricted": (original, ANONYMOUS),
        "restricted, reader": (restricted_path, READER),
        "restricted, anonymous": (restricted_path, ANONYMOUS),
    }
    times: dict[str, list[float]] = {name: [] for name in configurations}
    found: dict[str, int] = dict.fromkeys(configurations, 0)
    names = list(configurations)
    for round_ in range(args.rounds):
        for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
            source, principal = configurations[name]
            shutil.copyfile(source, deployment.index_path)
            lookup(pipeline, "warm the new index up", principal=principal)  # the index is read again here
            for question in questions:
                started = time.perf_counter()
                result = lookup(pipeline, question, principal=principal)
                times[name].append((time.perf_counter() - started) * 1000)
                found[name] += bool(result["found"])
    shutil.copyfile(original, deployment.index_path)
    report = {
        "chunks": sum(d.chunks for d in restricted.documents),
        "restricted_chunks": hidden,
        "questions": len(questions),
        "rounds": args.rounds,
        "p50_ms": {name: round(statistics.median(values), 2) for name, values in times.items()},
        "p95_ms": {name: round(statistics.quantiles(values, n=20)[-1], 2) for name, values in times.items()},
        "found": found,
    }
    base = report["p50_ms"]["unrestricted"]
    report["p50_ratio_vs_unrestricted"] = {name: round(value / base, 3) for name, value in report["p50_ms"].items()}
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
