"""Side-by-side performance figures: the full lookup pipeline next to a bare Haystack retrieval pipeline.

Everything is measured in one run, in an order rotated query by query so that machine noise hits all contenders
alike; the figures are medians, percentiles and ratios of that run:

- the lookup pipeline as configured (BM25 on the index run's BM25 index file, sidecar off), the same with BM25
  inside Milvus (`lexical_source: milvus`), the same without the sidecar component, a bare Haystack pipeline (the
  lookup's embedder -> milvus-haystack `MilvusEmbeddingRetriever`, same store, model and candidate count), and
  optionally the lookup pipeline with other parameters (`compare`);
- `lookup_overhead_ratio` (p50 lookup / p50 bare on the queries whose lookup made one attempt) and
  `retry_overhead_ratio` (the same on the queries where the unfiltered retry ran);
- `stages_ms`: where a lookup's time goes, per pipeline component (its `run`), per retrieval stage (dense search,
  BM25, ... from the attempts' `stage_ms`) and the `framework`'s share (a lookup's time outside every component's
  `run`: Haystack's input copies and scheduling);
- `filtered_retrieval`: the retriever's `run` with a category filter (the collection's largest category) beside the
  same run without one, query by query: a lookup filters only when L0 names one category, which the eval questions
  may never do on a synthetic collection, so this times the filtered search at every scale;
- `index_throughput_ratio`: indexing characters/s over the embedding models' own characters/s on the same texts;
- `cold_start_s`: process start -> first answer of `lookup-knowledge ask` (median of fresh processes);
- with `scales`, the same lookups on synthetic collections of that many chunks (`pipelines.measure.scale_corpus`), each
  measured in a process of its own: p50/p95 of lookup and bare, their ratio, the stages, the filtered retrieval,
  the process' peak RSS, the cold start, and `p95_ratio_100k_vs_1k` (largest scale over smallest).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit

from haystack import Pipeline

from components.core.embedding_backends import get_backend
from components.embedders.offline_text_embedder import OfflineTextEmbedder
from components.retrievers.filtered_retry_retriever import FilteredRetryRetriever
from components.retrievers.sidecar_retriever import SidecarRetriever
from components.store.knowledge_index import KnowledgeIndex
from components.store.lite_host import HostPaths, LiteHostLease
from components.store.schema import is_lite_uri
from components.store.stock_retriever import stock_retriever
from pipelines import load_pipeline, lookup
from pipelines.indexing import IndexSummary, KnowledgeIndexer
from pipelines.knowledge_files import find_knowledge_files
from pipelines.loading import node_of_type
from pipelines.measure.scale_corpus import ScalePool, build_scale_corpus, embed_pool
from pipelines.settings import REPO_ROOT, Deployment

#: the stage of a lookup's time spent outside every component's `run`
FRAMEWORK = "framework"
UNITS = {"latency": "ms", "stages_ms": "ms (p50 per lookup)", "rss": "MB", "cold_start": "s", "throughput": "chars/s"}


#: leases on Milvus Lite hosts held for the bare pipelines of this process (a lease closes when it is dropped)
_BARE_LEASES: list[LiteHostLease] = []


def _bare_pipeline(deployment: Deployment, collection: str, model: str, top_k: int) -> Pipeline:
    # the same Milvus as the lookup pipeline's: for a Milvus Lite folder, its host (every process shares it)
    retriever, lease = stock_retriever(deployment.milvus_uri, collection, top_k)
    if lease is not None:
        _BARE_LEASES.append(lease)
    bare = Pipeline()
    bare.add_component("embedder", OfflineTextEmbedder(model=model))
    bare.add_component("retriever", retriever)
    bare.connect("embedder.embedding", "retriever.query_embedding")
    bare.warm_up()
    return bare


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _summary(values: list[float]) -> dict[str, float]:
    return {
        "p50": round(statistics.median(values), 2),
        "p90": round(_percentile(values, 0.9), 2),
        "p95": round(_percentile(values, 0.95), 2),
    }


class StageTimer:
    """
    Times each component's `run` in a pipeline, lookup by lookup, to tell where a lookup's time goes.

    Wraps the components' `run` methods on their instances (the pipeline and its YAML stay as they are); the time
    of a lookup outside every `run` is the framework's share.

    ### Usage example

    ```python
    timer = StageTimer(pipeline)
    with timer.lookup():
        lookup(pipeline, "disk full")
    print(timer.stages_ms())
    ```
    """

    def __init__(self, pipeline: Pipeline) -> None:
        """
        Instrument every component of `pipeline`.

        :param pipeline: A lookup pipeline.
        """
        self._current: dict[str, float] = {}
        self.samples: list[dict[str, float]] = []
        for name, instance in pipeline.walk():
            instance.run = self._timed(name, instance.run)  # type: ignore[method-assign]

    def _timed(self, name: str, run: Callable[..., Any]) -> Callable[..., Any]:
        def timed_run(**kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return run(**kwargs)
            finally:
                self._current[name] = self._current.get(name, 0.0) + (time.perf_counter() - started) * 1000

        return timed_run

    @contextmanager
    def lookup(self) -> Iterator[None]:
        """Time one lookup: its components' runs and, as `framework`, the rest."""
        self._current = {}
        started = time.perf_counter()
        yield
        wall = (time.perf_counter() - started) * 1000
        self._current[FRAMEWORK] = wall - sum(self._current.values())
        self.samples.append(self._current)

    def add(self, stages: dict[str, float]) -> None:
        """
        Add finer stages to the last lookup (e.g. a retriever's own stage times).

        :param stages: Milliseconds per stage name.
        """
        for name, ms in stages.items():
            self.samples[-1][name] = self.samples[-1].get(name, 0.0) + ms

    def stages_ms(self) -> dict[str, float]:
        """
        :returns: The median milliseconds of every stage over the timed lookups (0 where a lookup skipped it),
            largest first.
        """
        names = {name for sample in self.samples for name in sample}
        medians = {name: statistics.median(s.get(name, 0.0) for s in self.samples) for name in names}
        return {name: round(ms, 2) for name, ms in sorted(medians.items(), key=lambda item: -item[1])}


