"""`lookup_knowledge` as an MCP server (the `mcp` SDK's `MCPServer`), over stdio or streamable HTTP.

```bash
lookup-knowledge serve                                  # stdio, ./data
lookup-knowledge serve --transport http --port 8765     # http://127.0.0.1:8765/mcp
```

The lookup pipeline is loaded once at start-up. The tool takes `query` and an optional `session_id` and returns the
same compact JSON as the Haystack tool (`pipelines.entrypoints.agent_tool`), as text content and as structured content.
A rejected query or a failed lookup (Milvus unreachable, nothing indexed) is an `isError` tool result with the reason;
the server keeps serving. Every call that reaches the tool is recorded in the trace database with the caller's
`session_id`; calls whose arguments do not match the input schema (no `query`, a non-string `query`) are answered by
the SDK before the tool runs. In stdio mode nothing but protocol messages reaches stdout: logs go to stderr, and the
standard output descriptor points at stderr while the pipeline loads (and, thanks to the SDK, while serving). Every
stdio message gets an answer: a line the SDK's parser refuses is read again as REST reads a body (a lone surrogate
becomes its escape, as text) and served, or answered with a JSON-RPC error (`AnsweringReadStream`).

Over HTTP the server binds to loopback. Any other address needs `allow_remote` (`--allow-remote`) *and* a bearer
token in `LOOKUP_KNOWLEDGE_TOKEN` or principals with tokens (`pipelines.access`); with a token set, every request
without `Authorization: Bearer <token>` gets 401, on loopback too (one check for `/mcp` and every REST route:
`pipelines.entrypoints.rest_api.identify`, constant time). A principal's token serves the request as that principal;
the shared token and no token (where allowed) are anonymous: public pages only. A token that no request could send
is refused at start-up (`check_token`): blank, with whitespace at either end, or not printable ASCII. DNS-rebinding
protection stays on: only loopback Host headers, the bind address and `allowed_hosts` (`--allowed-host`) are served.

The same HTTP server also serves the REST routes of `pipelines.entrypoints.rest_api` (`POST /lookup`, Dify's `POST
/retrieval`, `GET /health`, `GET /openapi.json`) on the same tool, under the same Host check and token (`/retrieval`
answers a missing or wrong token in Dify's shape, 403).
"""

from __future__ import annotations

import inspect
import json
import logging as stdlib_logging
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, Literal, Self

import anyio
from haystack import logging
from haystack.utils import Secret
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.stdio import stdio_server
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.message import SessionMessage
from mcp.types import (
    INVALID_REQUEST,
    PARSE_ERROR,
    CallToolResult,
    ErrorData,
    JSONRPCError,
    TextContent,
    ToolAnnotations,
    jsonrpc_message_adapter,
)
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model
from pydantic.alias_generators import to_camel
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse

from components.core.environment import SERVER_TOKEN
from pipelines.access import ANONYMOUS, Principal, Principals
from pipelines.catalog import Catalog, UnknownKnowledgeError
from pipelines.entrypoints.agent_tool import (
    LookupKnowledgeTool,
    LookupToolError,
    ServedResult,
    lookup_knowledge_tool,
)
from pipelines.entrypoints.rest_api import (
    RETRIEVAL_PATH,
    authorization_header,
    identify,
    load_json,
    rest_routes,
)
from pipelines.knowledge_reads import DocumentRead, EvidenceRead, Facets
from pipelines.service import KnowledgeService
from pipelines.settings import DEFAULT_LOOKUP_PIPELINE, DEFAULT_MCP_HOST, DEFAULT_MCP_PORT, Deployment
from pipelines.tool_contract import (
    BUILT_IN_FILTER_KEYS,
    TOOL_DESCRIPTION,
    TOOL_NAME,
    TOOL_PARAMETERS,
    filters_schema,
)

__all__ = [
    "AnsweringReadStream",
    "CallerMiddleware",
    "build_server",
    "check_token",
    "http_app",
    "read_again",
    "serve",
    "serve_stdio",
    "transport_security",
]

