"""The Milvus Lite host of a data folder: started once, shared, private, stopped when unused, replaced when gone."""

from __future__ import annotations

import json
import os
import signal
import stat
import time
from pathlib import Path

import pytest
from pymilvus import MilvusClient

from components.store.lite_host import (
    LINGER_ENV,
    HostPaths,
    LiteFolderBusyError,
    LiteHostError,
    LiteHostLease,
    linger_seconds,
)
from components.store.milvus_chunk_store import MilvusChunkStore
from components.store.schema import CollectionSchema

pytestmark = pytest.mark.integration


def _state(db: Path) -> dict:
    try:
        return json.loads(HostPaths.of(db).state.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}


def _wait_until(predicate, timeout: float = 60, what: str = "the condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout} s"
        time.sleep(0.05)


@pytest.fixture
def db(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv(LINGER_ENV, "0")  # a host stops as soon as its last lease is gone
    return tmp_path / "data" / "milvus.db"


class TestLiteHostLease:
    def test_one_host_serves_every_lease_privately_and_stops_when_none_is_left(self, db):
        first = LiteHostLease.acquire(db)
        second = LiteHostLease.acquire(db)
        pid = _state(db)["pid"]
        try:
            assert first.uri == second.uri and first.held and second.held
            MilvusClient(uri=first.uri).create_collection("shared", dimension=4)
            assert "shared" in MilvusClient(uri=second.uri).list_collections()
            folder = HostPaths.of(db).folder
            assert stat.S_IMODE(folder.stat().st_mode) == 0o700 and stat.S_IMODE(folder.parent.stat().st_mode) == 0o700
            for sock in (HostPaths.of(db).grpc_socket, HostPaths.of(db).lease_socket):
                assert sock.is_socket() and not stat.S_IMODE(sock.stat().st_mode) & 0o077  # the owner's only
            first.release()
            time.sleep(1)
            assert _state(db).get("pid") == pid  # a lease is still held
        finally:
            first.release()
            second.release()
        _wait_until(lambda: not _state(db), what="the host stopping")
        _wait_until(lambda: not _alive(pid), what="the host process ending")

    def test_a_command_arriving_while_the_host_stops_waits_and_gets_the_next_host(self, db):
        """The host closes the data (a flush) after it stopped taking leases; a new host must not find it locked."""
        lease = LiteHostLease.acquire(db)
        client = MilvusClient(uri=lease.uri)
        client.create_collection("rows", dimension=4)
        client.insert("rows", [{"id": i, "vector": [float(i), 1.0, 0.0, 0.0]} for i in range(20_000)])
        client.close()
        old = _state(db)["pid"]
        lease.release()
        _wait_until(lambda: _state(db).get("status") != "ready", what="the host retiring")
        again = LiteHostLease.acquire(db)  # while it is stopping, or just after
        try:
            assert _state(db)["pid"] != old
            client = MilvusClient(uri=again.uri)
            client.load_collection("rows")
            assert client.query("rows", filter="id >= 0", output_fields=["id"], limit=3)
        finally:
            again.release()

    def test_a_host_that_was_killed_is_replaced_at_the_next_call(self, db):
        store = MilvusChunkStore(str(db), CollectionSchema("chunks", dimension=4, crosslingual_field=""))
        try:
            store.ensure_collection()
            killed = _state(db)["pid"]
            os.kill(killed, signal.SIGKILL)
            _wait_until(lambda: not _alive(killed), what="the host dying")
            assert store.exists()  # the lease saw its host end: a new one was started and asked
            assert _state(db)["pid"] != killed
        finally:
            store.close()

    def test_a_folder_held_by_another_process_is_refused_in_one_line(self, db, tmp_path):
        import subprocess
        import sys

        db.parent.mkdir(parents=True)
        holder = subprocess.Popen(  # someone's own script opens the folder in its process and keeps it
            [
                sys.executable,
                "-c",
                "import sys, time\nfrom milvus_lite import MilvusLite\nMilvusLite(sys.argv[1])\n"
                "print('open', flush=True)\ntime.sleep(120)",
                str(db),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert holder.stdout is not None and holder.stdout.readline().strip() == "open"
            started = time.monotonic()
            with pytest.raises(LiteFolderBusyError, match="open in another process") as refused:
                LiteHostLease.acquire(db)
            assert "\n" not in str(refused.value)
            with pytest.raises(LiteFolderBusyError):  # remembered for a moment: not started again by every caller
                LiteHostLease.acquire(db)
            assert time.monotonic() - started < 30
        finally:
            holder.kill()
            holder.wait(timeout=20)

    def test_a_host_that_cannot_open_the_data_says_why(self, tmp_path, monkeypatch):
        monkeypatch.setenv(LINGER_ENV, "0")
        db = tmp_path / "milvus.db"
        db.write_text("a file where the data folder should be")
        with pytest.raises(LiteHostError, match="could not start") as failed:
            LiteHostLease.acquire(db, timeout_s=60)
        assert "\n" not in str(failed.value)


class TestLingerSeconds:
    @pytest.mark.parametrize(("raw", "expected"), [("", 60.0), ("0", 0.0), ("2.5", 2.5)])
    def test_read_from_the_environment(self, monkeypatch, raw, expected):
        monkeypatch.setenv(LINGER_ENV, raw)
        assert linger_seconds() == expected

    @pytest.mark.parametrize("raw", ["-1", "soon", "nan"])
    def test_a_bad_value_is_refused_naming_the_variable(self, monkeypatch, raw):
        monkeypatch.setenv(LINGER_ENV, raw)
        with pytest.raises(ValueError, match=LINGER_ENV):
            linger_seconds()


def _alive(pid: int) -> bool:
    """Whether a process still runs: a zombie whose threads have all ended (its files closed) does not."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    proc = Path(f"/proc/{pid}")
    try:
        zombie = (proc / "stat").read_text().split(") ", 1)[1].startswith("Z")
        return not (zombie and len(os.listdir(proc / "task")) <= 1)
    except (FileNotFoundError, ProcessLookupError):
        return False
