"""Every lookup leaves exactly one trace row, whatever breaks: through the real pipeline, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from components.query.l0_hint_provider import L0HintProvider
from components.retrievers.sidecar_retriever import SidecarRetriever
from components.trace.trace_store import TraceStore
from pipelines import load_pipeline, lookup
from pipelines.loading import node_of_type
from pipelines.spans import disable_spans, enable_spans
from tests.conftest import write_tiny_kb

REPO_ROOT = Path(__file__).resolve().parents[2]
ANSWERABLE = "磁盘满了怎么办"
OFF_TOPIC = "zxqv plorn wibble frumious snark"

pytestmark = pytest.mark.integration


def _until_already_returned(pipeline, query: str, session_id: str) -> list[dict]:
    """Ask the same question in one session until all its evidence was returned; no block may come twice."""
    results = []
    for _ in range(10):
        results.append(lookup(pipeline, query, session_id=session_id))
        if results[-1]["evidenceStatus"] != "evidence":
            break
    assert results[-1]["evidenceStatus"] == "already_returned"
    keys = [b["evidenceKey"] for r in results for b in r["evidenceBlocks"]]
    assert keys and len(keys) == len(set(keys))
    return results


@pytest.fixture
def spool(tmp_path) -> Path:
    return tmp_path / "trace_spool.jsonl"


@pytest.fixture
def make_pipeline(knowledge_data, trace_url, spool):
    """Lookup pipelines over the indexed repository knowledge base, recording into this test's own database."""

    def make(**params):
        trace = {"spool_path": str(spool)}
        params = {"recorder": {**trace, "retry_after_s": 0}, "session_filter": trace, **params}
        return load_pipeline(data_dir=knowledge_data, trace_db_url=trace_url, component_params=params)

    return make


@pytest.fixture
def rows(trace_url, spool):
    """The rows stored so far, replaying the spool first (what an operator would count)."""
    store = TraceStore(trace_url, spool_path=str(spool))

    def count() -> list:
        store.replay()
        return store.list(limit=100_000)

    yield count
    store.close()


class TestExactlyOnce:
    def test_every_status_leaves_one_row(self, make_pipeline, rows, monkeypatch):
        pipeline = make_pipeline()
        repeated = _until_already_returned(pipeline, ANSWERABLE, "s1")
        statuses = [
            lookup(pipeline, OFF_TOPIC)["evidenceStatus"],
            lookup(pipeline, "")["evidenceStatus"],
            lookup(pipeline, "\udcff\udcfe")["evidenceStatus"],
            lookup(pipeline, 42)["evidenceStatus"],  # type: ignore[arg-type]
        ]
        assert statuses == ["no_evidence"] + ["invalid_query"] * 3
        # a component before the recorder raises: the call is recorded as an error naming it
        _, l0 = node_of_type(pipeline, L0HintProvider)

        def broken(*args, **kwargs):
            raise RuntimeError("knowledge index is corrupt")

        monkeypatch.setattr(l0, "run", broken)
        failed = lookup(pipeline, "disk full", session_id="s2")
        assert failed["evidenceStatus"] == "error" and failed["found"] is False
        assert "'l0'" in failed["error"] and "knowledge index is corrupt" in failed["error"]
        assert isinstance(failed["traceId"], int)
        stored = rows()
        assert Counter(r.status for r in stored) == {
            "evidence": len(repeated) - 1,
            "already_returned": 1,
            "no_evidence": 1,
            "invalid_query": 3,
            "error": 1,
        }
        error_row = next(r for r in stored if r.status == "error")
        assert error_row.session_id == "s2" and error_row.retrieval_details["failed_component"] == "l0"
        surrogate_row = next(r for r in stored if r.query.startswith("\\udc"))
        assert surrogate_row.query == "\\udcff\\udcfe"

    def test_a_failing_sidecar_still_leaves_one_row_and_the_same_result(self, make_pipeline, rows, monkeypatch):
        pipeline = make_pipeline(sidecar={"enabled": True, "retriever": "bm25"})
        _, sidecar = node_of_type(pipeline, SidecarRetriever)
        monkeypatch.setattr(sidecar, "_retrieve", lambda query: (_ for _ in ()).throw(RuntimeError("sidecar down")))
        result = lookup(pipeline, ANSWERABLE)
        assert result["evidenceStatus"] == "evidence"
        stored = rows()
        assert len(stored) == 1 and stored[0].retrieval_details["sidecar"]["status"] == "failed"

    def test_a_damaged_spool_line_neither_blocks_tracing_nor_session_memory(self, make_pipeline, rows, spool):
        spool.write_text('{"tool_name": "lookup_knowledge", "query": "cut off mid-app')
        # what is tested is the damaged line, not the 0.5 s deadline: a statement that a loaded 2-core machine slows
        # past it would hold the session memory back for the store's 5 s and end the loop early (CI, 2026-12-06)
        roomy = {"spool_path": str(spool), "timeout_s": 5.0}
        pipeline = make_pipeline(recorder={**roomy, "retry_after_s": 0}, session_filter=roomy)
        answers = _until_already_returned(pipeline, ANSWERABLE, "s1")
        assert all(isinstance(r["traceId"], int) for r in answers)
        assert len(rows()) == len(answers)
        assert spool.with_name(spool.name + ".rejected").read_text().startswith('{"tool_name"')


