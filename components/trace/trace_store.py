"""The `tool_invocation` table (sqlmodel) and a store that records every call exactly once.

SQLite in the data folder by default, any SQLAlchemy URL (PostgreSQL with psycopg) by configuration; the schema is
brought to the newest Alembic revision on first use (`components.trace.migrate`). When the database cannot be
written within `timeout_s`, the row goes to the spool (`TraceSpool`) and the database is left alone for
`retry_after_s`, so a slow or locked database costs one lookup the timeout and the following ones nothing. Spooled
rows are replayed by the next successful write or by `replay()`; each row has an idempotency key
(`invocation_id`), so a row replayed twice, by two processes or after a crash, is stored once.
"""

from __future__ import annotations

import math
import sqlite3
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from haystack import logging
from haystack.utils import Secret
from sqlalchemy import JSON, Column, event, func, insert
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as SQLAlchemyTimeoutError
from sqlmodel import Field, Session, SQLModel, create_engine, select

from components.trace import migrate
from components.trace.safe_text import safe_json, safe_text
from components.trace.trace_spool import TraceSpool

logger = logging.getLogger(__name__)

_REPLAY_CHUNK = 500
#: errors that mean the database cannot be reached or is busy (the rows wait), not that it refuses a row
_UNAVAILABLE = (OperationalError, InterfaceError, SQLAlchemyTimeoutError, OSError)


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
    session_id: str | None = Field(default=None, index=True)
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


#: the environment variable the trace components read the database password from (a Haystack `Secret`)
PASSWORD_ENV = "TRACE_DB_PASSWORD"  # noqa: S105 - a variable name, not a password


def redact_url(url: str) -> str:
    """
    Return a database URL safe for logs and traces (password hidden).

    :param url: A SQLAlchemy URL.
    :returns: The URL with its password masked.
    """
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return "<unparseable database url>"


def storable(row: ToolInvocation) -> ToolInvocation:
    """
    Return a copy of `row` whose strings every database can store (`safe_text`).

    :param row: A row.
    :returns: The safe copy.
    """
    data = row.model_dump()
    for key, value in data.items():
        if isinstance(value, str):
            data[key] = safe_text(value)
    data["retrieval_details"] = safe_json(data.get("retrieval_details") or {})
    return ToolInvocation.model_validate(data)


