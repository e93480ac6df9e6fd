"""`lookup-knowledge index --watch` and the estimate an index run states: through the real CLI, store and server."""

from __future__ import annotations

import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from watchfiles import Change

from components.store.knowledge_index import KnowledgeIndex
from pipelines.indexing import DEFAULT_BYTES_PER_SECOND, KnowledgeIndexer, estimate_of
from pipelines.settings import Deployment
from pipelines.watching import KnowledgeChanges
from tests.conftest import write_tiny_kb
from tests.postgres_server import free_port
from tests.served_lookup import post_lookup

REPO_ROOT = Path(__file__).resolve().parents[2]
_CLI = [sys.executable, "-m", "pipelines.entrypoints.cli"]
PAGES = ("alerts/disk-full.md", "alerts/high-cpu.md", "payments/refund-processing.md", "product-faq/data-export.md")
_LICENCE_LINES = "#\n# Licensed to the Apache Software Foundation (ASF) under one or more agreements.\n"
LICENCE_HEADER = "<!--\n" + _LICENCE_LINES * 40 + "-->\n"
NEW_PAGE = """---
title: Vault access
category: ops
---
# Vault access

The vault door code for the east data hall is 8675309; change it every quarter.
"""


def _lines(stream) -> queue.Queue:
    lines: queue.Queue = queue.Queue()

    def pump() -> None:
        for line in stream:
            lines.put(line.rstrip("\n"))

    threading.Thread(target=pump, daemon=True).start()
    return lines


def _wait_for(lines: queue.Queue, text: str, timeout: float = 240) -> list[str]:
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=1)
        except queue.Empty:
            continue
        seen.append(line)
        if text in line:
            return seen
    raise AssertionError(f"{text!r} never printed; got {seen}")


class TestKnowledgeChanges:
    def test_hidden_files_and_the_data_folder_are_not_changes(self, tmp_path: Path):
        root, data = tmp_path / "kb", tmp_path / "kb" / "data"
        changes = KnowledgeChanges(root, data)
        assert changes(Change.modified, str(root / "ops" / "a.md"))
        assert not changes(Change.modified, str(data / "milvus.db" / "x"))
        assert not changes(Change.added, str(root / ".git" / "index"))
        assert not changes(Change.added, str(root / "ops" / ".a.md.swp"))
        assert not changes(Change.added, str(tmp_path / "elsewhere.md"))


class TestEstimate:
    def test_the_estimate_is_the_size_at_the_rate(self, tmp_path: Path):
        files = []
        for i, size in enumerate((60_000, 30_000)):
            files.append(tmp_path / f"{i}.md")
            files[-1].write_bytes(b"x" * size)
        assert estimate_of([*files, tmp_path / "gone.md"], 1500.0) == {
            "files": 3,
            "bytes": 90_000,
            "bytes_per_second": 1500.0,
            "rate": "measured by the last run",
            "minutes": 1.0,
        }
        assert estimate_of(files, 0.0)["bytes_per_second"] == DEFAULT_BYTES_PER_SECOND

    @pytest.mark.integration
    def test_a_run_announces_its_estimate_and_records_its_rate_for_the_next(self, tmp_path: Path):
        knowledge = tmp_path / "knowledge"
        for page in PAGES:  # a few real pages: the rate is measured on any size, and a whole base costs half a minute
            (knowledge / page).parent.mkdir(parents=True, exist_ok=True)
            _, front, body = (REPO_ROOT / "knowledge" / page).read_text(encoding="utf-8").split("---\n", 2)
            # as every page of an Apache project begins: bytes on disk that are never embedded
            (knowledge / page).write_text(f"---\n{front}---\n{LICENCE_HEADER}{body}", encoding="utf-8")
        deployment = Deployment.resolve(tmp_path / "data")
        announced: list[dict] = []
        indexer = KnowledgeIndexer(deployment)
        try:
            first = indexer.index(knowledge, progress=False, announce=announced.append)
            rate = KnowledgeIndex.load(deployment.index_path).bytes_per_second
            again = indexer.index(knowledge, rebuild=True, progress=False, announce=announced.append)
            (knowledge / "alerts" / "vault.md").write_text(NEW_PAGE, encoding="utf-8")
            second = indexer.index(knowledge, progress=False, announce=announced.append)
            third = indexer.index(knowledge, progress=False, announce=announced.append)
        finally:
            indexer.close()
        assert first.estimate["rate"] == "default" and first.estimate["files"] == first.indexed == len(PAGES)
        assert first.estimate["bytes"] > 2 * first.characters  # the comments are read, not embedded
        assert rate == pytest.approx(first.estimate["bytes"] / first.seconds, rel=0.1)  # timed before it saves
        # the same files again are expected to take what they took, whatever part of them the embedder saw
        assert again.estimate["bytes"] / again.estimate["bytes_per_second"] == pytest.approx(first.seconds, rel=0.1)
        assert second.estimate == {
            **estimate_of([knowledge / "alerts" / "vault.md"], second.estimate["bytes_per_second"]),
            "rate": "measured by the last run",
        }
        assert third.estimate["files"] == 0 and len(announced) == 3  # nothing to embed: nothing announced


@pytest.mark.integration
class TestWatch:
    def test_changes_are_indexed_and_served_without_a_restart_until_stopped(self, tmp_path: Path):
        kb = write_tiny_kb(tmp_path / "kb")
        data = str(tmp_path / "data")
        port = free_port()
        watcher = subprocess.Popen(
            [*_CLI, "index", "--knowledge", str(kb), "--data-dir", data, "--watch", "--debounce-ms", "300", "--quiet"],
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        serve = None
        try:
            out = _lines(watcher.stdout)
            _wait_for(out, "Watching")
            serve = subprocess.Popen(
                [*_CLI, "serve", "--transport", "http", "--port", str(port), "--data-dir", data],
                cwd=REPO_ROOT,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
            question = "what is the vault door code of the east data hall?"
            assert post_lookup(port, question, timeout=180)["found"] is False

            (kb / "ops").mkdir(exist_ok=True)
            (kb / "ops" / "vault.md").write_text(NEW_PAGE, encoding="utf-8")
            _wait_for(out, "1 indexed")
            answer = post_lookup(port, question, timeout=180)
            assert answer["found"] is True and answer["evidenceBlocks"][0]["source"] == "ops/vault.md"

            (kb / "ops" / "vault.md").unlink()
            _wait_for(out, "1 deleted")
            assert "ops/vault.md" not in {
                b["source"] for b in post_lookup(port, question, timeout=180)["evidenceBlocks"]
            }

            watcher.send_signal(signal.SIGTERM)
            assert watcher.wait(timeout=60) == 0
            _wait_for(out, "Stopped watching after 2 run(s)", timeout=10)
        finally:
            for process in (watcher, serve):
                if process is not None and process.poll() is None:
                    process.kill()
                    process.wait(timeout=30)
        assert "Traceback" not in watcher.stderr.read()