def _retrieval_stages(retriever: str, result: dict[str, Any]) -> dict[str, float]:
    """`{retriever}.{attempt}.{stage}` milliseconds of one lookup, from its retrieval trace."""
    stages = {}
    for attempt in (result.get("retrievalTrace") or {}).get("attempts", []):
        for stage, ms in (attempt.get("stageMs") or {}).items():
            stages[f"{retriever}.{attempt['name']}.{stage}"] = ms
    return stages


def time_lookups(
    data_dir: str | Path, queries: list[str], rounds: int, compare: dict[str, dict[str, Any]] | None = None
) -> dict[str, Any]:
    """
    Time the lookup pipeline and its variants next to the bare Haystack pipeline on one indexed data folder.

    :param data_dir: An indexed data folder.
    :param queries: The queries.
    :param rounds: How many times every query runs through each contender.
    :param compare: Parameter overrides of one more lookup pipeline timed beside the others.
    :returns: Latencies per contender, the overhead ratios, how many queries retried, and the stages.
    """
    deployment = Deployment.resolve(data_dir)
    full = load_pipeline(data_dir=deployment.data_dir, milvus_uri=deployment.milvus_uri)
    retriever_name, retriever = node_of_type(full, FilteredRetryRetriever)
    in_milvus = load_pipeline(
        data_dir=deployment.data_dir,
        milvus_uri=deployment.milvus_uri,
        component_params={retriever_name: {"lexical_source": "milvus"}},
    )
    without_sidecar = load_pipeline(data_dir=deployment.data_dir, milvus_uri=deployment.milvus_uri)
    # and its connections: the switched-off sidecar's whole cost
    without_sidecar.remove_component(node_of_type(without_sidecar, SidecarRetriever)[0])
    index = KnowledgeIndex.load(deployment.index_path)
    bare = _bare_pipeline(deployment, index.collection_name, index.embedding_model, retriever.top_k)
    timer = StageTimer(full)
    attempts: dict[str, int] = {}

    def run_full(query: str) -> None:
        with timer.lookup():
            result = lookup(full, query)
        timer.add(_retrieval_stages(retriever_name, result))
        attempts[query] = len(result["retrievalTrace"]["attempts"]) if result.get("retrievalTrace") else 0

    runners: dict[str, Callable[[str], object]] = {
        "bare_haystack": lambda q: bare.run({"embedder": {"text": q}}),
        "lookup_pipeline": run_full,
        "lookup_pipeline_milvus_bm25": lambda q: lookup(in_milvus, q),
        "lookup_pipeline_without_sidecar": lambda q: lookup(without_sidecar, q),
    }
    if compare:
        compared = load_pipeline(
            data_dir=deployment.data_dir, milvus_uri=deployment.milvus_uri, component_params=compare
        )
        runners["lookup_pipeline_compared"] = lambda q: lookup(compared, q)
    for query in queries[:3]:  # warm every path before timing
        for run in runners.values():
            run(query)
    timer.samples.clear()

    names = list(runners)
    timings: dict[str, dict[str, list[float]]] = {name: defaultdict(list) for name in names}
    for round_no in range(rounds):
        for i, query in enumerate(queries):
            shift = (i + round_no) % len(names)  # rotate the order so machine noise hits all alike
            for name in names[shift:] + names[:shift]:
                started = time.perf_counter()
                runners[name](query)
                timings[name][query].append((time.perf_counter() - started) * 1000)

    def pooled(name: str, subset: list[str]) -> list[float]:
        return [ms for query in subset for ms in timings[name][query]]

    single = [q for q in queries if attempts.get(q, 0) <= 1]
    retried = [q for q in queries if attempts.get(q, 0) > 1]
    figures: dict[str, Any] = {
        "queries": len(queries),
        "queries_retried": len(retried),
        "rounds": rounds,
        "latency_ms": {name: _summary(pooled(name, queries)) for name in names},
        "lookup_overhead_ratio": _ratio(pooled("lookup_pipeline", single), pooled("bare_haystack", single)),
        "retry_overhead_ratio": _ratio(pooled("lookup_pipeline", retried), pooled("bare_haystack", retried)),
        "stages_ms": timer.stages_ms(),
    }
    medians = {name: figures["latency_ms"][name]["p50"] for name in names}
    figures["p50_ratio_lookup_to_bare"] = round(medians["lookup_pipeline"] / medians["bare_haystack"], 3)
    figures["p50_ratio_milvus_bm25_to_lookup"] = round(
        medians["lookup_pipeline_milvus_bm25"] / medians["lookup_pipeline"], 3
    )
    figures["p50_ratio_sidecar_off_to_no_sidecar"] = round(
        medians["lookup_pipeline"] / medians["lookup_pipeline_without_sidecar"], 3
    )
    category = _largest_category(index)
    if category:
        embedder = cast(OfflineTextEmbedder, bare.get_component("embedder"))
        figures.update(time_filtered_retrieval(retriever, embedder, queries, category, rounds))
    if compare:
        figures["compared_overrides"] = compare
        figures["p50_ratio_lookup_to_compared"] = round(
            medians["lookup_pipeline"] / medians["lookup_pipeline_compared"], 3
        )
    for pipeline in (full, in_milvus, without_sidecar):
        _close(pipeline)
    return figures


