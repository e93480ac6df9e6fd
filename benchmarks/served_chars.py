"""Characters an agent receives per `lookup_knowledge` call: the served (compact) result of each `knowledge/` question.

    python benchmarks/served_chars.py [--data-dir /tmp/served/data] [--against OTHER_CHECKOUT] [--json out.json]

If the data folder holds no index yet, `knowledge/` is indexed into it first. Each question of `knowledge/eval.jsonl`
is looked up once (no session) and the string an agent receives is measured: what the MCP tool returns as text and
the Haystack tool hands the model (`compact_result_json`). Reported: calls, found, characters per call (mean, median,
max, total; the mean over the found calls) and, over the found calls, the share of the served text that is evidence
content.

With `--against DIR` (another checkout of this repository, e.g. one before a change), the same measurement runs in a
subprocess on that checkout (its own data folder beside this one's, indexed by that checkout), and both are reported
with their ratio. Character counts do not depend on the machine's load, so one run of each is the figure.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
QUESTIONS = REPO_ROOT / "knowledge" / "eval.jsonl"

# runs in the checkout given as its working directory: that checkout's service and served form
_CHILD = r"""
import json, statistics, sys
from pipelines.entrypoints.agent_tool import compact_result_json
from pipelines.service import KnowledgeService
data, questions = sys.argv[1], sys.argv[2]
service = KnowledgeService.load(data_dir=data)
sizes, found_sizes, content = [], [], 0
for line in open(questions, encoding="utf-8"):
    query = json.loads(line)["query"]
    served = compact_result_json(service.lookup(query))
    sizes.append(len(served))
    body = json.loads(served)
    if body["found"]:
        found_sizes.append(len(served))
        content += sum(len(b["content"]) for b in body["evidenceBlocks"])
service.close()
print(json.dumps({"sizes": sizes, "found_sizes": found_sizes, "content_chars": content}))
"""


def _index(checkout: Path, data: Path) -> None:
    if (data / "knowledge_index.json").exists():
        return
    command = [sys.executable, "-m", "pipelines.entrypoints.cli", "index", "--knowledge", str(checkout / "knowledge")]
    subprocess.run([*command, "--data-dir", str(data), "--quiet"], cwd=checkout, env=_env(checkout), check=True)


def _env(checkout: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(checkout)}


def measure(checkout: Path, data: Path) -> dict[str, Any]:
    """
    The served characters of every question on one checkout.

    :param checkout: A checkout of this repository.
    :param data: Its data folder (indexed by it when empty).
    :returns: `calls`, `found`, `chars_mean`, `chars_median`, `chars_max`, `chars_total`, `content_share`.
    """
    _index(checkout, data)
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(data), str(QUESTIONS)],
        cwd=checkout,
        env=_env(checkout),
        capture_output=True,
        text=True,
        check=True,
    )
    raw = json.loads(done.stdout.strip().splitlines()[-1])
    sizes, found_sizes = raw["sizes"], raw["found_sizes"]
    return {
        "calls": len(sizes),
        "found": len(found_sizes),
        "chars_mean": round(statistics.fmean(sizes), 1),
        "chars_median": statistics.median(sizes),
        "chars_max": max(sizes),
        "chars_total": sum(sizes),
        "found_chars_mean": round(statistics.fmean(found_sizes), 1) if found_sizes else 0.0,
        "content_share": round(raw["content_chars"] / sum(found_sizes), 3) if found_sizes else 0.0,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=Path("/tmp/served-chars/data"))
    parser.add_argument("--against", type=Path, default=None, help="another checkout, measured beside this one")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    report: dict[str, Any] = {"this": measure(REPO_ROOT, args.data_dir)}
    if args.against is not None:
        report["against"] = measure(args.against.resolve(), args.data_dir.parent / "against-data")
        report["ratio_mean"] = round(report["this"]["chars_mean"] / report["against"]["chars_mean"], 3)
    text = json.dumps(report, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
