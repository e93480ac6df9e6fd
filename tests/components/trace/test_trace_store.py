from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import JSON, Boolean, Column, DateTime, Float, Integer, MetaData, String, Table, create_engine, inspect
from sqlmodel import SQLModel

from components.trace import migrate
from components.trace.session_key import session_key
from components.trace.trace_store import ToolInvocation, TraceStore, redact_url, storable

REPO_ROOT = Path(__file__).resolve().parents[3]


def _row(
    query: str = "q",
    *,
    session_id: str | None = "s1",
    found: bool = True,
    keys: list[str] | None = None,
    principal: str | None = None,
):
    details: dict[str, Any] = {"evidence_blocks": [{"evidence_key": k, "preview": "p"} for k in (keys or [])]}
    return ToolInvocation(
        tool_name="lookup_knowledge",
        session_id=session_id,
        principal=principal,
        query=query,
        found=found,
        status="evidence" if found else "no_evidence",
        retrieval_layer="L1",
        candidate_count=len(keys or []),
        evidence_block_count=len(keys or []),
        retrieval_details=details,
    )


def _blocked_url(tmp_path: Path) -> tuple[str, Path]:
    """A SQLite URL under a regular file: the database cannot be created until the file is removed."""
    blocker = tmp_path / "blocker"
    blocker.write_text("not a directory")
    return f"sqlite:///{blocker}/sub/traces.db", blocker


def _sqlite_store_with_a_row(tmp_path: Path) -> tuple[TraceStore, Path]:
    """A SQLite trace store (0.2 s busy timeout, spool after a failure for 30 s) holding one row, `before`."""
    db = tmp_path / "traces.db"
    store = TraceStore(f"sqlite:///{db}", spool_path=str(tmp_path / "spool.jsonl"), timeout_s=0.2, retry_after_s=30)
    assert isinstance(store.write(_row("before")), int)
    return store, db


@pytest.fixture
def store(trace_url, tmp_path):
    s = TraceStore(trace_url, spool_path=str(tmp_path / "spool.jsonl"), retry_after_s=0)
    yield s
    s.close()


def _keys(store: TraceStore, session_id: str) -> set[str]:
    keys, error = store.session_memory(session_id)
    assert error is None
    return keys