def time_filtered_retrieval(
    retriever: FilteredRetryRetriever, embedder: OfflineTextEmbedder, queries: list[str], category: str, rounds: int
) -> dict[str, Any]:
    """
    Time the retriever's `run` with and without a category filter, alternated query by query.

    A lookup filters only when L0 names one category, which the eval questions may never do on a synthetic
    collection; this times the filtered search (and the unfiltered retry when its result is weak) on every scale.

    :param retriever: A warmed-up retriever.
    :param embedder: The query embedder (its vectors are computed once, outside the timings).
    :param queries: The queries.
    :param category: The category filter.
    :param rounds: How many times every query runs each way.
    :returns: `filtered_retrieval` (category, p50/p95 ms of filtered and unfiltered runs, their p50 ratio).
    """
    vectors = [embedder.run(text=query)["embedding"] for query in queries]
    timings: dict[str, list[float]] = {"filtered": [], "unfiltered": []}
    for round_no in range(rounds):
        for i, (query, vector) in enumerate(zip(queries, vectors, strict=True)):
            order = [category, None] if (i + round_no) % 2 == 0 else [None, category]
            for category_filter in order:
                started = time.perf_counter()
                retriever.run(query_embedding=vector, query=query, category_filter=category_filter)
                elapsed = (time.perf_counter() - started) * 1000
                timings["filtered" if category_filter else "unfiltered"].append(elapsed)
    return {
        "filtered_retrieval": {
            "category": category,
            "latency_ms": {name: _summary(values) for name, values in timings.items()},
            "p50_ratio_filtered_to_unfiltered": _ratio(timings["filtered"], timings["unfiltered"]),
        }
    }


