"""Secrets never leave the process, and nothing is written outside the data folder: real CLI runs, real stores."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from haystack.core.serialization import component_to_dict
from haystack.utils import Secret

from components.trace.trace_store import TraceStore
from pipelines.settings import Deployment
from tests.conftest import write_tiny_kb

REPO_ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.integration


#: a trace deadline no loaded machine misses
_PATIENT = ("--set", "recorder.timeout_s=30")


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "pipelines.entrypoints.cli", *args]
    full_env = {**os.environ, **env}
    return subprocess.run(
        command, cwd=REPO_ROOT, env=full_env, capture_output=True, text=True, timeout=300, check=False
    )


def _files_under(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.postgres
class TestSecrets:
    def test_milvus_token_and_database_passwords_are_never_printed_stored_or_logged(self, postgres_server, tmp_path):
        password, inline, token = (f"{kind}-{uuid.uuid4().hex}" for kind in ("pw", "inline", "tok"))
        url = postgres_server.create_database(f"s_{uuid.uuid4().hex[:12]}")
        with_inline = url.replace("postgres@", f"postgres:{inline}@")
        data, kb = tmp_path / "data", write_tiny_kb(tmp_path / "knowledge")
        secret_env = {"TRACE_DB_PASSWORD": password, "MILVUS_TOKEN": token, "LOOKUP_KNOWLEDGE_SPANS": "1"}
        plain, leaky = {**secret_env, "TRACE_DB_URL": url}, {**secret_env, "TRACE_DB_URL": with_inline}
        dead = "postgresql+psycopg://postgres@127.0.0.1:1/none"  # refused: the error path must not leak either
        runs = [
            _cli("index", "--knowledge", str(kb), "--data-dir", str(data), env=leaky),
            # the secrets are the test, not the trace deadline: under load a fresh process's first write missed the
            # 0.5 s default and spooled its row, so the database held one row of two
            _cli("ask", "disk full on a node", "--data-dir", str(data), *_PATIENT, env=plain),
            _cli("ask", "disk full", "--data-dir", str(data), "--json", *_PATIENT, env=leaky),
            _cli("ask", "zxqv plorn", "--data-dir", str(data), env={**secret_env, "TRACE_DB_URL": dead}),
            _cli("trace", "list", "--data-dir", str(data), "--json", env=leaky),
            _cli("trace", "show", "1", "--data-dir", str(data), env=plain),
        ]
        assert [run.returncode for run in runs] == [0, 0, 0, 0, 0, 0], [run.stderr[-2000:] for run in runs]
        store = TraceStore(url)
        try:
            rows = [row.model_dump_json() for row in store.list(limit=100)]
        finally:
            store.close()
        assert len(rows) == 2  # the two asks that reached this database
        outputs = [run.stdout + run.stderr for run in runs] + rows
        outputs += [content.decode("utf-8", "replace") for content in _files_under(data).values()]
        for secret in (password, inline, token):
            assert not [text for text in outputs if secret in text], secret

    def test_the_password_secret_reaches_the_connection_and_not_the_configuration(self, postgres_server, monkeypatch):
        from components.trace.trace_recorder import TraceRecorder

        monkeypatch.setenv("TRACE_DB_PASSWORD", "s3cret-from-env")
        recorder = TraceRecorder(database_url=postgres_server.url())
        assert recorder.store.engine.url.password == "s3cret-from-env"
        assert "s3cret-from-env" not in repr(component_to_dict(recorder, "recorder"))
        with pytest.raises(ValueError, match="Cannot serialize token-based secret"):  # Haystack's rule
            component_to_dict(TraceRecorder(database_password=Secret.from_token("x")), "recorder")
        recorder.store.close()


class TestPaths:
    def test_nothing_is_written_outside_the_data_folder(self, tmp_path, monkeypatch):
        from pipelines.entrypoints.cli import main

        monkeypatch.delenv("TRACE_DB_URL", raising=False)
        monkeypatch.delenv("MILVUS_URI", raising=False)
        kb = write_tiny_kb(tmp_path / "knowledge")
        (kb / "escape.md").write_text("---\nid: ../../../outside\ntitle: x\n---\n# Escape\n\nbody\n", encoding="utf-8")
        before = _files_under(tmp_path)
        data = str(tmp_path / "data")
        assert main(["index", "--knowledge", str(kb), "--data-dir", data, "--quiet"]) == 0
        assert main(["ask", "disk full", "--data-dir", data, "--session", "../../s"]) == 0
        assert main(["trace", "list", "--data-dir", data]) == 0
        after = {name: content for name, content in _files_under(tmp_path).items() if not name.startswith("data/")}
        assert after == before  # the knowledge folder untouched, nothing new beside it

    @pytest.mark.parametrize("name", ["traces.db", "trace_spool.jsonl", "knowledge_index.json", "milvus.db"])
    def test_a_data_file_linked_out_of_the_folder_is_refused(self, tmp_path, name):
        data = tmp_path / "data"
        data.mkdir()
        (data / name).symlink_to(tmp_path / "elsewhere")
        with pytest.raises(ValueError, match=f"{name} is a link to .*elsewhere"):
            Deployment.resolve(data)