logger = logging.getLogger(__name__)

SERVER_NAME = "lookup-knowledge"
HTTP_PATH = "/mcp"
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
AUTH_ENV = SERVER_TOKEN.name
_LOOPBACK_HOST_HEADERS = ["127.0.0.1:*", "localhost:*", "[::1]:*"]
#: deepest stdio message read again: the SDK's own JSON parser's limit (pydantic-core's 200 levels)
STDIO_MAX_JSON_DEPTH = 200

SERVER_INSTRUCTIONS = (
    "Evidence-first knowledge lookup. Call the lookup tool before answering questions about the knowledge base; "
    "answer only from the evidence it returns and cite its sources. Pass the same session_id on every call of a "
    "conversation. list_facets says what filters accept; read_evidence and read_document read on from a citation."
)


def compact_json(body: dict[str, Any]) -> str:
    """
    :param body: A JSON-serializable result.
    :returns: It as compact JSON text (no indentation, non-ASCII kept): what an agent reads.
    """
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"))


_QUERY_DESCRIPTION = TOOL_PARAMETERS["properties"]["query"]["description"]
_SESSION_DESCRIPTION = TOOL_PARAMETERS["properties"]["session_id"]["description"]
_FILTERS_DESCRIPTION = TOOL_PARAMETERS["properties"]["filters"]["description"]
_MAX_CHARS_DESCRIPTION = TOOL_PARAMETERS["properties"]["max_chars"]["description"]
_CURSOR_DESCRIPTION = TOOL_PARAMETERS["properties"]["cursor"]["description"]
FACETS_URI = "knowledge://facets"


def filters_model(filter_keys: Sequence[str]) -> type[BaseModel]:
    """
    The `filters` argument as a pydantic model (the MCP SDK derives the tool's input schema from it): one optional
    field per key the knowledge base accepts, no other key.

    :param filter_keys: The keys (`KnowledgeService.filter_keys`).
    :returns: The model.
    """
    properties = filters_schema(filter_keys)["properties"]
    fields: dict[str, Any] = {}
    for key in filter_keys:
        kind: Any = str | None if key in ("source_prefix", "updated_after") else str | list[str] | None
        fields[key] = (kind, Field(default=None, description=properties[key]["description"]))
    return create_model("Filters", __config__=ConfigDict(extra="forbid"), **fields)


def _tool_error(tool: str, err: Exception) -> ToolError:
    logger.exception("{tool} failed: {error}", tool=tool, error=err)
    return ToolError(f"{tool} failed: {type(err).__name__}: {err}. Tell the user the knowledge lookup failed.")


def _structured(body: dict[str, Any]) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=compact_json(body))], structured_content=body)


def _read_result(body: dict[str, Any]) -> CallToolResult:
    """A read's result; a refused request is a tool error with the reason (it is recorded all the same)."""
    if body.get("status") in ("invalid_request", "error"):
        raise ToolError(f"{body.get('message')} (traceId={body.get('traceId')})")
    return _structured(body)


def _caller(ctx: Context | None, default: Principal) -> Principal:
    """
    Whom an MCP call is for: over HTTP, the principal `CallerMiddleware` identified for its request; over stdio, the
    server's (`serve --as`, default anonymous).
    """
    try:
        request = ctx.request_context.request if ctx is not None else None
    except ValueError:  # no request: a call from outside a session (a test calling the function itself)
        request = None
    if request is None:
        return default
    found = getattr(request, "scope", {}).get("state", {}).get("principal")
    return found if isinstance(found, Principal) else ANONYMOUS