def _largest_category(index: KnowledgeIndex) -> str:
    """The category of the most documents (ties: the first name), or "" when no document has one."""
    counts = Counter(document.category for document in index.documents if document.category.strip())
    return max(sorted(counts), key=counts.__getitem__) if counts else ""


def _ratio(lookups: list[float], bare: list[float]) -> float | None:
    """p50 over p50, or None when no query fell in the group."""
    if not lookups or not bare:
        return None
    return round(statistics.median(lookups) / statistics.median(bare), 3)


def _close(pipeline: Pipeline) -> None:
    for _, instance in pipeline.walk():
        close = getattr(instance, "close", None)
        if callable(close):
            close()


def index_throughput(indexer: KnowledgeIndexer, summary: IndexSummary, knowledge_dir: Path) -> dict[str, Any]:
    """
    Indexing throughput next to the embedding models' own on exactly the texts the indexing pipeline embeds.

    :param indexer: The indexer that indexed `knowledge_dir` (its pipeline up to the chunks, and its embedders).
    :param summary: What its run did.
    :param knowledge_dir: The folder it indexed.
    :returns: Characters/s of both and their ratio (`index_throughput_ratio`).
    """
    chunks, _ = indexer.run_without_writing(knowledge_dir, list(find_knowledge_files(knowledge_dir).files), embed=False)
    embedders = indexer.document_embedders
    seconds = 0.0
    characters = 0
    for embedder in embedders:
        texts = [embedder.text_to_embed(chunk) for chunk in chunks]
        backend = get_backend(embedder.model)
        started = time.perf_counter()
        for i in range(0, len(texts), embedder.batch_size):
            backend.embed_passages(texts[i : i + embedder.batch_size])
        seconds += time.perf_counter() - started
        characters = characters or sum(len(t) for t in texts)
    raw = characters / seconds if seconds else 0.0
    return {
        "index_chars_per_second": round(summary.chars_per_second, 1),
        "embedders_chars_per_second": round(raw, 1),
        "embedders": [e.model for e in embedders],
        "index_throughput_ratio": round(summary.chars_per_second / raw, 3) if raw else None,
    }


#: the file types `--formats` times, each on the files of that type in the folder given
FORMATS = {
    "markdown": (".md", ".mdx"),
    "html": (".html", ".htm"),
    "pdf": (".pdf",),
    "docx": (".docx",),
    "rst": (".rst",),
    "text": (".txt",),
}


def index_throughput_by_format(folder: Path, work: Path) -> dict[str, dict[str, Any]]:
    """
    Indexing throughput per file type: the files of each type in `folder` (their folders kept, so that includes
    resolve) indexed into a fresh data folder, next to the embedding models' own speed on the same chunks.

    :param folder: Documents of several types (the repository's `tests/fixtures/real_docs` by default).
    :param work: A folder for the copies and data folders.
    :returns: Per type: files, chunks, characters, both speeds and `index_throughput_ratio`.
    """
    figures: dict[str, dict[str, Any]] = {}
    for name, suffixes in FORMATS.items():
        files = [p for p in sorted(folder.rglob("*")) if p.is_file() and p.suffix.lower() in suffixes]
        files = [p for p in files if p.name not in ("SOURCES.md", "LICENSE.md", "README.md")]
        if not files:
            continue
        kb = work / f"formats-{name}"
        for path in files:
            target = kb / path.relative_to(folder)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(path, target)
        indexer = KnowledgeIndexer(Deployment.resolve(work / f"formats-{name}-data"))
        try:
            summary = indexer.index(kb, progress=False)
            figures[name] = {
                "files": summary.files,
                "chunks": summary.chunks,
                "characters": summary.characters,
                **index_throughput(indexer, summary, kb),
            }
        finally:
            indexer.close()
    return figures


