"""REST routes beside the MCP endpoint: `POST /lookup`, Dify's `POST /retrieval`, `GET /health`, `GET /facets`,
`POST /read_evidence`, `POST /read_document`, `GET /openapi.json`.

`lookup-knowledge serve --transport http` serves them in the same process as `/mcp`
(`pipelines.entrypoints.mcp_server.http_app` composes both), through the same `KnowledgeService` (`pipelines.service`),
so MCP and REST lookups run alike: concurrently, one trace row each, calls of one session one after another.

- `POST /lookup` `{query, session_id?, filters?, max_chars?, cursor?}` → the full `LookupResult` JSON (camelCase,
  as `pipelines.lookup` returns it): 200 for `evidence`, `no_evidence`, `already_returned`, `l1_disabled`; 422 for
  `invalid_query` (empty or over-long query, unknown filter key, damaged cursor); 503 for `error` (knowledge store
  unreachable, nothing indexed). The call is recorded in all three cases and the body has its `traceId`.
- `POST /retrieval`: Dify's External Knowledge API (`pipelines.entrypoints.dify_knowledge`): `{"records": [...]}` or
  `{"error_code", "error_msg"}`.
- `GET /health` → `{status, storeReachable, collection, collectionExists, indexVersion, documents, chunks, error}`:
  200 when the store answers and the collection exists, else 503 (`status: unavailable`), checked on a connection of
  its own, never through the lookup pipeline (no trace row). A check that itself fails (the knowledge index file
  cannot be read, e.g. it is corrupt) is 503 too, `status: error` with the reason in `error`: never a 500.
- `GET /facets` → `list_facets`; `POST /read_evidence` `{citation, before?, after?, max_chars?, session_id?}` and `POST
  /read_document` `{source, section?, max_chars?, session_id?}` → the reads (200; 404 `not_found`; 422
  `invalid_request`; 503 `error`), each recorded as a trace row like a lookup.
- `GET /openapi.json` → the OpenAPI 3.1 document of these routes.

Requests that never reach the pipeline are refused with a one-line JSON error and leave no trace row, as the MCP SDK
answers calls that do not match the tool's schema: a body that is not JSON, nested deeper than 32 arrays and objects,
not an object, or not of the documented shape (400); larger than 64 KiB (413); without `Content-Type:
application/json` (415); a Host header that is not served (421, DNS-rebinding protection, the MCP endpoint's allowed
hosts) or a foreign `Origin` (403). `/lookup` and the others answer `{"error": <word>, "detail": <reason>}`;
`/retrieval` answers in Dify's shape. A lone surrogate in a string of the body (JSON's `"\\ud800"`, not Unicode text)
is read as its escape, the six characters `\\ud800`, as the trace store stores it: the lookup runs on that text, is
recorded once, and its answer can be sent. Every request is served as a principal (`pipelines.access`): the one whose
token it sends (the principals file), else anonymous (public pages only). With a bearer token set
(`LOOKUP_KNOWLEDGE_TOKEN`, anonymous) or principals, `CallerMiddleware` identifies the caller of every route and refuses
what it cannot (401) but on `/retrieval`, which identifies its caller itself to answer Dify's 1001/1002 (403); both
use `identify`. Pipeline runs are blocking: they run in a worker thread.
"""

from __future__ import annotations

import functools
import hmac
import json
import re
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Literal, TypeVar

from haystack import logging
from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from components.core.lookup_result import LookupResult
from pipelines.access import ANONYMOUS, Principal, Principals
from pipelines.catalog import Catalog, UnknownKnowledgeError
from pipelines.entrypoints.dify_knowledge import (
    ERROR_CODES,
    DifyError,
    RetrievalRequest,
    RetrievalResponse,
    compile_filter,
    matching_sources,
    records,
)
from pipelines.knowledge_reads import DocumentRead, EvidenceRead, Facets
from pipelines.service import Health, KnowledgeService

__all__ = [
    "HEALTH_PATH",
    "LOOKUP_PATH",
    "MAX_BODY_BYTES",
    "MAX_JSON_DEPTH",
    "OPENAPI_PATH",
    "RETRIEVAL_PATH",
    "ApiError",
    "JsonTooDeepError",
    "authorization_header",
    "bearer_token_matches",
    "caller_of",
    "escape_lone_surrogates",
    "identify",
    "load_json",
    "openapi_document",
    "rest_routes",
]

logger = logging.getLogger(__name__)

