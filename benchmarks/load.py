"""Load: threads sharing one pipeline get exactly what the same calls get one at a time; memory over many lookups.

    python benchmarks/load.py [--threads 8] [--lookups 200] [--sessions 24] [--memory-lookups 10000]
                              [--memory-threads 8] [--sample-every 1000] [--json FILE]

Indexes `knowledge/` into a temporary folder (as `trace_concurrency.py` does), then:

1. Identical to serial. A deterministic plan of `--threads` x `--lookups` calls (session, question from
   `knowledge/eval.jsonl`) runs on `--threads` threads through ONE pipeline; then the same calls run one at a time on
   a fresh pipeline with a fresh trace database and spool. Each call's result is compared with its serial twin
   without its run-dependent fields, `traceId` and `latencyMs` (per retrieval attempt), and nothing else
   (`lookup_snapshot.stable`). Session memory makes a result depend on the calls before it in its session, so the
   order within a session must be the same in both runs: each session is owned by exactly one thread (session k by
   thread k mod threads) and every thread mixes its own sessions (`--sessions` / `--threads` each, chosen at random
   with a fixed seed); the serial run keeps each thread's order. Sessions shared between threads, whose order no
   one fixes, are what `trace_concurrency.py` checks (no block twice, every call recorded once).
   Prints calls, errors (exceptions, and results with status `error`), trace rows (one per call), mismatches (must
   be 0) and a diff of the first mismatch.
2. Memory. `--memory-lookups` lookups on one fresh pipeline from `--memory-threads` threads, questions of
   `knowledge/eval.jsonl` cycled, 50 sessions open at a time of 20 lookups each (so lookup i is in session
   `m{i // 1000}.{i % 50}`: 500 sessions over 10,000 lookups, and the trace database grows by a row a lookup, as
   under real traffic). The resident set size (`/proc/self/statm`, Linux) is sampled before the first lookup and
   after every `--sample-every` (1,000); prints the table (lookups, RSS MB, seconds) and the growth per 1,000
   lookups: the least-squares slope over the samples from 1,000 lookups on (the first 1,000 are warm-up).

Progress lines are printed as it goes. 10,000 lookups take the better part of an hour on two cores: every size is a
flag, and the defaults are tracker issue 13's (8 threads x 200 lookups, 10,000 lookups for memory).
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from haystack import Pipeline
from lookup_snapshot import stable
from trace_concurrency import eval_queries, index_knowledge, stored_rows

from pipelines import load_pipeline, lookup

#: memory run: sessions open at a time, and lookups of each
OPEN_SESSIONS = 50
SESSION_LOOKUPS = 20

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Call:
    """One planned lookup: its place in the plan, the thread that makes it, its session and query."""

    index: int
    thread: int
    session: str
    query: str


def make_plan(threads: int, lookups: int, sessions: int, queries: list[str], seed: int = 13) -> list[list[Call]]:
    """
    The calls of each thread, in order: session k belongs to thread k mod `threads` alone.

    :param threads: Threads.
    :param lookups: Calls per thread.
    :param sessions: Sessions in all, at least `threads`.
    :param queries: Questions to draw from.
    :param seed: Seed of the draws (the plan is the same for the same arguments).
    :returns: One list of calls per thread.
    :raises ValueError: If there are fewer sessions than threads.
    """
    if sessions < threads:
        msg = f"sessions={sessions} < threads={threads}: every thread owns at least one session"
        raise ValueError(msg)
    plan = []
    for t in range(threads):
        owned = [f"s{k}" for k in range(t, sessions, threads)]
        rng = random.Random(seed * 1000 + t)
        plan.append([Call(t * lookups + i, t, rng.choice(owned), rng.choice(queries)) for i in range(lookups)])
    return plan


def pipeline_with_own_traces(data_dir: Path, folder: Path) -> tuple[Pipeline, str, Path]:
    """A pipeline on `data_dir` recording into a fresh trace database and spool under `folder`: it, their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    url, spool = f"sqlite:///{folder / 'traces.db'}", folder / "trace_spool.jsonl"
    params = {"recorder": {"spool_path": str(spool)}, "session_filter": {"spool_path": str(spool)}}
    return load_pipeline(data_dir=data_dir, trace_db_url=url, component_params=params), url, spool


def run_concurrently(pipeline: Pipeline, plan: list[list[Call]]) -> tuple[dict[int, dict[str, Any]], list[str]]:
    """Each thread's calls on a thread of its own, all through `pipeline`: results by call index, and the errors."""
    results: dict[int, dict[str, Any]] = {}
    errors: list[str] = []

    def worker(calls: list[Call]) -> None:
        for call in calls:
            try:
                results[call.index] = lookup(pipeline, call.query, session_id=call.session)
            except Exception as err:
                errors.append(f"call {call.index}: {type(err).__name__}: {err}")

    workers = [threading.Thread(target=worker, args=(calls,)) for calls in plan]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()
    return results, errors


