"""Build unanswerable queries for an eval set, without leaking its answers: near-domain, off-domain, gibberish.

    python benchmarks/build_negatives.py ../shared/eval/gitlab_handbook --off-domain ../shared/eval/stard \
        --out data/negatives/gitlab_handbook

writes two things under `--out`:

- `negatives.jsonl`: off-domain negatives (queries of the other set(s), `--off-domain`, sampled) and gibberish
  (generated), for `lookup-knowledge eval DATASET --negatives OUT/negatives.jsonl`;
- `near/`: a dataset of its own — a copy of the set's `knowledge/` with some categories removed, its `eval.jsonl`
  (the judged queries whose documents all remain) and its `negatives.jsonl` (the judged queries whose documents
  were all removed: near-domain negatives, the hard case), for `lookup-knowledge eval OUT/near`.

Everything is drawn with a fixed seed, so the same command gives the same files. Queries whose judged documents are
split between kept and removed categories are left out of both. Categories are removed one at a time — each time the
one that turns the most judged queries into negatives per document it removes (seeded tie-break) — until at least
`--negative-share` of the judged queries have lost all their documents, skipping categories that alone hold more
than a third of the documents (removing one giant category would leave little near-domain knowledge to be confused
with) and never removing more than half of the documents.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipelines.measure.evaluation import EvalQuery, load_eval_set

SEED = 20261201
_CATEGORY = re.compile(r"^category:\s*(.+?)\s*$", re.MULTILINE)
_ID = re.compile(r"^id:\s*(.+?)\s*$", re.MULTILINE)
_LATIN = "abcdefghijklmnopqrstuvwxyz"
_CJK_START, _CJK_END = 0x4E00, 0x9FA5


def _frontmatter_value(pattern: re.Pattern[str], text: str) -> str:
    head = text.split("\n---", 1)[0]
    found = pattern.search(head)
    return found.group(1).strip().strip("'\"") if found else ""


def gibberish(count: int, rng: random.Random) -> list[str]:
    """Queries that mean nothing: Latin pseudo-words, random Chinese characters, and mixtures with digits."""
    out = []
    for i in range(count):
        kind = i % 3
        if kind == 0:
            words = ["".join(rng.choice(_LATIN) for _ in range(rng.randint(3, 9))) for _ in range(rng.randint(2, 7))]
            out.append(" ".join(words))
        elif kind == 1:
            out.append("".join(chr(rng.randint(_CJK_START, _CJK_END)) for _ in range(rng.randint(4, 16))))
        else:
            parts = [
                "".join(rng.choice(_LATIN) for _ in range(rng.randint(2, 6))),
                str(rng.randint(0, 99999)),
                "".join(chr(rng.randint(_CJK_START, _CJK_END)) for _ in range(rng.randint(2, 5))),
            ]
            rng.shuffle(parts)
            out.append(" ".join(parts) + rng.choice(["", "?", "？", "!"]))
    return out


def _row(qid: str, query: str, kind: str) -> dict:
    return {"qid": qid, "query": query, "expected_doc_ids": [], "gold_categories": [], "type": kind}


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")


def _knowledge_dir(dataset: Path) -> Path:
    return dataset / "knowledge" if (dataset / "knowledge").is_dir() else dataset


def near_domain(dataset: Path, out: Path, share: float, rng: random.Random) -> tuple[int, int, list[str]]:
    """Copy the set without some categories; return (kept judged queries, near negatives, removed categories)."""
    knowledge = _knowledge_dir(dataset)
    files = sorted(knowledge.rglob("*.md"))
    category_of: dict[Path, str] = {}
    doc_category: dict[str, str] = {}
    for path in files:
        text = path.read_text(encoding="utf-8")
        category = _frontmatter_value(_CATEGORY, text)
        category_of[path] = category
        doc_category[_frontmatter_value(_ID, text) or path.relative_to(knowledge).as_posix()] = category
    sizes: dict[str, int] = {}
    for category in category_of.values():
        sizes[category] = sizes.get(category, 0) + 1
    judged = [q for q in load_eval_set(dataset / "eval.jsonl") if q.expected]

    def lost(categories: set[str]) -> int:
        return sum(all(doc_category.get(doc) in categories for doc in q.expected) for q in judged)

    removed: set[str] = set()
    candidates = sorted(c for c in sizes if sizes[c] <= len(files) / 3)
    rng.shuffle(candidates)  # the tie-break among equally good categories
    while lost(removed) < share * len(judged):
        room = [c for c in candidates if c not in removed and sum(sizes[x] for x in removed | {c}) <= len(files) / 2]
        if not room:
            break
        # the category that turns the most judged queries into negatives per document it removes
        removed.add(max(room, key=lambda c: (lost(removed | {c}) - lost(removed)) / sizes[c]))
    target = out / "near"
    if target.exists():
        shutil.rmtree(target)
    for path in files:
        if category_of[path] not in removed:
            copy = target / "knowledge" / path.relative_to(knowledge)
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, copy)
    kept, negatives = [], []
    for query in judged:
        gone = [doc_category.get(doc) in removed for doc in query.expected]
        if all(gone):
            negatives.append(_row(f"near-{query.qid}", query.query, "near-domain"))
        elif not any(gone):
            kept.append(_as_row(query))
    _write_jsonl(target / "eval.jsonl", kept)
    _write_jsonl(target / "negatives.jsonl", negatives)
    return len(kept), len(negatives), sorted(removed)


def _as_row(query: EvalQuery) -> dict:
    row = {
        "qid": query.qid,
        "query": query.query,
        "expected_doc_ids": query.expected,
        "gold_categories": query.gold_categories,
    }
    if query.type:
        row["type"] = query.type
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dataset", help="a dataset folder (knowledge/ and eval.jsonl) or a knowledge folder with one")
    parser.add_argument("--off-domain", action="append", default=[], help="another set whose queries are off-domain")
    parser.add_argument("--out", required=True, help="folder to write into")
    parser.add_argument("--off-domain-count", type=int, default=100, help="off-domain queries drawn in all")
    parser.add_argument("--gibberish-count", type=int, default=60)
    parser.add_argument(
        "--negative-share", type=float, default=0.25, help="share of judged queries that become near-domain negatives"
    )
    args = parser.parse_args()
    dataset, out = Path(args.dataset), Path(args.out)
    rng = random.Random(SEED)
    off: list[dict] = []
    per_set = max(1, args.off_domain_count // max(1, len(args.off_domain)))
    for other in args.off_domain:
        pool = [q for q in load_eval_set(Path(other) / "eval.jsonl") if q.query.strip()]
        for query in rng.sample(pool, min(per_set, len(pool))):
            off.append(_row(f"off-{query.qid}", query.query, "off-domain"))
    noise = [_row(f"gib-{i}", text, "gibberish") for i, text in enumerate(gibberish(args.gibberish_count, rng))]
    _write_jsonl(out / "negatives.jsonl", off + noise)
    kept, near, removed = near_domain(dataset, out, args.negative_share, rng)
    print(f"{out / 'negatives.jsonl'}: {len(off)} off-domain, {len(noise)} gibberish")
    print(
        f"{out / 'near'}: knowledge without {len(removed)} categories ({', '.join(removed)}); "
        f"{kept} judged queries kept, {near} near-domain negatives"
    )


if __name__ == "__main__":
    main()