class TestTraceStore:
    def test_init_stores_settings_without_connecting(self, tmp_path):
        url = f"sqlite:///{tmp_path}/lazy/traces.db"
        s = TraceStore(url, spool_path=str(tmp_path / "spool.jsonl"))
        assert s.database_url == url
        assert s.spool_path == tmp_path / "spool.jsonl"
        assert TraceStore(url).spool_path is None
        assert not (tmp_path / "lazy").exists()

    @pytest.mark.integration
    def test_first_use_creates_folder_and_table(self, tmp_path):
        s = TraceStore(f"sqlite:///{tmp_path}/a/b/traces.db")
        assert s.list() == []
        assert (tmp_path / "a" / "b" / "traces.db").is_file()
        s.close()

    @pytest.mark.integration
    def test_write_and_get(self, store):
        row_id = store.write(_row("disk full", keys=["a.md#0"]))
        assert isinstance(row_id, int)
        row = store.get(row_id)
        assert row is not None
        assert row.id == row_id
        assert row.tool_name == "lookup_knowledge"
        assert row.session_id == "s1"
        assert row.query == "disk full"
        assert row.found is True
        assert row.status == "evidence"
        assert row.retrieval_layer == "L1"
        assert row.candidate_count == 1
        assert row.retrieval_details == {"evidence_blocks": [{"evidence_key": "a.md#0", "preview": "p"}]}
        assert row.created_at is not None

    @pytest.mark.integration
    def test_get_missing_is_none(self, store):
        store.write(_row())
        assert store.get(9999) is None

    @pytest.mark.integration
    def test_rows_survive_a_new_store(self, trace_url):
        url = trace_url
        first = TraceStore(url)
        row_id = first.write(_row("persisted"))
        first.close()
        second = TraceStore(url)
        row = second.get(row_id)
        assert row is not None and row.query == "persisted"
        second.close()

    @pytest.mark.integration
    def test_list_newest_first_with_limit(self, store):
        ids = [store.write(_row(f"q{i}")) for i in range(5)]
        assert ids == sorted(ids)
        rows = store.list()
        assert [r.query for r in rows] == ["q4", "q3", "q2", "q1", "q0"]
        assert [r.query for r in store.list(limit=2)] == ["q4", "q3"]

    @pytest.mark.integration
    def test_list_filters_by_session(self, store):
        store.write(_row("a1", session_id="a"))
        store.write(_row("b1", session_id="b"))
        store.write(_row("a2", session_id="a"))
        store.write(_row("none", session_id=None))
        assert [r.query for r in store.list(session_id="a")] == ["a2", "a1"]
        assert [r.query for r in store.list(session_id="b")] == ["b1"]
        assert store.list(session_id="zzz") == []
        assert len(store.list()) == 4
        # the limit applies to the session's rows, not to all rows
        store.write(_row("b2", session_id="b"))
        store.write(_row("b3", session_id="b"))
        assert [r.query for r in store.list(limit=1, session_id="a")] == ["a2"]

    @pytest.mark.integration
    def test_session_memory(self, store):
        store.write(_row(session_id="s1", keys=["a.md#0", "b.md#1"]))
        store.write(_row(session_id="s1", keys=["c.md#0"]))
        store.write(_row(session_id="s1", found=False, keys=["lost.md#0"]))
        store.write(_row(session_id="s2", keys=["other.md#0"]))
        assert _keys(store, "s1") == {"a.md#0", "b.md#1", "c.md#0"}
        assert _keys(store, "s2") == {"other.md#0"}
        assert _keys(store, "nobody") == set()

    @pytest.mark.integration
    def test_session_memory_holds_the_blocks_text_keys_too(self, store):
        row = _row(session_id="s1")
        row.retrieval_details = {
            "evidence_blocks": [
                {"evidence_key": "docs/a.md#3", "text_key": "text:docs/a.md|00aa"},
                {"evidence_key": "b.md#0", "text_key": None},
                {"evidence_key": "c.md#0", "text_key": ["not", "a", "key"]},
            ]
        }
        store.write(row)
        assert _keys(store, "s1") == {"docs/a.md#3", "text:docs/a.md|00aa", "b.md#0", "c.md#0"}

    @pytest.mark.integration
    def test_session_memory_ignores_rows_without_blocks(self, store):
        store.write(_row(session_id="s1"))
        bare = _row(session_id="s1")
        bare.retrieval_details = {}
        store.write(bare)
        odd = _row(session_id="s1")
        odd.retrieval_details = {"evidence_blocks": [{"preview": "no key"}, {"evidence_key": ""}]}
        store.write(odd)
        assert _keys(store, "s1") == set()

    @pytest.mark.integration
    def test_unavailable_database_spools_the_row(self, tmp_path):
        url, _ = _blocked_url(tmp_path)
        spool = tmp_path / "spool" / "trace_spool.jsonl"
        s = TraceStore(url, spool_path=str(spool))
        assert s.write(_row("spooled", keys=["a.md#0"])) is None
        lines = spool.read_text(encoding="utf-8").splitlines()
        assert len(lines) == 1
        data = json.loads(lines[0])
        assert data["query"] == "spooled"
        assert data["session_id"] == "s1"
        assert data["found"] is True
        assert data["retrieval_details"]["evidence_blocks"][0]["evidence_key"] == "a.md#0"
        assert s.write(_row("spooled again")) is None
        assert len(spool.read_text(encoding="utf-8").splitlines()) == 2
        s.close()

    @pytest.mark.integration
    def test_next_successful_write_replays_the_spool(self, tmp_path):
        url, blocker = _blocked_url(tmp_path)
        spool = tmp_path / "spool.jsonl"
        s = TraceStore(url, spool_path=str(spool), retry_after_s=0)
        assert s.write(_row("first")) is None
        assert s.write(_row("second")) is None
        blocker.unlink()  # the database comes back
        row_id = s.write(_row("third"))
        assert isinstance(row_id, int)
        assert not spool.exists()
        assert [r.query for r in s.list()] == ["third", "second", "first"]
        assert s.get(row_id).query == "third"
        s.close()

    @pytest.mark.integration
    def test_spooled_rows_count_as_returned_evidence(self, tmp_path):
        url, _ = _blocked_url(tmp_path)
        spool = tmp_path / "spool.jsonl"
        down = TraceStore(url, spool_path=str(spool))
        down.write(_row(session_id="s1", keys=["spooled.md#0"]))
        down.write(_row(session_id="s1", found=False, keys=["notfound.md#0"]))
        down.write(_row(session_id="s2", keys=["s2.md#0"]))
        up = TraceStore(f"sqlite:///{tmp_path}/traces.db", spool_path=str(spool))
        assert spool.exists()
        assert _keys(up, "s1") == {"spooled.md#0"}
        assert _keys(up, "s2") == {"s2.md#0"}
        assert spool.exists()  # reading does not consume the spool
        up.close()
        down.close()

    @pytest.mark.integration
    def test_close_then_reuse(self, store):
        store.write(_row("before"))
        store.close()
        store.write(_row("after"))
        assert [r.query for r in store.list()] == ["after", "before"]

    def test_redact_url_hides_password(self):
        redacted = redact_url("postgresql://u:secret@h/db")
        assert "secret" not in redacted
        assert redacted.startswith("postgresql://u:")
        assert redacted.endswith("@h/db")

    def test_redact_url_hides_passwords_in_query_parameters(self):
        redacted = redact_url("postgresql+psycopg://u@h/db?password=Pw1&sslpassword=Pw2&PWD=Pw3&sslmode=require")
        assert not any(s in redacted for s in ("Pw1", "Pw2", "Pw3")) and "sslmode=require" in redacted

    def test_redact_url_keeps_urls_without_password(self):
        assert redact_url("sqlite:///data/traces.db") == "sqlite:///data/traces.db"

    def test_redact_url_unparseable(self):
        redacted = redact_url("::not a url::")
        assert "not a url" not in redacted
        assert redacted == "<unparseable database url>"


