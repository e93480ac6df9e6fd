from __future__ import annotations

import time
from typing import Any

from haystack import component, logging
from haystack.utils import Secret

from components.core.frozen import FrozenDict, Record
from components.core.lookup_result import LookupResult
from components.trace.safe_text import safe_text
from components.trace.session_key import normalize_principal, normalize_session_id, session_key, stored_session_id
from components.trace.trace_store import PASSWORD_ENV, ToolInvocation, TraceStore

logger = logging.getLogger(__name__)


@component
class TraceRecorder:
    """
    Records every lookup as exactly one `tool_invocation` row, after the result is assembled.

    Rejected input, errors and no-evidence results are recorded too, and so is a lookup that a component before the
    recorder broke: `pipelines.lookup` then calls `record_failure`. The row carries the tool name, session, the
    caller's principal (None for an anonymous caller), query (escaped where a database could not store it, with its
    original length), found, status, retrieval layer, fallback reason, counts, latency, error and the snake_case
    `retrieval_details` (evidence summaries only, never full content). If the database cannot be written within
    `timeout_s` (whatever it is doing: a stopped server is not waited for), the row is spooled to a file and replayed
    later, and writes go straight to the spool for `retry_after_s`. If the spool cannot be written either (a full
    disk), the row waits in memory and the result says so: `traceId` null and `traceError` the reason. The lookup
    never fails because of the trace store.

    ### Usage example

    ```python
    from components.trace.trace_recorder import TraceRecorder

    recorder = TraceRecorder(database_url="sqlite:///data/traces.db")
    out = recorder.run(result=result, details=details)
    print(out["result"]["traceId"])
    ```
    """

    def __init__(
        self,
        database_url: str = "sqlite:///data/traces.db",
        spool_path: str | None = "data/trace_spool.jsonl",
        tool_name: str = "lookup_knowledge",
        max_query_chars: int = 2000,
        timeout_s: float = 0.5,
        retry_after_s: float = 5.0,
        database_password: Secret | None = Secret.from_env_var(PASSWORD_ENV, strict=False),  # noqa: B008 - Haystack's idiom
    ) -> None:
        """
        Create the recorder; the database is connected on first use.

        :param database_url: SQLAlchemy URL (SQLite file by default, PostgreSQL by URL).
        :param spool_path: File for rows written while the database is down.
        :param tool_name: The tool name recorded.
        :param max_query_chars: Longest query text stored (a rejected 1 MB query is stored cut).
        :param timeout_s: Longest wait for a locked or slow trace database before the row is spooled.
        :param retry_after_s: After a failed write, how long rows go straight to the spool.
        :param database_password: The database password as a Haystack `Secret` (by default the `TRACE_DB_PASSWORD`
            environment variable; a password written into `database_url` works too, but is part of the configuration).
        :raises ValueError: If `database_url` or `tool_name` is empty, or a number is out of range.
        """
        if not database_url or not tool_name:
            msg = f"database_url={database_url!r} and tool_name={tool_name!r} must be non-empty"
            raise ValueError(msg)
        for name, value in (("max_query_chars", max_query_chars), ("timeout_s", timeout_s)):
            if value <= 0:
                msg = f"{name}={value!r} must be positive"
                raise ValueError(msg)
        if retry_after_s < 0:
            msg = f"retry_after_s={retry_after_s!r} must be 0 or more (0: retry the database on every write)"
            raise ValueError(msg)
        self.database_url = database_url
        self.spool_path = spool_path
        self.tool_name = tool_name
        self.max_query_chars = max_query_chars
        self.timeout_s = timeout_s
        self.retry_after_s = retry_after_s
        self.database_password = database_password
        self._store = TraceStore(
            database_url, spool_path, timeout_s=timeout_s, retry_after_s=retry_after_s, password=database_password
        )

    @property
    def store(self) -> TraceStore:
        """The trace store the rows go to."""
        return self._store

    def warm_up(self) -> None:
        """
        Start connecting to the trace database in the background (idempotent): a lookup then waits at most
        `timeout_s` for it, the first lookup of the process included.
        """
        self._store.connect_soon()

    def close(self) -> None:
        """Release the database connection."""
        self._store.close()

    @component.output_types(result=dict[str, Any], details=FrozenDict)
    def run(
        self,
        result: Record,
        details: Record,
        raw_query: str | None = None,
        started_at: float | None = None,
        principal: str | None = None,
    ) -> dict[str, Any]:
        """
        Write the row.

        :param result: The camelCase `LookupResult` JSON (a dict, or the assembler's read-only `FrozenDict`).
        :param details: The snake_case `retrieval_details` (likewise).
        :param raw_query: The query as received (stored when the normalized one is empty).
        :param started_at: Epoch seconds at which the lookup started (defaults to the query transform's time).
        :param principal: The caller's principal name (None or empty: an anonymous caller); stored in the row and
            part of its session key, so session memory is per principal.
        :returns: `result`, a plain dict copy with `traceId` set (None when the row was spooled or kept in memory)
            and `traceError` (None, or why neither the trace database nor the spool took the row); and `details`,
            the `retrieval_details` as recorded (with `latency_ms`), for callers that measure the lookup (`eval`).
        """
        transform = details.get("query_transform") or {}
        start = started_at or transform.get("started_at") or time.time()
        latency_ms = round((time.time() - start) * 1000, 2)
        received = raw_query if isinstance(raw_query, str) else result.get("query") or ""
        query = result.get("query") or received
        session = normalize_session_id(result.get("sessionId"))
        owner = normalize_principal(principal)
        row = ToolInvocation(
            tool_name=self.tool_name,
            session_id=stored_session_id(session),
            session_key=session_key(session, owner),
            principal=owner,
            query=query[: self.max_query_chars],
            query_chars=len(received),
            found=bool(result.get("found")),
            status=str(result.get("evidenceStatus")),
            retrieval_layer=str(details.get("retrieval_layer", "none")),
            fallback_reason=details.get("fallback_reason"),
            candidate_count=int(details.get("candidate_count", 0)),
            evidence_block_count=int(details.get("evidence_block_count", 0)),
            latency_ms=latency_ms,
            error=result.get("error"),
            retrieval_details={**details, "latency_ms": latency_ms},
        )
        written = self._store.record(row)
        recorded = FrozenDict({**details, "latency_ms": latency_ms})
        return {"result": {**result, "traceId": written.row_id, "traceError": written.error}, "details": recorded}

    def record_rejection(
        self,
        query: Any,
        session_id: str | None,
        reason: str,
        started_at: float | None = None,
        *,
        principal: str | None = None,
    ) -> dict[str, Any]:
        """
        Record a lookup refused before it ran (a damaged cursor, a budget that is no number), and return its result.

        :param query: The query as received.
        :param session_id: The caller's session.
        :param reason: Why it was refused, naming the fix.
        :param started_at: Epoch seconds at which the lookup started.
        :param principal: The caller's principal name (None: an anonymous caller).
        :returns: The camelCase `LookupResult` JSON of status `invalid_query`, with `traceId`.
        """
        text = query if isinstance(query, str) else repr(query)
        reason = safe_text(reason)[:1000]
        result = LookupResult(
            found=False,
            evidence_status="invalid_query",
            message=f"Rejected call: {reason}",
            query=safe_text(text[: self.max_query_chars]),
            session_id=normalize_session_id(session_id) or None,
            error=reason,
        ).to_json_dict()
        details = {"retrieval_layer": "none", "error": reason}
        return self.run(result=result, details=details, raw_query=text, started_at=started_at, principal=principal)[
            "result"
        ]

    def record_call(
        self,
        tool_name: str,
        request: str,
        session_id: str | None,
        status: str,
        details: Record,
        found: bool = False,
        error: str | None = None,
        started_at: float | None = None,
        *,
        principal: str | None = None,
    ) -> tuple[int | None, str | None]:
        """
        Record a call of another tool than the lookup (`read_evidence`, `read_document`, `list_facets`): one row.

        :param tool_name: The tool called.
        :param request: What was asked, as one line (the citation, the source and section).
        :param session_id: The caller's session.
        :param status: The call's status (`evidence`, `not_found`, `invalid_request`, ...).
        :param details: The row's `retrieval_details` (what was returned, in short).
        :param found: Whether it returned knowledge.
        :param error: Why it failed or was refused.
        :param started_at: Epoch seconds at which the call started.
        :param principal: The caller's principal name (None: an anonymous caller).
        :returns: The row id (None when spooled) and why it could not be recorded (None when it was).
        """
        latency_ms = round((time.time() - (started_at or time.time())) * 1000, 2)
        session = normalize_session_id(session_id)
        owner = normalize_principal(principal)
        row = ToolInvocation(
            tool_name=tool_name,
            session_id=stored_session_id(session),
            session_key=session_key(session, owner),
            principal=owner,
            query=request[: self.max_query_chars],
            query_chars=len(request),
            found=found,
            status=status,
            retrieval_layer="none",
            latency_ms=latency_ms,
            error=error,
            retrieval_details={**details, "latency_ms": latency_ms},
        )
        written = self._store.record(row)
        return written.row_id, written.error

    def record_failure(
        self,
        query: Any,
        session_id: str | None,
        error: BaseException,
        started_at: float | None = None,
        *,
        principal: str | None = None,
    ) -> dict[str, Any]:
        """
        Record a lookup that failed before its result was assembled, and return its `error` result.

        :param query: The query as received.
        :param session_id: The caller's session (normalized here as the query transformer does).
        :param error: What broke (a `PipelineRuntimeError` names the component).
        :param started_at: Epoch seconds at which the lookup started.
        :param principal: The caller's principal name (None: an anonymous caller).
        :returns: The camelCase `LookupResult` JSON of status `error`, with `traceId`.
        """
        component_name = getattr(error, "component_name", None)
        cause = error.__cause__ or error
        where = f" in component {component_name!r}" if component_name else ""
        reason = safe_text(f"internal error{where}: {type(cause).__name__}: {cause}")[:1000]
        logger.error("Lookup failed: {error}", error=reason)
        text = query if isinstance(query, str) else repr(query)
        result = LookupResult(
            found=False,
            evidence_status="error",
            message="Knowledge lookup failed; see the error and the trace row.",
            query=safe_text(text[: self.max_query_chars]),
            session_id=normalize_session_id(session_id) or None,
            error=reason,
        ).to_json_dict()
        details = {"retrieval_layer": "none", "failed_component": component_name, "error": reason}
        return self.run(result=result, details=details, raw_query=text, started_at=started_at, principal=principal)[
            "result"
        ]