@dataclass
class ReplayReport:
    """What a replay did."""

    stored: int = 0  # rows inserted
    duplicates: int = 0  # rows already in the database (replayed before), skipped
    rejected: int = 0  # damaged lines moved aside
    files: int = 0  # spool files claimed
    error: str | None = None  # why the database could not take them (they stay spooled)

    def as_dict(self) -> dict[str, Any]:
        """The report as a dict."""
        return dict(self.__dict__)


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
    ) -> None:
        """
        Create the store; the database is connected on first use.

        :param database_url: A SQLAlchemy URL.
        :param spool_path: JSON-lines file for rows that could not be written (None: no spool).
        :param timeout_s: Longest wait for a locked or slow database per statement (PostgreSQL connects within
            max(2 s, this), libpq's floor).
        :param retry_after_s: After a failure, how long writes go straight to the spool.
        :param password: The database password, when it is not in the URL (resolved at the first connection).
        """
        self.database_url = database_url
        self.password = password
        self.spool_path = Path(spool_path) if spool_path else None
        self.timeout_s = timeout_s
        self.retry_after_s = retry_after_s
        self.spool = TraceSpool(spool_path) if spool_path else None
        self._engine: Engine | None = None
        self._migrated = False
        self._lock = threading.Lock()
        self._down_until = 0.0

    def _connect_args(self) -> dict[str, Any]:
        backend = make_url(self.database_url).get_backend_name()
        if backend == "sqlite":
            return {"timeout": self.timeout_s}
        if backend == "postgresql":
            ms = max(1, int(self.timeout_s * 1000))
            return {
                "connect_timeout": max(2, math.ceil(self.timeout_s)),
                "options": f"-c statement_timeout={ms} -c lock_timeout={ms}",
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
        if self._engine is None:
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
                    migrate.upgrade(engine)
                except Exception:
                    engine.dispose()
                    raise
                self._migrated = True
            self._engine = engine
        return self._engine

    def close(self) -> None:
        """Dispose of the engine."""
        if self._engine is not None:
            self._engine.dispose()
        self._engine = None

    def _available(self) -> bool:
        return time.monotonic() >= self._down_until

    def _mark_down(self, err: Exception) -> None:
        logger.warning(
            "Trace database {url} unavailable ({error}); spooling trace rows for {seconds} s",
            url=redact_url(self.database_url),
            error=type(err).__name__,
            seconds=self.retry_after_s,
        )
        self._down_until = time.monotonic() + self.retry_after_s
        self._migrated = False  # a database that was replaced meanwhile gets its table again on reconnect
        self.close()

    def write(self, row: ToolInvocation) -> int | None:
        """
        Persist a row, then replay any spooled rows.

        :param row: The row.
        :returns: The row id, or None when the database is unavailable (the row is spooled, or logged when no
            spool file is configured or writable). Never raises.
        """
        row = storable(row)
        with self._lock:
            row_id = self._insert(row) if self._available() else None
            if row_id is None:
                self._spool(row)
            elif self.spool is not None and self.spool.pending():
                self._replay()
            return row_id

    def _insert(self, row: ToolInvocation) -> int | None:
        # a Core insert of the row's values: the ORM's unit of work (add, flush, commit) cost each lookup 1.4 ms
        # of its 2.3 ms here, for one row it never reads back
        table = ToolInvocation.__table__  # type: ignore[attr-defined]
        try:
            with self.engine.begin() as connection:
                result = connection.execute(insert(table), row.model_dump(exclude={"id"}))
                return int(result.inserted_primary_key[0])  # type: ignore[index]  # one row inserted: its key
        except Exception as err:
            self._mark_down(err)
            return None

    def _spool(self, row: ToolInvocation) -> None:
        try:
            if self.spool is None:
                raise OSError("no spool file configured")
            self.spool.append(row.model_dump(mode="json"))
        except Exception as err:  # last resort: the row survives in the log
            logger.error(
                "Trace row could not be spooled ({error}): {row}",
                error=safe_text(str(err)),
                row=row.model_dump_json(),
            )

    def replay(self) -> ReplayReport:
        """
        Store every spooled row now (`lookup-knowledge trace replay`).

        :returns: What was stored, skipped as already stored, and moved aside as damaged.
        """
        with self._lock:
            self._down_until = 0.0
            return self._replay()

    def _replay(self) -> ReplayReport:
        report = ReplayReport()
        if self.spool is None:
            return report
        try:
            _ = self.engine  # connected and migrated, or the rows stay where they are
        except Exception as err:
            report.error = f"{type(err).__name__}: {safe_text(str(err))[:200]}"
            self._mark_down(err)
            return report
        for batch in self.spool.claim():
            report.files += 1
            report.rejected += batch.rejected
            try:
                try:
                    stored = self._insert_new(batch.rows)
                except _UNAVAILABLE:
                    raise
                except Exception:  # a row the database refuses must not hold back the others: one at a time
                    stored, refused = self._insert_one_by_one(batch.rows)
                    self.spool.reject(refused)
                    report.rejected += len(refused)
                    batch.rows = [r for r in batch.rows if r not in refused]
            except _UNAVAILABLE as err:
                self.spool.release(batch)
                report.error = f"{type(err).__name__}: {safe_text(str(err))[:200]}"
                self._mark_down(err)
                continue
            report.stored += stored
            report.duplicates += len(batch.rows) - stored
            self.spool.done(batch)
        if report.stored or report.rejected:
            logger.info(
                "Replayed the trace spool: {stored} rows stored, {duplicates} already stored, {rejected} damaged",
                stored=report.stored,
                duplicates=report.duplicates,
                rejected=report.rejected,
            )
        return report

    def _insert_one_by_one(self, rows: list[dict[str, Any]]) -> tuple[int, list[dict[str, Any]]]:
        stored, refused = 0, []
        for row in rows:
            try:
                stored += self._insert_new([row])
            except _UNAVAILABLE:
                raise
            except Exception as err:
                logger.warning("Trace row refused by the database ({error}); moved aside", error=type(err).__name__)
                refused.append(row)
        return stored, refused

    def _insert_new(self, rows: list[dict[str, Any]]) -> int:
        """Insert the rows whose invocation id is not stored yet; returns how many were inserted."""
        table = ToolInvocation.__table__  # type: ignore[attr-defined]
        stored = 0
        with self.engine.begin() as connection:
            for start in range(0, len(rows), _REPLAY_CHUNK):
                chunk = [_spooled_values(r) for r in rows[start : start + _REPLAY_CHUNK]]
                ids = [v["invocation_id"] for v in chunk]
                known = set(
                    connection.execute(select(table.c.invocation_id).where(table.c.invocation_id.in_(ids))).scalars()
                )
                fresh = {v["invocation_id"]: v for v in chunk if v["invocation_id"] not in known}
                if fresh:
                    connection.execute(insert(table), list(fresh.values()))
                    stored += len(fresh)
        return stored

    def list(
        self,
        limit: int = 20,
        session_id: str | None = None,
        status: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> list[ToolInvocation]:
        """
        Return the newest rows first.

        :param limit: Most rows.
        :param session_id: Only this session's rows.
        :param status: Only rows with this `evidenceStatus`.
        :param since: Only rows created at or after this time.
        :param until: Only rows created before this time.
        :returns: Rows.
        """
        query = select(ToolInvocation)
        if session_id:
            query = query.where(ToolInvocation.session_id == safe_text(session_id))
        if status:
            query = query.where(ToolInvocation.status == status)
        if since is not None:
            query = query.where(ToolInvocation.created_at >= since)
        if until is not None:
            query = query.where(ToolInvocation.created_at < until)
        query = query.order_by(ToolInvocation.created_at.desc(), ToolInvocation.id.desc()).limit(limit)  # type: ignore[attr-defined,union-attr]
        with Session(self.engine) as session:
            return list(session.exec(query))

    def get(self, row_id: int) -> ToolInvocation | None:
        """
        Return one row.

        :param row_id: The id.
        :returns: The row, or None.
        """
        with Session(self.engine) as session:
            return session.get(ToolInvocation, row_id)

    def count(self) -> int:
        """
        Count the stored rows.

        :returns: The number of rows.
        """
        with Session(self.engine) as session:
            return int(session.exec(select(func.count()).select_from(ToolInvocation)).one())

    def session_memory(self, session_id: str) -> tuple[set[str], str | None]:
        """
        Return the evidence keys already returned as consumable evidence in a session, spooled rows included.

        :param session_id: The session.
        :returns: The keys, and None, or the reason the database could not be read (then the keys are the spooled
            rows' alone: a partial memory, never an exception).
        """
        session_id = safe_text(session_id)
        details: list[Any] = []
        error = None
        if not self._available():
            error = "trace database unavailable (recent failure)"
        else:
            try:
                with Session(self.engine) as session:
                    query = select(ToolInvocation.retrieval_details).where(
                        ToolInvocation.session_id == session_id,
                        ToolInvocation.found == True,  # noqa: E712
                    )
                    details.extend(session.exec(query))  # type: ignore[arg-type]
            except Exception as err:
                error = f"trace database unavailable ({type(err).__name__})"
                with self._lock:
                    self._mark_down(err)
        if self.spool is not None:
            details.extend(
                r.get("retrieval_details") or {}
                for r in self.spool.rows()
                if r.get("session_id") == session_id and r.get("found")
            )
        keys = {
            block["evidence_key"]
            for item in details
            for block in (item or {}).get("evidence_blocks", [])
            if isinstance(block, dict) and block.get("evidence_key")
        }
        return keys, error


def _spooled_values(row: dict[str, Any]) -> dict[str, Any]:
    """A spooled row as column values (validated by the model, so a row from an older version still fits)."""
    values = ToolInvocation.model_validate(row).model_dump(exclude={"id"})
    if not values.get("invocation_id"):
        values["invocation_id"] = _new_invocation_id()
    return values