def _spool_line(query: str, invocation_id: str | None = None) -> str:
    row = _row(query)
    if invocation_id:
        row.invocation_id = invocation_id
    return row.model_dump_json()


class TestUnencodableText:
    @pytest.mark.integration
    def test_surrogates_and_nul_are_stored_escaped(self, store):
        row = _row("disk \udcff\udcfe full\x00", session_id="s\udcff", keys=["a\udcff.md#0"])
        row.query_chars = 16
        row.error = "bad \udcff"
        row_id = store.write(row)
        assert isinstance(row_id, int)
        stored = store.get(row_id)
        assert stored.query == "disk \\udcff\\udcfe full\\x00"
        assert stored.query_chars == 16
        assert stored.session_id == "s\\udcff"
        assert stored.error == "bad \\udcff"
        assert stored.retrieval_details["evidence_blocks"][0]["evidence_key"] == "a\\udcff.md#0"
        # the session is found by its original id: the escape is applied on both sides
        assert _keys(store, "s\udcff") == {"a\\udcff.md#0"}
        assert [r.id for r in store.list(session_id="s\udcff")] == [row_id]

    def test_write_does_not_mutate_the_row(self, tmp_path):
        store = TraceStore(f"sqlite:///{tmp_path}/t.db")
        row = _row("q\udcff")
        store.write(row)
        assert row.query == "q\udcff"
        store.close()


class TestSpool:
    @pytest.mark.integration
    def test_a_damaged_line_is_moved_aside_and_later_writes_go_on(self, store, tmp_path, caplog):
        spool = tmp_path / "spool.jsonl"
        spool.write_text(
            _spool_line("kept-1") + "\n" + '{"tool_name": "lookup_kn' + "\n" + _spool_line("kept-2") + "\n"
        )
        assert isinstance(store.write(_row("live")), int)
        assert sorted(r.query for r in store.list()) == ["kept-1", "kept-2", "live"]
        rejected = spool.with_name("spool.jsonl.rejected")
        assert rejected.read_text(encoding="utf-8") == '{"tool_name": "lookup_kn\n'
        assert "1 damaged lines" in caplog.text
        assert not spool.exists()
        assert isinstance(store.write(_row("after")), int)
        assert _keys(store, "s1") == set()  # session memory still works

    @pytest.mark.integration
    def test_a_row_the_database_refuses_is_moved_aside_not_retried_forever(self, store, tmp_path):
        spool = tmp_path / "spool.jsonl"
        refused = json.dumps({"tool_name": "lookup_knowledge", "query": None, "found": "maybe"})  # not a valid row
        spool.write_text(_spool_line("good-1") + "\n" + refused + "\n" + _spool_line("good-2") + "\n")
        report = store.replay()
        assert (report.stored, report.rejected, report.error) == (2, 1, None)
        assert sorted(r.query for r in store.list()) == ["good-1", "good-2"]
        assert json.loads(spool.with_name("spool.jsonl.rejected").read_text())["found"] == "maybe"
        assert not spool.exists()
        assert store.replay().files == 0

    @pytest.mark.integration
    def test_a_row_replayed_twice_is_stored_once(self, store, tmp_path):
        """A crash between the insert and the spool's removal leaves the spool as it was: replay it again."""
        spool = tmp_path / "spool.jsonl"
        lines = [_spool_line(f"q{i}", invocation_id=f"id-{i}") for i in range(5)]
        spool.write_text("\n".join(lines) + "\n")
        first = store.replay()
        assert (first.stored, first.duplicates, first.rejected) == (5, 0, 0)
        spool.write_text("\n".join(lines) + "\n")  # as if the process died before removing it
        second = store.replay()
        assert (second.stored, second.duplicates) == (0, 5)
        assert store.count() == 5

    @pytest.mark.integration
    def test_a_stale_claim_of_a_dead_process_is_replayed(self, store, tmp_path):
        claimed = tmp_path / "spool.jsonl.999-dead.claimed"
        claimed.write_text(_spool_line("orphan", invocation_id="orphan-1") + "\n")
        os.utime(claimed, (0, 0))
        assert store.replay().stored == 1
        assert not claimed.exists()
        assert [r.query for r in store.list()] == ["orphan"]

    @pytest.mark.integration
    def test_replay_into_an_unavailable_database_keeps_the_rows(self, tmp_path):
        url, blocker = _blocked_url(tmp_path)
        spool = tmp_path / "spool.jsonl"
        spool.write_text(_spool_line("waiting", invocation_id="w-1") + "\n")
        s = TraceStore(url, spool_path=str(spool))
        report = s.replay()
        assert report.error and report.stored == 0
        assert [r["query"] for r in s.spool.rows()] == ["waiting"]
        blocker.unlink()
        assert s.replay().stored == 1
        assert [r.query for r in s.list()] == ["waiting"]
        s.close()

    @pytest.mark.integration
    def test_several_processes_replaying_one_spool_store_each_row_once(self, trace_url, tmp_path):
        spool = tmp_path / "spool.jsonl"
        rows = 3000
        spool.write_text("".join(_spool_line(f"q{i}") + "\n" for i in range(rows)))
        TraceStore(trace_url).close()  # migrate first, so the processes race on the rows, not on the schema
        # the race on the rows is the test, not the deadline: on a loaded machine four processes starting at once
        # missed the 0.5 s default for their first connection, found the database "unavailable" and stored nothing
        script = (
            "import sys\nfrom components.trace.trace_store import TraceStore\n"
            "s = TraceStore(sys.argv[1], spool_path=sys.argv[2], retry_after_s=0, timeout_s=30)\n"
            "print(s.replay().stored)\n"
        )
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", script, trace_url, str(spool)],
                cwd=REPO_ROOT,
                stdout=subprocess.PIPE,
                text=True,
            )
            for _ in range(4)
        ]
        stored = [int(p.communicate(timeout=120)[0].strip() or 0) for p in procs]
        assert all(p.returncode == 0 for p in procs)
        checker = TraceStore(trace_url)
        assert checker.count() == rows
        assert sum(stored) == rows
        checker.close()


