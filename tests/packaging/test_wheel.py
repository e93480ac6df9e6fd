"""The wheel, installed in a fresh virtual environment and used from another folder, as a new user would."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import write_tiny_kb
from tests.postgres_server import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]
#: what the wheel must bring itself: the project's own files in this environment are left out of the new one
OWN = ("__editable__", "lookup_knowledge", "_distutils_hack", "distutils-precedence.pth", "pip", "setuptools")

pytestmark = pytest.mark.integration


def _run(command: list[str], cwd: Path, env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert done.returncode == 0, f"{command}: {done.stderr[-2000:]}"
    return done


def _dependencies_view(target: Path) -> Path:
    """This environment's packages, but the project's own: the new environment finds its dependencies offline."""
    target.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if not entry.name.startswith(OWN):
            (target / entry.name).symlink_to(entry)
    return target


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """A virtual environment with the wheel built from this checkout installed: its bin folder, and an environment."""
    root = tmp_path_factory.mktemp("wheel")
    source = root / "source"  # a copy: building in place would leave build/ and egg-info in the checkout
    shutil.copytree(
        REPO_ROOT,
        source,
        ignore=shutil.ignore_patterns(".git", ".venv", "data", "build", "*.egg-info", "__pycache__", ".*_cache"),
    )
    dist = root / "dist"
    _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(dist), "."],
        source,
        {
            **os.environ,
            "PIP_NO_INDEX": "1",
        },
    )
    wheel = next(dist.glob("lookup_knowledge-*.whl"))
    venv = root / "venv"
    _run(
        [getattr(sys, "_base_executable", sys.executable), "-m", "venv", "--without-pip", str(venv)],
        root,
        dict(os.environ),
    )
    purelib = Path(
        _run(
            [str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], root, {}
        ).stdout.strip()
    )
    (purelib / "dependencies.pth").write_text(f"{_dependencies_view(root / 'dependencies')}\n", encoding="utf-8")
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(venv / "bin" / "python"),
            "install",
            "--no-deps",
            "--no-index",
            str(wheel),
        ],
        root,
        dict(os.environ),
    )
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "MILVUS_URI", "LOOKUP_KNOWLEDGE_DATA_DIR", "TRACE_DB_URL")
    }
    env["LOOKUP_KNOWLEDGE_LITE_LINGER_S"] = "0"
    return venv / "bin", env


class TestWheel:
    def test_the_installed_package_is_the_wheel_and_carries_its_pipelines(self, installed, tmp_path):
        bin_dir, env = installed
        code = (
            "import pipelines, components, pipelines.settings as s; "
            "print(pipelines.__file__, components.__file__, s.DEFAULT_LOOKUP_PIPELINE.read_text()[:20])"
        )
        shown = _run([str(bin_dir / "python"), "-c", code], tmp_path, env).stdout
        assert str(REPO_ROOT) not in shown and shown.count("site-packages") == 2 and "# The lookup" in shown

    def test_index_ask_and_serve_from_another_folder(self, installed, tmp_path):
        bin_dir, env = installed
        cli = str(bin_dir / "lookup-knowledge")
        kb = write_tiny_kb(tmp_path / "kb")
        indexed = _run([cli, "index", "--knowledge", str(kb), "--data-dir", "d", "--json", "--quiet"], tmp_path, env)
        assert json.loads(indexed.stdout)["indexed"] == 3
        asked = _run([cli, "ask", "--json", "--data-dir", "d", "disk usage above 90 percent on a node"], tmp_path, env)
        answer = json.loads(asked.stdout)
        assert answer["evidenceStatus"] == "evidence" and answer["evidenceBlocks"][0]["source"] == "alerts/disk.md"
        port = free_port()
        serve = subprocess.Popen(
            [cli, "serve", "--transport", "http", "--port", str(port), "--data-dir", "d"],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            deadline = time.monotonic() + 120
            while True:
                assert serve.poll() is None, serve.stderr.read() if serve.stderr else ""
                try:
                    health = httpx.get(f"http://127.0.0.1:{port}/health", timeout=10)
                    break
                except httpx.TransportError:
                    assert time.monotonic() < deadline, "serve did not listen"
                    time.sleep(0.3)
            assert health.status_code == 200 and health.json()["documents"] == 3
        finally:
            serve.terminate()
            serve.wait(timeout=60)

    def test_the_shipped_pipelines_can_be_exported_to_edit(self, installed, tmp_path):
        bin_dir, env = installed
        _run([str(bin_dir / "lookup-knowledge"), "export-pipelines", "mine"], tmp_path, env)
        assert (tmp_path / "mine" / "pipelines.yaml").read_text() == (REPO_ROOT / "pipelines.yaml").read_text()
        assert (tmp_path / "mine" / "indexing.yaml").read_text() == (
            REPO_ROOT / "pipelines" / "indexing.yaml"
        ).read_text()
        again = subprocess.run(
            [str(bin_dir / "lookup-knowledge"), "export-pipelines", "mine"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        assert again.returncode == 2 and "already exist" in again.stderr  # an edited copy is never overwritten
