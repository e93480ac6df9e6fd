"""The `tool_invocation` table (sqlmodel) and a store that records every call exactly once.

SQLite in the data folder by default, any SQLAlchemy URL (PostgreSQL with psycopg) by configuration; the schema is
brought to the newest Alembic revision on first use (`components.trace.migrate`).

Every wait has a bound. The database work (connect, pool checkout and pre-ping, statements, commit) runs on one worker
thread per store (`BoundedWorker`) and the caller waits for it at most `timeout_s`: a store that was told to connect
early (`connect_soon`, what the pipeline's warm-up does) connects while the process starts, and its first call waits
no longer than any other; a store used without it waits at most max(`timeout_s`, 2 s), libpq's connect floor, for its
first connection, which also checks the schema; a one-time schema migration on a database that answers is waited for
up to 30 s. When the database cannot be written in time the row goes to the spool (`TraceSpool`) and the database is
left alone for `retry_after_s`, and while the worker is still blocked (a stopped server) rows go straight to the spool
without queueing behind it. When the spool cannot be written either (a full disk), the row waits in memory (a bounded
queue shared by the stores of one database and spool in this process; the caller is told, `TraceWrite.error`) and is
written, before any newer row, by the next write that succeeds, or by a retry in the background every `MEMORY_RETRY_S`
until it is written. Spooled rows are replayed by the next successful write or by `replay()`; each row has an
idempotency key (`invocation_id`), so a row replayed twice, by two processes or after a crash, is stored once.
"""

from __future__ import annotations

import atexit
import builtins
import contextlib
import math
import re
import sqlite3
import threading
import time
import uuid
import weakref
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import quote_plus

from haystack import logging
from haystack.utils import Secret
from pydantic import ValidationError
from sqlalchemy import JSON, Column, event, func, insert
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as SQLAlchemyTimeoutError
from sqlmodel import Field, Session, SQLModel, create_engine, select

from components.core.environment import TRACE_DB_PASSWORD
from components.trace import migrate
from components.trace.bounded_worker import BoundedWorker, DeadlineExceeded
from components.trace.safe_text import safe_json, safe_text
from components.trace.session_key import normalize_principal, session_key, stored_session_id
from components.trace.trace_spool import SpoolBatch, TraceSpool

logger = logging.getLogger(__name__)

_REPLAY_CHUNK = 500
#: errors that mean the database cannot be reached or is busy (the rows wait), not that it refuses a row
_UNAVAILABLE = (OperationalError, InterfaceError, SQLAlchemyTimeoutError, OSError, DeadlineExceeded)
#: the share of `timeout_s` the database's own timeouts get (busy, statement and lock timeouts)
_DATABASE_SHARE = 0.8
#: libpq's floor for connecting; the first use of a store not connected early (connect, schema check) may take this long
_CONNECT_FLOOR_S = 2.0
#: how often rows waiting in memory are tried again when no write comes to take them
MEMORY_RETRY_S = 1.0
#: how long a caller waits for a one-time schema migration running on a database that answers
_MIGRATION_WAIT_S = 30.0
#: an explicit replay gives up when no chunk of rows was stored for this long (or `timeout_s`, if longer)
_REPLAY_STALL_S = 5.0
#: rows kept in memory when neither the database nor the spool can take them
DEFAULT_MEMORY_ROWS = 1000
#: the longest `trace list` / `show` wait for a database that does not answer
BROWSE_TIMEOUT_S = 30.0


def _now() -> datetime:
    return datetime.now(UTC)


def _new_invocation_id() -> str:
    return uuid.uuid4().hex


class ToolInvocation(SQLModel, table=True):
    """One agent tool call: what was asked, what came back, and why (`retrieval_details`)."""

    __tablename__ = "tool_invocation"

    id: int | None = Field(default=None, primary_key=True)
    #: idempotency key: the same call, replayed from the spool twice, is stored once
    invocation_id: str | None = Field(default_factory=_new_invocation_id, unique=True, index=True)
    created_at: datetime = Field(default_factory=_now, index=True)
    tool_name: str = Field(index=True)
    #: the session id, readable (cut to 200 characters: `session_key` is what sessions are matched by)
    session_id: str | None = Field(default=None, index=True)
    #: the digest of the caller's session: its whole normalized id and its principal (`components.trace.session_key`)
    session_key: str | None = Field(default=None, index=True)
    #: the caller's principal name (None: an anonymous caller); session memory is per principal
    principal: str | None = Field(default=None, index=True)
    query: str
    #: the query's length as received (the stored `query` may be cut or escaped)
    query_chars: int | None = None
    found: bool
    status: str = Field(index=True)
    retrieval_layer: str
    fallback_reason: str | None = None
    candidate_count: int = 0
    evidence_block_count: int = 0
    latency_ms: float = 0.0
    error: str | None = None
    retrieval_details: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON))

    def belongs_to(self, principal: str | None) -> bool:
        """
        Whether this row was recorded for `principal`: for checking a caller may see one row (`TraceStore.get`).

        :param principal: The caller's principal; None (or empty) for an anonymous caller, who owns anonymous rows.
        :returns: True when the row's principal is `principal`, compared as stored.
        """
        return self.principal == stored_principal(principal)