def run_serially(pipeline: Pipeline, plan: list[list[Call]]) -> dict[int, dict[str, Any]]:
    """The same calls one at a time, call i of every thread before call i + 1 (each session keeps its order)."""
    in_turn = [call for step in zip(*plan, strict=True) for call in step]
    return {call.index: lookup(pipeline, call.query, session_id=call.session) for call in in_turn}


def result_diff(got: dict[str, Any] | None, expected: dict[str, Any], lines: int = 80) -> str:
    """A unified diff of two results without their run-dependent fields (at most `lines` lines)."""

    def text(result: dict[str, Any] | None) -> list[str]:
        return json.dumps(stable(result), ensure_ascii=False, indent=1, sort_keys=True).splitlines()

    diff = difflib.unified_diff(text(expected), text(got), "serial", "concurrent", lineterm="")
    return "\n".join(list(diff)[:lines])


def identical_to_serial(
    data_dir: Path, plan: list[list[Call]], folder: Path, progress: Progress | None = None
) -> dict[str, Any]:
    """
    Run `plan` concurrently on one pipeline, then serially on a fresh one, and compare call by call.

    :param data_dir: An indexed data folder.
    :param plan: From `make_plan`.
    :param folder: Where the two runs' trace databases go.
    :param progress: Called with a line after each run.
    :returns: The figures: `calls`, `errors`, `error_results`, `statuses` (calls by evidence status), `rows` and
        `one_row_per_call` (the concurrent run's trace database), `mismatches`, `first_mismatch_diff`, seconds and
        lookups per second of both runs.
    """
    say = progress or (lambda line: None)
    pipeline, url, spool = pipeline_with_own_traces(data_dir, folder / "concurrent")
    started = time.perf_counter()
    concurrent, errors = run_concurrently(pipeline, plan)
    concurrent_s = time.perf_counter() - started
    say(f"concurrent: {len(concurrent)} calls in {concurrent_s:.0f} s, {len(errors)} errors")
    rows = stored_rows(url, spool)
    serial_pipeline, _, _ = pipeline_with_own_traces(data_dir, folder / "serial")
    started = time.perf_counter()
    serial = run_serially(serial_pipeline, plan)
    serial_s = time.perf_counter() - started
    say(f"serial: {len(serial)} calls in {serial_s:.0f} s")
    mismatched = [i for i in sorted(serial) if stable(concurrent.get(i)) != stable(serial[i])]
    first_diff = result_diff(concurrent.get(mismatched[0]), serial[mismatched[0]]) if mismatched else None
    calls = list(concurrent.values())
    trace_ids = [r["traceId"] for r in calls]
    return {
        "threads": len(plan),
        "lookups_per_thread": len(plan[0]),
        "sessions": len({c.session for calls in plan for c in calls}),
        "calls": len(calls),
        "errors": len(errors),
        "error_results": sum(r["evidenceStatus"] == "error" for r in calls),
        "first_errors": errors[:3],
        "statuses": dict(Counter(r["evidenceStatus"] for r in calls).most_common()),
        "rows": len(rows),
        # a call whose row was spooled returned no id: its row (replayed) then matches no call
        "one_row_per_call": Counter(r.id for r in rows) == Counter(trace_ids) and None not in trace_ids,
        "mismatches": len(mismatched),
        "mismatched_calls": mismatched[:10],
        "first_mismatch_diff": first_diff,
        "concurrent_seconds": round(concurrent_s, 1),
        "concurrent_lookups_per_second": round(len(calls) / concurrent_s, 2),
        "serial_seconds": round(serial_s, 1),
        "serial_lookups_per_second": round(len(serial) / serial_s, 2),
    }


def rss_mb() -> float:
    """This process's resident set size in MB (Linux `/proc/self/statm`)."""
    resident_pages = int(Path("/proc/self/statm").read_text().split()[1])
    return resident_pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def memory_session(i: int) -> str:
    """The session of lookup `i` of the memory run: `OPEN_SESSIONS` open at a time, `SESSION_LOOKUPS` lookups each."""
    return f"m{i // (OPEN_SESSIONS * SESSION_LOOKUPS)}.{i % OPEN_SESSIONS}"