class TestCommandLine:
    @staticmethod
    def _cli(trace_url: str, *args: bytes) -> subprocess.CompletedProcess[bytes]:
        # a process of its own, so argv really is bytes; undecodable ones become lone surrogates, as in a shell
        argv = [sys.executable.encode(), b"-m", b"pipelines.entrypoints.cli", *args]
        env = {"TRACE_DB_URL": trace_url, "PATH": "/usr/bin:/bin", "HAYSTACK_TELEMETRY_ENABLED": "False"}
        return subprocess.run(argv, cwd=REPO_ROOT, capture_output=True, env=env, timeout=300, check=False)

    def test_undecodable_arguments_are_answered_and_recorded(self, trace_url, tmp_path):
        data = str(tmp_path / "data").encode()
        kb = str(write_tiny_kb(tmp_path / "knowledge")).encode()
        indexed = self._cli(trace_url, b"index", b"--knowledge", kb, b"--data-dir", data, b"--quiet")
        assert indexed.returncode == 0, indexed.stderr.decode(errors="replace")
        rejected = self._cli(trace_url, b"ask", b"\xff\xfe", b"--data-dir", data)
        assert rejected.returncode == 2, rejected.stderr.decode(errors="replace")
        assert b"query is empty" in rejected.stderr
        answered = self._cli(trace_url, b"ask", b"disk full", b"--session", b"s\xff", b"--data-dir", data)
        assert answered.returncode == 0, answered.stderr.decode(errors="replace")
        listed = self._cli(trace_url, b"trace", b"list", b"--data-dir", data)
        assert listed.returncode == 0 and b"session=s\\udcff" in listed.stdout
        store = TraceStore(trace_url)
        stored = {r.status: r for r in store.list()}
        store.close()
        assert len(stored) == 2
        assert stored.pop("invalid_query").query == "\\udcff\\udcfe"
        assert next(iter(stored.values())).session_id == "s\\udcff"


class TestConcurrency:
    def test_threads_sharing_one_pipeline_record_every_call_once(self, make_pipeline, rows, spool):
        """8 threads x 15 lookups, mixed sessions (the full 8 x 200 run: benchmarks/trace_concurrency.py)."""
        # concurrency, not a slow database: on a loaded machine a statement may outlast the shipped 0.5 s, and the
        # store is then taken for down (session memory partial: TestPostgresDown and the spool tests cover that)
        patient = {"spool_path": str(spool), "timeout_s": 10}
        pipeline = make_pipeline(recorder={**patient, "retry_after_s": 0}, session_filter=patient)
        queries = [ANSWERABLE, "how long do refunds take?", OFF_TOPIC, "charged twice", ""]
        results: dict[str, list[dict]] = defaultdict(list)
        errors: list[BaseException] = []
        lock = threading.Lock()

        def worker(t: int) -> None:
            for i in range(15):
                session = f"s{(t + i) % 6}"
                try:
                    result = lookup(pipeline, queries[(t * 15 + i) % len(queries)], session_id=session)
                except BaseException as err:  # collected: the assertion below shows them
                    errors.append(err)
                    continue
                with lock:
                    results[session].append(result)

        threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        calls = [r for session in results.values() for r in session]
        assert len(calls) == 120
        assert all(r["evidenceStatus"] != "error" for r in calls)
        stored = rows()
        assert len(stored) == 120
        assert sorted(r.id for r in stored) == sorted(r["traceId"] for r in calls)
        for session, answers in results.items():
            returned = [b["evidenceKey"] for r in answers for b in r["evidenceBlocks"]]
            assert len(returned) == len(set(returned)), f"session {session} got evidence twice"


