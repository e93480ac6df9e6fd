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

Over HTTP the server binds to loopback. Any other address needs `allow_remote` (`--allow-remote`) *and* a bearer
token in `LOOKUP_KNOWLEDGE_TOKEN`; with a token set, every request without `Authorization: Bearer <token>` (compared
in constant time) gets 401, on loopback too. DNS-rebinding protection stays on: only loopback Host headers, the bind
address and `allowed_hosts` (`--allowed-host`) are served.

The same HTTP server also serves the REST routes of `pipelines.rest_api` (`POST /lookup`, Dify's `POST /retrieval`,
`GET /health`, `GET /openapi.json`) on the same tool, under the same Host check and token (`/retrieval` answers a
missing or wrong token in Dify's shape, 403).
"""

from __future__ import annotations

import hmac
import json
import logging as stdlib_logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, Literal

from haystack import logging
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types import CallToolResult, TextContent
from pydantic import Field
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse

from pipelines.agent_tool import (
    TOOL_DESCRIPTION,
    TOOL_NAME,
    TOOL_PARAMETERS,
    LookupKnowledgeTool,
    LookupToolError,
    compact_result_json,
    lookup_knowledge_tool,
)
from pipelines.rest_api import RETRIEVAL_PATH, KnowledgeService, rest_routes
from pipelines.settings import DEFAULT_LOOKUP_PIPELINE, DEFAULT_MCP_HOST, DEFAULT_MCP_PORT

__all__ = ["build_server", "http_app", "serve", "transport_security"]

logger = logging.getLogger(__name__)

SERVER_NAME = "lookup-knowledge"
HTTP_PATH = "/mcp"
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
AUTH_ENV = "LOOKUP_KNOWLEDGE_TOKEN"
_LOOPBACK_HOST_HEADERS = ["127.0.0.1:*", "localhost:*", "[::1]:*"]

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


class BearerTokenMiddleware:
    """ASGI middleware: every HTTP request must carry `Authorization: Bearer <token>`, else a one-line JSON 401."""

    def __init__(self, app: Any, token: str, exempt_paths: tuple[str, ...] = ()) -> None:
        """
        Wrap an ASGI app.

        :param app: The app.
        :param token: The expected token.
        :param exempt_paths: Paths whose route checks the token itself (Dify's `/retrieval`, to answer in Dify's
            error shape).
        """
        self.app = app
        self._expected = f"Bearer {token}".encode()
        self._exempt = exempt_paths

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """Serve one ASGI connection; lifespan events pass through."""
        if scope["type"] == "http" and scope.get("path") not in self._exempt:
            sent = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not hmac.compare_digest(sent, self._expected):
                body = json.dumps({"error": "unauthorized", "detail": f"send Authorization: Bearer <{AUTH_ENV}>"})
                headers = [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")]
                await send({"type": "http.response.start", "status": 401, "headers": headers})
                await send({"type": "http.response.body", "body": body.encode()})
                return
        await self.app(scope, receive, send)


def check_bind(host: str, allow_remote: bool, token: str | None) -> None:
    """
    Refuse to serve beyond loopback unless asked to, with a token.

    :param host: The bind address.
    :param allow_remote: The operator's explicit consent (`--allow-remote`).
    :param token: The bearer token (`LOOKUP_KNOWLEDGE_TOKEN`).
    :raises ValueError: If a non-loopback host lacks `allow_remote` or a token, with the fix.
    """
    if host in LOOPBACK_HOSTS:
        return
    if not allow_remote:
        msg = f"--host {host} is not a loopback address; serving beyond this machine needs --allow-remote"
        raise ValueError(msg)
    if not token:
        msg = f"--host {host} needs a bearer token: set {AUTH_ENV} (every request must then send it)"
        raise ValueError(msg)


def transport_security(host: str, allowed_hosts: list[str] | None = None) -> TransportSecuritySettings:
    """
    DNS-rebinding protection: the Host (and Origin) headers served, for `/mcp` and the REST routes alike.

    :param host: The bind address (served as a Host header too, unless it is a wildcard address).
    :param allowed_hosts: More Host header values to serve (`name` or `name:port`).
    :returns: The settings (protection on).
    """
    names = [h if ":" in h else f"{h}:*" for h in allowed_hosts or []]
    if host not in (*LOOPBACK_HOSTS, "0.0.0.0", "::"):  # noqa: S104 - a wildcard is no Host header
        names.append(f"{host}:*")
    hosts = [*_LOOPBACK_HOST_HEADERS, *names]
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=hosts,
        allowed_origins=[f"http://{h}" for h in hosts] + [f"https://{h}" for h in names],
    )


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    """Unknown path, wrong method: one line of JSON like every other refusal."""
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    word = {404: "not_found", 405: "method_not_allowed"}.get(status, "http_error")
    detail = exc.detail if isinstance(exc, HTTPException) else "internal error"
    return JSONResponse({"error": word, "detail": f"{request.method} {request.url.path}: {detail}"}, status)


def http_app(
    server: MCPServer,
    host: str,
    token: str | None = None,
    allowed_hosts: list[str] | None = None,
    service: KnowledgeService | None = None,
) -> Any:
    """
    The HTTP ASGI app: streamable HTTP at `/mcp` and, given a service, the REST routes beside it (one Starlette app,
    one lifespan: the MCP session manager's). DNS-rebinding protection always on, the bearer token checked when set.

    :param server: From `build_server`.
    :param host: The bind address (served as a Host header too, unless it is a wildcard address).
    :param token: The bearer token, or None (loopback only, see `check_bind`).
    :param allowed_hosts: More Host header values to serve (`name` or `name:port`).
    :param service: The REST routes' service on the same tool (`pipelines.rest_api.KnowledgeService`); None serves
        `/mcp` only.
    :returns: The ASGI app.
    """
    security = transport_security(host, allowed_hosts)
    mcp_app = server.streamable_http_app(streamable_http_path=HTTP_PATH, transport_security=security, host=host)
    routes = rest_routes(service, security, token) if service is not None else []
    # the MCP app's own routes (it has no middleware without the SDK's OAuth) and its lifespan, which runs the
    # session manager: a Mount would hand unknown paths to the inner app's plain-text 404
    app = Starlette(
        routes=[*routes, *mcp_app.routes],
        lifespan=mcp_app.router.lifespan_context,
        exception_handlers={HTTPException: _http_error},
    )
    return BearerTokenMiddleware(app, token, exempt_paths=(RETRIEVAL_PATH,) if routes else ()) if token else app


def serve(
    transport: Literal["stdio", "http"] = "stdio",
    host: str = DEFAULT_MCP_HOST,
    port: int = DEFAULT_MCP_PORT,
    data_dir: str | Path | None = None,
    pipeline_path: str | Path | None = None,
    allow_remote: bool = False,
    allowed_hosts: list[str] | None = None,
) -> None:
    """
    Load the lookup pipeline once and serve `lookup_knowledge` until the client disconnects (stdio) or the process
    is stopped (http).

    :param transport: `stdio` (for a client that starts the server) or `http` (streamable HTTP at `/mcp`, and the
        REST routes of `pipelines.rest_api`).
    :param host: HTTP bind address; loopback by default.
    :param port: HTTP port.
    :param data_dir: Data folder (else `LOOKUP_KNOWLEDGE_DATA_DIR`, else `./data`); `MILVUS_URI` and `TRACE_DB_URL`
        apply as everywhere.
    :param pipeline_path: The lookup pipeline YAML (default `pipelines.yaml`).
    :param allow_remote: Allow a non-loopback `host` (which then also needs `LOOKUP_KNOWLEDGE_TOKEN`).
    :param allowed_hosts: More Host header values to serve over HTTP (e.g. the name clients use).
    :raises ValueError: If `transport` is unknown, the pipeline file is not a pipeline, or the bind is refused.
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
    token = os.environ.get(AUTH_ENV) or None
    check_bind(host, allow_remote, token)  # before loading anything
    tool = lookup_knowledge_tool(path, data_dir=data_dir)
    server = build_server(tool, log_level="INFO")
    logger.info(
        "Serving {tool} over streamable HTTP at http://{host}:{port}{path}, REST at /lookup, /retrieval (Dify), "
        "/health, /openapi.json (bearer token {auth})",
        tool=TOOL_NAME,
        host=host,
        port=port,
        path=HTTP_PATH,
        auth="required" if token else "off: loopback only",
    )
    import uvicorn

    app = http_app(server, host, token, allowed_hosts, service=KnowledgeService(tool))
    uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="info")).run()