class KnowledgeBases(BaseModel):
    """`list_facets` of a server serving several knowledge bases: each one's facets."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)

    knowledge_bases: list[Facets]


def _lookup_tool(
    server: MCPServer, tool: LookupKnowledgeTool | None, annotations: ToolAnnotations, default: Principal
) -> None:
    """Register one knowledge base's lookup tool: its own name, description and filter keys."""
    service = tool.service if tool is not None else None
    name = tool.name if tool is not None else TOOL_NAME
    filters_type = filters_model(service.filter_keys() if service is not None else list(BUILT_IN_FILTER_KEYS))

    def lookup_knowledge(
        query: Annotated[str, Field(description=_QUERY_DESCRIPTION)],
        session_id: Annotated[str | None, Field(description=_SESSION_DESCRIPTION)] = None,
        filters: Any = None,  # typed below: this knowledge base's filter keys
        max_chars: Annotated[int | None, Field(ge=200, description=_MAX_CHARS_DESCRIPTION)] = None,
        cursor: Annotated[str | None, Field(description=_CURSOR_DESCRIPTION)] = None,
        ctx: Context | None = None,
    ) -> Annotated[CallToolResult, ServedResult]:
        """Run one lookup, for the caller the request identified; runs in a worker thread."""
        given = filters.model_dump(exclude_none=True) if filters is not None else None
        caller = _caller(ctx, default)
        try:
            compact = tool.lookup(  # type: ignore[union-attr]
                query, session_id=session_id, principal=caller, filters=given, max_chars=max_chars, cursor=cursor
            )
        except LookupToolError as err:
            raise ToolError(str(err)) from err
        except Exception as err:  # a crash inside the pipeline: still a tool error, never a dead server
            raise _tool_error(name, err) from err
        return _structured(compact)

    # annotations are strings here (`from __future__ import annotations`), resolved in this module's namespace: the
    # model made for this knowledge base is set as the annotation itself
    lookup_knowledge.__annotations__["filters"] = Annotated[
        filters_type | None, Field(description=_FILTERS_DESCRIPTION)
    ]
    description = tool.description if tool is not None else TOOL_DESCRIPTION
    server.add_tool(
        lookup_knowledge, name=name, description=description, annotations=annotations, structured_output=True
    )


def _name_the_knowledge(fn: Any, names: list[str], required: bool) -> None:
    """
    Give a shared tool its `knowledge` argument: one of `names` (required for a read, optional for the facets) when a
    server serves several knowledge bases; none when it serves one. Set as the function's signature, which is what the
    MCP SDK reads its input schema from.
    """
    signature = inspect.signature(fn, eval_str=True)
    parameters = [p for p in signature.parameters.values() if p.name != "knowledge"]
    if names:
        choice: Any = Literal[tuple(names)]  # type: ignore[valid-type]
        what = f"The knowledge base: one of {', '.join(names)}" + ("." if required else " (without: all of them).")
        # built at run time from the served names: no static type to check
        annotation = Annotated[choice if required else choice | None, Field(description=what)]  # type: ignore[valid-type]
        default = inspect.Parameter.empty if required else None
        parameters.append(
            inspect.Parameter("knowledge", inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)
        )
    fn.__signature__ = signature.replace(parameters=parameters)


