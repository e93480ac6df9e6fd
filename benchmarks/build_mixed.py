"""Merge eval sets of different languages into one multilingual dataset, to check ranking across languages.

    python benchmarks/build_mixed.py ../shared/eval/gitlab_handbook ../shared/eval/stard --out data/mixed
    lookup-knowledge eval data/mixed                                   # cross-lingual ranking on
    lookup-knowledge eval data/mixed \
        --set language_balance.crosslingual_weight=0 --set language_balance.language_balance=0

The merged `knowledge/` holds every set's documents (under a folder per set; ids and categories are the sets' own) and
`eval.jsonl` every set's judged queries, each typed with the set it came from: `eval` then reports nDCG@10 per set
on the one collection. Its queries are all same-language, so this is where the cross-lingual adjustments (language
balance, cross-lingual bonus) show what they cost answers in the query's own language once the collection holds
another language, the risk the knowledge/ set (mostly cross-lingual questions) cannot measure.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipelines.measure.evaluation import load_eval_set


def build(sets: list[Path], out: Path) -> int:
    """
    Copy the sets' documents into `out/knowledge/<set>/` and write their judged queries to `out/eval.jsonl`.

    :param sets: Eval set folders (`knowledge/` and `eval.jsonl` each).
    :param out: The merged dataset folder (replaced).
    :returns: Number of queries written.
    """
    if out.exists():
        shutil.rmtree(out)
    (out / "knowledge").mkdir(parents=True)
    lines = []
    for dataset in sets:
        shutil.copytree(dataset / "knowledge", out / "knowledge" / dataset.name)
        for query in load_eval_set(dataset / "eval.jsonl"):
            if query.expected:
                lines.append(
                    json.dumps(
                        {
                            "qid": query.qid,
                            "query": query.query,
                            "expected_doc_ids": query.expected,
                            "gold_categories": query.gold_categories,
                            "type": dataset.name,
                        },
                        ensure_ascii=False,
                    )
                )
    (out / "eval.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return len(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sets", nargs="+", type=Path, help="eval set folders to merge")
    parser.add_argument("--out", type=Path, required=True, help="the merged dataset folder (replaced)")
    args = parser.parse_args()
    count = build(args.sets, args.out)
    print(f"{args.out}: {count} judged queries from {len(args.sets)} sets")


if __name__ == "__main__":
    main()
