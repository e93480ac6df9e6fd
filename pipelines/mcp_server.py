"""`lookup_knowledge` as an MCP server (the `mcp` SDK's `MCPServer`), over stdio or streamable HTTP.

```bash
lookup-knowledge serve                                  # stdio, ./data
lookup-knowledge serve --transport http --port 8765     # http://127.0.0.1:8765/mcp
```

The lookup pipeline is loaded once at start-up. The tool takes `query` and an optional `session_id` and returns the
same compact JSON as the Haystack tool (`pipelines.agent_tool`), as text content and as structured content. A
rejected query or a failed lookup (Milvus unreachable, nothing indexed) is an `isError` tool result with the reason;
the server keeps serving. Every call that reaches the tool is recorded in the trace database with the caller's
`session_id`; calls whose arguments do not match the input schema (no `query`, a non-string `query`) are answered by
the SDK before the tool runs. In stdio mode nothing but protocol messages reaches stdout: logs go to stderr, and the
standard output descriptor points at stderr while the pipeline loads (and, thanks to the SDK, while serving).
"""

from __future__ import annotations

import logging as stdlib_logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Literal

from haystack import logging
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent
from pydantic import Field

from pipelines.agent_tool import (
    TOOL_DESCRIPTION,
    TOOL_NAME,
    TOOL_PARAMETERS,
    LookupKnowledgeTool,
    LookupToolError,
    compact_result_json,
    lookup_knowledge_tool,
)
from pipelines.settings import DEFAULT_LOOKUP_PIPELINE, DEFAULT_MCP_HOST, DEFAULT_MCP_PORT

__all__ = ["build_server", "serve"]

logger = logging.getLogger(__name__)

SERVER_NAME = "lookup-knowledge"
HTTP_PATH = "/mcp"
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")

SERVER_INSTRUCTIONS = (
    "Evidence-first knowledge lookup. Call lookup_knowledge before answering questions about the knowledge base; "
    "answer only from the evidence it returns and cite its sources. Pass the same session_id on every call of a "
    "conversation."
)

_QUERY_DESCRIPTION = TOOL_PARAMETERS["properties"]["query"]["description"]
_SESSION_DESCRIPTION = TOOL_PARAMETERS["properties"]["session_id"]["description"]


def build_server(tool: LookupKnowledgeTool, *, log_level: str = "WARNING") -> MCPServer:
    """
    Build the MCP server around a `lookup_knowledge` tool (whose pipeline is loaded).

    :param tool: From `pipelines.agent_tool.lookup_knowledge_tool`.
    :param log_level: The SDK's log level (logs go to stderr).
    :returns: The server, with the one tool `lookup_knowledge`.
    """
    server: MCPServer = MCPServer(
        SERVER_NAME,
        instructions=SERVER_INSTRUCTIONS,
        log_level=log_level,  # type: ignore[arg-type]
    )

    def lookup_knowledge(
        query: Annotated[str, Field(description=_QUERY_DESCRIPTION)],
        session_id: Annotated[str | None, Field(description=_SESSION_DESCRIPTION)] = None,
    ) -> CallToolResult:
        """Run one lookup; runs in a worker thread (the tool serializes its pipeline runs)."""
        try:
            compact = tool.lookup(query, session_id=session_id)
        except LookupToolError as err:
            raise ToolError(str(err)) from err
        except Exception as err:  # a crash inside the pipeline: still a tool error, never a dead server
            logger.exception("lookup_knowledge failed: {error}", error=err)
            msg = f"{TOOL_NAME} failed: {type(err).__name__}: {err}. Tell the user the knowledge lookup failed."
            raise ToolError(msg) from err
        return CallToolResult(
            content=[TextContent(type="text", text=compact_result_json(compact))],
            structured_content=compact,
        )

    server.add_tool(lookup_knowledge, name=TOOL_NAME, description=TOOL_DESCRIPTION, structured_output=False)
    return server


@contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """Point the standard output descriptor at stderr (for this process and the children it starts meanwhile)."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def serve(
    transport: Literal["stdio", "http"] = "stdio",
    host: str = DEFAULT_MCP_HOST,
    port: int = DEFAULT_MCP_PORT,
    data_dir: str | Path | None = None,
    pipeline_path: str | Path | None = None,
) -> None:
    """
    Load the lookup pipeline once and serve `lookup_knowledge` until the client disconnects (stdio) or the process
    is stopped (http).

    :param transport: `stdio` (for a client that starts the server) or `http` (streamable HTTP at `/mcp`).
    :param host: HTTP bind address; loopback by default.
    :param port: HTTP port.
    :param data_dir: Data folder (else `LOOKUP_KNOWLEDGE_DATA_DIR`, else `./data`); `MILVUS_URI` and `TRACE_DB_URL`
        apply as everywhere.
    :param pipeline_path: The lookup pipeline YAML (default `pipelines.yaml`).
    :raises ValueError: If `transport` is unknown or the pipeline file is not a pipeline.
    :raises FileNotFoundError: If the pipeline file does not exist.
    """
    if transport not in ("stdio", "http"):
        msg = f"transport must be 'stdio' or 'http', not {transport!r}"
        raise ValueError(msg)
    # pymilvus logs every failed RPC itself; the tool error and the trace carry the reason once
    stdlib_logging.getLogger("pymilvus").setLevel(stdlib_logging.CRITICAL)
    # one INFO line per component and call is too much for a server log
    stdlib_logging.getLogger("haystack").setLevel(stdlib_logging.WARNING)
    path = pipeline_path or DEFAULT_LOOKUP_PIPELINE
    if transport == "stdio":
        with _stdout_to_stderr():  # loading may start Milvus Lite; nothing it prints may reach the protocol stream
            tool = lookup_knowledge_tool(path, data_dir=data_dir)
        build_server(tool).run("stdio")
        return
    tool = lookup_knowledge_tool(path, data_dir=data_dir)
    server = build_server(tool, log_level="INFO")
    if host not in LOOPBACK_HOSTS:
        logger.warning(
            "Serving {tool} on {host}, which is not a loopback address: the server has no authentication",
            tool=TOOL_NAME,
            host=host,
        )
    logger.info(
        "Serving {tool} over streamable HTTP at http://{host}:{port}{path}",
        tool=TOOL_NAME,
        host=host,
        port=port,
        path=HTTP_PATH,
    )
    server.run("streamable-http", host=host, port=port, streamable_http_path=HTTP_PATH)