def build_server(
    tool: LookupKnowledgeTool | Sequence[LookupKnowledgeTool] | None,
    *,
    log_level: str = "WARNING",
    principal: Principal | None = None,
) -> MCPServer:
    """
    Build the MCP server around the lookup tool of one knowledge base, or of several.

    All tools are read-only and idempotent, each with its output schema: one lookup per knowledge base (named and
    described as its tool is: `recorder.tool_name` or `lookup_<name>`, and the knowledge base it looks up), and
    `list_facets`, `read_evidence` and `read_document`, which take `knowledge` (the knowledge base's name) when there
    are several; the facets are also the resource `knowledge://facets`.

    :param tool: From `pipelines.entrypoints.agent_tool.lookup_knowledge_tool`, or one per knowledge base (their
        services named: `KnowledgeService.name`). None: the server initializes and lists its tools, with the built-in
        filter keys, but has nothing to answer with.
    :param log_level: The SDK's log level (logs go to stderr).
    :param principal: Whom calls without an HTTP request are for (stdio: `serve --as`; default `ANONYMOUS`, public
        pages only). Over HTTP every call is for the principal its request identified (`CallerMiddleware`). The
        resource `knowledge://facets` (which the SDK serves without a request) is always what `ANONYMOUS` may read.
    :returns: The server.
    """
    default = principal or ANONYMOUS
    server: MCPServer = MCPServer(
        SERVER_NAME,
        instructions=SERVER_INSTRUCTIONS,
        log_level=log_level,  # type: ignore[arg-type]
    )
    tools = [] if tool is None else [tool] if isinstance(tool, LookupKnowledgeTool) else list(tool)
    catalog = (
        Catalog({t.service.name: t.service for t in tools} if len(tools) > 1 else tools[0].service) if tools else None
    )
    read_only = ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)
    for each in tools or [None]:  # type: ignore[list-item]
        _lookup_tool(server, each, read_only, default)
    several = catalog is not None and catalog.several
    names = catalog.names() if catalog is not None else []

    def pick(knowledge: str | None) -> KnowledgeService:
        if catalog is None:
            msg = "no knowledge base is served"
            raise ToolError(msg)
        try:
            return catalog.pick(knowledge)
        except UnknownKnowledgeError as err:
            raise ToolError(str(err)) from err

    def every_facets(session_id: str | None, caller: Principal) -> dict[str, Any]:
        facets = [known.facets(session_id=session_id, principal=caller) for known in catalog or []]
        return {"knowledgeBases": facets} if several else facets[0]

    def list_facets(
        session_id: Annotated[str | None, Field(description=_SESSION_DESCRIPTION)] = None,
        knowledge: str | None = None,
        ctx: Context | None = None,
    ) -> Annotated[CallToolResult, Facets]:
        """What lookups may filter on (categories, tags, declared fields, folders, update days), with document counts
        and sample values, and what the knowledge base holds (documents, chunks, languages, index version)."""
        caller = _caller(ctx, default)
        try:
            if several and not knowledge:
                return _structured(every_facets(session_id, caller))
            body = pick(knowledge).facets(session_id=session_id, principal=caller)
            return _structured({"knowledgeBases": [body]} if several else body)
        except ToolError:
            raise
        except Exception as err:
            raise _tool_error("list_facets", err) from err

    def read_evidence(
        citation: Annotated[str, Field(description="A block's `citation`, as a lookup returned it.")],
        before: Annotated[int, Field(ge=0, le=10, description="Neighbouring chunks before it.")] = 1,
        after: Annotated[int, Field(ge=0, le=10, description="Neighbouring chunks after it.")] = 1,
        max_chars: Annotated[int | None, Field(ge=200, description="The most characters to return.")] = None,
        session_id: Annotated[str | None, Field(description=_SESSION_DESCRIPTION)] = None,
        knowledge: str | None = None,
        ctx: Context | None = None,
    ) -> Annotated[CallToolResult, EvidenceRead]:
        """Read a cited block whole, with the chunks around it, from the document's current version (`changed` says
        when the document changed since the citation was returned)."""
        chosen = pick(knowledge)
        caller = _caller(ctx, default)
        try:
            body = chosen.read_evidence(citation, before, after, max_chars, session_id=session_id, principal=caller)
        except Exception as err:
            raise _tool_error("read_evidence", err) from err
        return _read_result(body)

    def read_document(
        source: Annotated[str, Field(description="A block's `source` (the document's path).")],
        section: Annotated[
            str | None, Field(description="A heading path or heading; the whole document without.")
        ] = None,
        max_chars: Annotated[int | None, Field(ge=200, description="The most characters to return.")] = None,
        session_id: Annotated[str | None, Field(description=_SESSION_DESCRIPTION)] = None,
        knowledge: str | None = None,
        ctx: Context | None = None,
    ) -> Annotated[CallToolResult, DocumentRead]:
        """Read a document, or one of its sections, in order (with the list of its sections)."""
        chosen = pick(knowledge)
        caller = _caller(ctx, default)
        try:
            body = chosen.read_document(source, section, max_chars, session_id=session_id, principal=caller)
        except Exception as err:
            raise _tool_error("read_document", err) from err
        return _read_result(body)

    for fn in (list_facets, read_evidence, read_document):
        _name_the_knowledge(fn, names if several else [], required=fn is not list_facets)
        if several and fn is list_facets:
            fn.__signature__ = inspect.signature(fn).replace(  # type: ignore[attr-defined]
                return_annotation=Annotated[CallToolResult, KnowledgeBases]
            )
        # the docstring as one paragraph: what the agent reads
        summary = " ".join(inspect.cleandoc(fn.__doc__ or "").split())
        server.add_tool(fn, description=summary, annotations=read_only, structured_output=True)

    @server.resource(FACETS_URI, name="facets", mime_type="application/json")
    def facets() -> str:
        """The knowledge base's facets as an anonymous caller may see them (list_facets gives the caller's own)."""
        return compact_json(every_facets(None, ANONYMOUS) if catalog is not None else {})

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


