"""Several processes on one knowledge base: on the data folder's own Milvus Lite host (what every command starts when
none runs, nothing for the user to do) and through a `milvus-lite server` the operator runs (`MILVUS_URI`)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from components.retrievers.filtered_retry_retriever import FilteredRetryRetriever
from components.trace.trace_store import TraceStore
from pipelines import load_pipeline, lookup
from pipelines.loading import node_of_type
from pipelines.settings import Deployment
from tests.conftest import write_tiny_kb
from tests.lite_server import LiteServer
from tests.postgres_server import free_port
from tests.served_lookup import post_lookup

REPO_ROOT = Path(__file__).resolve().parents[2]
QUESTION = "disk usage above 90 percent on a node"
_CLI = [sys.executable, "-m", "pipelines.entrypoints.cli"]

pytestmark = pytest.mark.integration


def _env(uri: str | None) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key != "MILVUS_URI"}
    return {**env, "MILVUS_URI": uri} if uri else env


def _cli(*args: str, uri: str | None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "pipelines.entrypoints.cli", *args]
    return subprocess.run(
        command, cwd=REPO_ROOT, env=_env(uri), capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.fixture(params=["folder_host", "lite_server"])
def lite_server(request, tmp_path) -> Iterator[str | None]:
    """None: the data folder's own host (the default); else the URI of a `milvus-lite server` the operator started."""
    if request.param == "folder_host":
        yield None
        return
    server = LiteServer(tmp_path / "milvus")
    server.start()
    try:
        yield server.uri
    finally:
        server.stop()


