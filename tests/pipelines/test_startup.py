from __future__ import annotations

import gc
import json
import subprocess
import sys

import pytest

from pipelines import startup
from pipelines.settings import REPO_ROOT


@pytest.fixture
def collector():
    """Whatever a test does to the collector, the next one finds it on and nothing frozen."""
    yield
    startup._paused.clear()
    gc.enable()
    gc.unfreeze()


class TestStartup:
    def test_paused_until_resumed_then_what_startup_allocated_is_frozen(self, collector):
        startup.pause_collection()
        assert not gc.isenabled()
        kept = [{"startup": i} for i in range(1000)]
        startup.resume_collection()
        assert gc.isenabled() and gc.get_freeze_count() >= len(kept)
        startup.resume_collection()  # a second resume changes nothing
        assert gc.isenabled()

    def test_a_collector_turned_off_by_someone_else_stays_off(self, collector):
        gc.disable()
        startup.pause_collection()
        startup.resume_collection()
        assert not gc.isenabled() and gc.get_freeze_count() == 0

    def test_resume_without_pause_freezes_nothing(self, collector):
        startup.resume_collection()
        assert gc.isenabled() and gc.get_freeze_count() == 0


_ASK = """
import atexit, gc, json, sys
import pipelines.startup as startup
seen = []
resume = startup.resume_collection
def watched():
    before = gc.isenabled()
    resume()
    seen.append([sys._getframe(1).f_code.co_name, before, gc.isenabled(), gc.get_freeze_count()])
startup.resume_collection = watched
atexit.register(lambda: print(json.dumps(seen), file=sys.stderr))
sys.argv = ["lookup-knowledge", *sys.argv[1:]]
from pipelines.entrypoints import cli
sys.exit(cli.main())
"""


@pytest.mark.integration
def test_ask_starts_with_the_collector_paused_and_answers_with_it_running(tmp_path, tiny_kb):
    """The console-script path: paused from the start, resumed by `load_pipeline` with the startup frozen."""
    data = tmp_path / "data"
    index = [
        sys.executable,
        "-m",
        "pipelines.entrypoints.cli",
        "index",
        "--knowledge",
        str(tiny_kb),
        "--data-dir",
        str(data),
    ]
    assert (
        subprocess.run([*index, "--quiet"], capture_output=True, timeout=600, cwd=REPO_ROOT, check=False).returncode
        == 0
    )
    command = [sys.executable, "-c", _ASK, "ask", "disk full on the node", "--json", "--data-dir", str(data)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=REPO_ROOT, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["evidenceBlocks"][0]["source"] == "alerts/disk.md"
    (first, *rest) = json.loads(done.stderr.strip().splitlines()[-1])
    # resumed once the pipeline is ready, before the lookup; frozen: Haystack, pymilvus, SQLAlchemy, the models...
    assert first[:3] == ["load_pipeline", False, True] and first[3] > 100_000
    assert all(call[:3] == ["main", True, True] for call in rest)  # the command's own resume finds it running
    command[3] = "index"  # not a startup-bound command: never paused
    command[4:6] = ["--knowledge", str(tiny_kb)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=REPO_ROOT, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stderr.strip().splitlines()[-1]) == [["main", True, True, 0]]