class TestBoundedCost:
    @pytest.mark.integration
    def test_a_locked_sqlite_database_costs_one_timeout_then_nothing(self, tmp_path):
        s, db = _sqlite_store_with_a_row(tmp_path)
        holder = sqlite3.connect(db, timeout=0)
        holder.execute("BEGIN EXCLUSIVE")  # another process holds the write lock
        try:
            start = time.perf_counter()
            assert s.write(_row("locked-1")) is None
            first = time.perf_counter() - start
            start = time.perf_counter()
            assert s.write(_row("locked-2")) is None
            second = time.perf_counter() - start
        finally:
            holder.rollback()
            holder.close()
        assert first < 1.5  # the 0.2 s busy timeout, not SQLite's 5 s default
        assert second < 0.1  # straight to the spool while the database is marked down
        report = s.replay()
        assert report.stored == 2
        assert sorted(r.query for r in s.list()) == ["before", "locked-1", "locked-2"]
        s.close()


class TestMigrations:
    @pytest.mark.integration
    def test_a_database_from_before_migrations_is_upgraded_and_keeps_its_rows(self, trace_url):
        engine = create_engine(trace_url)
        legacy = MetaData()
        Table(
            "tool_invocation",
            legacy,
            Column("id", Integer, primary_key=True),
            Column("created_at", DateTime(timezone=True), nullable=False, index=True),
            Column("tool_name", String, nullable=False, index=True),
            Column("session_id", String, index=True),
            Column("query", String, nullable=False),
            Column("found", Boolean, nullable=False),
            Column("status", String, nullable=False),
            Column("retrieval_layer", String, nullable=False),
            Column("fallback_reason", String),
            Column("candidate_count", Integer, nullable=False),
            Column("evidence_block_count", Integer, nullable=False),
            Column("latency_ms", Float, nullable=False),
            Column("error", String),
            Column("retrieval_details", JSON),
        )
        legacy.create_all(engine)
        with engine.begin() as conn:
            conn.execute(
                legacy.tables["tool_invocation"].insert(),
                {
                    "created_at": datetime.now(UTC),
                    "tool_name": "lookup_knowledge",
                    "query": "old row",
                    "found": False,
                    "status": "no_evidence",
                    "retrieval_layer": "L1",
                    "candidate_count": 0,
                    "evidence_block_count": 0,
                    "latency_ms": 1.0,
                    "retrieval_details": {},
                },
            )
        store = TraceStore(trace_url)
        assert [r.query for r in store.list()] == ["old row"]
        assert store.list()[0].invocation_id is None
        assert store.list()[0].principal is None  # an anonymous caller's
        assert isinstance(store.write(_row("new row")), int)
        with store.engine.connect() as conn:
            assert migrate.current_revision(conn) == migrate.HEAD
            context = MigrationContext.configure(conn, opts={"compare_type": True})
            diff = compare_metadata(context, SQLModel.metadata)
        assert [d for d in diff if "tool_invocation" in str(d)] == []  # the model and the migrations agree
        store.close()
        engine.dispose()

    def test_head_is_the_newest_migration_script(self):
        from alembic.script import ScriptDirectory

        scripts = ScriptDirectory.from_config(migrate.alembic_config(None))
        assert scripts.get_current_head() == migrate.HEAD

    @pytest.mark.integration
    def test_a_database_at_head_is_not_migrated_again(self, trace_url, monkeypatch):
        store = TraceStore(trace_url)
        assert isinstance(store.write(_row("first")), int)  # creates the table through Alembic
        store.close()

        from alembic import command

        def no_alembic(*args: Any, **kwargs: Any) -> None:
            raise AssertionError("Alembic ran against a database at HEAD")

        monkeypatch.setattr(command, "upgrade", no_alembic)
        monkeypatch.setattr(command, "stamp", no_alembic)
        again = TraceStore(trace_url)
        assert isinstance(again.write(_row("second")), int)
        assert sorted(r.query for r in again.list()) == ["first", "second"]
        assert migrate.upgrade(again.engine) == migrate.HEAD
        again.close()