@pytest.mark.postgres
class TestPostgresDown:
    def test_a_server_stopped_mid_run_loses_and_doubles_nothing(self, knowledge_data, postgres_server, spool):
        url = postgres_server.create_database("stop_mid_run")
        params = {
            "recorder": {"spool_path": str(spool), "retry_after_s": 0},
            "session_filter": {"spool_path": str(spool)},
        }
        pipeline = load_pipeline(data_dir=knowledge_data, trace_db_url=url, component_params=params)
        traced = [lookup(pipeline, ANSWERABLE, session_id="pg")["traceId"] for _ in range(3)]
        postgres_server.stop()
        try:
            down = [lookup(pipeline, OFF_TOPIC, session_id="pg") for _ in range(4)]
        finally:
            postgres_server.start()
        assert all(r["traceId"] is None and r["evidenceStatus"] == "no_evidence" for r in down)
        assert len(spool.read_text().splitlines()) == 4
        after = lookup(pipeline, ANSWERABLE, session_id="pg")  # the next write replays the spool
        assert isinstance(after["traceId"], int)
        assert all(isinstance(t, int) for t in traced)
        store = TraceStore(url)
        assert store.count() == 8
        assert Counter(r.status for r in store.list())["no_evidence"] == 4
        store.close()
        assert not spool.exists()


class TestSpans:
    def test_each_lookup_is_one_span_tagged_with_its_trace_row(self, make_pipeline):
        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        pipeline = make_pipeline()
        enable_spans(provider)
        try:
            result = lookup(pipeline, ANSWERABLE)
        finally:
            disable_spans()
        spans = exporter.get_finished_spans()
        roots = [s for s in spans if s.name == "lookup_knowledge"]
        assert len(roots) == 1
        root = roots[0]
        assert root.parent is None
        assert root.attributes["lookup_knowledge.trace_id"] == result["traceId"]
        assert root.attributes["lookup_knowledge.status"] == "evidence"
        components = {s.attributes.get("haystack.component.name") for s in spans if s.name == "haystack.component.run"}
        assert {"retriever", "gate", "recorder"} <= components
        assert all(s.context.trace_id == root.context.trace_id for s in spans)
        # off again: the next lookup makes no span
        exporter.clear()
        lookup(pipeline, OFF_TOPIC)
        assert exporter.get_finished_spans() == ()


def test_rows_are_json_serializable(make_pipeline, rows):
    lookup(make_pipeline(), ANSWERABLE)
    assert json.dumps([r.model_dump(mode="json") for r in rows()])


def test_sessions_that_share_their_first_200_characters_do_not_share_memory(make_pipeline):
    pipeline = make_pipeline()
    first, second = "c" * 200 + "-first", "c" * 200 + "-second"
    one = lookup(pipeline, ANSWERABLE, session_id=first)
    other = lookup(pipeline, ANSWERABLE, session_id=second)
    again = lookup(pipeline, ANSWERABLE, session_id=f" {first} ")
    assert one["evidenceStatus"] == other["evidenceStatus"] == "evidence"
    assert [b["evidenceKey"] for b in other["evidenceBlocks"]] == [b["evidenceKey"] for b in one["evidenceBlocks"]]
    assert not {b["evidenceKey"] for b in again["evidenceBlocks"]} & {b["evidenceKey"] for b in one["evidenceBlocks"]}
    assert one["sessionId"] == first