def test_a_process_outside_the_project_holding_the_folder_is_named_in_one_line(tmp_path, capsys):
    """Milvus Lite opened by someone else's script cannot be shared: said in one line, with what to do."""
    from pipelines.entrypoints.cli import main

    data = tmp_path / "data"
    data.mkdir()
    holder = subprocess.Popen(  # another process opens the Milvus Lite folder and keeps it
        [
            sys.executable,
            "-c",
            "import sys, time\nfrom pymilvus import MilvusClient\nMilvusClient(uri=sys.argv[1])\n"
            "print('open', flush=True)\ntime.sleep(120)",
            str(data / "milvus.db"),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "open"
        for argv in (["ask", "disk full"], ["index", "--knowledge", str(write_tiny_kb(tmp_path / "kb"))]):
            assert main([*argv, "--data-dir", str(data)]) == 1
            err = capsys.readouterr().err.strip()
            assert err.count("\n") == 0 and "open in another process" in err and "milvus-lite server" in err
    finally:
        holder.kill()
        holder.wait(timeout=20)


def _version_of_blocks(result: dict) -> set[str]:
    return {b["content"].split("Runbook v", 1)[1][:1] for b in result["evidenceBlocks"] if "Runbook v" in b["content"]}


class TestSeveralProcesses:
    def test_index_and_lookups_in_several_processes_share_one_server_with_full_text_search(self, lite_server, tmp_path):
        kb = write_tiny_kb(tmp_path / "knowledge")
        data = str(tmp_path / "data")
        indexed = _cli("index", "--knowledge", str(kb), "--data-dir", data, "--json", uri=lite_server)
        assert indexed.returncode == 0, indexed.stderr
        assert '"bm25": "milvus"' in indexed.stdout  # the server tier has full-text search
        pipeline = load_pipeline(data_dir=data, milvus_uri=lite_server)  # this process stays connected
        assert lookup(pipeline, QUESTION)["evidenceStatus"] == "evidence"
        asked = _cli("ask", QUESTION, "--data-dir", data, "--json", uri=lite_server)  # a second process meanwhile
        assert asked.returncode == 0 and '"evidenceStatus": "evidence"' in asked.stdout, asked.stderr
        again = _cli("index", "--knowledge", str(kb), "--data-dir", data, "--json", uri=lite_server)
        assert again.returncode == 0 and '"skipped": 3' in again.stdout, again.stderr

    def test_lookups_during_a_reindex_see_the_old_or_the_new_version_never_a_mix(self, lite_server, tmp_path):
        kb, data, disk, text = _indexed_at_version_1(tmp_path, lite_server)
        pipeline = load_pipeline(data_dir=data, milvus_uri=lite_server)
        disk.write_text(_versioned(text, 2), encoding="utf-8")
        results: list[dict] = []
        errors: list[BaseException] = []
        stop = threading.Event()

        def look() -> None:
            while not stop.is_set():
                try:
                    results.append(lookup(pipeline, QUESTION))
                except BaseException as err:  # shown by the assertion below
                    errors.append(err)

        threads = [threading.Thread(target=look) for _ in range(4)]
        for thread in threads:
            thread.start()
        try:
            reindex = _cli("index", "--knowledge", str(kb), "--data-dir", data, uri=lite_server)
            time.sleep(2)  # a few lookups after the switch
        finally:
            stop.set()
            for thread in threads:
                thread.join()
        assert reindex.returncode == 0, reindex.stderr
        assert errors == [] and results
        odd = [(r["evidenceStatus"], r.get("error")) for r in results if r["evidenceStatus"] != "evidence"]
        assert odd == [], odd
        versions = [_version_of_blocks(r) for r in results]
        assert all(len(v) <= 1 for v in versions), "a result mixed versions of one document"
        assert {"1", "2"} >= set().union(*versions)
        assert _version_of_blocks(lookup(pipeline, QUESTION)) == {"2"}

    def test_a_reindex_between_a_search_and_its_result_keeps_the_version_the_search_found(
        self, lite_server, tmp_path, monkeypatch
    ):
        """The switch lands after the search read the old chunks: the document keeps them, it does not vanish."""
        kb, data, disk, text = _indexed_at_version_1(tmp_path, lite_server)
        pipeline = load_pipeline(data_dir=data, milvus_uri=lite_server)
        collection = node_of_type(pipeline, FilteredRetryRetriever)[1].collection
        search = collection.dense_search
        reindexed: list[subprocess.CompletedProcess[str]] = []

        def search_then_reindex(*args, **kwargs):
            hits = search(*args, **kwargs)
            if not reindexed:  # another process switches to version 2 and deletes version 1's chunks
                disk.write_text(_versioned(text, 2), encoding="utf-8")
                reindexed.append(_cli("index", "--knowledge", str(kb), "--data-dir", data, uri=lite_server))
            return hits

        monkeypatch.setattr(collection, "dense_search", search_then_reindex)
        during = lookup(pipeline, QUESTION)
        assert reindexed and reindexed[0].returncode == 0, reindexed[0].stderr
        assert during["evidenceStatus"] == "evidence" and _version_of_blocks(during) == {"1"}
        after = lookup(pipeline, QUESTION)
        assert after["evidenceStatus"] == "evidence" and _version_of_blocks(after) == {"2"}


def _indexed_at_version_1(tmp_path: Path, uri: str | None) -> tuple[Path, str, Path, str]:
    """The tiny base indexed with its disk runbook at version 1: (base, data folder, runbook, its unversioned text)."""
    kb = write_tiny_kb(tmp_path / "knowledge")
    disk = kb / "alerts" / "disk.md"
    text = disk.read_text(encoding="utf-8")
    disk.write_text(_versioned(text, 1), encoding="utf-8")
    data = str(tmp_path / "data")
    assert _cli("index", "--knowledge", str(kb), "--data-dir", data, uri=uri).returncode == 0
    return kb, data, disk, text


def _versioned(text: str, version: int) -> str:
    """Every section of the document names its version, so a result that mixes versions shows it."""
    for heading in ("## Diagnosis\n", "## Remediation\n"):
        text = text.replace(heading, f"{heading}\nRunbook v{version}.\n")
    return text


def _started_together(commands: list[list[str]], env: dict[str, str]) -> list[subprocess.CompletedProcess[str]]:
    """Start every command at once, then wait for all of them."""
    procs = [
        subprocess.Popen(c, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for c in commands
    ]
    done = []
    for command, proc in zip(commands, procs, strict=True):
        out, err = proc.communicate(timeout=600)
        done.append(subprocess.CompletedProcess(command, proc.returncode, out, err))
    return done


def _wait_for_no_host(data: Path) -> None:
    """Until the folder's host has stopped (its linger is short in tests), so the next commands race to start one."""
    from components.store.lite_host import HostPaths

    state = HostPaths.of(data / "milvus.db").state
    deadline = time.monotonic() + 60
    while state.exists():
        assert time.monotonic() < deadline, "the Milvus Lite host did not stop"
        time.sleep(0.1)


#: what `_read_so_far` read of each process' stderr, by pid
_SEEN: dict[int, bytes] = {}


def _read_so_far(proc: subprocess.Popen[bytes]) -> bytes:
    """A process' stderr so far, read without blocking."""
    assert proc.stderr is not None
    os.set_blocking(proc.stderr.fileno(), False)
    with contextlib.suppress(BlockingIOError, TypeError):
        _SEEN[proc.pid] = _SEEN.get(proc.pid, b"") + (os.read(proc.stderr.fileno(), 65536) or b"")
    return _SEEN.get(proc.pid, b"")


class TestOnTheDefaultDataFolder:
    """Nothing started by the user, no MILVUS_URI: the commands share the folder's own Milvus Lite host."""

    def test_four_asks_started_at_the_same_instant_all_answer(self, tmp_path):
        kb = write_tiny_kb(tmp_path / "knowledge")
        data = tmp_path / "data"
        assert _cli("index", "--knowledge", str(kb), "--data-dir", str(data), uri=None).returncode == 0
        _wait_for_no_host(data)
        ask = [sys.executable, "-m", "pipelines.entrypoints.cli", "ask", QUESTION, "--data-dir", str(data), "--json"]
        done = _started_together([ask] * 4, _env(None))
        for proc in done:
            assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
            assert json.loads(proc.stdout)["evidenceStatus"] == "evidence"
        assert len(TraceStore(Deployment.resolve(data).trace_db_url).list(limit=100)) == 4

    def test_two_index_runs_at_once_take_turns(self, tmp_path):
        from filelock import FileLock

        from pipelines.indexing import INDEX_LOCK_FILE

        kb = write_tiny_kb(tmp_path / "knowledge")
        data = tmp_path / "data"
        data.mkdir()
        index = [*_CLI, "index", "--knowledge", str(kb), "--data-dir", str(data), "--json", "--quiet"]
        held = FileLock(data / INDEX_LOCK_FILE)
        held.acquire()  # both runs find the folder being indexed, and must wait their turn
        procs = [
            subprocess.Popen(index, cwd=REPO_ROOT, env=_env(None), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            for _ in range(2)
        ]
        try:
            deadline = time.monotonic() + 120
            while not all(b"waiting for it to finish" in _read_so_far(proc) for proc in procs):
                assert time.monotonic() < deadline, "the runs did not say that they wait"
                time.sleep(0.1)
        finally:
            held.release()
        done = [(proc, *proc.communicate(timeout=600)) for proc in procs]
        done = [(proc, out, _SEEN.pop(proc.pid, b"") + err) for proc, out, err in done]
        for proc, _, err in done:
            assert proc.returncode == 0 and b"Traceback" not in err, err.decode(errors="replace")
        summaries = sorted((json.loads(out)["indexed"], json.loads(out)["skipped"]) for _, out, _ in done)
        assert summaries == [(0, 3), (3, 0)]  # one after the other: the second found the work done

    def test_ask_index_serve_and_eval_started_together_all_work(self, tmp_path):
        dataset = tmp_path / "dataset"
        kb = write_tiny_kb(dataset / "knowledge")
        question = {"qid": "q1", "query": QUESTION, "expected_doc_ids": ["alerts-disk"], "gold_categories": ["alerts"]}
        (dataset / "eval.jsonl").write_text(json.dumps(question) + "\n", encoding="utf-8")
        data = tmp_path / "data"
        assert _cli("index", "--knowledge", str(kb), "--data-dir", str(data), uri=None).returncode == 0
        _wait_for_no_host(data)
        port = free_port()
        cli = _CLI
        serve = subprocess.Popen(
            [*cli, "serve", "--transport", "http", "--port", str(port), "--data-dir", str(data)],
            cwd=REPO_ROOT,
            env=_env(None),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            done = _started_together(
                [
                    [*cli, "ask", QUESTION, "--data-dir", str(data), "--json"],
                    [*cli, "index", "--knowledge", str(kb), "--data-dir", str(data), "--json", "--quiet"],
                    [*cli, "eval", str(dataset), "--data-dir", str(data), "--quiet"],
                ],
                _env(None),
            )
            for proc in done:
                assert proc.returncode == 0 and "Traceback" not in proc.stderr, (proc.args, proc.stderr)
            assert json.loads(done[0].stdout)["evidenceStatus"] == "evidence"
            answer = post_lookup(port, QUESTION)
            assert answer["evidenceStatus"] == "evidence"
        finally:
            serve.terminate()
            _, err = serve.communicate(timeout=60)
        assert "Traceback" not in err, err

    def test_index_while_serve_runs_updates_what_serve_answers(self, tmp_path):
        kb, data, disk, text = _indexed_at_version_1(tmp_path, None)
        port = free_port()
        serve = subprocess.Popen(
            [*_CLI, "serve", "--transport", "http", "--port", str(port), "--data-dir", data],
            cwd=REPO_ROOT,
            env=_env(None),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        answers: list[dict] = []
        errors: list[BaseException] = []
        stop = threading.Event()

        def look() -> None:
            while not stop.is_set():
                try:
                    answers.append(post_lookup(port, QUESTION))
                except BaseException as err:  # shown by the assertion below
                    errors.append(err)

        try:
            assert post_lookup(port, QUESTION)["evidenceStatus"] == "evidence"
            threads = [threading.Thread(target=look) for _ in range(2)]
            for thread in threads:
                thread.start()
            disk.write_text(_versioned(text, 2), encoding="utf-8")
            try:
                reindex = _cli("index", "--knowledge", str(kb), "--data-dir", data, uri=None)
                time.sleep(1)  # a few lookups after the switch
            finally:
                stop.set()
                for thread in threads:
                    thread.join()
            assert reindex.returncode == 0 and "Traceback" not in reindex.stderr, reindex.stderr
            assert errors == [] and answers
            assert [a["evidenceStatus"] for a in answers] == ["evidence"] * len(answers)
            assert all(len(_version_of_blocks(a)) == 1 for a in answers)
            assert _version_of_blocks(post_lookup(port, QUESTION)) == {"2"}  # served without a restart
        finally:
            serve.terminate()
            _, err = serve.communicate(timeout=60)
        assert "Traceback" not in err, err