class TestWriteAhead:
    @pytest.mark.integration
    def test_a_reader_does_not_hold_up_a_row(self, tmp_path):
        s, db = _sqlite_store_with_a_row(tmp_path)
        reader = sqlite3.connect(db, timeout=0)
        reader.execute("BEGIN")
        assert reader.execute("SELECT count(*) FROM tool_invocation").fetchone() == (1,)  # a read in progress
        try:
            started = time.perf_counter()
            assert isinstance(s.write(_row("while reading")), int)  # stored, not spooled
            assert time.perf_counter() - started < 0.15
        finally:
            reader.rollback()
            reader.close()
        assert sqlite3.connect(db).execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert not (tmp_path / "spool.jsonl").exists() or not (tmp_path / "spool.jsonl").read_text().strip()
        s.close()

    @pytest.mark.integration
    def test_a_row_outlives_the_process_that_wrote_it_being_killed(self, tmp_path):
        url = f"sqlite:///{tmp_path / 'traces.db'}"
        script = (
            "import os, signal, sys\n"
            "from components.trace.trace_store import TraceStore\n"
            "from tests.components.trace.test_trace_store import _row\n"
            f"row_id = TraceStore({url!r}).write(_row('killed right after'))\n"
            "print(row_id, flush=True)\n"
            "os.kill(os.getpid(), signal.SIGKILL)\n"
        )
        repo = Path(__file__).resolve().parents[3]
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=repo, check=False)
        assert done.returncode == -9, done.stderr
        row_id = int(done.stdout.strip())
        store = TraceStore(url)
        assert [(r.id, r.query) for r in store.list()] == [(row_id, "killed right after")]
        store.close()


def _spooled_garbage(session_id: str = "s1") -> str:
    """A spooled row of the wrong shape: `retrieval_details` is not an object."""
    data = json.loads(_row("garbage", session_id=session_id).model_dump_json())
    data["retrieval_details"] = "garbage"
    return json.dumps(data)


class TestExactSessionMemory:
    @pytest.mark.integration
    def test_a_spooled_row_of_the_wrong_shape_is_skipped_while_the_database_is_down(self, tmp_path, caplog):
        url, _ = _blocked_url(tmp_path)
        spool = tmp_path / "spool.jsonl"
        good = _row("good", keys=["good.md#0"]).model_dump_json()
        odd = json.loads(_row("odd", keys=[]).model_dump_json())
        odd["retrieval_details"] = {"evidence_blocks": 7}  # the right type outside, the wrong one inside
        spool.write_text(_spooled_garbage() + "\n" + good + "\n" + json.dumps(odd) + "\n")
        store = TraceStore(url, spool_path=str(spool))
        keys, error = store.session_memory("s1")
        assert keys == {"good.md#0"}
        assert error and "unavailable" in error
        assert "1 rows of the wrong shape skipped" in caplog.text
        store.close()

    @pytest.mark.integration
    def test_the_replay_moves_a_row_of_the_wrong_shape_aside_and_stores_the_rest(self, store, tmp_path, caplog):
        spool = tmp_path / "spool.jsonl"
        spool.write_text(_spooled_garbage() + "\n" + _spool_line("kept", invocation_id="k-1") + "\n")
        report = store.replay()
        assert (report.stored, report.rejected, report.error) == (1, 1, None)
        assert [r.query for r in store.list()] == ["kept"]
        assert json.loads(spool.with_name("spool.jsonl.rejected").read_text())["retrieval_details"] == "garbage"
        assert "1 rows of the wrong shape moved aside" in caplog.text

    @pytest.mark.integration
    def test_sessions_that_differ_after_the_stored_characters_never_share_memory(self, store):
        first, second = "x" * 3000 + "-first", "x" * 3000 + "-second"
        assert isinstance(store.write(_row("long 1", session_id=first, keys=["first.md#0"])), int)
        assert isinstance(store.write(_row("long 2", session_id=second, keys=["second.md#0"])), int)
        assert _keys(store, first) == {"first.md#0"}
        assert _keys(store, second) == {"second.md#0"}
        assert _keys(store, "x" * 200) == set()
        assert [r.query for r in store.list(session_id=first)] == ["long 1"]
        stored = store.list(session_id=second)[0]
        assert stored.session_id == "x" * 200 and stored.session_key != store.list(session_id=first)[0].session_key

    @pytest.mark.integration
    def test_a_session_is_its_normalized_id(self, store):
        store.write(_row("padded", session_id="  s1\t", keys=["a.md#0"]))
        assert _keys(store, "s1") == {"a.md#0"}
        assert [r.session_id for r in store.list(session_id=" s1 ")] == ["s1"]

    @pytest.mark.integration
    def test_spooled_rows_of_long_sessions_are_matched_by_the_whole_id(self, tmp_path):
        url, _ = _blocked_url(tmp_path)
        spool = tmp_path / "spool.jsonl"
        down = TraceStore(url, spool_path=str(spool))
        down.write(_row(session_id="y" * 250 + "1", keys=["one.md#0"]))
        assert _keys_partial(down, "y" * 250 + "1") == {"one.md#0"}
        assert _keys_partial(down, "y" * 250 + "2") == set()
        down.close()

    @pytest.mark.integration
    def test_rows_from_before_the_session_key_are_found_by_their_session(self, trace_url):
        engine = create_engine(trace_url)
        migrate.upgrade(engine, "0002")
        table = Table("tool_invocation", MetaData(), autoload_with=engine)
        assert "session_key" not in table.c
        with engine.begin() as conn:
            for session_id, key in (("s1", "old-1.md#0"), ("s1", "old-2.md#0"), ("s2", "other.md#0"), (None, "n.md#0")):
                conn.execute(
                    table.insert(),
                    {
                        "invocation_id": uuid.uuid4().hex,
                        "created_at": datetime.now(UTC),
                        "tool_name": "lookup_knowledge",
                        "session_id": session_id,
                        "query": "old",
                        "found": True,
                        "status": "evidence",
                        "retrieval_layer": "L1",
                        "candidate_count": 1,
                        "evidence_block_count": 1,
                        "latency_ms": 1.0,
                        "retrieval_details": {"evidence_blocks": [{"evidence_key": key}]},
                    },
                )
        engine.dispose()
        store = TraceStore(trace_url)
        assert _keys(store, "s1") == {"old-1.md#0", "old-2.md#0"}
        assert _keys(store, "s2") == {"other.md#0"}
        assert len(store.list(session_id="s1")) == 2
        with store.engine.connect() as conn:
            assert migrate.current_revision(conn) == migrate.HEAD
        store.close()


