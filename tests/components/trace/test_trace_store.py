from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from components.trace.trace_store import ToolInvocation, TraceStore, redact_url


def _row(query: str = "q", *, session_id: str | None = "s1", found: bool = True, keys: list[str] | None = None):
    details: dict[str, Any] = {"evidence_blocks": [{"evidence_key": k, "preview": "p"} for k in (keys or [])]}
    return ToolInvocation(
        tool_name="lookup_knowledge",
        session_id=session_id,
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


@pytest.fixture
def store(tmp_path):
    s = TraceStore(f"sqlite:///{tmp_path}/traces.db", spool_path=str(tmp_path / "spool.jsonl"))
    yield s
    s.close()


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
    def test_rows_survive_a_new_store(self, tmp_path):
        url = f"sqlite:///{tmp_path}/traces.db"
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
    def test_returned_evidence_keys(self, store):
        store.write(_row(session_id="s1", keys=["a.md#0", "b.md#1"]))
        store.write(_row(session_id="s1", keys=["c.md#0"]))
        store.write(_row(session_id="s1", found=False, keys=["lost.md#0"]))
        store.write(_row(session_id="s2", keys=["other.md#0"]))
        assert store.returned_evidence_keys("s1") == {"a.md#0", "b.md#1", "c.md#0"}
        assert store.returned_evidence_keys("s2") == {"other.md#0"}
        assert store.returned_evidence_keys("nobody") == set()

    @pytest.mark.integration
    def test_returned_evidence_keys_ignores_rows_without_blocks(self, store):
        store.write(_row(session_id="s1"))
        bare = _row(session_id="s1")
        bare.retrieval_details = {}
        store.write(bare)
        odd = _row(session_id="s1")
        odd.retrieval_details = {"evidence_blocks": [{"preview": "no key"}, {"evidence_key": ""}]}
        store.write(odd)
        assert store.returned_evidence_keys("s1") == set()

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
        s = TraceStore(url, spool_path=str(spool))
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
        assert up.returned_evidence_keys("s1") == {"spooled.md#0"}
        assert up.returned_evidence_keys("s2") == {"s2.md#0"}
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

    def test_redact_url_keeps_urls_without_password(self):
        assert redact_url("sqlite:///data/traces.db") == "sqlite:///data/traces.db"

    def test_redact_url_unparseable(self):
        redacted = redact_url("::not a url::")
        assert "not a url" not in redacted
        assert redacted == "<unparseable database url>"