def stored_principal(principal: str | None) -> str | None:
    """
    Return a principal as the `principal` column keeps it (`normalize_principal`, made storable by `safe_text`).

    :param principal: The caller's principal.
    :returns: The stored form, or None for an anonymous caller.
    """
    owner = normalize_principal(principal)
    return None if owner is None else safe_text(owner)


#: the environment variable the trace components read the database password from (a Haystack `Secret`)
PASSWORD_ENV = TRACE_DB_PASSWORD.name


#: query parameters that carry a secret: libpq's `password` and `sslpassword`, other drivers' `passwd`, `pwd`,
#: `token`, `secret`, `api_key` (a key file's path, `sslkey`, is masked too: harmless)
_SECRET_PARAMETER = re.compile(r"pass|pwd|secret|token|key", re.IGNORECASE)


def redact_url(url: str) -> str:
    """
    Return a URL safe for logs and traces: the password hidden, in the user part and in query parameters.

    :param url: A SQLAlchemy URL (or a server URI such as `http://user:password@host:19530`).
    :returns: The URL with every password masked (`***`).
    """
    try:
        parsed = make_url(url)
    except Exception:
        return "<unparseable database url>"
    shown = parsed.set(query={}).render_as_string(hide_password=True)
    if not parsed.query:
        return shown
    parameters = [
        f"{quote_plus(key)}={'***' if _SECRET_PARAMETER.search(key) else quote_plus(value)}"
        for key, values in parsed.query.items()
        for value in ((values,) if isinstance(values, str) else values)
    ]
    return f"{shown}?{'&'.join(parameters)}"


def storable(row: ToolInvocation) -> ToolInvocation:
    """
    Return a copy of `row` whose strings every database can store (`safe_text`), keyed by its session.

    :param row: A row.
    :returns: The safe copy; its `session_key` is the digest of its whole `session_id` and its `principal` when it
        had none, its `session_id` the readable form (normalized, cut to `STORED_SESSION_CHARS`), and its
        `principal` None for an anonymous caller.
    """
    data = row.model_dump()
    # the key is taken from the whole id and principal as given: escaping first would make a lone surrogate and its
    # spelled-out escape one session, and cutting first two long ids that differ late
    data["principal"] = normalize_principal(data.get("principal"))
    data["session_key"] = data.get("session_key") or session_key(data.get("session_id"), data["principal"])
    data["session_id"] = stored_session_id(data.get("session_id"))
    for key, value in data.items():
        if isinstance(value, str):
            data[key] = safe_text(value)
    data["retrieval_details"] = safe_json(data.get("retrieval_details") or {})
    return ToolInvocation.model_validate(data)


def spooled_row(raw: Any) -> ToolInvocation | None:
    """
    Return a spooled row as a validated row, or None when it has the wrong shape.

    A row spooled by an older version gets what it lacks: an invocation id, its session key; one spooled before
    principals existed is an anonymous caller's (no `principal`), whose session key is unchanged.

    :param raw: One parsed spool line.
    :returns: The row, or None (the replay moves such rows to the rejected file).
    """
    if not isinstance(raw, dict):
        return None
    try:
        row = ToolInvocation.model_validate(raw)
    except ValidationError:
        return None
    if not row.invocation_id:
        row.invocation_id = _new_invocation_id()
    if not row.session_key:
        row.session_key = session_key(row.session_id, row.principal)
    return row


def evidence_keys(details: Iterable[Any]) -> set[str]:
    """
    Return the evidence keys and text keys in rows' `retrieval_details`, whatever their shape (odd parts are skipped).

    :param details: `retrieval_details` values.
    :returns: The keys.
    """
    keys: set[str] = set()
    for item in details:
        blocks = item.get("evidence_blocks") if isinstance(item, dict) else None
        if not isinstance(blocks, list):
            continue
        for block in blocks:
            for name in ("evidence_key", "text_key"):
                key = block.get(name) if isinstance(block, dict) else None
                if isinstance(key, str) and key:
                    keys.add(key)
    return keys


@dataclass
class ReplayReport:
    """What a replay did."""

    stored: int = 0  # rows inserted
    duplicates: int = 0  # rows already in the database (replayed before), skipped
    rejected: int = 0  # damaged lines and rows of the wrong shape moved aside
    files: int = 0  # spool files claimed
    error: str | None = None  # why the database could not take them (they stay spooled)
    in_progress: int = 0  # spool files another replay is storing right now (not this one's to do)

    def as_dict(self) -> dict[str, Any]:
        """The report as a dict."""
        return dict(self.__dict__)


