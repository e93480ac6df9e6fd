"""`index --rebuild` writes a new collection beside the active one and switches to it at the end (issue 33).

Lookups in another process answer from the old index while the rebuild runs; a rebuild killed at any point leaves
the old index whole, and the next plain `index` completes what is missing and drops what the rebuild left.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from components.store.knowledge_index import KnowledgeIndex
from components.store.milvus_chunk_store import MilvusChunkStore
from components.store.schema import CollectionSchema
from tests.reliability.test_faults import (
    RUNBOOK_QUESTION,
    RUNBOOKS,
    _ask_cli,
    _versions_by_source,
    _write_runbooks,
)

REPO_ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.integration

_LOOKER = """
import json, re, sys
from pathlib import Path
from pipelines import load_pipeline, lookup
pipeline = load_pipeline(data_dir=sys.argv[1], trace_db_url=sys.argv[2])
stop = Path(sys.argv[3])
while not stop.exists():
    result = lookup(pipeline, sys.argv[4])
    versions = {}
    for block in result["evidenceBlocks"]:
        versions.setdefault(block["source"], set()).update(re.findall(r"Runbook v(\\d)", block["content"]))
    line = {"status": result["evidenceStatus"], "error": result.get("error"), "found": result["found"]}
    line["versions"] = {source: sorted(found) for source, found in versions.items()}
    print(json.dumps(line), flush=True)
"""


def _lines_of(proc: subprocess.Popen[str]) -> queue.Queue[str]:
    """The lines a process prints, as they come (a reader that waits never hangs the test)."""
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)

    threading.Thread(target=read, daemon=True).start()
    return lines


def _env() -> dict[str, str]:
    return {key: value for key, value in os.environ.items() if key != "MILVUS_URI"}


def _index(kb: Path, data: Path, *flags: str) -> subprocess.Popen[bytes]:
    command = [
        sys.executable,
        "-m",
        "pipelines.entrypoints.cli",
        "index",
        "--knowledge",
        str(kb),
        "--data-dir",
        str(data),
        *flags,
    ]
    return subprocess.Popen(command, cwd=REPO_ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _finish(proc: subprocess.Popen[bytes]) -> str:
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err.decode(errors="replace")
    return out.decode()


def _collections(data: Path) -> list[str]:
    store = MilvusChunkStore(str(data / "milvus.db"), CollectionSchema())
    try:
        return sorted(store.list_collections())
    finally:
        store.close()


def _active(data: Path) -> KnowledgeIndex:
    return KnowledgeIndex.load(data / "knowledge_index.json")


def _kill_after_first_batch(proc: subprocess.Popen[bytes]) -> None:
    assert proc.stderr is not None
    seen = b""
    while f"8/{RUNBOOKS}".encode() not in seen:
        chunk = os.read(proc.stderr.fileno(), 4096)
        assert chunk, f"the rebuild ended before its first batch: {seen.decode(errors='replace')}"
        seen += chunk
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)


def _kill_after_the_switch(proc: subprocess.Popen[bytes], data: Path, before: str) -> None:
    """SIGKILL once the index file names the new collection: while the old one waits to be dropped."""
    deadline = time.monotonic() + 600
    while _active(data).collection_name == before:
        assert proc.poll() is None, "the rebuild ended before it was seen switching"
        assert time.monotonic() < deadline
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)


@pytest.fixture
def indexed_v1(tmp_path) -> tuple[Path, Path]:
    kb, data = tmp_path / "knowledge", tmp_path / "data"
    _finish(_index(_write_runbooks(kb, 1), data))
    return kb, data


class TestRebuild:
    def test_lookups_in_another_process_answer_from_the_old_index_while_a_rebuild_runs(self, indexed_v1, tmp_path):
        kb, data = indexed_v1
        before = _active(data).collection_name
        stop = tmp_path / "stop"
        trace = f"sqlite:///{tmp_path / 'looker.db'}"
        command = [sys.executable, "-c", _LOOKER, str(data), trace, str(stop), RUNBOOK_QUESTION]
        looker = subprocess.Popen(command, cwd=REPO_ROOT, env=_env(), stdout=subprocess.PIPE, text=True)
        answers = _lines_of(looker)
        lines = [json.loads(answers.get(timeout=300))]  # answering before the rebuild starts
        rebuild = _index(_write_runbooks(kb, 2), data, "--rebuild", "--quiet")
        while rebuild.poll() is None:
            with contextlib.suppress(queue.Empty):
                lines.append(json.loads(answers.get(timeout=1)))
        _finish(rebuild)
        during = len(lines)
        while not any(set(line["versions"].get(s, [])) == {"2"} for line in lines[during:] for s in line["versions"]):
            lines.append(json.loads(answers.get(timeout=120)))  # until the looker has switched
        stop.touch()
        looker.wait(timeout=120)
        while not answers.empty():
            lines.append(json.loads(answers.get()))

        assert during > 1, "the rebuild was over before lookups could run beside it"
        assert Counter(line["status"] for line in lines) == {"evidence": len(lines)}, [
            line for line in lines if line["status"] != "evidence"
        ]
        assert all(len(versions) == 1 for line in lines for versions in line["versions"].values())  # never a mix
        first, last = lines[0]["versions"], lines[-1]["versions"]
        assert {v for vs in first.values() for v in vs} == {"1"} and {v for vs in last.values() for v in vs} == {"2"}
        after = _active(data).collection_name
        assert after != before and _collections(data) == [after]  # the old collection is dropped

    @pytest.mark.parametrize("moment", ["during_writing", "after_the_switch"])
    def test_a_killed_rebuild_leaves_a_whole_index_and_the_next_run_cleans_up(self, indexed_v1, moment):
        kb, data = indexed_v1
        before = _active(data).collection_name
        rebuild = _index(_write_runbooks(kb, 2), data, "--rebuild")
        if moment == "during_writing":
            _kill_after_first_batch(rebuild)
            assert _active(data).collection_name == before  # the switch never happened
            expected = {"1"}
        else:
            _kill_after_the_switch(rebuild, data, before)
            expected = {"2"}
        assert len(_collections(data)) == 2  # the killed run left one collection too many
        answer = _ask_cli(RUNBOOK_QUESTION, data)
        assert answer["evidenceStatus"] == "evidence"
        assert set().union(*_versions_by_source(answer).values()) == expected  # a whole index, never an empty one

        summary = json.loads(_finish(_index(kb, data, "--json", "--quiet")))
        index = _active(data)
        assert _collections(data) == [index.collection_name]
        assert summary["failed"] == 0 and summary["indexed"] == (RUNBOOKS if moment == "during_writing" else 0)
        assert {doc.source for doc in index.documents} == {f"worker-{i:02d}.md" for i in range(RUNBOOKS)}
        repaired = _ask_cli(RUNBOOK_QUESTION, data)
        assert set().union(*_versions_by_source(repaired).values()) == {"2"}
