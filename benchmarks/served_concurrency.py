"""The served tool under concurrent clients: 8 clients x 50 `POST /lookup` against the same 400 calls one at a time.

    python benchmarks/served_concurrency.py [--clients 8] [--calls 50] [--data-dir D] [--json FILE]

Indexes `knowledge/` into `--data-dir` (a temporary folder by default) unless it is indexed, starts the real server
(`lookup-knowledge serve --transport http` on a free loopback port, its own process, as users run it), warms it up
with a few lookups, then, in one run:

1. serial: `clients x calls` lookups (the questions of `knowledge/eval.jsonl`, cycled) from one client, one at a time;
2. concurrent: the same calls split over `--clients` threads, each with its own HTTP connection, all at once.

No call has a session, so each answer depends on its question alone. Reported: the wall time and throughput of each
phase and their ratio (concurrent over serial, same calls, same server, side by side), errors (transport failures
and non-2xx answers), the trace rows each phase added (exactly one per call), and mismatches between each call's
answer and its serial twin (`lookup_snapshot.stable`: without `traceId` and latencies). Issue 29 asks for a ratio of
at least 1.6 on two cores, 0 errors, exactly 400 rows and 0 mismatches.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
from lookup_snapshot import stable
from trace_concurrency import eval_queries, stored_rows

from pipelines.settings import REPO_ROOT, Deployment


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _ensure_indexed(data_dir: Path) -> None:
    if (data_dir / "knowledge_index.json").is_file():
        return
    command = [sys.executable, "-m", "pipelines.entrypoints.cli", "index", "--knowledge", str(REPO_ROOT / "knowledge")]
    subprocess.run([*command, "--data-dir", str(data_dir), "--quiet"], cwd=REPO_ROOT, check=True)


def _serve(data_dir: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "pipelines.entrypoints.cli", "serve", "--transport", "http", "--port", str(port)]
    with log.open("wb") as out:
        server = subprocess.Popen(
            [*command, "--data-dir", str(data_dir)], cwd=REPO_ROOT, stdout=out, stderr=subprocess.STDOUT
        )
    deadline = time.monotonic() + 300
    while True:
        if server.poll() is not None:
            msg = f"the server exited: {log.read_text()[-2000:]}"
            raise RuntimeError(msg)
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200:
                return server
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            msg = f"the server did not answer within 300 s: {log.read_text()[-2000:]}"
            raise RuntimeError(msg)
        time.sleep(0.3)


def _calls(client: httpx.Client, url: str, queries: list[str]) -> tuple[list[dict[str, Any]], list[str]]:
    answers, errors = [], []
    for query in queries:
        try:
            response = client.post(url, json={"query": query}, timeout=300)
            if response.status_code != 200:
                errors.append(f"{response.status_code}: {response.text[:200]}")
            answers.append(response.json())
        except (httpx.HTTPError, ValueError) as err:
            errors.append(f"{type(err).__name__}: {err}")
            answers.append({})
    return answers, errors


def _serial(url: str, queries: list[str]) -> tuple[float, list[dict[str, Any]], list[str]]:
    with httpx.Client() as client:
        started = time.perf_counter()
        answers, errors = _calls(client, url, queries)
        return time.perf_counter() - started, answers, errors


def _concurrent(url: str, queries: list[str], clients: int) -> tuple[float, list[dict[str, Any]], list[str]]:
    shares = [list(range(i, len(queries), clients)) for i in range(clients)]
    answers: list[dict[str, Any]] = [{} for _ in queries]
    errors: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(clients + 1)

    def client_thread(positions: list[int]) -> None:
        with httpx.Client() as client:
            start.wait()
            got, failed = _calls(client, url, [queries[p] for p in positions])
        with lock:
            for position, answer in zip(positions, got, strict=True):
                answers[position] = answer
            errors.extend(failed)

    threads = [threading.Thread(target=client_thread, args=(share,)) for share in shares]
    for thread in threads:
        thread.start()
    start.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started, answers, errors


def run(clients: int, calls: int, data_dir: Path) -> dict[str, Any]:
    """Both phases against one server; the figures."""
    _ensure_indexed(data_dir)
    deployment = Deployment.resolve(data_dir)
    questions = eval_queries()
    queries = [questions[i % len(questions)] for i in range(clients * calls)]
    port = _free_port()
    server = _serve(data_dir, port, data_dir.parent / "served_concurrency.log")
    url = f"http://127.0.0.1:{port}/lookup"
    try:
        _serial(url, questions[:5])  # warm: models, caches, connections
        rows_before = len(stored_rows(deployment.trace_db_url, deployment.spool_path))
        serial_s, serial, serial_errors = _serial(url, queries)
        rows_serial = len(stored_rows(deployment.trace_db_url, deployment.spool_path))
        concurrent_s, concurrent, concurrent_errors = _concurrent(url, queries, clients)
        rows_concurrent = len(stored_rows(deployment.trace_db_url, deployment.spool_path))
    finally:
        server.terminate()
        server.wait(timeout=60)
    mismatches = [
        query
        for query, one, other in zip(queries, serial, concurrent, strict=True)
        if json.dumps(stable(one), sort_keys=True) != json.dumps(stable(other), sort_keys=True)
    ]
    return {
        "clients": clients,
        "calls_per_client": calls,
        "calls": len(queries),
        "serial_s": round(serial_s, 2),
        "concurrent_s": round(concurrent_s, 2),
        "serial_calls_per_s": round(len(queries) / serial_s, 2),
        "concurrent_calls_per_s": round(len(queries) / concurrent_s, 2),
        "throughput_ratio": round(serial_s / concurrent_s, 3),
        "errors": {"serial": serial_errors[:5], "concurrent": concurrent_errors[:5]},
        "error_count": len(serial_errors) + len(concurrent_errors),
        "trace_rows": {"serial": rows_serial - rows_before, "concurrent": rows_concurrent - rows_serial},
        "mismatches": len(mismatches),
        "first_mismatches": mismatches[:3],
        "load_average": os.getloadavg(),
        "cores": os.cpu_count(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--calls", type=int, default=50, help="calls per client")
    parser.add_argument("--data-dir", default=None, help="an indexed data folder (default: a temporary one)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    data_dir = Path(args.data_dir or Path(tempfile.mkdtemp(prefix="served-concurrency-")) / "data").resolve()
    figures = run(args.clients, args.calls, data_dir)
    text = json.dumps(figures, ensure_ascii=False, indent=1)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