@dataclass
class TraceWrite:
    """Where a written row went."""

    row_id: int | None = None  # the database's id; None while the row waits in the spool or in memory
    error: str | None = None  # set when neither the database nor the spool took the row: why, in one line


class _MemoryQueue:
    """Rows that neither the database nor the spool could take, oldest first, shared by the stores of one target."""

    def __init__(self, spool_path: Path | None) -> None:
        self.spool_path = spool_path
        self._rows: deque[ToolInvocation] = deque()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._rows)

    def take(self) -> list[ToolInvocation]:
        with self._lock:
            rows = list(self._rows)
            self._rows.clear()
            return rows

    def put_back(self, taken: list[ToolInvocation], new: ToolInvocation | None, limit: int) -> bool:
        """Put taken rows back in front, and `new` at the end if there is room; returns whether `new` was kept."""
        with self._lock:
            self._rows.extendleft(reversed(taken))
            if new is None:
                return True
            if len(self._rows) >= limit:
                return False
            self._rows.append(new)
            return True

    def snapshot(self) -> list[ToolInvocation]:
        with self._lock:
            return list(self._rows)


_MEMORY: dict[tuple[str, str], _MemoryQueue] = {}
_MEMORY_LOCK = threading.Lock()


def _memory_for(database_url: str, spool_path: Path | None) -> _MemoryQueue:
    key = (database_url, str(spool_path.absolute()) if spool_path else "")
    with _MEMORY_LOCK:
        if not _MEMORY:
            atexit.register(_flush_memory_at_exit)
        return _MEMORY.setdefault(key, _MemoryQueue(spool_path))


def _flush_memory_at_exit() -> None:
    """At exit, rows still in memory go to the spool if it can take them now, else each to the error log."""
    for queue in list(_MEMORY.values()):
        rows = queue.take()
        if not rows:
            continue
        try:
            if queue.spool_path is None:
                raise OSError("no spool file configured")
            TraceSpool(queue.spool_path).append_rows([r.model_dump(mode="json") for r in rows])
        except Exception as err:  # last resort: the rows survive in the log
            for row in rows:
                logger.error(
                    "Trace row lost at exit ({error}): {row}", error=safe_text(str(err)), row=row.model_dump_json()
                )


def _retry_memory(store_ref: weakref.ref[TraceStore]) -> None:
    """The background retry of a store's rows in memory; ends when they are written or the store is closed or gone."""
    while True:
        store = store_ref()
        if store is None or store._closed.wait(0) or not len(store._memory):
            return
        closed = store._closed
        del store  # a store dropped while this thread sleeps is not kept alive by it
        if closed.wait(MEMORY_RETRY_S):
            return
        store = store_ref()
        if store is None:
            return
        store._persist(None)
        del store


def _reason(err: BaseException) -> str:
    """One line on what went wrong: the driver's own message (SQLAlchemy's adds the statement and its values)."""
    cause = getattr(err, "orig", None) or err
    lines = str(cause).strip().splitlines()
    return f"{type(err).__name__}: {safe_text(lines[0] if lines else '')[:160]}"


