"""Several processes on one knowledge base, through one Milvus Lite server on 127.0.0.1 (`milvus-lite server`)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from components.filtered_retry_retriever import FilteredRetryRetriever
from pipelines import load_pipeline, lookup
from pipelines.loading import node_of_type
from tests.conftest import write_tiny_kb
from tests.lite_server import LiteServer

REPO_ROOT = Path(__file__).resolve().parents[2]
QUESTION = "disk usage above 90 percent on a node"

pytestmark = pytest.mark.integration


def _cli(*args: str, uri: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MILVUS_URI": uri}
    command = [sys.executable, "-m", "pipelines.cli", *args]
    return subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False)


@pytest.fixture
def lite_server(tmp_path) -> Iterator[str]:
    server = LiteServer(tmp_path / "milvus")
    server.start()
    try:
        yield server.uri
    finally:
        server.stop()


def test_a_second_process_on_a_lite_folder_is_told_in_one_line_what_to_do(tmp_path, capsys):
    from pipelines.cli import main

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


def _indexed_at_version_1(tmp_path: Path, uri: str) -> tuple[Path, str, Path, str]:
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