def _keys_partial(store: TraceStore, session_id: str) -> set[str]:
    keys, error = store.session_memory(session_id)
    assert error is not None  # the database is down: the spool's rows alone
    return keys


class TestMemoryQueue:
    @pytest.mark.integration
    def test_a_row_neither_database_nor_spool_takes_waits_in_memory_and_goes_first_when_one_can(self, tmp_path):
        url, blocker = _blocked_url(tmp_path)
        s = TraceStore(url, retry_after_s=0)  # no spool: the database is the only place
        first = s.record(_row("first"))
        second = s.record(_row("second"))
        assert (first.row_id, second.row_id) == (None, None)
        assert first.error and "kept in memory (1 waiting)" in first.error and "spool not configured" in first.error
        assert "kept in memory (2 waiting)" in second.error
        blocker.unlink()
        third = s.record(_row("third"))
        assert isinstance(third.row_id, int) and third.error is None
        assert [r.query for r in s.list()] == ["third", "second", "first"]
        assert sorted(r.id for r in s.list()) == [r.id for r in reversed(s.list())]  # stored in their order
        s.close()

    @pytest.mark.integration
    def test_the_memory_queue_is_bounded_and_a_row_beyond_it_is_in_the_error_log(self, tmp_path, caplog):
        url, blocker = _blocked_url(tmp_path)
        s = TraceStore(url, retry_after_s=0, max_memory_rows=2)
        assert [s.record(_row(f"q{i}")).error.startswith("trace row kept in memory") for i in range(2)] == [True] * 2
        lost = s.record(_row("beyond"))
        assert lost.row_id is None and "memory queue full (2 rows)" in lost.error
        assert "Trace row lost" in caplog.text and '"query":"beyond"' in caplog.text
        blocker.unlink()
        s.close()  # writes what waits in memory now that it can
        assert sorted(r.query for r in TraceStore(url).list()) == ["q0", "q1"]

    @pytest.mark.integration
    def test_rows_in_memory_go_to_the_spool_once_it_can_be_written(self, tmp_path):
        url, _ = _blocked_url(tmp_path)
        spool_dir = tmp_path / "spool-blocker"
        spool_dir.write_text("a file where the spool's folder should be")
        s = TraceStore(url, spool_path=str(spool_dir / "spool.jsonl"), retry_after_s=0)
        assert "kept in memory" in s.record(_row("waited")).error
        spool_dir.unlink()
        assert s.record(_row("next")).error is None
        assert [r["query"] for r in s.spool.rows()] == ["waited", "next"]
        s.close()


class TestBoundedWaits:
    @pytest.mark.integration
    def test_a_spooled_copy_of_a_row_a_late_write_stored_is_a_duplicate(self, store, tmp_path):
        """A write given up on may still commit; its spooled copy is then skipped by its invocation id."""
        row = storable(_row("late"))
        assert isinstance(store.write(row), int)
        (tmp_path / "spool.jsonl").write_text(row.model_dump_json() + "\n")
        report = store.replay()
        assert (report.stored, report.duplicates) == (0, 1)
        assert store.count() == 1

    @pytest.mark.integration
    def test_a_large_spool_replayed_behind_new_writes_ends_with_every_row_stored_once(self, tmp_path):
        db = tmp_path / "traces.db"
        spool = tmp_path / "spool.jsonl"
        spool.write_text("".join(_spool_line(f"spooled {i}") + "\n" for i in range(1500)))
        s = TraceStore(f"sqlite:///{db}", spool_path=str(spool), retry_after_s=0)
        ids = [s.write(_row(f"live {i}")) for i in range(5)]
        assert all(isinstance(i, int) for i in ids)  # no live row waited for the whole spool
        assert _wait(lambda: not spool.exists() and not list(tmp_path.glob("spool.jsonl.*.claimed")), 30)
        assert s.count() == 1505
        s.close()