def cold_start(data_dir: str | Path, query: str, runs: int = 5) -> dict[str, Any]:
    """
    Process start -> first answer of `lookup-knowledge ask`, in fresh processes.

    On Milvus Lite every `ask` is timed twice: with no host running for the folder (it starts one, as the first
    command after a pause does: `cold_start_s`), and with the host already running (as every later command finds it
    while one runs or lingers: `warm_host_cold_start_s`).

    :param data_dir: An indexed data folder.
    :param query: The question asked.
    :param runs: How many processes of each kind.
    :returns: `cold_start_s` (median wall seconds) and every run's, `warm_host_cold_start_s` and its runs (None on a
        Milvus server), and `ask_peak_rss_mb`: the median peak RSS of the `ask` processes (the shipped pipeline
        answering one question; the Milvus Lite host is a process of its own, not counted; None where the platform
        does not report it).
    :raises RuntimeError: If an `ask` fails.
    """
    deployment = Deployment.resolve(data_dir)
    lite = is_lite_uri(deployment.milvus_uri)
    command = [sys.executable, "-m", "pipelines.entrypoints.cli", "ask", "--data-dir", str(data_dir), query]
    walls, peaks, warm = [], [], []
    for _ in range(runs):
        if lite:  # the host the previous run started stops with it
            wait_for_no_host(deployment.milvus_uri)
        wall, peak = _time_ask(command, {"LOOKUP_KNOWLEDGE_LITE_LINGER_S": "0"})
        walls.append(wall)
        peaks.append(peak)
    if lite:
        lease = LiteHostLease.acquire(deployment.milvus_uri)  # a running host, as a later command finds it
        try:
            warm = [_time_ask(command, {})[0] for _ in range(runs)]
        finally:
            lease.release()
    return {
        "cold_start_s": round(statistics.median(walls), 2),
        "runs_s": [round(w, 2) for w in walls],
        "warm_host_cold_start_s": round(statistics.median(warm), 2) if warm else None,
        "warm_host_runs_s": [round(w, 2) for w in warm],
        "ask_peak_rss_mb": round(statistics.median(peaks), 1) if any(peaks) else None,
    }


def _time_ask(command: list[str], env: dict[str, str]) -> tuple[float, float]:
    """One `ask`: its wall seconds from spawn to exit and its own peak RSS in MB."""
    with tempfile.TemporaryFile() as stderr:
        started = time.perf_counter()
        process = subprocess.Popen(  # noqa: S603
            command, stdout=subprocess.DEVNULL, stderr=stderr, cwd=REPO_ROOT, env={**os.environ, **env}
        )
        _, status, usage = os.wait4(process.pid, 0)  # the child's own resource usage, its peak RSS in KB
        wall = time.perf_counter() - started
        process.returncode = os.waitstatus_to_exitcode(status)
        if process.returncode != 0:
            stderr.seek(0)
            msg = f"`ask` failed with exit {process.returncode}: {stderr.read().decode(errors='replace')[-500:]}"
            raise RuntimeError(msg)
    return wall, usage.ru_maxrss / 1024


def wait_for_no_host(milvus_uri: str, timeout_s: float = 60) -> None:
    """
    Wait until no Milvus Lite host serves the folder (a host whose last process ended stops after its linger time).

    :param milvus_uri: The Milvus Lite `.db` folder.
    :param timeout_s: Longest wait.
    :raises RuntimeError: If a host still runs then.
    """
    state = HostPaths.of(milvus_uri).state
    deadline = time.monotonic() + timeout_s
    while state.exists():
        if time.monotonic() > deadline:
            msg = f"the Milvus Lite host of {milvus_uri} still runs after {timeout_s:g} s (another process uses it)"
            raise RuntimeError(msg)
        time.sleep(0.05)


def lite_host_peak_rss_mb(milvus_uri: str) -> float | None:
    """
    :param milvus_uri: The deployment's Milvus URI.
    :returns: The peak resident set size in MB of the Milvus Lite host serving it (the collections it loaded), or
        None on a server or where unavailable.
    """
    if not is_lite_uri(milvus_uri):
        return None
    try:
        pid = json.loads(HostPaths.of(milvus_uri).state.read_text(encoding="utf-8"))["pid"]
        return peak_rss_mb(Path(f"/proc/{int(pid)}/status"))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def peak_rss_mb(status_file: Path = Path("/proc/self/status")) -> float | None:
    """
    :param status_file: The process' `/proc/<pid>/status` (default: this process').
    :returns: The process' peak resident set size in MB (Linux `VmHWM`), or None where unavailable.
    """
    try:
        status = status_file.read_text(encoding="utf-8")
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    return None