def _refused_line(error: Exception) -> str | None:
    """The line the SDK's stdio reader could not parse as JSON, or None when it parsed but is no JSON-RPC message."""
    if isinstance(error, ValidationError):
        first = error.errors()[0]
        if first["type"] == "json_invalid" and isinstance(first.get("input"), str):
            return str(first["input"])
    return None


def _request_id(data: Any) -> str | int | None:
    request_id = data.get("id") if isinstance(data, dict) else None
    return request_id if isinstance(request_id, str | int) and not isinstance(request_id, bool) else None


def _answer(request_id: str | int | None, code: int, reason: str) -> SessionMessage:
    logger.warning("MCP stdio: answered an unreadable message with {code}: {reason}", code=code, reason=reason)
    return SessionMessage(JSONRPCError(jsonrpc="2.0", id=request_id, error=ErrorData(code=code, message=reason)))


def read_again(error: Exception) -> SessionMessage:
    """
    Read again a stdio line that the SDK's reader refused, as REST reads a body, or answer it.

    :param error: What the SDK's stdio reader made of the line (its parser's `ValidationError`).
    :returns: The message to serve (the line's JSON, nesting bounded, lone surrogates escaped: `load_json`), or a
        JSON-RPC error to send back: parse error (-32700) for a line that is not JSON, invalid request (-32600) for
        JSON that is no JSON-RPC message, with the request's id when the line has one (else null, as JSON-RPC says).
    """
    line = _refused_line(error)
    if line is None:
        return _answer(None, INVALID_REQUEST, "Invalid Request: not a JSON-RPC 2.0 message")
    try:
        data = load_json(line, STDIO_MAX_JSON_DEPTH)
    except ValueError as err:
        return _answer(None, PARSE_ERROR, f"Parse error: {err}")
    try:
        return SessionMessage(jsonrpc_message_adapter.validate_python(data, by_name=False))
    except ValidationError:
        return _answer(_request_id(data), INVALID_REQUEST, "Invalid Request: not a JSON-RPC 2.0 message")


class AnsweringReadStream:
    """
    The stdio transport's read stream, where no message goes unanswered.

    The SDK's stdio reader passes the server an exception for a line its JSON parser refuses (a lone surrogate such
    as `"\\ud800"`, which Python's parser reads; a line that is not JSON), and the server only logs it: the client
    would wait for its answer forever. Here each such line is read again (`read_again`) and served, or answered with
    a JSON-RPC error.
    """

    def __init__(self, inner: Any, answers: Any) -> None:
        """
        :param inner: The transport's read stream (`mcp.server.stdio.stdio_server`).
        :param answers: The transport's write stream, for the errors.
        """
        self._inner = inner
        self._answers = answers

    @property
    def last_context(self) -> Any:
        """The sender's context of the last message: the server's loop reads it off its stream."""
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> SessionMessage | Exception:
        """
        :returns: The next message to serve (an unreadable line was answered meanwhile).
        :raises anyio.EndOfStream: At the end of the input.
        """
        while True:
            item = await self._inner.receive()
            if not isinstance(item, Exception):
                return item
            try:
                read = read_again(item)
            except Exception as err:  # still an answer, never a dead server
                logger.exception("MCP stdio: reading a message again failed: {error}", error=err)
                read = _answer(None, PARSE_ERROR, f"Parse error: {type(err).__name__}")
            if not isinstance(read.message, JSONRPCError):
                return read
            await self._answers.send(read)

    async def aclose(self) -> None:
        """Close the transport's read stream."""
        await self._inner.aclose()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