class TestSessionMemoryWhileTheDatabaseIsDown:
    def test_a_spooled_row_of_the_wrong_shape_fails_no_lookup_of_its_session(self, knowledge_data, tmp_path, caplog):
        blocker = tmp_path / "blocker"
        blocker.write_text("not a folder")  # a database under a file: it can be neither created nor read
        spool = tmp_path / "trace_spool.jsonl"
        url = f"sqlite:///{blocker}/sub/traces.db"
        trace = {"spool_path": str(spool)}
        pipeline = load_pipeline(
            data_dir=knowledge_data,
            trace_db_url=url,
            component_params={"recorder": {**trace, "retry_after_s": 0}, "session_filter": trace},
        )
        first = lookup(pipeline, ANSWERABLE, session_id="shape")
        assert first["evidenceStatus"] == "evidence" and first["traceId"] is None  # spooled
        row = json.loads(spool.read_text().splitlines()[-1])
        with spool.open("a") as handle:
            handle.write(json.dumps({**row, "invocation_id": "garbage", "retrieval_details": "garbage"}) + "\n")
        again = [lookup(pipeline, ANSWERABLE, session_id="shape") for _ in range(2)]
        # the well-formed spooled rows are still this session's memory, the garbage one is skipped, nothing fails
        assert all(r["evidenceStatus"] in {"evidence", "already_returned"} for r in again)
        returned = [[b["evidenceKey"] for b in r["evidenceBlocks"]] for r in (first, *again)]
        every = [key for keys in returned for key in keys]
        assert returned[0] and len(every) == len(set(every))  # no block twice in the session
        assert "wrong shape skipped" in caplog.text


class TestLockedSqlite:
    def test_a_locked_database_costs_a_lookup_its_budget_and_every_row_arrives(self, knowledge_data, tmp_path):
        database = tmp_path / "traces.db"
        spool = tmp_path / "trace_spool.jsonl"
        trace = {"spool_path": str(spool), "timeout_s": 0.5}
        pipeline = load_pipeline(
            data_dir=knowledge_data,
            trace_db_url=f"sqlite:///{database}",
            component_params={"recorder": {**trace, "retry_after_s": 0}, "session_filter": trace},
        )
        assert isinstance(lookup(pipeline, ANSWERABLE)["traceId"], int)
        started = time.perf_counter()
        lookup(pipeline, "how long do refunds take?")
        usual_s = time.perf_counter() - started
        holder = sqlite3.connect(database, timeout=0)
        holder.execute("BEGIN EXCLUSIVE")  # another process holds the write lock
        try:
            started = time.perf_counter()
            locked = lookup(pipeline, ANSWERABLE, session_id="locked")
            locked_s = time.perf_counter() - started
        finally:
            holder.rollback()
            holder.close()
        assert locked_s < usual_s + 2 * 0.5 + 0.75  # the session read and the write, each at most 0.5 s
        assert locked["traceId"] is None and locked["traceError"] is None  # spooled
        store = TraceStore(f"sqlite:///{database}", spool_path=str(spool))
        assert store.replay().error is None
        assert store.count() == 3
        store.close()


class TestReplayCommand:
    def test_a_rejected_file_linked_out_of_the_folder_is_never_written_through(self, trace_url, tmp_path):
        data = tmp_path / "data"
        data.mkdir()
        outside = tmp_path / "outside.txt"
        outside.write_text("not the spool's\n")
        (data / "trace_spool.jsonl.rejected").symlink_to(outside)
        (data / "trace_spool.jsonl").write_text('{"cut off\n')  # a damaged line: it goes to the rejected file
        store = TraceStore(trace_url)
        assert store.count() == 0  # the database exists (replay refuses a data folder that recorded nothing)
        store.close()
        env = {"TRACE_DB_URL": trace_url, "PATH": "/usr/bin:/bin", "HAYSTACK_TELEMETRY_ENABLED": "False"}
        command = [sys.executable, "-m", "pipelines.entrypoints.cli", "trace", "replay", "--data-dir", str(data)]
        done = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, env=env, timeout=120)
        assert done.returncode == 0, done.stderr
        assert outside.read_text() == "not the spool's\n"
        assert not (data / "trace_spool.jsonl.rejected").is_symlink()
        assert (data / "trace_spool.jsonl.rejected").read_text() == '{"cut off\n'
