"""Build supersession cases from an eval set, without leaking its answers: a new version of some documents with one
fact changed, the old version marked superseded.

    python benchmarks/build_supersession.py knowledge --out /tmp/supersession/knowledge [--documents 8]
    lookup-knowledge eval /tmp/supersession/knowledge --data-dir /tmp/supersession/data

writes under `--out` a dataset of its own: `knowledge/`, a copy of the set's knowledge where each chosen document has a
successor beside it (`<name>-v2.md`, id `<id>-v2`, the first number of its body raised by one: one fact changed) and
is marked `status: superseded`, `superseded_by: <id>-v2`; and `eval.jsonl`, the set's queries whose only judged
document is a chosen one, judged on the successor (`expected_doc_ids`) with the old one named in
`superseded_doc_ids`. `eval` then reports, per config, how often a superseded page comes first (it must never) and
how often its successor does.

Documents are chosen with a fixed seed among those that are the only judged document of at least one query and have
a number in their body, so the same command gives the same files.
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

from pipelines.measure.evaluation import load_eval_set

SEED = 20261205
_ID = re.compile(r"^id:\s*(.+?)\s*$", re.MULTILINE)
_NUMBER = re.compile(r"(?<![\w.])(\d{1,6})(?![\w.])")


def _split(text: str) -> tuple[str, str]:
    """Front matter (with its fences) and body of a markdown file."""
    if not text.startswith("---\n"):
        return "", text
    end = text.index("\n---", 4) + len("\n---\n")
    return text[:end], text[end:]


def _changed(body: str) -> str | None:
    """The body with its first number outside headings and code raised by one, or None without one."""
    lines = body.split("\n")
    in_code = False
    for i, line in enumerate(lines):
        if line.lstrip().startswith(("```", "~~~")):
            in_code = not in_code
        if in_code or line.lstrip().startswith("#"):
            continue
        found = _NUMBER.search(line)
        if found:
            number = int(found.group(1)) + 1
            lines[i] = line[: found.start()] + str(number) + line[found.end() :]
            return "\n".join(lines)
    return None


def build(dataset: Path, out: Path, documents: int) -> dict[str, int]:
    knowledge = dataset / "knowledge" if (dataset / "knowledge").is_dir() else dataset
    queries = load_eval_set(dataset / "eval.jsonl")
    files: dict[str, Path] = {}
    for path in sorted(knowledge.rglob("*.md")):
        found = _ID.search(_split(path.read_text(encoding="utf-8"))[0])
        if found:
            files[found.group(1).strip().strip("'\"")] = path
    sole = sorted({q.expected[0] for q in queries if len(q.expected) == 1 and q.expected[0] in files})
    usable = [d for d in sole if _changed(_split(files[d].read_text(encoding="utf-8"))[1]) is not None]
    chosen = sorted(random.Random(SEED).sample(usable, min(documents, len(usable))))
    if out.exists():
        shutil.rmtree(out)
    target = out / "knowledge"
    shutil.copytree(knowledge, target, ignore=shutil.ignore_patterns("*.jsonl"))
    for doc_id in chosen:
        source = target / files[doc_id].relative_to(knowledge)
        head, body = _split(source.read_text(encoding="utf-8"))
        new_id = f"{doc_id}-v2"
        new_head = _ID.sub(f"id: {new_id}", head, count=1)
        source.with_name(f"{source.stem}-v2.md").write_text(new_head + str(_changed(body)), encoding="utf-8")
        old_head = head[: -len("---\n")] + f"status: superseded\nsuperseded_by: {new_id}\n---\n"
        source.write_text(old_head + body, encoding="utf-8")
    rows = [
        {
            "qid": q.qid,
            "query": q.query,
            "expected_doc_ids": [f"{q.expected[0]}-v2"],
            "gold_categories": q.gold_categories,
            "superseded_doc_ids": q.expected,
            "type": "supersession",
        }
        for q in queries
        if len(q.expected) == 1 and q.expected[0] in chosen
    ]
    (out / "eval.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return {"documents": len(chosen), "queries": len(rows)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dataset", type=Path, help="an eval set folder (knowledge/ and eval.jsonl), or knowledge/")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--documents", type=int, default=8, help="how many documents get a successor")
    args = parser.parse_args()
    counts = build(args.dataset.resolve(), args.out.resolve(), args.documents)
    print(f"{args.out}: {counts['documents']} documents superseded, {counts['queries']} queries")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