LOOKUP_PATH = "/lookup"
RETRIEVAL_PATH = "/retrieval"
HEALTH_PATH = "/health"
OPENAPI_PATH = "/openapi.json"
#: Largest request body read (a query is at most 2,000 characters; Dify's request is a few hundred bytes).
MAX_BODY_BYTES = 64 * 1024
#: Deepest nesting of arrays and objects in a request body (Dify's deepest request nests 4 levels); checked before the
#: body is parsed, since the parser recurses once per level.
MAX_JSON_DEPTH = 32

#: `evidenceStatus` → HTTP status of `/lookup` (every other status is 200).
LOOKUP_STATUS = {"invalid_query": 422, "error": 503}
#: a read's `status` → HTTP status (`evidence` is 200)
READ_STATUS = {"not_found": 404, "invalid_request": 422, "error": 503}
FACETS_PATH = "/facets"
READ_EVIDENCE_PATH = "/read_evidence"
READ_DOCUMENT_PATH = "/read_document"

M = TypeVar("M", bound=BaseModel)


class ApiError(Exception):
    """
    A request refused before or after the lookup, answered as one line of JSON in the route's error shape.

    :param status: The HTTP status.
    :param error: A short word for `/lookup`'s `{"error": ...}` (e.g. `bad_request`).
    :param detail: The reason, with the fix.
    :param dify_code: Dify's `error_code` (default: the status followed by a 1, see `ERROR_CODES`).
    """

    def __init__(self, status: int, error: str, detail: str, dify_code: int | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.error = error
        self.detail = detail
        self.dify_code = dify_code if dify_code is not None else status * 10 + 1


def dify_error(code: int, detail: str | None = None) -> ApiError:
    """
    One of Dify's documented errors (1001, 1002, 2001) or ours, with its HTTP status.

    :param code: A key of `ERROR_CODES`.
    :param detail: The message (default: the code's own).
    :returns: The error.
    """
    status, message = ERROR_CODES[code]
    return ApiError(status, "dify", detail or message, dify_code=code)


def error_response(err: ApiError) -> JSONResponse:
    """
    :param err: The error.
    :returns: `{"error": ..., "detail": ...}` with the error's status.
    """
    return JSONResponse({"error": err.error, "detail": err.detail}, status_code=err.status)


def dify_error_response(err: ApiError) -> JSONResponse:
    """
    :param err: The error.
    :returns: Dify's `{"error_code": ..., "error_msg": ...}` with the error's status.
    """
    return JSONResponse({"error_code": err.dify_code, "error_msg": err.detail}, status_code=err.status)


_KNOWLEDGE = "The knowledge base, when the server serves several (`GET /facets` lists them)."


class LookupRequest(BaseModel):
    """The body of `POST /lookup`."""

    model_config = ConfigDict(strict=True, extra="forbid")

    query: str = Field(description="The question or its key terms, in the user's language (1 to 2,000 characters).")
    session_id: str | None = Field(
        default=None, description="A stable id for the conversation: evidence already returned in it is not repeated."
    )
    filters: dict[str, str | list[str]] | None = Field(
        default=None,
        description="Search only documents matching all of these (strict): category, tags, source_prefix, "
        "updated_after and the declared fields (`GET /facets` lists them and their values).",
    )
    max_chars: int | None = Field(default=None, ge=200, description="The most characters of evidence to return.")
    cursor: str | None = Field(default=None, description="A previous result's `cursor`: that lookup's next blocks.")
    knowledge: str | None = Field(default=None, description=_KNOWLEDGE)


class ReadEvidenceRequest(BaseModel):
    """The body of `POST /read_evidence`."""

    model_config = ConfigDict(strict=True, extra="forbid")

    citation: str = Field(description="A block's `citation`.")
    before: int = Field(default=1, ge=0, le=10, description="Neighbouring chunks before it.")
    after: int = Field(default=1, ge=0, le=10, description="Neighbouring chunks after it.")
    max_chars: int | None = Field(default=None, ge=200, description="The most characters to return.")
    session_id: str | None = None
    knowledge: str | None = Field(default=None, description=_KNOWLEDGE)


class ReadDocumentRequest(BaseModel):
    """The body of `POST /read_document`."""

    model_config = ConfigDict(strict=True, extra="forbid")

    source: str = Field(description="A block's `source`.")
    section: str | None = Field(default=None, description="A heading path or heading; the whole document without.")
    max_chars: int | None = Field(default=None, ge=200, description="The most characters to return.")
    session_id: str | None = None
    knowledge: str | None = Field(default=None, description=_KNOWLEDGE)


class ErrorBody(BaseModel):
    """A refused request (every route but `/retrieval`)."""

    error: str
    detail: str


def _one_line(err: Exception) -> str:
    """An exception as one line (pydantic's and others' messages span several), at most 300 characters."""
    return " ".join(f"{type(err).__name__}: {err}".split())[:300]


def _describe(err: ValidationError) -> str:
    """One line naming each invalid field (never echoing its value)."""
    parts = [f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in err.errors()[:5]]
    return "; ".join(parts)


def parse_body(model: type[M], data: Any) -> M:
    """
    Validate a decoded JSON body against a request model.

    :param model: The request model.
    :param data: The decoded body.
    :returns: The request.
    :raises ApiError: 400, naming the invalid fields.
    """
    if not isinstance(data, dict):
        raise ApiError(400, "bad_request", f"the body must be a JSON object, not {type(data).__name__}")
    try:
        return model.model_validate(data)
    except ValidationError as err:
        raise ApiError(400, "bad_request", f"invalid request: {_describe(err)}") from None


class JsonTooDeepError(ValueError):
    """JSON text nested deeper than its reader accepts."""


#: a JSON string (an unterminated one runs to the end, so that scanning stays linear) or a bracket
_STRING_OR_BRACKET = re.compile(r'"(?:[^"\\]|\\.)*(?:"|\\?\Z)|[\[\]{}]', re.DOTALL)


def json_depth(text: str, limit: int) -> int:
    """
    How deep JSON text nests arrays and objects, counted without parsing it (brackets in strings do not count).

    :param text: JSON text (valid or not).
    :param limit: Stop counting above this depth.
    :returns: The deepest nesting, or `limit + 1` when it is deeper than `limit`.
    """
    depth = deepest = 0
    for match in _STRING_OR_BRACKET.finditer(text):
        char = match.group()[0]
        if char in "[{":
            depth += 1
            deepest = max(deepest, depth)
            if deepest > limit:
                break
        elif char in "]}":
            depth -= 1
    return deepest


def _escaped(text: str) -> str:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", errors="backslashreplace").decode("utf-8")
    return text


def escape_lone_surrogates(value: Any) -> Any:
    r"""
    Return decoded JSON whose strings (keys too) are Unicode text: each lone surrogate becomes its escape, as text.

    JSON's `"\ud800"` decodes to a lone surrogate, which is no character: UTF-8 cannot encode it, so an answer or a log
    line holding it fails. It becomes the six characters `\ud800`, as the trace store stores such strings, so what is
    looked up, answered and recorded is one and the same text.

    :param value: A decoded JSON value.
    :returns: The value, copied where a string changed.
    """
    if isinstance(value, str):
        return _escaped(value)
    if isinstance(value, dict):
        return {_escaped(key): escape_lone_surrogates(item) for key, item in value.items()}
    if isinstance(value, list):
        return [escape_lone_surrogates(item) for item in value]
    return value


def load_json(text: str, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """
    Parse JSON text of bounded nesting, its lone surrogates escaped (`escape_lone_surrogates`).

    :param text: The JSON text.
    :param max_depth: Deepest nesting of arrays and objects accepted. Checked before parsing: the parser recurses once
        per level, and 30,000 levels fit in 64 KiB and exhaust Python's stack.
    :returns: The decoded value.
    :raises JsonTooDeepError: If it nests deeper than `max_depth`.
    :raises ValueError: If it is not JSON.
    """
    if json_depth(text, max_depth) > max_depth:
        msg = f"nested deeper than {max_depth} levels of arrays and objects"
        raise JsonTooDeepError(msg)
    return escape_lone_surrogates(json.loads(text))


async def read_json(request: Request, limit: int = MAX_BODY_BYTES) -> Any:
    """
    Read and decode a JSON request body of at most `limit` bytes and `MAX_JSON_DEPTH` levels (`load_json`).

    :param request: The request.
    :param limit: Largest body accepted.
    :returns: The decoded body, lone surrogates escaped.
    :raises ApiError: 415 without `Content-Type: application/json`, 413 over the limit, 400 if it is not JSON or is
        nested too deep.
    """
    content_type = request.headers.get("content-type", "")
    if not content_type.lower().startswith("application/json"):
        raise ApiError(415, "unsupported_media_type", "send the body as JSON with Content-Type: application/json")
    too_large = ApiError(413, "too_large", f"the request body is larger than {limit} bytes")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise too_large
    body = bytearray()
    async for chunk in request.stream():
        body.extend(chunk)
        if len(body) > limit:
            raise too_large
    try:
        return load_json(body.decode("utf-8"))
    except JsonTooDeepError as err:
        raise ApiError(400, "bad_request", f"the body is {err}") from None
    except (UnicodeDecodeError, ValueError) as err:
        raise ApiError(400, "bad_request", f"the body is not JSON: {err}") from None


class HostCheck:
    """DNS-rebinding protection for the REST routes: the MCP SDK's own Host and Origin check, same settings."""

    def __init__(self, security: TransportSecuritySettings) -> None:
        """
        :param security: The MCP endpoint's settings (`pipelines.entrypoints.mcp_server.transport_security`).
        """
        self._check = TransportSecurityMiddleware(security)

    async def __call__(self, request: Request) -> None:
        """
        :param request: The request.
        :raises ApiError: 421 for a Host header that is not served, 403 for a foreign Origin.
        """
        refused = await self._check.validate_request(request, is_post=False)
        if refused is None:
            return
        if refused.status_code == 421:
            msg = "this Host header is not served (DNS-rebinding protection); serve it with --allowed-host NAME[:PORT]"
            raise ApiError(421, "misdirected_request", msg)
        raise ApiError(refused.status_code, "forbidden_origin", "this Origin is not served (DNS-rebinding protection)")


def authorization_header(headers: Iterable[tuple[bytes, bytes]]) -> bytes:
    """
    :param headers: A request's headers as sent (ASGI's `scope["headers"]`, Starlette's `request.headers.raw`).
    :returns: Its first `Authorization` header, as bytes (b"" without one).
    """
    return next((value for name, value in headers if name.lower() == b"authorization"), b"")


def bearer_credentials(header: bytes) -> bytes | None:
    """
    :param header: An `Authorization` header as sent.
    :returns: Its credentials if it is `Bearer <credentials>` (the scheme in any case, as HTTP has it), else None.
    """
    scheme, _, credentials = header.strip().partition(b" ")
    credentials = credentials.strip()
    return credentials if scheme.lower() == b"bearer" and credentials else None


def bearer_token_matches(header: bytes, token: str) -> bool:
    """
    Whether an `Authorization` header carries the bearer token: the one comparison of every route and of `/mcp`.

    Compared as bytes, in constant time (`hmac.compare_digest`): a header is bytes on the wire, and the token is
    printable ASCII (`pipelines.entrypoints.mcp_server.check_token`), so its UTF-8 is exactly what a client sends.

    :param header: The `Authorization` header as sent.
    :param token: The server's bearer token.
    :returns: True if it is `Bearer <token>`.
    """
    credentials = bearer_credentials(header)
    return credentials is not None and hmac.compare_digest(credentials, token.encode("utf-8"))


def identify(header: bytes, token: str | None, principals: Principals | None = None) -> Principal | None:
    """
    Who a request is, by its `Authorization` header: the one check of every route and of `/mcp`.

    - a principal's token (the principals file, compared by hash) is that principal;
    - the server's bearer token (`LOOKUP_KNOWLEDGE_TOKEN`, compared with `bearer_token_matches`) is anonymous;
    - no header is anonymous when the server has no bearer token, else no one;
    - any other token is no one when the server has a token or principals (never quietly anonymous), and is ignored
      when it has neither (a loopback server without any: every caller is anonymous).

    :param header: The `Authorization` header as sent.
    :param token: The server's bearer token, or None.
    :param principals: The deployment's principals, or None.
    :returns: The principal (`ANONYMOUS`: public pages only), or None for a request that must be refused.
    """
    credentials = bearer_credentials(header)
    if credentials is None:
        return ANONYMOUS if token is None else None
    if token is not None and bearer_token_matches(header, token):
        return ANONYMOUS
    if principals:
        found = principals.by_token(credentials.decode("utf-8", "replace"))
        if found is not None:
            return found
    return None if token is not None or principals else ANONYMOUS


def caller_of(request: Request) -> Principal:
    """
    The principal `CallerMiddleware` identified for a request.

    :param request: The request.
    :returns: Its principal; `ANONYMOUS` when no middleware identified it (fail closed: public pages only).
    """
    found = request.scope.get("state", {}).get("principal")
    return found if isinstance(found, Principal) else ANONYMOUS


def retrieval_caller(header: bytes, token: str | None, principals: Principals | None) -> Principal:
    """
    Dify's authorization check on `/retrieval` (`identify`, as on every other route).

    :param header: The `Authorization` header as sent.
    :param token: The server's bearer token, or None.
    :param principals: The deployment's principals, or None.
    :returns: The caller.
    :raises ApiError: Dify's 1001 (no `Bearer <key>` where one is needed) or 1002 (a key that names no one), both 403.
    """
    caller = identify(header, token, principals)
    if caller is not None:
        return caller
    raise dify_error(1001 if bearer_credentials(header) is None else 1002)


Handler = Callable[[Request], Awaitable[Response]]


def _guarded(handle: Callable[[Request], Awaitable[Response]], on_error: Callable[[ApiError], JSONResponse]) -> Handler:
    """A route endpoint: `handle`, with its refusals and crashes as one-line JSON errors in the route's shape."""

    async def endpoint(request: Request) -> Response:
        try:
            return await handle(request)
        except ApiError as err:
            return on_error(err)
        except Exception as err:  # a crash is an answer too, never a dead connection
            logger.exception("{path} failed: {error}", path=request.url.path, error=err)
            return on_error(ApiError(500, "internal", f"internal error: {type(err).__name__}"))

    return endpoint


def _picked(catalog: Catalog, name: str | None) -> KnowledgeService:
    try:
        return catalog.pick(name)
    except UnknownKnowledgeError as err:
        raise ApiError(404, "unknown_knowledge", str(err)) from None


def rest_routes(
    service: KnowledgeService | Catalog,
    security: TransportSecuritySettings,
    token: str | None = None,
    principals: Principals | None = None,
) -> list[Route]:
    """
    The REST routes, to serve beside `/mcp` (`pipelines.entrypoints.mcp_server.http_app`) or on their own.

    :param service: The loaded pipeline's service, or the catalog of several knowledge bases (then `/lookup` and the
        reads take `knowledge`, `/facets` lists them all without `?knowledge=`, `/health` answers for each, Dify's
        `knowledge_id` is a knowledge base's name).
    :param security: Allowed Host and Origin headers (the MCP endpoint's).
    :param token: The bearer token: `/retrieval` checks it (the others rely on `CallerMiddleware`).
    :param principals: The deployment's principals: `/retrieval` identifies its caller by them.
    :returns: `/lookup`, `/retrieval`, `/health`, `/facets`, `/read_evidence`, `/read_document` and `/openapi.json`.
    """
    check_host = HostCheck(security)
    catalog = service if isinstance(service, Catalog) else Catalog(service)

    async def lookup_route(request: Request) -> Response:
        await check_host(request)
        payload = parse_body(LookupRequest, await read_json(request))
        chosen = _picked(catalog, payload.knowledge)
        result = await run_in_threadpool(
            functools.partial(
                chosen.lookup,
                payload.query,
                payload.session_id,
                filters=payload.filters,
                max_chars=payload.max_chars,
                cursor=payload.cursor,
                principal=caller_of(request),
            )
        )
        return JSONResponse(result, status_code=LOOKUP_STATUS.get(result.get("evidenceStatus", ""), 200))

    async def facets_route(request: Request) -> Response:
        await check_host(request)
        name = request.query_params.get("knowledge")
        chosen = list(catalog) if catalog.several and not name else [_picked(catalog, name)]
        caller = caller_of(request)
        try:
            every = [await run_in_threadpool(functools.partial(known.facets, principal=caller)) for known in chosen]
        except Exception as err:  # an unreadable knowledge index: unavailable, with the reason, as /health says
            raise ApiError(503, "unavailable", _one_line(err)) from None
        return JSONResponse({"knowledgeBases": every} if catalog.several and not name else every[0])

    async def answer_read(read: Callable[[], dict[str, Any]]) -> Response:
        body = await run_in_threadpool(read)
        return JSONResponse(body, status_code=READ_STATUS.get(body["status"], 200))

    async def read_evidence_route(request: Request) -> Response:
        await check_host(request)
        payload = parse_body(ReadEvidenceRequest, await read_json(request))
        chosen = _picked(catalog, payload.knowledge)
        caller = caller_of(request)
        return await answer_read(
            lambda: chosen.read_evidence(
                payload.citation,
                payload.before,
                payload.after,
                payload.max_chars,
                session_id=payload.session_id,
                principal=caller,
            )
        )

    async def read_document_route(request: Request) -> Response:
        await check_host(request)
        payload = parse_body(ReadDocumentRequest, await read_json(request))
        chosen = _picked(catalog, payload.knowledge)
        caller = caller_of(request)
        return await answer_read(
            lambda: chosen.read_document(
                payload.source, payload.section, payload.max_chars, session_id=payload.session_id, principal=caller
            )
        )

    async def retrieval_route(request: Request) -> Response:
        await check_host(request)
        caller = retrieval_caller(authorization_header(request.headers.raw), token, principals)
        payload = parse_body(RetrievalRequest, await read_json(request))
        chosen = catalog.for_knowledge_id(payload.knowledge_id)
        if chosen is None:
            raise dify_error(2001)
        declared = await run_in_threadpool(chosen.filter_keys)
        try:
            metadata_filter = compile_filter(payload.metadata_condition, declared)
        except ValueError as err:
            raise dify_error(4001, f"invalid request: {err}") from None
        documents = await run_in_threadpool(functools.partial(chosen.documents, principal=caller))
        filters = None
        if metadata_filter.on_documents:  # search within the matching documents, not only filter what comes back
            sources = matching_sources(metadata_filter, documents)
            if not sources:
                return JSONResponse({"records": []})
            filters = {"source": sources}
        lookup = functools.partial(chosen.lookup, payload.query, None, filters=filters, principal=caller)
        result = await run_in_threadpool(lookup)
        status = LOOKUP_STATUS.get(str(result.get("evidenceStatus")))
        if status is not None:  # rejected (4221) or failed (5031): recorded, and an error for Dify
            raise ApiError(
                status, str(result["evidenceStatus"]), f"{result.get('error')} (traceId={result.get('traceId')})"
            )
        return JSONResponse({"records": records(result, payload.retrieval_setting, metadata_filter, documents)})

    async def health_route(request: Request) -> Response:
        await check_host(request)
        checks = {}
        for name, known in catalog.services.items():
            try:
                checks[name] = await run_in_threadpool(known.health)
            except Exception as err:  # a health check that fails is an unhealthy server, not a crashed route
                logger.exception("Health check failed: {error}", error=err)
                reason = " ".join(f"health check failed: {type(err).__name__}: {err}".split())
                checks[name] = {"status": "error", "error": reason}
        healthy = all(check["status"] == "ok" for check in checks.values())
        if catalog.several:
            body = {"status": "ok" if healthy else "unavailable", "knowledgeBases": checks}
        else:
            body = next(iter(checks.values()))
        return JSONResponse(body, status_code=200 if healthy else 503)

    async def openapi_route(request: Request) -> Response:
        await check_host(request)
        return JSONResponse(openapi_document())

    return [
        Route(LOOKUP_PATH, _guarded(lookup_route, error_response), methods=["POST"]),
        Route(RETRIEVAL_PATH, _guarded(retrieval_route, dify_error_response), methods=["POST"]),
        Route(HEALTH_PATH, _guarded(health_route, error_response), methods=["GET"]),
        Route(FACETS_PATH, _guarded(facets_route, error_response), methods=["GET"]),
        Route(READ_EVIDENCE_PATH, _guarded(read_evidence_route, error_response), methods=["POST"]),
        Route(READ_DOCUMENT_PATH, _guarded(read_document_route, error_response), methods=["POST"]),
        Route(OPENAPI_PATH, _guarded(openapi_route, error_response), methods=["GET"]),
    ]


def _schemas(models: dict[type[BaseModel], Literal["validation", "serialization"]]) -> dict[str, Any]:
    """The models' JSON schemas (and the ones they refer to) as OpenAPI components."""
    schemas: dict[str, Any] = {}
    for model, mode in models.items():
        schema = model.model_json_schema(by_alias=True, ref_template="#/components/schemas/{model}", mode=mode)
        schemas.update(schema.pop("$defs", {}))
        schemas[model.__name__] = schema
    return schemas


def _json(schema: str, description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{schema}"}}},
    }


def openapi_document() -> dict[str, Any]:
    """
    The OpenAPI 3.1 document of the REST routes (the request and response schemas are the pydantic models').

    :returns: The document.
    """
    refused = {
        "400": _json(
            "ErrorBody",
            f"Not JSON, nested deeper than {MAX_JSON_DEPTH} levels, not an object, or not the documented shape "
            "(not recorded).",
        ),
        "401": _json("ErrorBody", "A token is set and the request does not send it."),
        "413": _json("ErrorBody", f"The body is larger than {MAX_BODY_BYTES} bytes."),
        "415": _json("ErrorBody", "No `Content-Type: application/json`."),
        "421": _json("ErrorBody", "The Host header is not served (DNS-rebinding protection)."),
    }
    meanings: dict[int, list[str]] = {}
    for code, (status, what) in ERROR_CODES.items():
        meanings.setdefault(status, []).append(f"{code}: {what}")
    dify_refused = {str(status): _json("DifyError", "; ".join(codes)) for status, codes in sorted(meanings.items())}
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "lookup-knowledge",
            "version": "1",
            "description": (
                "Evidence-first knowledge lookup. Every lookup is recorded (traceId). With LOOKUP_KNOWLEDGE_TOKEN set "
                "on the server, every route needs `Authorization: Bearer <token>`."
            ),
        },
        "components": {
            "schemas": _schemas(
                {
                    LookupRequest: "validation",
                    LookupResult: "serialization",
                    RetrievalRequest: "validation",
                    RetrievalResponse: "serialization",
                    DifyError: "serialization",
                    Health: "serialization",
                    Facets: "serialization",
                    ReadEvidenceRequest: "validation",
                    EvidenceRead: "serialization",
                    ReadDocumentRequest: "validation",
                    DocumentRead: "serialization",
                    ErrorBody: "serialization",
                }
            ),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}, {}],
        "paths": {
            LOOKUP_PATH: {
                "post": {
                    "summary": "One lookup_knowledge call: the full LookupResult",
                    "requestBody": {"required": True, **_json("LookupRequest", "The query and an optional session.")},
                    "responses": {
                        "200": _json("LookupResult", "Evidence, no evidence, already returned, or L1 disabled."),
                        "422": _json("LookupResult", "evidenceStatus invalid_query: the query was rejected."),
                        "503": _json("LookupResult", "evidenceStatus error: the knowledge store failed."),
                        **refused,
                    },
                }
            },
            RETRIEVAL_PATH: {
                "post": {
                    "summary": "Dify's External Knowledge API",
                    "requestBody": {"required": True, **_json("RetrievalRequest", "Dify's retrieval request.")},
                    "responses": {
                        "200": _json("RetrievalResponse", "The records ([] when nothing was found)."),
                        **dify_refused,
                    },
                }
            },
            HEALTH_PATH: {
                "get": {
                    "summary": "Whether the store answers, and what is indexed",
                    "responses": {
                        "200": _json("Health", "The store answers and the collection exists."),
                        "503": _json(
                            "Health",
                            "The store does not answer or nothing is indexed (status unavailable), or the check "
                            "failed, e.g. the knowledge index file cannot be read (status error).",
                        ),
                    },
                }
            },
            FACETS_PATH: {
                "get": {
                    "summary": "What lookups may filter on, with document counts and sample values (list_facets)",
                    "responses": {"200": _json("Facets", "The facets (recorded as a list_facets call).")},
                }
            },
            READ_EVIDENCE_PATH: {
                "post": {
                    "summary": "A cited block whole, with its neighbours (read_evidence)",
                    "requestBody": {"required": True, **_json("ReadEvidenceRequest", "The citation.")},
                    "responses": {
                        "200": _json("EvidenceRead", "The blocks (`changed` when the document changed since)."),
                        "404": _json("EvidenceRead", "status not_found: the document is not indexed (any more)."),
                        "422": _json("EvidenceRead", "status invalid_request: not a citation."),
                        **refused,
                    },
                }
            },
            READ_DOCUMENT_PATH: {
                "post": {
                    "summary": "A document, or one of its sections (read_document)",
                    "requestBody": {"required": True, **_json("ReadDocumentRequest", "The source and section.")},
                    "responses": {
                        "200": _json("DocumentRead", "The blocks in order, and the document's sections."),
                        "404": _json("DocumentRead", "status not_found: no such document or section."),
                        "422": _json("DocumentRead", "status invalid_request."),
                        **refused,
                    },
                }
            },
            OPENAPI_PATH: {"get": {"summary": "This document", "responses": {"200": {"description": "OpenAPI 3.1"}}}},
        },
    }
