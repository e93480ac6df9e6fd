"""The recorded `tool_invocation` rows of a deployment, for the entry points that browse and replay them.

The entry points (`lookup-knowledge trace`, the trace browser) read rows through this module, never through the
trace store itself.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.engine import make_url

from components.trace.trace_store import ToolInvocation, TraceStore, redact_url
from pipelines.settings import Deployment

__all__ = ["TraceRow", "open_traces", "redact_url"]

#: one recorded call, as `trace list` / `show` render it
TraceRow = ToolInvocation


def open_traces(deployment: Deployment) -> TraceStore:
    """
    Open the deployment's trace database and spool for browsing and replay (close it after use).

    :param deployment: The deployment.
    :returns: Its trace store.
    :raises ValueError: If the deployment's SQLite trace database does not exist: browsing must not create a data
        folder and an empty database where nothing was ever recorded.
    """
    database = make_url(deployment.trace_db_url)
    if database.get_backend_name() == "sqlite" and database.database and not Path(database.database).exists():
        msg = f"no trace database at {database.database}: nothing was recorded with this data folder"
        raise ValueError(msg)
    return TraceStore(deployment.trace_db_url, spool_path=str(deployment.spool_path))
