"""Faults during lookups and indexing, through the real pipeline and stores: reported, recorded, recovered from."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from components.embedders.offline_text_embedder import OfflineTextEmbedder
from components.store.knowledge_index import KnowledgeIndex
from components.trace.trace_store import TraceStore
from pipelines import load_pipeline, lookup
from pipelines.indexing import KnowledgeIndexer
from pipelines.settings import Deployment
from tests.conftest import REPO_ROOT, write_tiny_kb
from tests.lite_server import LiteServer

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
from lookup_snapshot import stable  # the fields two runs may differ in: trace id, latencies

QUESTION = "disk usage above 90 percent on a node"
RUNBOOKS = 24  # three batches of the CLI's 8 files
RUNBOOK_QUESTION = "what does the worker do when its queue is full"

pytestmark = pytest.mark.integration


def _stored(url: str) -> list:
    store = TraceStore(url)
    try:
        return list(reversed(store.list(limit=1_000)))
    finally:
        store.close()


def _answer(result: dict) -> list[tuple[str, str]]:
    return [(b["evidenceKey"], b["content"]) for b in result["evidenceBlocks"]]


class TestMilvusServerStopped:
    def test_lookups_fail_clearly_are_recorded_and_recover_when_it_is_back(self, tmp_path):
        server = LiteServer(tmp_path / "milvus")
        server.start()
        url = f"sqlite:///{tmp_path / 'trace.db'}"
        try:
            deployment = Deployment.resolve(tmp_path / "data", milvus_uri=server.uri)
            indexer = KnowledgeIndexer(deployment)
            indexer.index(write_tiny_kb(tmp_path / "knowledge"), progress=False)
            indexer.close()
            pipeline = load_pipeline(data_dir=tmp_path / "data", milvus_uri=server.uri, trace_db_url=url)
            before = lookup(pipeline, QUESTION)
            server.stop()
            down = [lookup(pipeline, QUESTION) for _ in range(3)]
            time.sleep(8)  # gRPC's default reconnect backoff would have grown past the restart by now
            server.start()
            after = lookup(pipeline, QUESTION)  # the same pipeline: no restart of ours
        finally:
            server.stop()
        assert before["evidenceStatus"] == "evidence"
        for result in down:
            assert result["evidenceStatus"] == "error" and not result["found"] and not result["evidenceBlocks"]
            assert "Knowledge retrieval failed" in result["error"] and "server unavailable" in result["error"]
        assert after["evidenceStatus"] == "evidence" and _answer(after) == _answer(before)
        assert [row.status for row in _stored(url)] == ["evidence", "error", "error", "error", "evidence"]


class TestEmbedderFailure:
    def test_a_failing_embedder_is_an_error_naming_it_and_the_next_lookup_is_fine(
        self, knowledge_data, tmp_path, monkeypatch
    ):
        url = f"sqlite:///{tmp_path / 'trace.db'}"
        pipeline = load_pipeline(data_dir=knowledge_data, trace_db_url=url)
        name = "embedder"  # the query embedder of pipelines.yaml (the other one makes cross-lingual vectors)
        embedder = pipeline.get_component(name)
        assert isinstance(embedder, OfflineTextEmbedder)
        with monkeypatch.context() as patch:
            patch.setattr(embedder, "_backend", _BrokenBackend())
            failed = lookup(pipeline, QUESTION)
        recovered = lookup(pipeline, QUESTION)
        assert failed["evidenceStatus"] == "error" and not failed["evidenceBlocks"]
        assert name in failed["error"] and "model file damaged" in failed["error"]
        assert recovered["evidenceStatus"] == "evidence"
        rows = _stored(url)
        assert [row.status for row in rows] == ["error", "evidence"]
        assert rows[0].retrieval_details["failed_component"] == name


class _BrokenBackend:
    def embed_queries(self, texts):
        raise RuntimeError("model file damaged")


def _write_runbooks(root: Path, version: int) -> Path:
    """Files of two sections each, every section saying which version of the file it belongs to."""
    for i in range(RUNBOOKS):
        path = root / f"worker-{i:02d}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            f"---\ntitle: Worker {i} runbook\ncategory: workers\n---\n# Worker {i} runbook\n\n"
            f"## Queue full\n\nRunbook v{version}: worker {i} pauses intake when its queue is full.\n\n"
            f"## Restart\n\nRunbook v{version}: worker {i} restarts after draining the queue.\n",
            encoding="utf-8",
        )
    return root


def _versions_by_source(result: dict) -> dict[str, set[str]]:
    seen: dict[str, set[str]] = {}
    for block in result["evidenceBlocks"]:
        seen.setdefault(block["source"], set()).update(re.findall(r"Runbook v(\d)", block["content"]))
    return seen


_COUNT = """
import sys
from components.store.knowledge_index import KnowledgeIndex
from pipelines.indexing import KnowledgeIndexer
from pipelines.settings import Deployment
indexer = KnowledgeIndexer(Deployment.resolve(sys.argv[1]))
print(sum(sys.argv[2] in row["content"] for row in indexer.collection.scan(with_content=True)))
"""


def _count_cli(data: Path, text: str) -> int:
    """Chunks holding a text, counted by another process."""
    env = {key: value for key, value in os.environ.items() if key != "MILVUS_URI"}
    command = [sys.executable, "-c", _COUNT, str(data), text]
    counted = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert counted.returncode == 0, counted.stderr
    return int(counted.stdout.split()[-1])


def _ask_cli(question: str, data: Path) -> dict:
    command = [sys.executable, "-m", "pipelines.entrypoints.cli", "ask", question, "--data-dir", str(data), "--json"]
    env = {key: value for key, value in os.environ.items() if key != "MILVUS_URI"}
    asked = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert asked.returncode == 0, asked.stderr
    return json.loads(asked.stdout)


def _index_cli(kb: Path, data: Path) -> subprocess.Popen[bytes]:
    command = [
        sys.executable,
        "-m",
        "pipelines.entrypoints.cli",
        "index",
        "--knowledge",
        str(kb),
        "--data-dir",
        str(data),
    ]
    env = {key: value for key, value in os.environ.items() if key != "MILVUS_URI"}
    return subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _kill_after_first_batch(proc: subprocess.Popen[bytes]) -> bytes:
    """Read the progress bar until the first batch is written, then kill the process (SIGKILL: no clean-up)."""
    assert proc.stderr is not None
    seen = b""
    while f"8/{RUNBOOKS}".encode() not in seen:
        chunk = os.read(proc.stderr.fileno(), 4096)
        assert chunk, f"indexing ended before its first batch: {seen.decode(errors='replace')}"
        seen += chunk
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    return seen


class TestKilledMidIndex:
    def test_the_next_run_repairs_and_no_lookup_ever_mixes_versions(self, tmp_path):
        kb, data = tmp_path / "knowledge", tmp_path / "data"
        first = _index_cli(_write_runbooks(kb, 1), data)
        _, err = first.communicate(timeout=600)
        assert first.returncode == 0, err.decode(errors="replace")
        index_before = (data / "knowledge_index.json").read_bytes()

        _write_runbooks(kb, 2)
        progress = _kill_after_first_batch(_index_cli(kb, data))
        assert f"{RUNBOOKS}/{RUNBOOKS}".encode() not in progress  # killed midway, not after the run
        assert (data / "knowledge_index.json").read_bytes() == index_before  # the switch never happened

        assert _count_cli(data, "Runbook v2") > 0  # new chunks were written: lookups must pass them over
        killed = _ask_cli(RUNBOOK_QUESTION, data)  # another process: this one must leave Milvus Lite to the next run
        assert killed["evidenceStatus"] == "evidence"
        assert set().union(*_versions_by_source(killed).values()) == {"1"}  # the old version, whole

        repair = _index_cli(kb, data)
        _, err = repair.communicate(timeout=600)
        assert repair.returncode == 0, err.decode(errors="replace")
        deployment = Deployment.resolve(data)
        indexer = KnowledgeIndexer(deployment)
        try:
            rows = indexer.collection.scan(with_content=True)
        finally:
            indexer.close()
        active = KnowledgeIndex.load(deployment.index_path).by_source()
        assert len(active) == RUNBOOKS
        assert Counter(row["source"] for row in rows) == {s: d.chunks for s, d in active.items()}
        assert all(row["doc_version"] == active[row["source"]].doc_version for row in rows)
        assert all("Runbook v2" in row["content"] for row in rows)

        trace = f"sqlite:///{tmp_path / 'trace.db'}"
        repaired = lookup(load_pipeline(data_dir=data, trace_db_url=trace), RUNBOOK_QUESTION)
        assert all(versions == {"2"} for versions in _versions_by_source(repaired).values())


SIDECAR_QUESTIONS = ("磁盘满了怎么办", "how do I rotate the API keys", "zxqv plorn wibble frumious snark")


@pytest.fixture(scope="module")
def main_results(knowledge_data, tmp_path_factory):
    """The answers with the sidecar off: what every sidecar fault must leave byte for byte."""
    url = f"sqlite:///{tmp_path_factory.mktemp('sidecar-off') / 'trace.db'}"
    pipeline = load_pipeline(data_dir=knowledge_data, trace_db_url=url)
    return [json.dumps(stable(lookup(pipeline, q)), sort_keys=True) for q in SIDECAR_QUESTIONS]


class TestSidecarFaults:
    def _pipeline(self, knowledge_data, tmp_path, **sidecar):
        url = f"sqlite:///{tmp_path / 'trace.db'}"
        params = {"sidecar": {"enabled": True, "retriever": "bm25", **sidecar}}
        return load_pipeline(data_dir=knowledge_data, trace_db_url=url, component_params=params), url

    def _answers(self, pipeline) -> list[str]:
        return [json.dumps(stable(lookup(pipeline, q)), sort_keys=True) for q in SIDECAR_QUESTIONS]

    def test_a_raising_sidecar_leaves_the_main_result_unchanged(self, knowledge_data, tmp_path, main_results):
        pipeline, url = self._pipeline(knowledge_data, tmp_path)
        sidecar = pipeline.get_component("sidecar")
        sidecar._retrieve = _raise_runtime_error
        assert self._answers(pipeline) == main_results
        reports = [row.retrieval_details["sidecar"] for row in _stored(url)]
        assert [(r["status"], r["error"]) for r in reports[:2]] == [("failed", "RuntimeError: sidecar store lost")] * 2

    def test_a_sidecar_that_cannot_start_leaves_the_main_result_unchanged(self, knowledge_data, tmp_path, main_results):
        pipeline, url = self._pipeline(knowledge_data, tmp_path, collection={"metric_type": "COSINE"})  # L2 stored
        assert self._answers(pipeline) == main_results
        reports = [row.retrieval_details["sidecar"] for row in _stored(url)]
        assert all(r["status"] == "failed" for r in reports[:2])
        assert all(r["error"].startswith("initialization failed: CollectionMismatchError") for r in reports[:2])

    def test_a_hung_sidecar_costs_one_budget_once_and_leaves_the_result_unchanged(
        self, knowledge_data, tmp_path, main_results
    ):
        pipeline, url = self._pipeline(knowledge_data, tmp_path, timeout_ms=1_500)
        release = threading.Event()
        pipeline.get_component("sidecar")._retrieve = lambda query, hidden: release.wait(60) and []
        try:
            answers, seconds = [], []
            for question in SIDECAR_QUESTIONS:
                started = time.perf_counter()
                answers.append(json.dumps(stable(lookup(pipeline, question)), sort_keys=True))
                seconds.append(time.perf_counter() - started)
        finally:
            release.set()
        assert answers == main_results
        assert seconds[0] >= 1.5 and max(seconds[1:]) < 1.5  # later lookups do not wait behind the hung one
        statuses = [row.retrieval_details["sidecar"]["status"] for row in _stored(url)]
        assert statuses[:2] == ["timeout", "skipped"]


def _raise_runtime_error(query, hidden):
    raise RuntimeError("sidecar store lost")


class TestDamagedKnowledgeIndex:
    def test_ask_records_the_failure_and_exits_1_and_index_rebuilds(self, tmp_path):
        kb = write_tiny_kb(tmp_path / "knowledge")
        data = tmp_path / "data"
        first = _index_cli(kb, data)
        _, err = first.communicate(timeout=600)
        assert first.returncode == 0, err.decode(errors="replace")
        index_path = data / "knowledge_index.json"
        index_path.write_text('{"documents": [garbage', encoding="utf-8")

        command = [
            sys.executable,
            "-m",
            "pipelines.entrypoints.cli",
            "ask",
            QUESTION,
            "--data-dir",
            str(data),
            "--json",
        ]
        env = {key: value for key, value in os.environ.items() if key != "MILVUS_URI"}
        asked = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)
        assert asked.returncode == 1, asked.stderr  # an internal failure, not bad input (2)
        result = json.loads(asked.stdout)
        assert result["evidenceStatus"] == "error" and "knowledge index" in result["error"]
        assert "damaged" in asked.stderr.splitlines()[-1] and "Traceback" not in asked.stderr
        rows = TraceStore(Deployment.resolve(data).trace_db_url).list(limit=10)
        assert [(row.status, row.id) for row in rows] == [("error", result["traceId"])]

        repair = _index_cli(kb, data)
        _, err = repair.communicate(timeout=600)
        assert repair.returncode == 0, err.decode(errors="replace")
        kept = list(data.glob("knowledge_index.json.damaged-*"))
        assert b"damaged" in err and [p.read_text() for p in kept] == ['{"documents": [garbage']
        assert len(KnowledgeIndex.load(index_path).documents) == 3
        assert _ask_cli(QUESTION, data)["evidenceStatus"] == "evidence"
