from __future__ import annotations

import copy
import json
import time
from pathlib import Path
from typing import Any

import pytest
from haystack import Document
from haystack.core.serialization import component_from_dict, component_to_dict

from components.evidence.context_packer import ContextPacker
from components.evidence.lookup_result_assembler import LookupResultAssembler
from components.trace.session_key import session_key
from components.trace.trace_recorder import TraceRecorder
from components.trace.trace_store import TraceStore

LONG_CONTENT = "".join(f"Line {i}: rotate and compress old logs before deleting core dumps. " for i in range(100))


def _doc(i: int, content: str) -> Document:
    return Document(
        content=content,
        score=0.9,
        meta={
            "source": f"alerts/doc{i}.md",
            "doc_id": f"doc-{i}",
            "title": f"Doc {i}",
            "evidence_key": f"alerts/doc{i}.md#0",
            "hit_reasons": ["l1_unfiltered"],
            "base_score": 0.88,
            "raw_score": 0.76,
            "score_semantics": "cosine",
            "retrieval_path": "haystack",
            "attempt": "unfiltered",
            "boosts": [],
        },
    )


def _assembled(
    docs: list[Document] | None = None,
    *,
    query: str = "disk full",
    error: str | None = None,
    session_id: str | None = "s1",
    fallback: str | None = None,
    started_at: float | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A real (result, details) pair from the assembler."""
    docs = [] if docs is None else docs
    attempt = {"name": "unfiltered", "mode": "dense", "candidate_count": len(docs), "error": None}
    out = LookupResultAssembler().run(
        query=query,
        documents=docs,
        context_pack=ContextPacker().run(documents=docs)["context_pack"],
        retrieval_trace={
            "l1_enabled": True,
            "attempts": [] if error else [attempt],
            "fallback_reason": fallback,
            "reference_threshold": 0.75,
        },
        rerank_trace={"weights": {}, "max_boost": 0.06, "items": []},
        dedup_summary={"candidate_count": len(docs)},
        query_transform={"started_at": started_at or time.time()},
        error=error,
        session_id=session_id,
    )
    return out["result"], out["details"]


def _blocked_url(tmp_path: Path) -> tuple[str, Path]:
    """A SQLite URL under a regular file: unwritable until the file is removed."""
    blocker = tmp_path / "blocker"
    blocker.write_text("not a directory")
    return f"sqlite:///{blocker}/sub/traces.db", blocker


@pytest.fixture
def db_url(tmp_path):
    return f"sqlite:///{tmp_path}/traces.db"


@pytest.fixture
def read_store(db_url):
    store = TraceStore(db_url)
    yield store
    store.close()


class TestTraceRecorder:
    def test_init_defaults(self):
        recorder = TraceRecorder()
        assert recorder.database_url == "sqlite:///data/traces.db"
        assert recorder.spool_path == "data/trace_spool.jsonl"
        assert recorder.tool_name == "lookup_knowledge"
        assert recorder.max_query_chars == 2000

    def test_init_custom(self, tmp_path):
        recorder = TraceRecorder(
            database_url="postgresql://u:pw@h/db",
            spool_path=str(tmp_path / "s.jsonl"),
            tool_name="t",
            max_query_chars=9,
        )
        assert recorder.database_url == "postgresql://u:pw@h/db"
        assert recorder.spool_path == str(tmp_path / "s.jsonl")
        assert (recorder.tool_name, recorder.max_query_chars) == ("t", 9)

    @pytest.mark.parametrize(
        ("kwargs", "match"),
        [
            ({"database_url": ""}, "database_url"),
            ({"tool_name": ""}, "tool_name"),
            ({"max_query_chars": 0}, "max_query_chars=0"),
            ({"timeout_s": 0}, "timeout_s=0"),
            ({"retry_after_s": -1}, "retry_after_s=-1"),
        ],
    )
    def test_invalid_init(self, kwargs, match):
        with pytest.raises(ValueError, match=match):
            TraceRecorder(**kwargs)

    def test_to_dict_from_dict(self, tmp_path, db_url):
        spool = str(tmp_path / "spool.jsonl")
        recorder = TraceRecorder(
            database_url=db_url, spool_path=spool, tool_name="kb", max_query_chars=500, timeout_s=0.2, retry_after_s=1
        )
        data = component_to_dict(recorder, "recorder")
        assert data["init_parameters"] == {
            "database_url": db_url,
            "spool_path": spool,
            "tool_name": "kb",
            "max_query_chars": 500,
            "timeout_s": 0.2,
            "retry_after_s": 1,
            "database_password": {"type": "env_var", "env_vars": ["TRACE_DB_PASSWORD"], "strict": False},
        }
        restored = component_from_dict(TraceRecorder, data, "recorder")
        assert (restored.database_url, restored.spool_path, restored.tool_name, restored.max_query_chars) == (
            db_url,
            spool,
            "kb",
            500,
        )

    @pytest.mark.integration
    def test_writes_one_row_per_run(self, db_url, read_store):
        result, details = _assembled([_doc(1, "Short evidence."), _doc(2, "More evidence.")], fallback="fb_reason")
        recorder = TraceRecorder(database_url=db_url)
        ran = recorder.run(result=result, details=details, started_at=time.time() - 0.25)
        recorder.close()
        out = ran["result"]

        trace_id = out["traceId"]
        assert isinstance(trace_id, int)
        rows = read_store.list()
        assert [r.id for r in rows] == [trace_id]
        row = read_store.get(trace_id)
        assert row.tool_name == "lookup_knowledge"
        assert row.session_id == "s1"
        assert row.query == "disk full"
        assert row.found is True
        assert row.status == "evidence"
        assert row.retrieval_layer == "L1"
        assert row.fallback_reason == "fb_reason"
        assert row.candidate_count == 2
        assert row.evidence_block_count == 2
        assert row.error is None
        assert row.latency_ms >= 250
        assert row.retrieval_details["latency_ms"] == row.latency_ms
        assert dict(ran["details"]) == row.retrieval_details  # what callers that measure a lookup read
        expected = json.loads(json.dumps(dict(details)))
        assert {k: v for k, v in row.retrieval_details.items() if k != "latency_ms"} == expected
        assert [b["evidence_key"] for b in row.retrieval_details["evidence_blocks"]] == [
            "alerts/doc1.md#0",
            "alerts/doc2.md#0",
        ]

    @pytest.mark.integration
    def test_each_run_adds_a_row(self, db_url, read_store):
        recorder = TraceRecorder(database_url=db_url)
        ids = [recorder.run(*_assembled(query=f"q{i}"))["result"]["traceId"] for i in range(3)]
        recorder.close()
        assert len(set(ids)) == 3
        assert [r.query for r in read_store.list()] == ["q2", "q1", "q0"]

    @pytest.mark.integration
    def test_result_gets_trace_id_and_is_otherwise_unchanged(self, db_url):
        result, details = _assembled([_doc(1, "Evidence.")])
        recorder = TraceRecorder(database_url=db_url)
        out = recorder.run(result=result, details=details)["result"]
        recorder.close()
        assert out["traceId"] is not None
        assert {k: v for k, v in out.items() if k != "traceId"} == {k: v for k, v in result.items() if k != "traceId"}

    @pytest.mark.integration
    def test_latency_defaults_to_query_transform_start(self, db_url, read_store):
        result, details = _assembled(started_at=time.time() - 2.0)
        recorder = TraceRecorder(database_url=db_url)
        trace_id = recorder.run(result=result, details=details)["result"]["traceId"]
        recorder.close()
        assert 2000 <= read_store.get(trace_id).latency_ms < 60_000

    @pytest.mark.integration
    def test_custom_tool_name(self, db_url, read_store):
        recorder = TraceRecorder(database_url=db_url, tool_name="search_runbooks")
        trace_id = recorder.run(*_assembled())["result"]["traceId"]
        recorder.close()
        assert read_store.get(trace_id).tool_name == "search_runbooks"

    @pytest.mark.integration
    def test_no_full_content_in_the_trace(self, db_url, read_store):
        result, details = _assembled([_doc(1, LONG_CONTENT)])
        recorder = TraceRecorder(database_url=db_url)
        trace_id = recorder.run(result=result, details=details)["result"]["traceId"]
        recorder.close()
        stored = json.dumps(read_store.get(trace_id).retrieval_details, ensure_ascii=False)
        assert LONG_CONTENT not in stored
        assert LONG_CONTENT[:100] in stored  # the preview is there

    @pytest.mark.integration
    def test_no_evidence_is_recorded(self, db_url, read_store):
        recorder = TraceRecorder(database_url=db_url)
        trace_id = recorder.run(*_assembled([]))["result"]["traceId"]
        recorder.close()
        row = read_store.get(trace_id)
        assert row.found is False
        assert row.status == "no_evidence"
        assert row.retrieval_layer == "none"
        assert row.candidate_count == 0
        assert row.evidence_block_count == 0

    @pytest.mark.integration
    def test_rejected_query_is_recorded_with_error(self, db_url, read_store):
        result, details = _assembled(query="", error="query is empty")
        recorder = TraceRecorder(database_url=db_url)
        trace_id = recorder.run(result=result, details=details, raw_query="   ")["result"]["traceId"]
        recorder.close()
        row = read_store.get(trace_id)
        assert row.status == "invalid_query"
        assert row.found is False
        assert row.error == "query is empty"
        assert row.query == "   "

    @pytest.mark.integration
    def test_huge_rejected_query_is_stored_cut(self, db_url, read_store):
        raw = "A" * 1_000_000
        result, details = _assembled(query="", error="query too long")
        recorder = TraceRecorder(database_url=db_url)
        trace_id = recorder.run(result=result, details=details, raw_query=raw)["result"]["traceId"]
        recorder.close()
        row = read_store.get(trace_id)
        assert row.query == raw[:2000]
        assert row.status == "invalid_query"

    @pytest.mark.integration
    def test_max_query_chars_is_configurable(self, db_url, read_store):
        result, details = _assembled(query="x" * 500)
        recorder = TraceRecorder(database_url=db_url, max_query_chars=100)
        trace_id = recorder.run(result=result, details=details)["result"]["traceId"]
        recorder.close()
        assert read_store.get(trace_id).query == "x" * 100

    @pytest.mark.integration
    def test_unwritable_database_spools_and_still_returns(self, tmp_path):
        url, _ = _blocked_url(tmp_path)
        spool = tmp_path / "trace_spool.jsonl"
        result, details = _assembled([_doc(1, "Evidence.")])
        recorder = TraceRecorder(database_url=url, spool_path=str(spool))
        out = recorder.run(result=result, details=details)["result"]
        recorder.close()
        assert out["traceId"] is None
        assert out["evidenceStatus"] == "evidence"
        lines = spool.read_text(encoding="utf-8").splitlines()
        assert len(lines) == 1
        row = json.loads(lines[0])
        assert row["query"] == "disk full"
        assert row["session_id"] == "s1"
        assert row["status"] == "evidence"
        assert row["retrieval_details"]["evidence_blocks"][0]["evidence_key"] == "alerts/doc1.md#0"

    @pytest.mark.integration
    def test_huge_query_is_cut_in_the_spool_too(self, tmp_path):
        url, _ = _blocked_url(tmp_path)
        spool = tmp_path / "trace_spool.jsonl"
        result, details = _assembled(query="", error="query too long")
        recorder = TraceRecorder(database_url=url, spool_path=str(spool))
        recorder.run(result=result, details=details, raw_query="B" * 1_000_000)
        recorder.close()
        assert json.loads(spool.read_text(encoding="utf-8"))["query"] == "B" * 2000

    @pytest.mark.integration
    def test_unwritable_database_without_spool_does_not_fail_the_lookup(self, tmp_path):
        # "the lookup itself never fails because of the trace store" (class docstring)
        url, _ = _blocked_url(tmp_path)
        result, details = _assembled([_doc(1, "Evidence.")])
        recorder = TraceRecorder(database_url=url)
        out = recorder.run(result=result, details=details)["result"]
        recorder.close()
        assert out["traceId"] is None
        assert out["evidenceStatus"] == "evidence"

    @pytest.mark.integration
    def test_spool_is_replayed_by_the_next_successful_write(self, tmp_path):
        url, blocker = _blocked_url(tmp_path)
        spool = tmp_path / "trace_spool.jsonl"
        recorder = TraceRecorder(database_url=url, spool_path=str(spool), retry_after_s=0)
        first = recorder.run(*_assembled(query="while down"))["result"]
        assert first["traceId"] is None
        assert spool.exists()

        blocker.unlink()  # the database comes back
        second = recorder.run(*_assembled(query="after recovery"))["result"]
        recorder.close()
        assert isinstance(second["traceId"], int)
        assert not spool.exists()

        store = TraceStore(url)
        rows = store.list()
        store.close()
        assert [r.query for r in rows] == ["after recovery", "while down"]
        assert rows[0].id == second["traceId"]
        assert all(r.tool_name == "lookup_knowledge" for r in rows)

    @pytest.mark.integration
    def test_empty_input(self, db_url, read_store):
        recorder = TraceRecorder(database_url=db_url)
        out = recorder.run(result={}, details={})
        recorder.close()
        assert set(out["result"]) == {"traceId", "traceError"} and out["result"]["traceError"] is None
        row = read_store.get(out["result"]["traceId"])
        assert row.query == ""
        assert row.found is False
        assert row.candidate_count == 0
        assert row.evidence_block_count == 0

    @pytest.mark.integration
    def test_inputs_not_mutated(self, db_url):
        result, details = _assembled([_doc(1, LONG_CONTENT)])
        before = (copy.deepcopy(result), copy.deepcopy(details))
        recorder = TraceRecorder(database_url=db_url)
        out = recorder.run(result=result, details=details, raw_query="disk full")["result"]
        recorder.close()
        assert (result, details) == before
        assert out is not result
        assert "latency_ms" not in details

    @pytest.mark.integration
    def test_a_failed_lookup_is_recorded_once_as_error(self, db_url, read_store):
        from haystack.core.errors import PipelineRuntimeError

        recorder = TraceRecorder(database_url=db_url, spool_path=None)
        err = PipelineRuntimeError.from_exception("l0", TraceRecorder, ValueError("index corrupt"))
        err.__cause__ = ValueError("index corrupt")
        result = recorder.record_failure("disk \udcff", "s1", err)
        assert result["evidenceStatus"] == "error" and result["found"] is False
        assert result["error"] == "internal error in component 'l0': ValueError: index corrupt"
        rows = read_store.list()
        assert len(rows) == 1 and rows[0].id == result["traceId"]
        assert (rows[0].status, rows[0].session_id, rows[0].query) == ("error", "s1", "disk \\udcff")
        assert rows[0].query_chars == 6
        assert rows[0].retrieval_details["failed_component"] == "l0"

    @pytest.mark.integration
    def test_a_non_string_query_is_recorded_by_its_repr(self, db_url, read_store):
        recorder = TraceRecorder(database_url=db_url, spool_path=None)
        result = recorder.record_failure({"q": 1}, None, RuntimeError("boom"))
        assert result["error"] == "internal error: RuntimeError: boom"
        assert read_store.list()[0].query == "{'q': 1}"

    @pytest.mark.integration
    def test_a_row_neither_the_database_nor_the_spool_takes_is_reported_and_written_later(self, tmp_path):
        url, db_blocker = _blocked_url(tmp_path)
        spool_blocker = tmp_path / "spool-folder"
        spool_blocker.write_text("a file where the spool's folder should be")
        recorder = TraceRecorder(database_url=url, spool_path=str(spool_blocker / "s.jsonl"), retry_after_s=0)
        down = recorder.run(*_assembled(query="while nothing takes it"))["result"]
        assert down["traceId"] is None and down["evidenceStatus"] == "no_evidence"
        assert "kept in memory" in down["traceError"] and "\n" not in down["traceError"]
        db_blocker.unlink()
        spool_blocker.unlink()
        up = recorder.run(*_assembled(query="back"))["result"]
        recorder.close()
        assert isinstance(up["traceId"], int) and up["traceError"] is None
        store = TraceStore(url)
        assert [r.query for r in store.list()] == ["back", "while nothing takes it"]
        store.close()

    @pytest.mark.integration
    def test_a_long_session_id_is_stored_readable_and_matched_whole(self, trace_url):
        from components.evidence.session_evidence_filter import SessionEvidenceFilter

        session = "chat-" + "x" * 5000
        docs = [_doc(1, "Evidence.")]
        recorder = TraceRecorder(database_url=trace_url, spool_path=None)
        out = recorder.run(*_assembled(docs, session_id=session))["result"]
        recorder.close()
        assert isinstance(out["traceId"], int)  # an index entry of 5,000 characters is refused by PostgreSQL
        store = TraceStore(trace_url)
        row = store.get(out["traceId"])
        assert row.session_id == session[:200] and [r.id for r in store.list(session_id=session)] == [row.id]
        store.close()
        session_filter = SessionEvidenceFilter(database_url=trace_url, spool_path=None)
        same = session_filter.run(documents=docs, session_id=session)
        other = session_filter.run(documents=docs, session_id=session[:-1] + "y")
        session_filter.close()
        assert same["documents"] == [] and other["documents"] == docs

    @pytest.mark.integration
    def test_a_failed_lookup_is_recorded_under_the_normalized_session(self, db_url, read_store):
        recorder = TraceRecorder(database_url=db_url, spool_path=None)
        result = recorder.record_failure("disk full", "  s1 \n", RuntimeError("boom"))
        recorder.close()
        assert result["sessionId"] == "s1" and result["traceError"] is None
        assert [r.id for r in read_store.list(session_id="s1")] == [result["traceId"]]
        assert read_store.get(result["traceId"]).session_id == "s1"


class TestPrincipal:
    def test_principal_is_an_optional_run_input(self):
        sockets = TraceRecorder().__haystack_input__._sockets_dict
        assert "principal" in sockets and not sockets["principal"].is_mandatory

    @pytest.mark.integration
    def test_the_principal_is_stored_and_scopes_the_session_key(self, db_url, read_store):
        recorder = TraceRecorder(database_url=db_url, spool_path=None)
        mine = recorder.run(*_assembled([_doc(1, "Evidence.")]), principal="alice")["result"]
        anonymous = recorder.run(*_assembled([_doc(1, "Evidence.")]))["result"]
        empty = recorder.run(*_assembled([_doc(1, "Evidence.")]), principal="")["result"]
        recorder.close()
        assert "principal" not in mine  # the result is unchanged: the caller knows who it is
        row = read_store.get(mine["traceId"])
        assert (row.principal, row.session_id, row.session_key) == ("alice", "s1", session_key("s1", "alice"))
        for out in (anonymous, empty):
            row = read_store.get(out["traceId"])
            assert (row.principal, row.session_key) == (None, session_key("s1"))
        assert [r.id for r in read_store.list(principal="alice")] == [mine["traceId"]]

    @pytest.mark.integration
    def test_rejections_calls_and_failures_record_the_principal(self, db_url, read_store):
        recorder = TraceRecorder(database_url=db_url, spool_path=None)
        rejected = recorder.record_rejection("q", "s1", "bad cursor", principal="alice")
        call_id, call_error = recorder.record_call(
            "read_evidence", "a.md#0", "s1", "evidence", {"returned": 1}, found=True, principal="bob"
        )
        failed = recorder.record_failure("q", " s1 ", RuntimeError("boom"), principal="carol")
        anonymous = recorder.record_failure("q", "s1", RuntimeError("boom"))
        recorder.close()
        assert call_error is None
        for row_id, principal in (
            (rejected["traceId"], "alice"),
            (call_id, "bob"),
            (failed["traceId"], "carol"),
            (anonymous["traceId"], None),
        ):
            row = read_store.get(row_id)
            assert (row.principal, row.session_key) == (principal, session_key("s1", principal))
        assert {r.principal for r in read_store.list(session_id="s1")} == {"alice", "bob", "carol", None}

    @pytest.mark.integration
    def test_a_spooled_principals_row_keeps_its_principal_through_the_replay(self, tmp_path):
        url, blocker = _blocked_url(tmp_path)
        spool = tmp_path / "spool.jsonl"
        recorder = TraceRecorder(database_url=url, spool_path=str(spool), retry_after_s=0)
        down = recorder.run(*_assembled(query="while down"), principal="alice")["result"]
        assert down["traceId"] is None and down["traceError"] is None
        assert json.loads(spool.read_text(encoding="utf-8"))["principal"] == "alice"
        blocker.unlink()
        up = recorder.run(*_assembled(query="back"))["result"]
        assert recorder.store.replay().error is None  # whatever the write's background replay left
        recorder.close()
        assert isinstance(up["traceId"], int)
        assert not spool.exists()
        store = TraceStore(url)
        assert [(r.query, r.principal) for r in store.list()] == [("back", None), ("while down", "alice")]
        assert store.list(principal="alice")[0].session_key == session_key("s1", "alice")
        store.close()