def parse_scales(text: str | None) -> list[int] | None:
    """
    Parse `--scale`: comma-separated chunk counts, with `k` for thousands.

    :param text: E.g. `1k,10k,100k` (None or empty: no scale runs).
    :returns: The counts, or None.
    :raises ValueError: If a size is not a positive whole number of chunks, naming it.
    """
    if not text:
        return None
    sizes = []
    for part in text.split(","):
        size = part.strip().lower()
        try:
            value = int(size[:-1]) * 1000 if size.endswith("k") else int(size)
        except ValueError:
            value = 0
        if value <= 0:
            msg = f"--scale {text!r}: {part.strip()!r} is not a number of chunks; use e.g. 1k,10k,100k"
            raise ValueError(msg)
        sizes.append(value)
    return sizes


def store_label(milvus_uri: str) -> str:
    """
    Name the store a bench ran on, for its configuration: Milvus Lite, or the server's address without credentials.

    :param milvus_uri: The deployment's Milvus URI.
    :returns: The label.
    """
    if is_lite_uri(milvus_uri):
        store = "Milvus Lite (embedded)"
    else:
        address = urlsplit(milvus_uri)
        host = address.netloc.rpartition("@")[2]  # without `user:password@`
        store = f"a Milvus server at {address.scheme}://{host} (MILVUS_URI)"
    return (
        f"{store}; BM25 as pipelines.yaml sets it (lexical_source auto: the index run's BM25 index file), inside "
        "Milvus for lookup_pipeline_milvus_bm25"
    )


def _configuration(queries: int, rounds: int, milvus_uri: str, load_at_start: list[float] | None) -> dict[str, Any]:
    return {
        "pipeline": "pipelines.yaml (sidecar off)",
        "store": store_label(milvus_uri),
        "queries": queries,
        "rounds": rounds,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "load_average_at_start": load_at_start,
    }


def _load_average() -> list[float] | None:
    """The 1/5/15-minute load averages, so absolute times can be read against how busy the machine was."""
    try:
        return [round(load, 2) for load in os.getloadavg()]
    except OSError:  # not reported on this platform
        return None