def memory_growth(
    pipeline: Pipeline,
    queries: list[str],
    lookups: int,
    threads: int,
    every: int = 1000,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """
    `lookups` lookups from `threads` threads, the RSS sampled before the first and after every `every`.

    :returns: `samples` (`[lookups, rss_mb, seconds]`), `growth_mb_per_1000` (least-squares slope over the samples
        from `every` lookups on, the first `every` being warm-up; None with fewer than two), `errors`,
        `error_results`, `sessions`.
    """
    say = progress or (lambda line: None)
    lock = threading.Lock()
    counters = {"next": 0, "done": 0, "errors": 0, "error_results": 0}
    started = time.perf_counter()
    samples = [[0, round(rss_mb(), 1), 0.0]]
    say(f"memory: {samples[0][1]:.1f} MB before the first lookup")

    def worker() -> None:
        while True:
            with lock:
                i = counters["next"]
                counters["next"] += 1
            if i >= lookups:
                return
            try:
                status = lookup(pipeline, queries[i % len(queries)], session_id=memory_session(i))["evidenceStatus"]
            except Exception:
                status = None
            with lock:
                counters["done"] += 1
                counters["errors"] += status is None
                counters["error_results"] += status == "error"
                if counters["done"] % every == 0:
                    sample = [counters["done"], round(rss_mb(), 1), round(time.perf_counter() - started, 1)]
                    samples.append(sample)
                    say(f"memory: {sample[0]} lookups, {sample[1]:.1f} MB, {sample[2]:.0f} s")

    workers = [threading.Thread(target=worker) for _ in range(threads)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()
    fitted = [s for s in samples if s[0] >= every]
    counts, sizes = [s[0] for s in fitted], [s[1] for s in fitted]
    slope = statistics.linear_regression(counts, sizes).slope if len(fitted) > 1 else None
    return {
        "lookups": lookups,
        "threads": threads,
        "sessions": len({memory_session(i) for i in range(lookups)}),
        "errors": counters["errors"],
        "error_results": counters["error_results"],
        "samples": samples,
        "growth_mb_per_1000": None if slope is None else round(slope * 1000, 2),
        "sample_every": every,
        "seconds": round(time.perf_counter() - started, 1),
    }


def identical_report(identical: dict[str, Any]) -> str:
    """The figures of `identical_to_serial` as text."""
    lines = [
        f"identical to serial: {identical['threads']} threads x {identical['lookups_per_thread']} lookups, "
        f"{identical['sessions']} sessions (each owned by one thread)",
        f"  calls {identical['calls']}, errors {identical['errors']}, error results {identical['error_results']}, "
        f"trace rows {identical['rows']} (one per call: {'yes' if identical['one_row_per_call'] else 'NO'})",
        f"  statuses {', '.join(f'{k} {n}' for k, n in identical['statuses'].items())}",
        f"  mismatches with the serial run: {identical['mismatches']}",
        f"  concurrent {identical['concurrent_seconds']} s ({identical['concurrent_lookups_per_second']} lookups/s), "
        f"serial {identical['serial_seconds']} s ({identical['serial_lookups_per_second']} lookups/s)",
    ]
    lines += [f"  error: {e}" for e in identical["first_errors"]]
    if identical["first_mismatch_diff"]:
        lines += [f"  first mismatch, call {identical['mismatched_calls'][0]}:", identical["first_mismatch_diff"]]
    return "\n".join(lines)


def memory_report(memory: dict[str, Any]) -> str:
    """The figures of `memory_growth` as text."""
    growth = memory["growth_mb_per_1000"]
    return "\n".join(
        [
            f"memory: {memory['lookups']} lookups, {memory['threads']} threads, {memory['sessions']} sessions, "
            f"errors {memory['errors']}, error results {memory['error_results']}",
            f"  {'lookups':>8} {'RSS MB':>8} {'seconds':>8}",
            *(f"  {n:>8} {mb:>8.1f} {sec:>8.0f}" for n, mb, sec in memory["samples"]),
            f"  growth per 1,000 lookups (least squares from {memory['sample_every']:,} lookups on): "
            + ("n/a (fewer than two samples)" if growth is None else f"{growth:+.2f} MB"),
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--lookups", type=int, default=200, help="lookups per thread")
    parser.add_argument("--sessions", type=int, default=24, help="sessions in all (each owned by one thread)")
    parser.add_argument("--memory-lookups", type=int, default=10_000, help="0 skips the memory run")
    parser.add_argument("--memory-threads", type=int, default=8)
    parser.add_argument("--sample-every", type=int, default=1000, help="lookups between two RSS samples")
    parser.add_argument("--json", default=None, metavar="FILE", help="also write the figures to FILE")
    args = parser.parse_args()

    def say(line: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {line}", flush=True)

    with tempfile.TemporaryDirectory(prefix="load-") as tmp:
        root = Path(tmp)
        say("indexing knowledge/")
        deployment = index_knowledge(root, f"sqlite:///{root / 'index-traces.db'}")
        queries = eval_queries()
        plan = make_plan(args.threads, args.lookups, args.sessions, queries)
        identical = identical_to_serial(deployment.data_dir, plan, root / "identical", say)
        print(identical_report(identical), flush=True)
        memory = None
        if args.memory_lookups:
            pipeline, _, _ = pipeline_with_own_traces(deployment.data_dir, root / "memory")
            memory = memory_growth(pipeline, queries, args.memory_lookups, args.memory_threads, args.sample_every, say)
            print(memory_report(memory), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"identical": identical, "memory": memory}, indent=1) + "\n")
    failed = identical["errors"] or identical["error_results"] or identical["mismatches"]
    sys.exit(1 if failed or not identical["one_row_per_call"] else 0)


if __name__ == "__main__":
    main()