async def _serve_stdio(server: MCPServer) -> None:
    # `MCPServer.run("stdio")`, with `AnsweringReadStream` between the transport and the server: `run` takes no
    # streams, so the loop is run on the server's low-level server as `run` runs it
    lowlevel = server._lowlevel_server
    async with stdio_server() as (read_stream, write_stream):
        answering = AnsweringReadStream(read_stream, write_stream)
        await lowlevel.run(answering, write_stream, lowlevel.create_initialization_options())


def serve_stdio(server: MCPServer) -> None:
    """
    Serve over stdio until the input ends, answering every message (`AnsweringReadStream`).

    :param server: From `build_server`.
    """
    anyio.run(_serve_stdio, server)


class CallerMiddleware:
    """
    ASGI middleware: identify the caller of every HTTP request (`identify`), or refuse it with a one-line JSON 401.

    The principal goes into the request's state (`scope["state"]["principal"]`), where the REST routes and the MCP
    tools read it. Exempt paths (Dify's `/retrieval`, which answers in Dify's error shape) are passed on unidentified
    and identify their caller themselves.
    """

    def __init__(
        self,
        app: Any,
        token: str | None,
        principals: Principals | None = None,
        exempt_paths: tuple[str, ...] = (),
    ) -> None:
        """
        Wrap an ASGI app.

        :param app: The app.
        :param token: The server's bearer token (its callers are anonymous), or None.
        :param principals: The deployment's principals (their tokens name them), or None.
        :param exempt_paths: Paths whose route identifies its caller itself.
        """
        self.app = app
        self._token = token
        self._principals = principals
        self._exempt = exempt_paths

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """Serve one ASGI connection; lifespan events pass through."""
        if scope["type"] != "http" or scope.get("path") in self._exempt:
            await self.app(scope, receive, send)
            return
        caller = identify(authorization_header(scope.get("headers") or []), self._token, self._principals)
        if caller is None:
            body = json.dumps({"error": "unauthorized", "detail": f"send Authorization: Bearer <{AUTH_ENV} or yours>"})
            headers = [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")]
            await send({"type": "http.response.start", "status": 401, "headers": headers})
            await send({"type": "http.response.body", "body": body.encode()})
            return
        scope.setdefault("state", {})["principal"] = caller
        await self.app(scope, receive, send)


def check_token(token: str | None) -> str | None:
    """
    Refuse a bearer token that no request could send, in one line that never shows it.

    :param token: The configured token (`LOOKUP_KNOWLEDGE_TOKEN`); None or empty is no token.
    :returns: The token, or None for none.
    :raises ValueError: If it is blank (a blank token is no token), has whitespace at either end (HTTP drops it from
        a header) or a character that is not printable ASCII (a header is bytes, which servers and clients read as
        Latin-1 or UTF-8 as they please, so such a token would match on one route and not on another).
    """
    if not token:
        return None
    fix = f"set {AUTH_ENV} to printable ASCII, e.g. `python -c 'import secrets; print(secrets.token_urlsafe(32))'`"
    if not token.strip():
        msg = f"{AUTH_ENV} is blank, which is no token: {fix}, or unset it"
        raise ValueError(msg)
    if token != token.strip():
        msg = f"{AUTH_ENV} has whitespace at its start or end, which HTTP drops from the header: {fix}"
        raise ValueError(msg)
    if not all(" " <= char <= "~" for char in token):
        msg = f"{AUTH_ENV} has a character that is not printable ASCII, which HTTP headers do not carry alike: {fix}"
        raise ValueError(msg)
    return token


def check_bind(host: str, allow_remote: bool, token: str | None, principals: Principals | None = None) -> None:
    """
    Refuse to serve beyond loopback unless asked to, with a token.

    :param host: The bind address.
    :param allow_remote: The operator's explicit consent (`--allow-remote`).
    :param token: The bearer token (`LOOKUP_KNOWLEDGE_TOKEN`).
    :param principals: The deployment's principals: their tokens count as a token.
    :raises ValueError: If a non-loopback host lacks `allow_remote` or a token, with the fix.
    """
    if host in LOOPBACK_HOSTS:
        return
    if not allow_remote:
        msg = f"--host {host} is not a loopback address; serving beyond this machine needs --allow-remote"
        raise ValueError(msg)
    if not token and not principals:
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
    service: KnowledgeService | Catalog | None = None,
    principals: Principals | None = None,
) -> Any:
    """
    The HTTP ASGI app: streamable HTTP at `/mcp` and, given a service, the REST routes beside it (one Starlette app,
    one lifespan: the MCP session manager's). DNS-rebinding protection always on, the bearer token checked when set.

    :param server: From `build_server`.
    :param host: The bind address (served as a Host header too, unless it is a wildcard address).
    :param token: The bearer token, or None (loopback only, see `check_bind`).
    :param allowed_hosts: More Host header values to serve (`name` or `name:port`).
    :param service: The REST routes' service, the tool's (`pipelines.service.KnowledgeService`), or the catalog of
        several knowledge bases; None serves `/mcp` only.
    :param principals: The deployment's principals: a request sending one's token is served as it
        (`CallerMiddleware`); any other is anonymous (public pages only) or, with a token or principals set and a
        token that names no one, refused.
    :returns: The ASGI app.
    :raises ValueError: If the token is one no request could send (`check_token`).
    """
    token = check_token(token)
    security = transport_security(host, allowed_hosts)
    mcp_app = server.streamable_http_app(streamable_http_path=HTTP_PATH, transport_security=security, host=host)
    routes = rest_routes(service, security, token, principals) if service is not None else []
    # the MCP app's own routes (it has no middleware without the SDK's OAuth) and its lifespan, which runs the
    # session manager: a Mount would hand unknown paths to the inner app's plain-text 404
    app = Starlette(
        routes=[*routes, *mcp_app.routes],
        lifespan=mcp_app.router.lifespan_context,
        exception_handlers={HTTPException: _http_error},
    )
    return CallerMiddleware(app, token, principals, exempt_paths=(RETRIEVAL_PATH,) if routes else ())


