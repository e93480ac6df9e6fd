"""The `tool_invocation` table (sqlmodel) and a store that never loses a row.

SQLite in the data folder by default, any SQLAlchemy URL (e.g. PostgreSQL) by configuration. When the database
cannot be written, the row goes to a JSON-lines spool file next to the data and is replayed into the database
by the next successful write, so a trace store that is down neither fails the lookup nor loses its trace.
"""

from __future__ import annotations

import json
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from haystack import logging
from sqlalchemy import JSON, Column
from sqlalchemy.engine import Engine, make_url
from sqlmodel import Field, Session, SQLModel, create_engine, select

logger = logging.getLogger(__name__)


def _now() -> datetime:
    return datetime.now(timezone.utc)


class ToolInvocation(SQLModel, table=True):
    """One agent tool call: what was asked, what came back, and why (`retrieval_details`)."""

    __tablename__ = "tool_invocation"

    id: int | None = Field(default=None, primary_key=True)
    created_at: datetime = Field(default_factory=_now, index=True)
    tool_name: str = Field(index=True)
    session_id: str | None = Field(default=None, index=True)
    query: str
    found: bool
    status: str
    retrieval_layer: str
    fallback_reason: str | None = None
    candidate_count: int = 0
    evidence_block_count: int = 0
    latency_ms: float = 0.0
    error: str | None = None
    retrieval_details: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON))


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


class TraceStore:
    """
    Writes and reads `tool_invocation` rows, spooling to a file when the database is unavailable.

    ### Usage example

    ```python
    store = TraceStore("sqlite:///data/traces.db", spool_path="data/trace_spool.jsonl")
    row_id = store.write(ToolInvocation(tool_name="lookup_knowledge", query="q", found=False,
                                        status="no_evidence", retrieval_layer="L1"))
    ```
    """

    def __init__(self, database_url: str, spool_path: str | None = None) -> None:
        """
        Create the store; the database is connected on first use.

        :param database_url: A SQLAlchemy URL.
        :param spool_path: JSON-lines file for rows that could not be written (None: no spool).
        """
        self.database_url = database_url
        self.spool_path = Path(spool_path) if spool_path else None
        self._engine: Engine | None = None
        self._lock = threading.Lock()

    @property
    def engine(self) -> Engine:
        """The engine; the tables are created on first use."""
        if self._engine is None:
            url = make_url(self.database_url)
            if url.get_backend_name() == "sqlite" and url.database and url.database != ":memory:":
                Path(url.database).parent.mkdir(parents=True, exist_ok=True)
            engine = create_engine(self.database_url, pool_pre_ping=True)
            SQLModel.metadata.create_all(engine, tables=[ToolInvocation.__table__])  # type: ignore[attr-defined]
            self._engine = engine
        return self._engine

    def close(self) -> None:
        """Dispose of the engine."""
        if self._engine is not None:
            self._engine.dispose()
        self._engine = None

    def _spool(self, row: ToolInvocation) -> None:
        if self.spool_path is None:
            raise RuntimeError("trace database unavailable and no spool file configured")
        self.spool_path.parent.mkdir(parents=True, exist_ok=True)
        with self.spool_path.open("a", encoding="utf-8") as handle:
            handle.write(row.model_dump_json() + "\n")

    def _replay_spool(self, session: Session) -> None:
        if self.spool_path is None or not self.spool_path.exists():
            return
        lines = self.spool_path.read_text(encoding="utf-8").splitlines()
        for line in lines:
            if line.strip():
                session.add(ToolInvocation.model_validate(json.loads(line)))
        session.commit()
        self.spool_path.unlink()
        logger.info("Replayed {count} spooled trace rows", count=len(lines))

    def write(self, row: ToolInvocation) -> int | None:
        """
        Persist a row (and any spooled rows before it).

        :param row: The row.
        :returns: The row id, or None when the database is unavailable (the row is spooled, or logged when no
            spool file is configured or writable). Never raises.
        """
        with self._lock:
            try:
                with Session(self.engine) as session:
                    self._replay_spool(session)
                    session.add(row)
                    session.commit()
                    session.refresh(row)
                    return row.id
            except Exception as err:
                logger.warning(
                    "Trace database {url} unavailable ({error}); spooling the trace row",
                    url=redact_url(self.database_url),
                    error=type(err).__name__,
                )
                self._engine = None
                try:
                    self._spool(row)
                except Exception as spool_err:  # last resort: the row survives in the log
                    logger.error(
                        "Trace row could not be spooled ({error}): {row}",
                        error=spool_err,
                        row=row.model_dump_json(),
                    )
                return None

    def list(self, limit: int = 20, session_id: str | None = None) -> list[ToolInvocation]:
        """
        Return the newest rows first.

        :param limit: Most rows.
        :param session_id: Only this session's rows.
        :returns: Rows.
        """
        with Session(self.engine) as session:
            query = select(ToolInvocation).order_by(ToolInvocation.id.desc()).limit(limit)  # type: ignore[union-attr]
            if session_id:
                query = query.where(ToolInvocation.session_id == session_id)
            return list(session.exec(query))

    def get(self, row_id: int) -> ToolInvocation | None:
        """
        Return one row.

        :param row_id: The id.
        :returns: The row, or None.
        """
        with Session(self.engine) as session:
            return session.get(ToolInvocation, row_id)

    def returned_evidence_keys(self, session_id: str) -> set[str]:
        """
        Return the evidence keys already returned as consumable evidence in a session (spooled rows included).

        :param session_id: The session.
        :returns: Evidence keys.
        """
        rows: list[Any] = []
        with Session(self.engine) as session:
            query = select(ToolInvocation.retrieval_details).where(
                ToolInvocation.session_id == session_id,
                ToolInvocation.found == True,  # noqa: E712
            )
            rows.extend(session.exec(query))  # type: ignore[arg-type]
        if self.spool_path is not None and self.spool_path.exists():
            for line in self.spool_path.read_text(encoding="utf-8").splitlines():
                data = json.loads(line) if line.strip() else {}
                if data.get("session_id") == session_id and data.get("found"):
                    rows.append(data.get("retrieval_details") or {})
        return {
            block["evidence_key"]
            for details in rows
            for block in (details or {}).get("evidence_blocks", [])
            if block.get("evidence_key")
        }