def _wait(check, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return check()


def _principal_keys(store: TraceStore, session_id: str, principal: str | None) -> set[str]:
    keys, error = store.session_memory(session_id, principal)
    assert error is None
    return keys


def _old_spool_line(query: str, session_id: str, keys: list[str], *, with_session_key: bool = True) -> str:
    """A row as the spool held it before principals existed: no `principal` (nor, older still, `session_key`)."""
    data = json.loads(_row(query, session_id=session_id, keys=keys).model_dump_json())
    del data["principal"]
    if with_session_key:
        data["session_key"] = session_key(session_id)
    else:
        del data["session_key"]
    return json.dumps(data)


class TestPrincipals:
    @pytest.mark.integration
    def test_the_principal_is_stored_and_part_of_the_session_key(self, store):
        alice = store.get(store.write(_row("mine", principal="alice")))
        anonymous = store.get(store.write(_row("anyone's")))
        empty = store.get(store.write(_row("anyone's too", principal="")))
        assert (alice.principal, anonymous.principal, empty.principal) == ("alice", None, None)
        assert alice.session_key == session_key("s1", "alice")
        assert anonymous.session_key == empty.session_key == session_key("s1") == hashlib.sha256(b"s1").hexdigest()
        assert alice.session_key != anonymous.session_key

    @pytest.mark.integration
    def test_a_row_tells_whom_it_belongs_to(self, store):
        alice = store.get(store.write(_row(principal="alice")))
        anonymous = store.get(store.write(_row()))
        assert alice.belongs_to("alice")
        assert not alice.belongs_to("bob") and not alice.belongs_to(None) and not alice.belongs_to("")
        assert not alice.belongs_to("Alice") and not alice.belongs_to("alice ")  # an identity is exact
        assert anonymous.belongs_to(None) and anonymous.belongs_to("")
        assert not anonymous.belongs_to("alice")

    @pytest.mark.integration
    def test_principals_with_the_same_session_id_never_share_memory(self, store):
        store.write(_row(session_id="s1", principal="alice", keys=["alice.md#0"]))
        store.write(_row(session_id="s1", principal="bob", keys=["bob.md#0"]))
        store.write(_row(session_id="s1", keys=["anonymous.md#0"]))
        store.write(_row(session_id="s2", principal="alice", keys=["alice-s2.md#0"]))
        assert _principal_keys(store, "s1", "alice") == {"alice.md#0"}
        assert _principal_keys(store, "s1", "bob") == {"bob.md#0"}
        assert _principal_keys(store, "s1", None) == _principal_keys(store, "s1", "") == {"anonymous.md#0"}
        assert _keys(store, "s1") == {"anonymous.md#0"}  # no principal: as before principals existed
        assert _principal_keys(store, "s2", "alice") == {"alice-s2.md#0"}
        assert _principal_keys(store, "s1", "carol") == set()

    @pytest.mark.integration
    def test_spooled_and_waiting_rows_count_for_their_principal_only(self, tmp_path):
        url, _ = _blocked_url(tmp_path)
        spool = tmp_path / "spool.jsonl"
        down = TraceStore(url, spool_path=str(spool))
        down.write(_row(session_id="s1", principal="alice", keys=["alice.md#0"]))
        down.write(_row(session_id="s1", keys=["anonymous.md#0"]))
        no_spool = TraceStore(url)  # rows wait in memory: no database, no spool
        try:
            assert no_spool.record(_row(session_id="s1", principal="bob", keys=["bob.md#0"])).error
            assert _keys_partial(down, "s1") == {"anonymous.md#0"}
            for principal, expected in (("alice", {"alice.md#0"}), ("carol", set())):
                keys, error = down.session_memory("s1", principal)
                assert error is not None and keys == expected
            keys, error = no_spool.session_memory("s1", "bob")
            assert error is not None and keys == {"bob.md#0"}
            assert no_spool.session_memory("s1", "alice")[0] == set()
        finally:
            down.close()
            no_spool._memory.take()  # drop the waiting row: nothing could ever store it
            no_spool.close()

    @pytest.mark.integration
    def test_list_filters_by_principal(self, store):
        store.write(_row("alice s1", session_id="s1", principal="alice"))
        store.write(_row("bob s1", session_id="s1", principal="bob"))
        store.write(_row("anonymous s1", session_id="s1"))
        store.write(_row("alice s2", session_id="s2", principal="alice"))
        assert [r.query for r in store.list(principal="alice")] == ["alice s2", "alice s1"]
        assert [r.query for r in store.list(principal="bob")] == ["bob s1"]
        assert store.list(principal="carol") == []
        assert store.list(principal="") == []  # no principal's name: nothing, never every row
        assert len(store.list()) == 4
        assert [r.query for r in store.list(limit=1, principal="alice")] == ["alice s2"]
        assert [r.query for r in store.list(session_id="s1", principal="alice")] == ["alice s1"]
        assert store.list(session_id="s2", principal="bob") == []
        # without a principal, a session id is that session of every principal and of anonymous callers
        assert [r.query for r in store.list(session_id="s1")] == ["anonymous s1", "bob s1", "alice s1"]
        assert [r.query for r in store.list(session_id="s2")] == ["alice s2"]

    @pytest.mark.integration
    def test_a_principals_long_session_is_listed_by_its_whole_id(self, store):
        first, second = "x" * 300 + "-first", "x" * 300 + "-second"
        store.write(_row("first", session_id=first, principal="alice"))
        store.write(_row("second", session_id=second, principal="bob"))
        assert [r.query for r in store.list(session_id=first)] == ["first"]
        assert [r.query for r in store.list(session_id=second)] == ["second"]
        assert store.list(session_id=first, principal="bob") == []

    @pytest.mark.integration
    @pytest.mark.parametrize("with_session_key", [True, False])
    def test_a_row_spooled_before_principals_replays_as_an_anonymous_callers(self, store, tmp_path, with_session_key):
        spool = tmp_path / "spool.jsonl"
        line = _old_spool_line("old spooled", "s1", ["old.md#0"], with_session_key=with_session_key)
        assert "principal" not in json.loads(line)
        spool.write_text(line + "\n")
        assert _keys(store, "s1") == {"old.md#0"}  # counted while it waits in the spool
        assert _principal_keys(store, "s1", "alice") == set()
        report = store.replay()
        assert (report.stored, report.rejected, report.error) == (1, 0, None)
        assert not spool.exists()
        (row,) = store.list()
        assert (row.query, row.principal, row.session_key) == ("old spooled", None, session_key("s1"))
        assert _keys(store, "s1") == {"old.md#0"}
        assert _principal_keys(store, "s1", "alice") == set()

    @pytest.mark.integration
    def test_a_spooled_principals_row_without_a_session_key_gets_the_principals_key(self, store, tmp_path):
        data = json.loads(_row("hand-made", principal="alice", keys=["a.md#0"]).model_dump_json())
        del data["session_key"]
        (tmp_path / "spool.jsonl").write_text(json.dumps(data) + "\n")
        assert store.replay().stored == 1
        assert store.list()[0].session_key == session_key("s1", "alice")
        assert _principal_keys(store, "s1", "alice") == {"a.md#0"}
        assert _keys(store, "s1") == set()


class TestPrincipalMigration:
    @pytest.mark.integration
    def test_a_database_at_0003_gains_the_principal_column_and_keeps_its_rows(self, trace_url):
        engine = create_engine(trace_url)
        assert migrate.upgrade(engine, "0003") == "0003"
        table = Table("tool_invocation", MetaData(), autoload_with=engine)
        assert "principal" not in table.c and "session_key" in table.c
        with engine.begin() as conn:
            for session_id, key in (("s1", "old-1.md#0"), ("s1", "old-2.md#0"), ("s2", "other.md#0"), (None, "n.md#0")):
                conn.execute(
                    table.insert(),
                    {
                        "invocation_id": uuid.uuid4().hex,
                        "created_at": datetime.now(UTC),
                        "tool_name": "lookup_knowledge",
                        "session_id": session_id,
                        "session_key": session_key(session_id),
                        "query": f"old {key}",
                        "found": True,
                        "status": "evidence",
                        "retrieval_layer": "L1",
                        "candidate_count": 1,
                        "evidence_block_count": 1,
                        "latency_ms": 1.0,
                        "retrieval_details": {"evidence_blocks": [{"evidence_key": key}]},
                    },
                )
        engine.dispose()
        store = TraceStore(trace_url)
        rows = store.list()
        assert len(rows) == 4 and all(r.principal is None for r in rows)
        assert _keys(store, "s1") == {"old-1.md#0", "old-2.md#0"}  # old rows keep matching anonymous sessions
        assert _principal_keys(store, "s1", "alice") == set()
        assert isinstance(store.write(_row("new", principal="alice", keys=["new.md#0"])), int)
        assert [r.query for r in store.list(principal="alice")] == ["new"]
        with store.engine.connect() as conn:
            assert migrate.current_revision(conn) == migrate.HEAD == "0004"
            assert "ix_tool_invocation_principal" in {i["name"] for i in inspect(conn).get_indexes("tool_invocation")}
            context = MigrationContext.configure(conn, opts={"compare_type": True})
            diff = compare_metadata(context, SQLModel.metadata)
        assert [d for d in diff if "tool_invocation" in str(d)] == []
        store.close()

    @pytest.mark.integration
    def test_the_principal_migration_downgrades_without_losing_rows(self, trace_url):
        store = TraceStore(trace_url)
        store.write(_row("anonymous"))
        store.write(_row("alice's", principal="alice"))
        store.close()
        from alembic import command

        engine = create_engine(trace_url)
        with engine.begin() as conn:
            command.downgrade(migrate.alembic_config(conn), "0003")
            assert migrate.current_revision(conn) == "0003"
        table = Table("tool_invocation", MetaData(), autoload_with=engine)
        assert "principal" not in table.c
        with engine.connect() as conn:
            assert sorted(conn.execute(table.select().with_only_columns(table.c.query)).scalars()) == [
                "alice's",
                "anonymous",
            ]
        engine.dispose()