def _named_tool(
    name: str, folder: str, path: str | Path, component_params: dict[str, dict[str, Any]] | None
) -> LookupKnowledgeTool:
    """One knowledge base of several: its tool `lookup_<name>`, its service named `name`."""
    tool = lookup_knowledge_tool(path, data_dir=folder, component_params=component_params, name=f"lookup_{name}")
    tool.service.name = name
    return tool


def serve(
    transport: Literal["stdio", "http"] = "stdio",
    host: str = DEFAULT_MCP_HOST,
    port: int = DEFAULT_MCP_PORT,
    data_dir: str | Path | None = None,
    pipeline_path: str | Path | None = None,
    allow_remote: bool = False,
    allowed_hosts: list[str] | None = None,
    token: Secret | None = None,
    component_params: dict[str, dict[str, Any]] | None = None,
    tool_name: str | None = None,
    tool_description: str | None = None,
    knowledge: list[tuple[str, str]] | None = None,
    principals_path: str | Path | None = None,
    as_principal: str | None = None,
) -> None:
    """
    Load the lookup pipeline once and serve `lookup_knowledge` until the client disconnects (stdio) or the process
    is stopped (http).

    :param transport: `stdio` (for a client that starts the server) or `http` (streamable HTTP at `/mcp`, and the
        REST routes of `pipelines.entrypoints.rest_api`).
    :param host: HTTP bind address; loopback by default.
    :param port: HTTP port.
    :param data_dir: Data folder (else `LOOKUP_KNOWLEDGE_DATA_DIR`, else `./data`); `MILVUS_URI` and `TRACE_DB_URL`
        apply as everywhere.
    :param pipeline_path: The lookup pipeline YAML (default `pipelines.yaml`).
    :param allow_remote: Allow a non-loopback `host` (which then also needs `LOOKUP_KNOWLEDGE_TOKEN`).
    :param allowed_hosts: More Host header values to serve over HTTP (e.g. the name clients use).
    :param token: The bearer token every HTTP request must send, a Haystack `Secret` (default: the
        `LOOKUP_KNOWLEDGE_TOKEN` environment variable, when set; none: loopback only).
    :param component_params: Init parameter overrides of the pipeline's components (`--set`).
    :param tool_name: The lookup tool's name (default: the pipeline's, `lookup_knowledge`): two knowledge bases served
        to one agent need two names.
    :param tool_description: The lookup tool's description (default: the pipeline's `metadata.tool_description`,
        else one naming the knowledge base).
    :param knowledge: Several knowledge bases to serve, as `(name, data folder)` pairs (`--knowledge NAME=DIR`):
        each gets its lookup tool `lookup_<name>` described from its own facets; `data_dir`, `tool_name` and
        `tool_description` are then not used.
    :param principals_path: The principals file (default: `LOOKUP_KNOWLEDGE_PRINCIPALS`, else `principals.yaml` in
        the data folder): over HTTP a request sending one's token is served as that principal, any other anonymously
        (public pages only).
    :param as_principal: Over stdio, the principal every call is for (a name in the principals file; default:
        anonymous). Over HTTP each request says who it is, so this is refused.
    :raises ValueError: If `transport` is unknown, the pipeline file is not a pipeline, the bind is refused, the
        HTTP token is one no request could send (`check_token`), the principals file is not valid, or `as_principal`
        is not in it or is given for HTTP.
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
    if knowledge and (tool_name or tool_description):
        msg = "--tool-name and --tool-description name one knowledge base; with --knowledge each is lookup_<name>"
        raise ValueError(msg)
    principals = Principals.load(principals_path or Principals.default_path(Deployment.resolve(data_dir).data_dir))
    if as_principal and transport == "http":
        msg = "--as is for stdio: over HTTP each request is its token's principal (or anonymous)"
        raise ValueError(msg)
    caller = principals.get(as_principal) if as_principal else ANONYMOUS

    def load() -> list[LookupKnowledgeTool]:
        if not knowledge:
            one = lookup_knowledge_tool(
                path, data_dir=data_dir, component_params=component_params, name=tool_name, description=tool_description
            )
            return [one]
        return [_named_tool(name, folder, path, component_params) for name, folder in knowledge]

    if transport == "stdio":
        with _stdout_to_stderr():  # loading may start Milvus Lite; nothing it prints may reach the protocol stream
            tools = load()
        serve_stdio(build_server(tools, principal=caller))
        return
    secret = token if token is not None else Secret.from_env_var(AUTH_ENV, strict=False)
    bearer = check_token(secret.resolve_value())  # both before loading anything
    check_bind(host, allow_remote, bearer, principals)
    tools = load()
    server = build_server(tools, log_level="INFO")
    logger.info(
        "Serving {tool} over streamable HTTP at http://{host}:{port}{path}, REST at /lookup, /retrieval (Dify), "
        "/health, /openapi.json (bearer token {auth}; {principals} principals)",
        tool=", ".join(t.name for t in tools),
        host=host,
        port=port,
        path=HTTP_PATH,
        auth="required" if bearer else "off: loopback only",
        principals=len(principals.names()),
    )
    import uvicorn

    catalog = Catalog({t.service.name: t.service for t in tools} if knowledge else tools[0].service)
    app = http_app(server, host, bearer, allowed_hosts, service=catalog, principals=principals or None)
    uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="info")).run()