def _queries(knowledge_dir: Path) -> list[str]:
    lines = (knowledge_dir / "eval.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line)["query"] for line in lines if line.strip()]


def run_bench(
    knowledge_dir: str | Path | None = None,
    rounds: int = 3,
    data_dir: str | Path | None = None,
    compare: dict[str, dict[str, Any]] | None = None,
    scales: list[int] | None = None,
    cold_start_runs: int = 5,
    progress: Callable[[str], None] | None = None,
    formats: str | Path | None = None,
) -> dict[str, Any]:
    """
    Index a knowledge folder into a fresh data folder, then time lookups of its eval questions (and at scale).

    :param knowledge_dir: The knowledge folder (default: the repository's `knowledge/`); its `eval.jsonl`
        supplies the queries.
    :param rounds: How many times every query runs through each contender.
    :param data_dir: Where to index (default: a new temporary folder); scale collections go beside it.
    :param compare: Parameter overrides (`{component: {param: value}}`) of one more lookup pipeline timed beside
        the others (`lookup_pipeline_compared`).
    :param scales: Chunk counts of synthetic collections to time lookups on (e.g. `[1000, 10000, 100000]`).
    :param cold_start_runs: Fresh `ask` processes timed (0: skip the cold start).
    :param progress: Called with a line on every step.
    :param formats: Also time indexing per file type on the documents of this folder (`index_throughput_by_format`;
        '': the repository's `tests/fixtures/real_docs`).
    :returns: The figures.
    :raises ValueError: If a scale is not positive.
    """
    if scales and any(n <= 0 for n in scales):
        msg = f"scales={scales!r}: every scale must be a positive number of chunks, e.g. 1k,10k,100k"
        raise ValueError(msg)
    say = progress or (lambda line: None)
    load_at_start = _load_average()  # before this run loads the machine itself
    kb = Path(knowledge_dir or REPO_ROOT / "knowledge").resolve()
    queries = _queries(kb)
    work = Path(data_dir or tempfile.mkdtemp(prefix="lookup-bench-"))
    deployment = Deployment.resolve(work)
    say(f"indexing {kb}")
    indexer = KnowledgeIndexer(deployment)
    summary = indexer.index(kb, progress=False)
    throughput = index_throughput(indexer, summary, kb)
    pool = embed_pool(kb, indexer) if scales else None  # real chunks and vectors every scale recombines
    indexer.close()
    start = {}
    if cold_start_runs:
        say("timing cold starts")
        start = cold_start(deployment.data_dir, queries[0], cold_start_runs)
    say("timing lookups")
    figures: dict[str, Any] = {
        "configuration": _configuration(len(queries), rounds, deployment.milvus_uri, load_at_start),
        "units": UNITS,
        "knowledge": str(kb),
        "documents": summary.files,
        "chunks": summary.chunks,
        **time_lookups(deployment.data_dir, queries, rounds, compare),
        **throughput,
    }
    if start:
        figures["cold_start_s"] = start["cold_start_s"]
        figures["cold_start_runs_s"] = start["runs_s"]
        figures["warm_host_cold_start_s"] = start["warm_host_cold_start_s"]
        figures["warm_host_cold_start_runs_s"] = start["warm_host_runs_s"]
        figures["ask_peak_rss_mb"] = start["ask_peak_rss_mb"]
    if scales and pool is not None:
        figures["scales"] = {}
        for chunks in sorted(scales):
            say(f"scale {chunks} chunks")
            scale_dir = work.parent / f"{work.name}-scale-{chunks}"
            figures["scales"][str(chunks)] = _run_scale(pool, chunks, scale_dir, rounds, cold_start_runs)
        smallest, largest = (figures["scales"][str(n)] for n in (min(scales), max(scales)))
        figures["p95_ratio_100k_vs_1k"] = round(
            largest["latency_ms"]["lookup_pipeline"]["p95"] / smallest["latency_ms"]["lookup_pipeline"]["p95"], 3
        )
        figures["p95_ratio_scales"] = [min(scales), max(scales)]
        figures["peak_rss_mb"] = {size: scale["peak_rss_mb"] for size, scale in figures["scales"].items()}
    if formats is not None:
        folder = Path(formats or REPO_ROOT / "tests" / "fixtures" / "real_docs").resolve()
        say(f"indexing per format: {folder}")
        formats_work = work.parent / f"{work.name}-formats"
        figures["index_throughput_by_format"] = index_throughput_by_format(folder, formats_work)
    figures["configuration"]["load_average_at_end"] = _load_average()
    return figures


def _run_scale(pool: ScalePool, chunks: int, data_dir: Path, rounds: int, cold_start_runs: int) -> dict[str, Any]:
    """Build a synthetic collection of `chunks` chunks, then time lookups on it in a process of its own."""
    if data_dir.exists():
        shutil.rmtree(data_dir)
    deployment = Deployment.resolve(data_dir)
    corpus = build_scale_corpus(pool.root, chunks, deployment, pool=pool)
    command = [
        sys.executable,
        "-m",
        "pipelines.measure.bench",
        "--worker",
        str(data_dir),
        "--knowledge",
        str(pool.root),
    ]
    command += ["--rounds", str(rounds)]
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO_ROOT, check=False)  # noqa: S603
    if done.returncode != 0:
        msg = f"the scale worker failed with exit {done.returncode}: {done.stderr.strip()[-800:]}"
        raise RuntimeError(msg)
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    figures["corpus"] = corpus.as_dict()
    if cold_start_runs:
        figures.update(cold_start(data_dir, _queries(pool.root)[0], cold_start_runs))
    return figures


def _worker(data_dir: str, knowledge_dir: str, rounds: int) -> None:
    """One scale's lookups in this process: print their figures and this process' peak RSS as one JSON line."""
    started = time.perf_counter()
    figures = time_lookups(data_dir, _queries(Path(knowledge_dir)), rounds)
    figures["seconds"] = round(time.perf_counter() - started, 1)
    figures["peak_rss_mb"] = peak_rss_mb()
    figures["lite_host_peak_rss_mb"] = lite_host_peak_rss_mb(Deployment.resolve(data_dir).milvus_uri)
    print(json.dumps(figures, ensure_ascii=False))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="the bench's per-scale worker (use `lookup-knowledge bench`)")
    parser.add_argument("--worker", required=True, metavar="DATA_DIR")
    parser.add_argument("--knowledge", required=True)
    parser.add_argument("--rounds", type=int, default=3)
    arguments = parser.parse_args()
    _worker(arguments.worker, arguments.knowledge, arguments.rounds)
