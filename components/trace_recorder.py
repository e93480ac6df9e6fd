from __future__ import annotations

import time
from typing import Any

from haystack import component, logging

from components.trace.trace_store import ToolInvocation, TraceStore

logger = logging.getLogger(__name__)


@component
class TraceRecorder:
    """
    Records every lookup as one `tool_invocation` row, after the result is assembled.

    Rejected input, errors and no-evidence results are recorded too. The row carries the tool name, session,
    query, found, status, retrieval layer, fallback reason, counts, latency, error and the snake_case
    `retrieval_details` (evidence summaries only, never full content). If the database cannot be written, the row
    is spooled to a file and replayed later; the lookup itself never fails because of the trace store.

    ### Usage example

    ```python
    from components.trace_recorder import TraceRecorder

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
    ) -> None:
        """
        Create the recorder; the database is connected on first use.

        :param database_url: SQLAlchemy URL (SQLite file by default, PostgreSQL by URL).
        :param spool_path: File for rows written while the database is down.
        :param tool_name: The tool name recorded.
        :param max_query_chars: Longest query text stored (a rejected 1 MB query is stored cut).
        :raises ValueError: If `database_url` or `tool_name` is empty.
        """
        if not database_url or not tool_name:
            msg = f"database_url={database_url!r} and tool_name={tool_name!r} must be non-empty"
            raise ValueError(msg)
        self.database_url = database_url
        self.spool_path = spool_path
        self.tool_name = tool_name
        self.max_query_chars = max_query_chars
        self._store = TraceStore(database_url, spool_path)

    def close(self) -> None:
        """Release the database connection."""
        self._store.close()

    @component.output_types(result=dict[str, Any])
    def run(
        self,
        result: dict[str, Any],
        details: dict[str, Any],
        raw_query: str | None = None,
        started_at: float | None = None,
    ) -> dict[str, Any]:
        """
        Write the row.

        :param result: The camelCase `LookupResult` JSON.
        :param details: The snake_case `retrieval_details`.
        :param raw_query: The query as received (stored when the normalized one is empty).
        :param started_at: Epoch seconds at which the lookup started (defaults to the query transform's time).
        :returns: `result`, a copy with `traceId` set (None when the row was spooled).
        """
        transform = details.get("query_transform") or {}
        start = started_at or transform.get("started_at") or time.time()
        latency_ms = round((time.time() - start) * 1000, 2)
        query = result.get("query") or raw_query or ""
        row = ToolInvocation(
            tool_name=self.tool_name,
            session_id=result.get("sessionId"),
            query=query[: self.max_query_chars],
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
        trace_id = self._store.write(row)
        return {"result": {**result, "traceId": trace_id}}