class TraceStore:
    """
    Writes and reads `tool_invocation` rows; a row the database cannot take is spooled, never lost, never doubled.

    ### Usage example

    ```python
    store = TraceStore("sqlite:///data/traces.db", spool_path="data/trace_spool.jsonl")
    row_id = store.write(ToolInvocation(tool_name="lookup_knowledge", query="q", found=False,
                                        status="no_evidence", retrieval_layer="L1"))
    ```
    """

    def __init__(
        self,
        database_url: str,
        spool_path: str | None = None,
        timeout_s: float = 0.5,
        retry_after_s: float = 5.0,
        password: Secret | None = None,
        max_memory_rows: int = DEFAULT_MEMORY_ROWS,
    ) -> None:
        """
        Create the store; the database is connected on first use.

        :param database_url: A SQLAlchemy URL.
        :param spool_path: JSON-lines file for rows that could not be written (None: no spool).
        :param timeout_s: Longest wait for the database per write or session read (the first connection of a store
            not connected early with `connect_soon`: max(2 s, this), libpq's floor); also the longest wait for the
            spool's file lock.
        :param retry_after_s: After a failure, how long writes go straight to the spool.
        :param password: The database password, when it is not in the URL (resolved at the first connection).
        :param max_memory_rows: Most rows kept in memory while neither the database nor the spool can be written.
        """
        self.database_url = database_url
        self.password = password
        self.spool_path = Path(spool_path) if spool_path else None
        self.timeout_s = timeout_s
        self.retry_after_s = retry_after_s
        self.max_memory_rows = max_memory_rows
        self.spool = TraceSpool(spool_path, lock_timeout_s=timeout_s) if spool_path else None
        self._engine: Engine | None = None
        self._engine_lock = threading.Lock()
        self._migrated = False
        self._migrating = False
        self._state = threading.Lock()
        self._down_until = 0.0
        self._reset_engine = False
        self._replay_queued = False
        self._worker: BoundedWorker | None = None
        self._memory_queue: _MemoryQueue | None = None
        self._connect_early = False
        self._memory_retry: threading.Thread | None = None
        self._closed = threading.Event()

    # -- connection ----------------------------------------------------------------------------------------------

    def _connect_args(self) -> dict[str, Any]:
        # the database's own timeouts end a locked or slow statement a little inside the caller's deadline, so that
        # the database says what happened and no statement lingers to commit after the row was spooled; the deadline
        # is for what no database timeout ends (a stopped server, a hung filesystem)
        statement_s = self.timeout_s * _DATABASE_SHARE
        backend = make_url(self.database_url).get_backend_name()
        if backend == "sqlite":
            return {"timeout": statement_s}
        if backend == "postgresql":
            ms = max(1, int(statement_s * 1000))
            return {
                "connect_timeout": max(2, math.ceil(self.timeout_s)),
                "options": f"-c statement_timeout={ms} -c lock_timeout={ms}",
                # the caller never waits on these (the worker's deadline does that); they free a worker blocked on
                # a host that vanished over TCP, which the server's own timeouts cannot
                "keepalives": 1,
                "keepalives_idle": 10,
                "keepalives_interval": 5,
                "keepalives_count": 3,
                "tcp_user_timeout": 30_000,
            }
        return {}

    @staticmethod
    def _write_ahead(connection: sqlite3.Connection, _record: Any) -> None:
        """
        SQLite in write-ahead mode, synced at checkpoints: a row costs a lookup an append, not three fsyncs.

        A committed row survives the process being killed (it is in the operating system's cache); only a crash of
        the machine itself may lose the last ones. Readers (`trace list`, session memory) no longer wait for a writer.
        """
        cursor = connection.cursor()
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
        except sqlite3.OperationalError as err:  # e.g. locked: this connection keeps the database's mode
            logger.warning("SQLite write-ahead mode not set: {error}", error=err)
        finally:
            cursor.close()

    @property
    def engine(self) -> Engine:
        """The engine; the schema is migrated to the newest revision on first use."""
        with self._engine_lock:
            if self._engine is None:
                self._engine = self._create_engine()
            return self._engine

    def _create_engine(self) -> Engine:
        url = make_url(self.database_url)
        if url.get_backend_name() == "sqlite" and url.database and url.database != ":memory:":
            Path(url.database).parent.mkdir(parents=True, exist_ok=True)
        if self.password is not None and (password := self.password.resolve_value()):
            url = url.set(password=password)
        engine = create_engine(url, pool_pre_ping=True, connect_args=self._connect_args())
        if url.get_backend_name() == "sqlite" and url.database and url.database != ":memory:":
            event.listen(engine, "connect", self._write_ahead)
        if not self._migrated:
            try:
                if not migrate.at_head(engine):
                    self._migrating = True  # the database answered: its callers wait for the migration
                    try:
                        migrate.upgrade(engine)
                    finally:
                        self._migrating = False
            except Exception:
                engine.dispose()
                raise
            self._migrated = True
        return engine

    def _dispose_engine(self) -> None:
        with self._engine_lock:
            engine, self._engine = self._engine, None
        if engine is not None:
            engine.dispose()

    def connect_soon(self) -> None:
        """
        Start connecting (and checking the schema) on the worker now, without waiting for it (idempotent).

        From then on every call waits at most `timeout_s`, the first one included: the connection is made while the
        process starts, and a database that does not answer by the first call is skipped like one that stopped
        answering (the row is spooled, session memory is partial).
        """
        with self._state:
            if self._connect_early:
                return
            self._connect_early = True
        self._get_worker().submit(partial(self._on_worker, self._connect_quietly))

    def _connect_quietly(self) -> None:
        try:
            _ = self.engine
        except Exception as err:  # the first call goes to the spool at once instead of trying again
            self._mark_down(err)

    def close(self) -> None:
        """Write what waits in memory if the database or spool take it now, then dispose of the engine."""
        self._closed.set()
        if self._memory_queue is not None and len(self._memory_queue):
            self._persist(None)
        with self._state:
            worker, self._worker = self._worker, None
        if worker is None:
            self._dispose_engine()
            return
        # disposed on the worker, after whatever it is doing: never under a connection it is using
        blocked = worker.stalled_for() > self.timeout_s  # a database that stopped answering is not waited for again
        task = worker.submit(self._dispose_engine)
        worker.stop()
        try:
            worker.wait(task, 0.0 if blocked else self.timeout_s, cancel=False)
        except DeadlineExceeded:
            logger.warning(
                "Trace database {url} still busy at close; its connections are closed when it answers",
                url=redact_url(self.database_url),
            )

    # -- the worker ----------------------------------------------------------------------------------------------

    def _get_worker(self) -> BoundedWorker:
        with self._state:
            if self._worker is None:
                self._worker = BoundedWorker(f"trace-db-{id(self):x}")
                # a store dropped without `close` must not leave its idle thread behind
                weakref.finalize(self, self._worker.stop)
            return self._worker

    def _on_worker(self, fn: Callable[[], Any]) -> Any:
        if self._reset_engine:  # a failure was seen: reconnect (a replaced database gets its table again)
            self._reset_engine = False
            self._dispose_engine()
        return fn()

    def _budget(self) -> float:
        connected = (self._engine is not None or self._connect_early) and not self._reset_engine
        return self.timeout_s if connected else max(self.timeout_s, _CONNECT_FLOOR_S)

    def _call(self, fn: Callable[[], Any], budget: float) -> Any:
        """Run database work on the worker, waiting at most `budget` (longer only for a running migration)."""
        worker = self._get_worker()
        started = time.monotonic()

        def migrating() -> bool:
            return self._migrating and time.monotonic() - started < _MIGRATION_WAIT_S

        return worker.run(partial(self._on_worker, fn), budget, extend=migrating)

    def _down_reason(self) -> str | None:
        """Why the database is not to be tried now, or None."""
        if time.monotonic() < self._down_until:
            return "unavailable (a recent failure)"
        stalled = self._worker.stalled_for() if self._worker is not None else 0.0
        if stalled > self.timeout_s and not self._migrating:
            return f"has not answered the previous call for {stalled:.1f} s"
        return None

    def _mark_down(self, err: BaseException) -> None:
        logger.warning(
            "Trace database {url} unavailable ({error}); spooling trace rows for {seconds} s",
            url=redact_url(self.database_url),
            error=type(err).__name__,
            seconds=self.retry_after_s,
        )
        with self._state:
            self._down_until = time.monotonic() + self.retry_after_s
            self._migrated = False
            self._reset_engine = True

    @property
    def _memory(self) -> _MemoryQueue:
        if self._memory_queue is None:
            self._memory_queue = _memory_for(self.database_url, self.spool_path)
        return self._memory_queue

    # -- writing -------------------------------------------------------------------------------------------------

    def write(self, row: ToolInvocation) -> int | None:
        """
        Persist a row, then replay any spooled rows.

        :param row: The row.
        :returns: The row id, or None when the database is unavailable (the row is spooled, or kept in memory when
            the spool cannot be written either: `record` says so). Never raises.
        """
        return self.record(row).row_id

    def record(self, row: ToolInvocation) -> TraceWrite:
        """
        Persist a row (after the rows waiting in memory), then replay any spooled rows; wait at most the budget.

        :param row: The row.
        :returns: Its id, or None and, when neither the database nor the spool took it, the one-line reason (the
            row then waits in memory). Never raises.
        """
        return self._persist(storable(row))

    def _persist(self, row: ToolInvocation | None) -> TraceWrite:
        rows = self._memory.take()
        if row is not None:
            rows.append(row)
        if not rows:
            return TraceWrite()
        started = time.monotonic()
        budget = self._budget()
        database = self._down_reason()
        if database is None:
            try:
                row_id = self._call(partial(self._insert_rows, rows, row is not None), budget)
            except DeadlineExceeded as err:
                database = f"did not answer within {budget:g} s"
                self._mark_down(err)
            except Exception as err:
                database = f"unavailable ({_reason(err)})"
                self._mark_down(err)
            else:
                self._replay_in_background(deadline=started + budget)
                return TraceWrite(row_id)
        spool = self._spool_rows(rows)
        if spool is None:
            return TraceWrite()
        return TraceWrite(error=self._keep_in_memory(rows, row, database, spool))

    def _insert_rows(self, rows: list[ToolInvocation], last_is_new: bool) -> int | None:
        """Insert rows waiting in memory (those not stored yet), then the new row; returns the new row's id."""
        # a Core insert of the row's values: the ORM's unit of work (add, flush, commit) cost each lookup 1.4 ms
        # of its 2.3 ms here, for one row it never reads back
        table = ToolInvocation.__table__  # type: ignore[attr-defined]
        waiting = rows[:-1] if last_is_new else rows
        with self.engine.begin() as connection:
            if waiting:  # a blocked write may have stored some of them after its caller gave up: insert by key
                self._insert_missing(connection, waiting)
            if not last_is_new:
                return None
            result = connection.execute(insert(table), rows[-1].model_dump(exclude={"id"}))
            return int(result.inserted_primary_key[0])  # type: ignore[index]  # one row inserted: its key

    def _spool_rows(self, rows: list[ToolInvocation]) -> str | None:
        """Append rows to the spool; returns None, or why they could not be."""
        if self.spool is None:
            return "not configured"
        try:
            self.spool.append_rows([r.model_dump(mode="json") for r in rows])
        except Exception as err:
            return f"not writable ({_reason(err)})"
        return None

    def _keep_in_memory(
        self, rows: list[ToolInvocation], new: ToolInvocation | None, database: str, spool: str
    ) -> str | None:
        taken = rows[:-1] if new is not None else rows
        kept = self._memory.put_back(taken, new, self.max_memory_rows)
        if new is None:
            return None
        if not kept:  # last resort: the row survives in the log
            logger.error(
                "Trace row lost: database {database}, spool {spool}, {limit} rows already in memory: {row}",
                database=database,
                spool=spool,
                limit=self.max_memory_rows,
                row=new.model_dump_json(),
            )
            return (
                f"trace row not recorded: database {database}; spool {spool}; memory queue full "
                f"({self.max_memory_rows} rows); the row is in the error log"
            )
        waiting = len(self._memory)
        self._retry_memory_soon()
        logger.error(
            "Trace row kept in memory ({waiting} waiting): database {database}, spool {spool}",
            waiting=waiting,
            database=database,
            spool=spool,
        )
        return (
            f"trace row kept in memory ({waiting} waiting): database {database}; spool {spool}; "
            "it is written when either can be"
        )

    def _retry_memory_soon(self) -> None:
        """Try the rows waiting in memory again every `MEMORY_RETRY_S` until they are written (no write may come)."""
        with self._state:
            if self._memory_retry is not None and self._memory_retry.is_alive():
                return
            self._memory_retry = threading.Thread(
                target=_retry_memory, args=(weakref.ref(self),), name="trace-memory-retry", daemon=True
            )
            self._memory_retry.start()

    # -- replay --------------------------------------------------------------------------------------------------

    def _replay_in_background(self, deadline: float) -> None:
        """After a write, replay the spool on the worker; wait for it only until the write's deadline."""
        if self.spool is None or not self.spool.pending():
            return
        with self._state:
            if self._replay_queued:
                return
            self._replay_queued = True
        worker = self._get_worker()
        task = worker.submit(partial(self._on_worker, self._background_replay))
        with contextlib.suppress(Exception):  # it goes on (or fails and logs) on its own
            worker.wait(task, max(0.0, deadline - time.monotonic()), cancel=False)

    def _background_replay(self) -> ReplayReport:
        try:
            return self._replay(yield_to_writes=True)
        finally:
            self._replay_queued = False

    def replay(self) -> ReplayReport:
        """
        Store every spooled row now (`lookup-knowledge trace replay`), and the rows waiting in memory.

        Gives up when the database stores no chunk of rows for max(5 s, `timeout_s`); the rows then stay spooled.

        :returns: What was stored, skipped as already stored, and moved aside as damaged; and how many spool files
            another replay is storing right now.
        """
        with self._state:
            self._down_until = 0.0
        if self._memory_queue is not None and len(self._memory_queue):
            self._persist(None)
        worker = self._get_worker()
        stall = max(self.timeout_s, _REPLAY_STALL_S)
        task = worker.submit(partial(self._on_worker, self._replay))
        try:
            return worker.wait(task, stall, extend=lambda: worker.stalled_for() < stall or self._migrating)
        except DeadlineExceeded as err:
            self._mark_down(err)
            return ReplayReport(error=f"the trace database did not answer within {stall:g} s; rows stay spooled")

    def _replay(self, yield_to_writes: bool = False) -> ReplayReport:
        report = ReplayReport()
        if self.spool is None:
            return report
        try:
            _ = self.engine  # connected and migrated, or the rows stay where they are
        except Exception as err:
            report.error = _reason(err)
            self._mark_down(err)
            return report
        stop = False
        for batch in self.spool.claim():
            report.files += 1
            report.rejected += batch.rejected
            if stop:  # the database went away, or writes wait: the rest is claimed again next time
                self.spool.release(batch)
                continue
            try:
                finished = self._replay_batch(batch, report, yield_to_writes)
            except _UNAVAILABLE as err:
                self.spool.release(batch)
                report.error = _reason(err)
                self._mark_down(err)
                stop = True
                continue
            stop = not finished
        report.in_progress = self.spool.in_progress()
        if report.stored or report.rejected:
            logger.info(
                "Replayed the trace spool: {stored} rows stored, {duplicates} already stored, {rejected} damaged",
                stored=report.stored,
                duplicates=report.duplicates,
                rejected=report.rejected,
            )
        return report

    def _replay_batch(self, batch: SpoolBatch, report: ReplayReport, yield_to_writes: bool) -> bool:
        """Store one claimed file's rows chunk by chunk; returns False when it stopped early (the file is released)."""
        rows, invalid = [], []
        for raw in batch.rows:
            row = spooled_row(raw)
            if row is None:
                invalid.append(raw)
            else:
                rows.append(row)
        refused: list[ToolInvocation] = []
        for start in range(0, len(rows), _REPLAY_CHUNK):
            chunk = rows[start : start + _REPLAY_CHUNK]
            stored, bad = self._insert_chunk(chunk)
            report.stored += stored
            report.duplicates += len(chunk) - stored - len(bad)
            refused.extend(bad)
            self.spool.keep(batch)  # type: ignore[union-attr]  # a replay runs with a spool
            if self._worker is not None:
                self._worker.progress()
            more = start + _REPLAY_CHUNK < len(rows)
            if more and yield_to_writes and self._worker is not None and self._worker.waiting():
                self.spool.release(batch)  # type: ignore[union-attr]  # stored rows are skipped next time, by key
                return False
        aside = invalid + [r.model_dump(mode="json") for r in refused]
        if invalid:
            logger.warning(
                "Trace spool {path}: {count} rows of the wrong shape moved aside",
                path=str(batch.path),
                count=len(invalid),
            )
        try:
            self.spool.reject(aside)  # type: ignore[union-attr]
        except OSError as err:  # the file keeps them; the next replay tries again
            logger.warning("Trace spool rows could not be moved aside ({error})", error=_reason(err))
            self.spool.release(batch)  # type: ignore[union-attr]
            return True
        report.rejected += len(aside)
        self.spool.done(batch)  # type: ignore[union-attr]
        return True

    def _insert_chunk(self, rows: list[ToolInvocation]) -> tuple[int, list[ToolInvocation]]:
        """Insert the rows not stored yet; returns how many were inserted and the rows the database refused."""
        try:
            with self.engine.begin() as connection:
                return self._insert_missing(connection, rows), []
        except _UNAVAILABLE:
            raise
        except Exception as err:  # a row the database refuses must not hold back the others: one at a time
            logger.info("Trace rows refused as a chunk ({error}); inserting one at a time", error=type(err).__name__)
        stored, refused = 0, []
        for row in rows:
            try:
                with self.engine.begin() as connection:
                    stored += self._insert_missing(connection, [row])
            except _UNAVAILABLE:
                raise
            except Exception as err:
                if self._is_stored(row.invocation_id):  # another replay stored it between our check and insert
                    continue
                logger.warning("Trace row refused by the database ({error}); moved aside", error=type(err).__name__)
                refused.append(row)
        return stored, refused

    def _is_stored(self, invocation_id: str | None) -> bool:
        table = ToolInvocation.__table__  # type: ignore[attr-defined]
        with self.engine.connect() as connection:
            query = select(func.count()).select_from(table).where(table.c.invocation_id == invocation_id)
            return bool(connection.execute(query).scalar())

    @staticmethod
    def _insert_missing(connection: Connection, rows: list[ToolInvocation]) -> int:
        """Insert the rows whose invocation id is not stored yet; returns how many were inserted."""
        table = ToolInvocation.__table__  # type: ignore[attr-defined]
        values = [r.model_dump(exclude={"id"}) for r in rows]
        ids = [v["invocation_id"] for v in values]
        known = set(connection.execute(select(table.c.invocation_id).where(table.c.invocation_id.in_(ids))).scalars())
        fresh: dict[str, dict[str, Any]] = {}
        for value in values:
            if value["invocation_id"] not in known:
                fresh.setdefault(value["invocation_id"], value)
        if fresh:
            connection.execute(insert(table), list(fresh.values()))
        return len(fresh)

    # -- reading -------------------------------------------------------------------------------------------------

    def list(
        self,
        limit: int = 20,
        session_id: str | None = None,
        status: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        principal: str | None = None,
    ) -> list[ToolInvocation]:
        """
        Return the newest rows first.

        :param limit: Most rows.
        :param session_id: Only this session's rows (matched by its whole normalized id): with `principal`, that
            principal's session; without, the session of that id of every principal and of anonymous callers.
        :param status: Only rows with this `evidenceStatus`.
        :param since: Only rows created at or after this time.
        :param until: Only rows created before this time.
        :param principal: Only rows recorded for this principal (None: every row; the empty string, no principal's
            name, matches none).
        :returns: Rows.
        :raises TimeoutError: If the database does not answer within `BROWSE_TIMEOUT_S`.
        """

        def read(session: Session) -> builtins.list[ToolInvocation]:
            return list(session.exec(self._list_query(session, limit, session_id, status, since, until, principal)))

        return self._browse(read)

    @staticmethod
    def _list_query(
        session: Session,
        limit: int,
        session_id: str | None,
        status: str | None,
        since: datetime | None,
        until: datetime | None,
        principal: str | None,
    ) -> Any:
        query = select(ToolInvocation)
        if principal is not None:
            query = query.where(ToolInvocation.principal == safe_text(principal))
        if session_key(session_id) is not None:
            if principal is not None:
                keys = {session_key(session_id, principal)}
            else:
                # a session id is a session of each principal that used it: their keys, from the principals
                # recorded under its readable id (an indexed column, stored as `storable` keeps it)
                readable = safe_text(stored_session_id(session_id) or "")
                owners = session.exec(
                    select(ToolInvocation.principal).where(ToolInvocation.session_id == readable).distinct()
                )
                keys = {session_key(session_id, owner) for owner in owners} | {session_key(session_id)}
            query = query.where(ToolInvocation.session_key.in_(keys))  # type: ignore[union-attr]
        if status:
            query = query.where(ToolInvocation.status == status)
        if since is not None:
            query = query.where(ToolInvocation.created_at >= since)
        if until is not None:
            query = query.where(ToolInvocation.created_at < until)
        return query.order_by(ToolInvocation.created_at.desc(), ToolInvocation.id.desc()).limit(limit)  # type: ignore[attr-defined,union-attr]

    def get(self, row_id: int) -> ToolInvocation | None:
        """
        Return one row (whose principal a caller checks with `ToolInvocation.belongs_to`).

        :param row_id: The id.
        :returns: The row, or None.
        :raises TimeoutError: If the database does not answer within `BROWSE_TIMEOUT_S`.
        """
        return self._browse(lambda session: session.get(ToolInvocation, row_id))

    def count(self) -> int:
        """
        Count the stored rows.

        :returns: The number of rows.
        :raises TimeoutError: If the database does not answer within `BROWSE_TIMEOUT_S`.
        """
        return self._browse(lambda session: int(session.exec(select(func.count()).select_from(ToolInvocation)).one()))

    def _browse(self, read: Callable[[Session], Any]) -> Any:
        """Read rows on the worker: a database that stopped answering costs `trace list` a bounded wait, not a hang."""

        def run() -> Any:
            with Session(self.engine) as session:
                return read(session)

        try:
            return self._call(run, max(self.timeout_s, BROWSE_TIMEOUT_S))
        except DeadlineExceeded:
            msg = (
                f"the trace database {redact_url(self.database_url)} did not answer within "
                f"{max(self.timeout_s, BROWSE_TIMEOUT_S):g} s"
            )
            raise TimeoutError(msg) from None

    def session_memory(self, session_id: str, principal: str | None = None) -> tuple[set[str], str | None]:
        """
        Return the evidence keys already returned as consumable evidence in a session, spooled rows included.

        Waits for the database at most `timeout_s` (the first connection of a store not connected early: 2 s).
        Spooled rows of the wrong shape are skipped with a warning (the replay moves them aside).

        :param session_id: The session (matched by its whole normalized id).
        :param principal: The caller's principal (None or empty: an anonymous caller): a session is its principal's,
            and the rows of the database, the spool and the memory queue are matched by that principal's session key.
        :returns: The keys, and None, or the reason the database could not be read (then the keys are those of the
            spooled rows and of rows waiting in memory alone: a partial memory, never an exception).
        """
        key = session_key(session_id, principal)
        if key is None:
            return set(), None
        details: builtins.list[Any] = []
        error = self._down_reason()
        if error is not None:
            error = f"trace database {error}"
        else:
            budget = self._budget()
            try:
                details.extend(self._call(partial(self._read_session, key), budget))
            except DeadlineExceeded as err:
                error = f"trace database did not answer within {budget:g} s"
                self._mark_down(err)
            except Exception as err:
                error = f"trace database unavailable ({type(err).__name__})"
                self._mark_down(err)
        details.extend(self._waiting_details(key))
        return evidence_keys(details), error

    def _read_session(self, key: str) -> builtins.list[Any]:
        with Session(self.engine) as session:
            query = select(ToolInvocation.retrieval_details).where(
                ToolInvocation.session_key == key,
                ToolInvocation.found == True,  # noqa: E712
            )
            return list(session.exec(query))  # type: ignore[call-overload]

    def _waiting_details(self, key: str) -> builtins.list[Any]:
        """The `retrieval_details` of this session's `found` rows that wait in the spool or in memory."""
        waiting = list(self._memory.snapshot())
        wrong_shape = 0
        if self.spool is not None:
            for raw in self.spool.rows():
                row = spooled_row(raw)
                if row is None:
                    wrong_shape += 1
                else:
                    waiting.append(row)
        if wrong_shape:
            logger.warning(
                "Trace spool {path}: {count} rows of the wrong shape skipped by session memory (a replay moves them "
                "aside)",
                path=str(self.spool_path),
                count=wrong_shape,
            )
        return [r.retrieval_details for r in waiting if r.session_key == key and r.found]
