"""The REST routes beside `/mcp`: `/lookup`, Dify's `/retrieval`, `/health`, `/openapi.json`.

`TestRestApi`, `TestDifyRetrieval` and `TestRestSecurity` run the composed app
(`pipelines.entrypoints.mcp_server.http_app`) in process on a scripted service (no pipeline). `TestRestApiServer` starts
`lookup-knowledge serve --transport http` twice, as subprocesses on free loopback ports: on an indexed knowledge base
with a bearer token, and without a token on a Milvus URI nobody listens on (store down). Every answer of `/retrieval` is
checked against the JSON schema in `tests/contracts/`, written from Dify's documentation.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest
from starlette.testclient import TestClient

from components.core.lookup_result import EvidenceBlock, LookupResult
from components.store.knowledge_index import IndexedDocument
from components.trace.trace_store import TraceStore
from pipelines.entrypoints.mcp_server import AUTH_ENV, build_server, http_app
from pipelines.entrypoints.rest_api import MAX_BODY_BYTES
from pipelines.settings import DATA_DIR_ENV, MILVUS_URI_ENV, REPO_ROOT, TRACE_DB_URL_ENV, Deployment
from pipelines.tool_contract import BUILT_IN_FILTER_KEYS
from tests.contracts.dify_client import DifyCondition, DifyMetadataCondition, dify_request
from tests.pipelines.entrypoints.test_mcp_server import index_in_subprocess
from tests.postgres_server import free_port

CONTRACT = json.loads(
    (REPO_ROOT / "tests" / "contracts" / "dify_external_knowledge.schema.json").read_text(encoding="utf-8")
)
TOKEN = "rest-test-token-value"
BEARER = {"authorization": f"Bearer {TOKEN}"}
STEP_TIMEOUT = 90
DEPLOYMENT_ENV = (AUTH_ENV, DATA_DIR_ENV, MILVUS_URI_ENV, TRACE_DB_URL_ENV)


def schemas_of(document: dict[str, Any]) -> dict[str, Any]:
    return document["components"]["schemas"]


def dify(kind: str, body: Any) -> None:
    """Validate a body against the contract's `$defs` entry `kind` (request, response, error, documented_errors)."""
    jsonschema.validate(body, {**CONTRACT, "$ref": f"#/$defs/{kind}"})


def retrieval_body(query: str = "disk full", top_k: int = 5, threshold: float = 0.0, **extra: Any) -> dict[str, Any]:
    body = {
        "knowledge_id": "lookup-knowledge",
        "query": query,
        "retrieval_setting": {"top_k": top_k, "score_threshold": threshold},
        **extra,
    }
    dify("request", body)  # what the tests send is what Dify sends
    return body


# --- in process: the composed app on a scripted service ------------------------------------------------------------


def _block(source: str, category: str, similarity: float, title: str) -> EvidenceBlock:
    return EvidenceBlock(
        evidence_key=f"{source}#0",
        source=source,
        doc_id=source.split("/")[1].removesuffix(".md"),
        title=title,
        breadcrumb=f"{title} > Section",
        category=category,
        retrieval_layer="L1",
        content=f"content of {source}",
        score=similarity + 0.03,
        similarity=similarity,
        score_label="high",
    )


BLOCKS = [
    _block("alerts/disk.md", "alerts", 0.95, "Disk Full Runbook"),
    _block("payments/refund.md", "payments", 0.91, "退款处理流程"),
    _block("faq/plans.md", "product-faq", 0.89, "Subscription Plans"),
]
DOCUMENTS = {
    "alerts/disk.md": IndexedDocument(
        doc_id="disk",
        source="alerts/disk.md",
        title="Disk Full Runbook",
        category="alerts",
        doc_version="1",
        keywords=["disk full", "inode"],
        entities=["node"],
        updated="2026-03-01",
        fields={"severity": ["2"]},
    ),
    "payments/refund.md": IndexedDocument(
        doc_id="refund",
        source="payments/refund.md",
        title="退款处理流程",
        category="payments",
        doc_version="1",
        keywords=["退款"],
        entities=[],
        updated="2025-06-30",
        fields={"severity": ["4"]},
    ),
    "faq/plans.md": IndexedDocument(
        doc_id="plans", source="faq/plans.md", title="Subscription Plans", category="product-faq", doc_version="1"
    ),
}


def canned(status: str, session_id: str | None = None, blocks: list[EvidenceBlock] | None = None) -> dict[str, Any]:
    found = status == "evidence"
    return LookupResult(
        found=found,
        evidence_status=status,  # type: ignore[arg-type]
        message=status,
        session_id=session_id,
        evidence_blocks=(BLOCKS if blocks is None else blocks) if found else [],
        error="query is empty" if status == "invalid_query" else ("Milvus down" if status == "error" else None),
        trace_id=7,
    ).model_dump(by_alias=True)


class FakeService:
    """`KnowledgeService` without a pipeline: answers `status` and records the calls."""

    def __init__(self, status: str = "evidence", healthy: bool = True) -> None:
        self.status = status
        self.healthy = healthy
        self.calls: list[tuple[Any, Any]] = []
        self.options: list[dict[str, Any]] = []
        self.principals: list[Any] = []
        self.blocks: list[EvidenceBlock] | None = None

    def lookup(
        self, query: str, session_id: str | None = None, principal: Any = None, **options: Any
    ) -> dict[str, Any]:
        self.calls.append((query, session_id))
        self.principals.append(principal)
        self.options.append({k: v for k, v in options.items() if v is not None})
        result = canned(self.status, session_id, self.blocks)
        allowed = (options.get("filters") or {}).get("source")
        if allowed is not None:  # the pipeline searches only within the sources asked for
            result["evidenceBlocks"] = [b for b in result["evidenceBlocks"] if b["source"] in allowed]
        return result

    def filter_keys(self) -> list[str]:
        return [*BUILT_IN_FILTER_KEYS, "severity"]

    def facets(self, principal: Any = None) -> dict[str, Any]:
        self.principals.append(principal)
        if not self.healthy:
            msg = "the knowledge index data/knowledge_index.json is damaged"
            raise ValueError(msg)
        return {"knowledge": "lookup-knowledge", "documents": len(DOCUMENTS)}

    def knowledge_ids(self) -> set[str]:
        return {"lookup-knowledge", "knowledge_chunks"}

    def documents(self, principal: Any = None) -> dict[str, IndexedDocument]:
        return DOCUMENTS

    def health(self) -> dict[str, Any]:
        return {"status": "ok" if self.healthy else "unavailable", "storeReachable": self.healthy}


def client_for(service: FakeService, token: str | None = None, host: str = "127.0.0.1:8765") -> TestClient:
    app = http_app(build_server(tool=None), "127.0.0.1", token, service=service)  # type: ignore[arg-type]
    return TestClient(app, base_url=f"http://{host}")


@pytest.fixture
def service() -> FakeService:
    return FakeService()


@pytest.fixture
def client(service) -> Iterator[TestClient]:
    with client_for(service) as test_client:
        yield test_client


class TestRestApi:
    @pytest.mark.parametrize(
        ("status", "http"), [("evidence", 200), ("no_evidence", 200), ("invalid_query", 422), ("error", 503)]
    )
    def test_lookup_answers_the_full_result_with_a_status_per_evidence_status(self, service, client, status, http):
        service.status = status
        response = client.post("/lookup", json={"query": "disk full", "session_id": "s1"})
        assert response.status_code == http
        assert response.json() == canned(status, "s1")
        assert service.calls == [("disk full", "s1")]
        assert "\n" not in response.text

    @pytest.mark.parametrize(
        ("content", "headers", "status", "detail"),
        [
            (b"not json", {}, 400, "not JSON"),
            (b"[1, 2]", {}, 400, "must be a JSON object, not list"),
            (b"{}", {}, 400, "query: Field required"),
            (b'{"query": 1}', {}, 400, "query: Input should be a valid string"),
            (b'{"query": "x", "session_id": 5}', {}, 400, "session_id"),
            (b'{"query": "x", "top_k": 5}', {}, 400, "top_k: Extra inputs are not permitted"),
            (b'{"query": "x"}', {"content-type": "text/plain"}, 415, "Content-Type: application/json"),
            (json.dumps({"query": "a" * MAX_BODY_BYTES}).encode(), {}, 413, f"larger than {MAX_BODY_BYTES}"),
            (b"[" * 30_000 + b"]" * 30_000, {}, 400, "nested deeper than 32 levels"),  # a RecursionError unbounded
            (b'{"query": "x", "session_id": ' + b"[" * 33 + b"]" * 33 + b"}", {}, 400, "nested deeper than 32"),
        ],
    )
    def test_bad_requests_are_refused_in_one_json_line_before_any_lookup(
        self, service, client, content, headers, status, detail
    ):
        response = client.post("/lookup", content=content, headers={"content-type": "application/json", **headers})
        assert response.status_code == status, response.text
        assert response.text.count("\n") == 0 and set(response.json()) == {"error", "detail"}
        assert detail in response.json()["detail"]
        assert service.calls == []

    def test_a_streamed_body_over_the_limit_is_refused(self, service, client):
        def chunks() -> Iterator[bytes]:  # no Content-Length: the limit counts what arrives
            yield b'{"query": "'
            yield b"a" * MAX_BODY_BYTES
            yield b'"}'

        response = client.post("/lookup", content=chunks(), headers={"content-type": "application/json"})
        assert response.status_code == 413 and service.calls == []

    def test_brackets_inside_strings_are_no_nesting(self, service, client):
        response = client.post("/lookup", json={"query": "[" * 40 + "{" * 40, "session_id": "]" * 40})
        assert response.status_code == 200 and service.calls == [("[" * 40 + "{" * 40, "]" * 40)]

    def test_a_lone_surrogate_is_looked_up_and_answered_as_its_escape(self, service, client):
        body = b'{"query": "disk \\udcff full", "session_id": "s-\\ud800"}'  # JSON escapes, as a client sends them
        response = client.post("/lookup", content=body, headers={"content-type": "application/json"})
        assert response.status_code == 200, response.text
        assert service.calls == [("disk \\udcff full", "s-\\ud800")]  # the six characters, as the trace stores them
        assert response.json()["sessionId"] == "s-\\ud800"

    def test_a_health_check_that_fails_is_a_503_never_a_500(self, service, client, monkeypatch):
        def broken() -> dict[str, Any]:
            raise ValueError("knowledge index unreadable\nsecond line")

        monkeypatch.setattr(service, "health", broken)
        response = client.get("/health")
        assert response.status_code == 503 and response.text.count("\n") == 0
        assert response.json() == {
            "status": "error",
            "error": "health check failed: ValueError: knowledge index unreadable second line",
        }

    def test_health_is_200_when_the_store_answers_else_503(self, service, client):
        assert client.get("/health").status_code == 200
        service.healthy = False
        response = client.get("/health")
        assert response.status_code == 503 and response.json()["storeReachable"] is False
        assert service.calls == []  # health never runs a lookup

    def test_facets_of_an_unreadable_index_are_a_503_with_the_reason(self, service, client):
        assert client.get("/facets").json()["documents"] == 3
        service.healthy = False
        response = client.get("/facets")
        assert response.status_code == 503 and response.json()["error"] == "unavailable"
        assert "is damaged" in response.json()["detail"]

    def test_unknown_paths_and_methods_are_json_too(self, client):
        missing = client.get("/nothing")
        assert missing.status_code == 404 and missing.json()["error"] == "not_found"
        wrong = client.get("/lookup")
        assert wrong.status_code == 405 and wrong.json()["error"] == "method_not_allowed"

    def test_openapi_document_describes_every_route_and_resolves(self, client):
        document = client.get("/openapi.json").json()
        assert document["openapi"].startswith("3.1")
        assert set(document["paths"]) == {
            "/lookup",
            "/retrieval",
            "/health",
            "/facets",
            "/read_evidence",
            "/read_document",
            "/openapi.json",
        }
        assert set(schemas_of(document)["LookupRequest"]["properties"]) == {
            "query",
            "session_id",
            "filters",
            "max_chars",
            "cursor",
            "knowledge",
        }
        schemas = document["components"]["schemas"]
        assert schemas["LookupRequest"]["required"] == ["query"]
        assert "evidenceBlocks" in schemas["LookupResult"]["properties"]  # camelCase, as the route answers
        assert set(document["paths"]["/retrieval"]["post"]["responses"]) >= {"200", "400", "403", "404", "413", "503"}
        refs = set()

        def walk(node: Any) -> None:
            if isinstance(node, dict):
                refs.update(v for k, v in node.items() if k == "$ref")
                for value in node.values():
                    walk(value)
            elif isinstance(node, list):
                for value in node:
                    walk(value)

        walk(document)
        assert refs and all(ref.removeprefix("#/components/schemas/") in schemas for ref in refs)
        # a canned result validates against the document's own LookupResult schema
        jsonschema.validate(canned("evidence"), {**schemas["LookupResult"], "components": document["components"]})

    def test_mcp_is_still_served_beside_the_routes(self, client):
        initialize = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            },
        }
        response = client.post(
            "/mcp", json=initialize, headers={"accept": "application/json, text/event-stream"}
        )  # needs the session manager, i.e. the lifespan passed through
        assert response.status_code == 200 and "lookup-knowledge" in response.text


class TestDifyRetrieval:
    def test_blocks_become_records_with_similarity_as_score(self, service, client):
        response = client.post("/retrieval", json=retrieval_body(top_k=2))
        assert response.status_code == 200
        dify("response", response.json())
        first, second = response.json()["records"]
        assert first == {
            "content": "content of alerts/disk.md",
            "score": 0.95,
            "title": "Disk Full Runbook",
            "metadata": {
                "document_id": "disk",
                "source": "alerts/disk.md",
                "title": "Disk Full Runbook",
                "breadcrumb": "Disk Full Runbook > Section",
                "similarity": 0.95,
                "rank_score": pytest.approx(0.98),
                "category": "alerts",
                "doc_id": "disk",
                "evidence_key": "alerts/disk.md#0",
                "citation": "",
                "keywords": ["disk full", "inode"],
                "tags": ["disk full", "inode"],
                "entities": ["node"],
                "document_name": ["disk.md", "Disk Full Runbook"],
                "upload_date": "2026-03-01",
                "last_update_date": "2026-03-01",
                "severity": ["2"],
                "trace_id": 7,
            },
        }
        assert second["metadata"]["source"] == "payments/refund.md"  # top_k=2 of 3
        assert service.calls == [("disk full", None)]

    def test_score_threshold_drops_less_similar_blocks(self, client):
        records = client.post("/retrieval", json=retrieval_body(threshold=0.9)).json()["records"]
        assert [r["score"] for r in records] == [0.95, 0.91]

    @pytest.mark.parametrize("status", ["no_evidence", "already_returned", "l1_disabled"])
    def test_nothing_found_is_an_empty_list(self, service, client, status):
        service.status = status
        response = client.post("/retrieval", json=retrieval_body())
        assert response.status_code == 200 and response.json() == {"records": []}
        dify("response", response.json())

    @pytest.mark.parametrize(
        ("condition", "sources"),
        [
            ({"name": "category", "comparison_operator": "is", "value": "alerts"}, ["alerts/disk.md"]),
            ({"name": ["category"], "comparison_operator": "is", "value": "ALERTS"}, ["alerts/disk.md"]),
            (
                {"name": "category", "comparison_operator": "is not", "value": "alerts"},
                ["payments/refund.md", "faq/plans.md"],
            ),
            ({"name": "title", "comparison_operator": "contains", "value": "runbook"}, ["alerts/disk.md"]),
            (
                {"name": "title", "comparison_operator": "not contains", "value": "plan"},
                ["alerts/disk.md", "payments/refund.md"],
            ),
            ({"name": "source", "comparison_operator": "start with", "value": "faq/"}, ["faq/plans.md"]),
            ({"name": "source", "comparison_operator": "end with", "value": "refund.md"}, ["payments/refund.md"]),
            (
                {"name": "category", "comparison_operator": "in", "value": ["alerts", "payments"]},
                ["alerts/disk.md", "payments/refund.md"],
            ),
            ({"name": "category", "comparison_operator": "not in", "value": ["alerts", "payments"]}, ["faq/plans.md"]),
            ({"name": "keywords", "comparison_operator": "is", "value": "inode"}, ["alerts/disk.md"]),
            ({"name": "keywords", "comparison_operator": "contains", "value": "退"}, ["payments/refund.md"]),
            ({"name": "keywords", "comparison_operator": "empty"}, ["faq/plans.md"]),
            ({"name": "entities", "comparison_operator": "not empty"}, ["alerts/disk.md"]),
            ({"name": ["category", "title"], "comparison_operator": "contains", "value": "plans"}, ["faq/plans.md"]),
            # a pattern is matched literally, never as a wildcard or an expression
            ({"name": "source", "comparison_operator": "contains", "value": "%"}, []),
            ({"name": "category", "comparison_operator": "is", "value": "alerts' or 1==1 or '"}, []),
        ],
    )
    def test_metadata_condition_filters_the_returned_blocks(self, client, condition, sources):
        body = retrieval_body(metadata_condition={"conditions": [condition]})
        response = client.post("/retrieval", json=body)
        assert response.status_code == 200, response.text
        assert [r["metadata"]["source"] for r in response.json()["records"]] == sources

    @pytest.mark.parametrize(
        ("operator", "conditions", "sources"),
        [
            ("and", [("source", "end with", ".md"), ("title", "contains", "disk")], ["alerts/disk.md"]),
            (
                "or",
                [("title", "contains", "disk"), ("category", "is", "product-faq")],
                ["alerts/disk.md", "faq/plans.md"],
            ),
        ],
    )
    def test_logical_operator_combines_conditions(self, client, operator, conditions, sources):
        listed = [{"name": name, "comparison_operator": op, "value": value} for name, op, value in conditions]
        body = retrieval_body(metadata_condition={"logical_operator": operator, "conditions": listed})
        assert [r["metadata"]["source"] for r in client.post("/retrieval", json=body).json()["records"]] == sources

    @pytest.mark.parametrize(
        ("condition", "detail"),
        [
            ({"name": "category", "comparison_operator": ">", "value": 2020}, "'>' compares numbers"),
            ({"name": "severity", "comparison_operator": ">", "value": "high"}, "value must be a number for '>'"),
            ({"name": "uploader", "comparison_operator": "is", "value": "x"}, "name ['uploader']: filter on category"),
            ({"name": "upload_date", "comparison_operator": "is", "value": "x"}, "compare them with 'before'"),
            ({"name": "upload_date", "comparison_operator": "after", "value": "soon"}, "must be a time"),
            ({"name": "category", "comparison_operator": "like", "value": "x"}, "'like' is not supported"),
            ({"name": "tag", "comparison_operator": "is", "value": "x"}, "name ['tag']: filter on category"),
            ({"name": [], "comparison_operator": "is", "value": "x"}, "name []"),
            ({"name": "category", "comparison_operator": "is", "value": 5}, "value must be a non-empty string"),
            ({"name": "category", "comparison_operator": "in", "value": [None]}, "non-empty list of strings"),
            ({"name": "category", "comparison_operator": "in", "value": []}, "non-empty list of strings"),
            ({"name": "category", "comparison_operator": "before", "value": "2024-01-01"}, "'before' compares days"),
        ],
    )
    def test_an_unsupported_condition_is_a_400_before_any_lookup(self, service, client, condition, detail):
        body = {**retrieval_body(), "metadata_condition": {"conditions": [condition]}}  # not all of them Dify's
        response = client.post("/retrieval", json=body)
        assert response.status_code == 400
        dify("error", response.json())
        assert response.json()["error_code"] == 4001 and detail in response.json()["error_msg"]
        assert service.calls == []

    @pytest.mark.parametrize(
        ("body", "detail"),
        [
            ({"query": "x", "retrieval_setting": {"top_k": 1, "score_threshold": 0}}, "knowledge_id: Field required"),
            (
                {**retrieval_body(), "retrieval_setting": {"top_k": "2", "score_threshold": 0.5}},
                "top_k: Input should be a valid integer",
            ),
            (
                {**retrieval_body(), "retrieval_setting": {"top_k": 0, "score_threshold": 0.5}},
                "top_k: Input should be greater than or equal to 1",
            ),
            ({**retrieval_body(), "retrieval_setting": {"top_k": 2, "score_threshold": 1.5}}, "score_threshold"),
            ({**retrieval_body(), "query": None}, "query: Input should be a valid string"),
            (
                {**retrieval_body(), "metadata_condition": {"logical_operator": "xor", "conditions": []}},
                "logical_operator",
            ),
        ],
    )
    def test_a_request_not_of_the_documented_shape_is_a_400(self, service, client, body, detail):
        response = client.post("/retrieval", json=body)
        assert response.status_code == 400
        dify("error", response.json())
        assert response.json()["error_code"] == 4001 and detail in response.json()["error_msg"]
        assert service.calls == []

    def test_unknown_fields_are_ignored_and_the_collection_name_is_a_knowledge_id(self, service, client):
        body = {**retrieval_body(), "knowledge_id": "knowledge_chunks", "future_field": 1}
        assert client.post("/retrieval", json=body).status_code == 200

    def test_an_unknown_knowledge_id_is_2001(self, service, client):
        response = client.post("/retrieval", json={**retrieval_body(), "knowledge_id": "AAA-BBB-CCC"})
        assert response.status_code == 404
        dify("documented_errors", response.json())
        assert response.json() == {"error_code": 2001, "error_msg": "The knowledge does not exist"}
        assert service.calls == []

    @pytest.mark.parametrize(("status", "http", "code"), [("invalid_query", 422, 4221), ("error", 503, 5031)])
    def test_a_rejected_or_failed_lookup_is_an_error_after_the_lookup(self, service, client, status, http, code):
        service.status = status
        response = client.post("/retrieval", json=retrieval_body())
        assert response.status_code == http
        dify("error", response.json())
        assert response.json()["error_code"] == code and "traceId=7" in response.json()["error_msg"]
        assert len(service.calls) == 1

    def test_too_large_and_not_json_in_difys_shape(self, service, client):
        big = client.post("/retrieval", json=retrieval_body(query="a" * MAX_BODY_BYTES))
        assert big.status_code == 413 and big.json()["error_code"] == 4131
        garbage = client.post("/retrieval", content=b"{", headers={"content-type": "application/json"})
        assert garbage.status_code == 400 and garbage.json()["error_code"] == 4001
        for response in (big, garbage):
            dify("error", response.json())
        assert service.calls == []


def dify_condition(*conditions: tuple[str, str, Any], logical: str | None = "and") -> DifyMetadataCondition:
    listed = [DifyCondition(name=name, comparison_operator=op, value=value) for name, op, value in conditions]
    return DifyMetadataCondition(logical_operator=logical, conditions=listed)  # type: ignore[arg-type]


def epoch(day: str) -> int:
    return int(datetime.fromisoformat(day).replace(tzinfo=UTC).timestamp())


class TestDifyAsDifyCallsIt:
    """Requests built as Dify's client code builds them (`tests/contracts/dify_client.py`), replayed."""

    def _records(self, client: TestClient, body: dict[str, Any]) -> list[dict[str, Any]]:
        response = client.post("/retrieval", json=body)
        assert response.status_code == 200, response.text
        dify("response", response.json())
        return response.json()["records"]

    def test_what_dify_sends_without_settings_is_accepted(self, service, client):
        empty = DifyMetadataCondition(logical_operator=None, conditions=None)
        for condition in (None, empty):
            body = dify_request("disk full", retrieval={}, metadata_condition=condition)
            assert body["retrieval_setting"] == {"top_k": None, "score_threshold": 0.0}
            assert len(self._records(client, body)) == 3  # top_k null: up to DEFAULT_TOP_K
        assert service.options == [{}, {}]  # no filter: the lookup is the plain one

    def test_a_document_condition_searches_within_the_documents_it_matches(self, service, client):
        body = dify_request("disk full", metadata_condition=dify_condition(("category", "is", "payments")))
        assert [r["metadata"]["source"] for r in self._records(client, body)] == ["payments/refund.md"]
        assert service.options == [{"filters": {"source": ["payments/refund.md"]}}]

    @pytest.mark.parametrize(
        ("conditions", "sources"),
        [
            ([("source", "in", "alerts/disk.md, faq/plans.md")], ["alerts/disk.md", "faq/plans.md"]),
            ([("source", "not in", "alerts/disk.md,faq/plans.md")], ["payments/refund.md"]),
            ([("document_name", "is", "plans.md")], ["faq/plans.md"]),
            ([("document_name", "contains", "runbook")], ["alerts/disk.md"]),
            ([("upload_date", "after", epoch("2026-01-01"))], ["alerts/disk.md"]),
            ([("last_update_date", "before", "2026-01-01T00:00:00Z")], ["payments/refund.md"]),
            ([("upload_date", "after", epoch("2020-01-01") * 1000)], ["alerts/disk.md", "payments/refund.md"]),
            ([("severity", "≥", 3)], ["payments/refund.md"]),
            ([("severity", "=", "2")], ["alerts/disk.md"]),
            ([("severity", "<", 10), ("category", "is", "alerts")], ["alerts/disk.md"]),
            ([("document_id", "is", "plans")], ["faq/plans.md"]),
            ([("tags", "contains", "inode")], ["alerts/disk.md"]),
        ],
    )
    def test_difys_fields_and_operators_choose_documents(self, service, client, conditions, sources):
        body = dify_request("disk full", metadata_condition=dify_condition(*conditions))
        assert [r["metadata"]["source"] for r in self._records(client, body)] == sources
        assert sorted(service.options[-1]["filters"]["source"]) == sorted(sources)

    def test_conditions_that_match_no_document_are_an_empty_list_without_a_lookup(self, service, client):
        body = dify_request("disk full", metadata_condition=dify_condition(("category", "is", "hr")))
        assert self._records(client, body) == [] and service.calls == []

    def test_a_condition_on_the_section_is_checked_on_the_records(self, service, client):
        body = dify_request("disk full", metadata_condition=dify_condition(("breadcrumb", "contains", "plans")))
        assert [r["metadata"]["source"] for r in self._records(client, body)] == ["faq/plans.md"]
        assert service.options == [{}]  # no document list for a condition on sections

    def test_scores_never_rise_down_the_list_and_the_similarity_stays(self, service, client):
        service.blocks = [
            _block("alerts/disk.md", "alerts", 0.91, "Disk Full Runbook"),
            _block("payments/refund.md", "payments", 0.95, "退款处理流程"),
            _block("faq/plans.md", "product-faq", 0.89, "Subscription Plans"),
        ]
        records = self._records(client, dify_request("disk full"))
        assert [r["score"] for r in records] == [0.91, 0.91, 0.89]
        assert [r["metadata"]["similarity"] for r in records] == [0.91, 0.95, 0.89]
        assert all(r["metadata"]["document_id"] == r["metadata"]["doc_id"] for r in records)
        # Dify re-sorts by score (stably): our order is its order
        assert sorted(records, key=lambda r: -r["score"]) == records
        body = dify_request("disk full", retrieval={"score_threshold_enabled": True, "score_threshold": 0.92})
        assert self._records(client, body) == []  # never the second without the first

    def test_pages_titled_alike_are_two_documents_for_dify(self, service, client):
        # the indexer's doc_id is the source unless the page sets an id: Dify falls back to the title without one
        service.blocks = [
            _block("a/intro.md", "a", 0.95, "Introduction").model_copy(update={"doc_id": "a/intro.md"}),
            _block("b/intro.md", "b", 0.94, "Introduction").model_copy(update={"doc_id": "b/intro.md"}),
        ]
        records = self._records(client, dify_request("intro"))
        assert [r["title"] for r in records] == ["Introduction", "Introduction"]
        assert [r["metadata"]["document_id"] for r in records] == ["a/intro.md", "b/intro.md"]


class TestRestSecurity:
    def test_with_a_token_every_route_needs_it_and_retrieval_answers_in_difys_shape(self, service):
        with client_for(service, token=TOKEN) as client:
            for method, path in (("POST", "/lookup"), ("GET", "/health"), ("GET", "/openapi.json"), ("POST", "/mcp")):
                refused = client.request(method, path, json={"query": "x"})
                assert refused.status_code == 401 and refused.json()["error"] == "unauthorized", path
                assert TOKEN not in refused.text
            assert client.post("/lookup", json={"query": "x"}, headers=BEARER).status_code == 200
            assert client.get("/health", headers=BEARER).status_code == 200

            body = retrieval_body()
            for headers, code in (
                ({}, 1001),
                ({"authorization": TOKEN}, 1001),
                ({"authorization": f"Basic {TOKEN}"}, 1001),
                ({"authorization": "Bearer "}, 1001),
                ({"authorization": "Bearer wrong"}, 1002),
                ({"authorization": f"Bearer {TOKEN}x"}, 1002),
            ):
                refused = client.post("/retrieval", json=body, headers=headers)
                assert refused.status_code == 403 and refused.json()["error_code"] == code, headers
                dify("documented_errors", refused.json())
                assert TOKEN not in refused.text
            assert len(service.calls) == 1  # only the one /lookup that sent the token
            assert client.post("/retrieval", json=body, headers=BEARER).status_code == 200

    @pytest.mark.parametrize(
        ("token", "reason"),
        [("   ", "is blank"), ("\tpadded", "whitespace at its start or end"), ("tökén", "not printable ASCII")],
    )
    def test_a_token_no_request_could_send_is_refused(self, service, token, reason):
        with pytest.raises(ValueError, match=reason) as refused:
            client_for(service, token=token)
        assert token.strip() not in str(refused.value) or not token.strip()

    def test_every_route_compares_the_raw_header_bytes_alike(self, service):
        with client_for(service, token=TOKEN) as client:
            for header, accepted in (
                (f"bearer {TOKEN}".encode(), True),
                (f"BEARER   {TOKEN}".encode(), True),
                (f"Bearer {TOKEN}".encode("utf-16"), False),
                ("Bearer tökén".encode(), False),
                ("Bearer tökén".encode("latin-1"), False),
            ):
                headers = {"authorization": header}
                lookup = client.post("/lookup", json={"query": "x"}, headers=headers).status_code
                retrieval = client.post("/retrieval", json=retrieval_body(), headers=headers).status_code
                health = client.get("/health", headers=headers).status_code
                assert (lookup, retrieval, health) == ((200, 200, 200) if accepted else (401, 403, 401)), header

    def test_without_a_token_loopback_callers_are_served(self, service, client):
        assert client.post("/retrieval", json=retrieval_body()).status_code == 200
        assert (
            client.post("/retrieval", json=retrieval_body(), headers={"authorization": "Bearer any"}).status_code == 200
        )
        assert client.post("/lookup", json={"query": "x"}).status_code == 200

    @pytest.mark.parametrize("host", ["evil.example", "evil.example:8765", "10.0.0.5:8765"])
    def test_a_foreign_host_header_is_refused_on_every_route(self, service, host):
        with client_for(service, host=host) as client:
            lookup = client.post("/lookup", json={"query": "x"})
            assert lookup.status_code == 421 and lookup.json()["error"] == "misdirected_request"
            retrieval = client.post("/retrieval", json=retrieval_body())
            assert retrieval.status_code == 421 and retrieval.json()["error_code"] == 4211
            assert client.get("/health").status_code == 421
            assert client.get("/openapi.json").status_code == 421
        assert service.calls == []

    def test_a_foreign_origin_is_refused(self, service, client):
        response = client.post("/lookup", json={"query": "x"}, headers={"origin": "http://evil.example"})
        assert response.status_code == 403 and response.json()["error"] == "forbidden_origin"
        assert (
            client.post("/lookup", json={"query": "x"}, headers={"origin": "http://127.0.0.1:8765"}).status_code == 200
        )
        assert len(service.calls) == 1


# --- real servers: `lookup-knowledge serve --transport http` as subprocesses -------------------------------------


def indexed_copy(tmp_path_factory: pytest.TempPathFactory, name: str) -> Path:
    """
    A data folder with the tiny knowledge base indexed: indexed once per session (in a subprocess, since Milvus Lite
    opens a folder in one process only) and copied for each caller, so that each server owns its copy.
    """
    base = tmp_path_factory.getbasetemp() / "indexed-tiny-kb"
    if not (base / "data" / "knowledge_index.json").exists():
        shutil.rmtree(base, ignore_errors=True)
        base.mkdir()
        index_in_subprocess(base)
    target = tmp_path_factory.mktemp(name) / "data"
    shutil.copytree(base / "data", target)
    return target


@dataclass
class Server:
    """A server subprocess on a loopback port."""

    proc: subprocess.Popen[bytes]
    port: int
    data: Path
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def wait_listening(self) -> None:
        deadline = time.monotonic() + STEP_TIMEOUT
        while True:
            assert self.proc.poll() is None, f"server exited: {self.log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"server not listening: {self.log.read_text()[-3000:]}"
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                time.sleep(0.2)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def rows(self, **filters: Any) -> list[Any]:
        """The trace rows stored so far (newest first), e.g. of one session."""
        return TraceStore(Deployment.resolve(self.data).trace_db_url).list(limit=1000, **filters)

    def rows_of(self, query: str) -> list[Any]:
        return [r for r in self.rows() if r.query == query]


def start_server(command: list[str], data: Path, port: int, **env: str) -> Server:
    """Start a server subprocess (stdout and stderr into a log beside `data`); `wait_listening` before using it."""
    log = data.parent / "server.log"
    # nothing of this process's deployment leaks in: the server's data is `data` and what `env` says
    environment = {k: v for k, v in os.environ.items() if k not in DEPLOYMENT_ENV}
    with log.open("wb") as out:
        proc = subprocess.Popen(
            command, cwd=REPO_ROOT, env={**environment, **env}, stdout=out, stderr=subprocess.STDOUT
        )
    return Server(proc, port, data, log)


def serve_command(data: Path, port: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "pipelines.entrypoints.cli",
        "serve",
        "--transport",
        "http",
        "--port",
        str(port),
        "--data-dir",
        str(data),
    ]


@pytest.fixture(scope="module")
def servers(tmp_path_factory) -> Iterator[tuple[Server, Server]]:
    """Two servers: on the indexed copy with a token, and without one with Milvus down (it loads while we index)."""
    down_data = tmp_path_factory.mktemp("rest-down") / "data"
    with socket.socket() as closed:  # a port nobody listens on
        closed.bind(("127.0.0.1", 0))
        milvus_down = f"http://127.0.0.1:{closed.getsockname()[1]}"
    started: list[Server] = []
    try:
        port = free_port()
        started.append(start_server(serve_command(down_data, port), down_data, port, MILVUS_URI=milvus_down))
        data = indexed_copy(tmp_path_factory, "rest-server")
        port = free_port()
        started.insert(0, start_server(serve_command(data, port), data, port, **{AUTH_ENV: TOKEN}))
        for server in started:
            server.wait_listening()
        yield started[0], started[1]
    finally:
        for server in started:
            server.stop()


@pytest.mark.integration
class TestRestApiServer:
    def test_lookup_answers_records_and_refuses(self, servers):
        server, _ = servers
        with httpx.Client(base_url=server.url, headers=BEARER, timeout=STEP_TIMEOUT) as client:
            first = client.post("/lookup", json={"query": "disk full on the node", "session_id": "rest-1"})
            assert first.status_code == 200, first.text
            result = first.json()
            assert result["found"] is True and result["evidenceStatus"] == "evidence"
            assert result["evidenceBlocks"][0]["source"] == "alerts/disk.md"
            assert {"retrievalTrace", "rerankTrace", "l0Hints", "evidenceDecision"} <= set(result)  # the full result
            again = client.post("/lookup", json={"query": "disk full on the node", "session_id": "rest-1"})
            assert again.json()["evidenceStatus"] == "already_returned"
            empty = client.post("/lookup", json={"query": "  ", "session_id": "rest-1"})
            assert empty.status_code == 422 and empty.json()["evidenceStatus"] == "invalid_query"
            malformed = client.post("/lookup", json={"session_id": "rest-1"})
            assert malformed.status_code == 400
            unauthorized = httpx.post(f"{server.url}/lookup", json={"query": "disk", "session_id": "rest-1"})
            assert unauthorized.status_code == 401
            foreign = client.post(
                "/lookup", json={"query": "disk", "session_id": "rest-1"}, headers={"host": "evil.example"}
            )
            assert foreign.status_code == 421 and foreign.json()["error"] == "misdirected_request"
        ids = [first.json()["traceId"], again.json()["traceId"], empty.json()["traceId"]]
        assert [(r.id, r.status) for r in reversed(server.rows(session_id="rest-1"))] == list(
            zip(ids, ["evidence", "already_returned", "invalid_query"], strict=True)
        )

    def test_retrieval_is_difys_api_on_the_same_pipeline(self, servers):
        server, _ = servers
        with httpx.Client(base_url=server.url, timeout=STEP_TIMEOUT) as client:
            found = client.post(
                "/retrieval", json=retrieval_body("node disk full", top_k=3, threshold=0.5), headers=BEARER
            )
            assert found.status_code == 200, found.text
            dify("response", found.json())
            [record, *_] = found.json()["records"]
            assert record["metadata"]["source"] == "alerts/disk.md" and record["title"] == "Disk Full Runbook"
            assert record["score"] == record["metadata"]["similarity"] and 0.5 <= record["score"] <= 1
            assert "inode" in record["metadata"]["keywords"] and record["metadata"]["breadcrumb"].startswith(
                "Disk Full"
            )
            filtered = client.post(
                "/retrieval",
                json=retrieval_body(
                    "node disk full",
                    metadata_condition={
                        "conditions": [{"name": ["category"], "comparison_operator": "is", "value": "payments"}]
                    },
                ),
                headers=BEARER,
            )
            assert filtered.json() == {"records": []}
            # as Dify's client code builds it: top_k null, a comma-separated `in` on Dify's built-in document_name
            condition = dify_condition(("document_name", "in", "disk.md,plans.md"), logical=None)
            built = client.post(
                "/retrieval",
                json=dify_request("the disk on my node is full", retrieval={}, metadata_condition=condition),
                headers=BEARER,
            )
            assert built.status_code == 200, built.text
            replayed = built.json()["records"]
            assert replayed and replayed[0]["metadata"]["source"] == "alerts/disk.md"
            assert {r["metadata"]["source"] for r in replayed} <= {"alerts/disk.md", "faq/plans.md"}
            assert all(a["score"] >= b["score"] for a, b in itertools.pairwise(replayed))
            assert replayed[0]["metadata"]["document_id"] == "alerts-disk" and replayed[0]["metadata"]["citation"]
            off_topic = client.post("/retrieval", json=retrieval_body("what is the capital of France"), headers=BEARER)
            assert off_topic.status_code == 200 and off_topic.json() == {"records": []}
            for headers, code in (({}, 1001), ({"authorization": "Bearer wrong"}, 1002)):
                refused = client.post("/retrieval", json=retrieval_body("refused retrieval"), headers=headers)
                assert refused.status_code == 403
                dify("documented_errors", refused.json())
                assert refused.json()["error_code"] == code
            unknown = client.post(
                "/retrieval", json={**retrieval_body("refused retrieval"), "knowledge_id": "x"}, headers=BEARER
            )
            assert unknown.status_code == 404 and unknown.json()["error_code"] == 2001
        rows = server.rows_of("node disk full")  # newest first: the filtered call searched the payments page only
        assert [(r.status, r.session_id) for r in rows] == [("no_evidence", None), ("evidence", None)]
        assert rows[0].retrieval_details["filters"]["requested"] == {"source": ["payments/refund.md"]}
        assert record["metadata"]["trace_id"] == rows[-1].id
        assert len(server.rows_of("what is the capital of France")) == 1
        assert [r.status for r in server.rows_of("what is the capital of France")] == ["no_evidence"]
        assert server.rows_of("refused retrieval") == []  # refused before the lookup: no row

    def test_an_agents_session_over_rest(self, servers):
        server, _ = servers
        with httpx.Client(base_url=server.url, headers=BEARER, timeout=STEP_TIMEOUT) as client:
            facets = client.get("/facets").json()
            assert facets["documents"] == 3 and "payments" in {c["value"] for c in facets["categories"]}
            body = {"query": "退款多久到账", "session_id": "rest-agent", "filters": {"category": "payments"}}
            filtered = client.post("/lookup", json=body).json()
            assert filtered["found"] is True and {b["source"] for b in filtered["evidenceBlocks"]} == {
                "payments/refund.md"
            }
            citation = filtered["evidenceBlocks"][0]["citation"]
            read = client.post("/read_evidence", json={"citation": citation, "after": 1})
            assert read.status_code == 200 and [b["citation"] for b in read.json()["blocks"] if b["cited"]] == [
                citation
            ]
            gone = client.post("/read_evidence", json={"citation": "nowhere.md#0@abcdef123456"})
            assert gone.status_code == 404 and gone.json()["status"] == "not_found"
            bad = client.post("/read_document", json={"source": "alerts/disk.md", "max_chars": 3})
            assert bad.status_code == 400  # under the floor: refused by the request's shape
            document = client.post("/read_document", json={"source": "alerts/disk.md"}).json()
            assert document["status"] == "evidence" and document["sections"]
            page = client.post("/lookup", json={"query": "退款多久到账", "max_chars": 200}).json()
            seen = [b["evidenceKey"] for b in page["evidenceBlocks"]]
            assert page["moreAvailable"] is True
            while page["cursor"]:
                page = client.post(
                    "/lookup", json={"query": "退款多久到账", "max_chars": 200, "cursor": page["cursor"]}
                ).json()
                assert not {b["evidenceKey"] for b in page["evidenceBlocks"]} & set(seen)
                seen += [b["evidenceKey"] for b in page["evidenceBlocks"]]
            assert len(seen) >= 2
            refused = client.post("/lookup", json={"query": "x", "filters": {"colour": "red"}})
            assert refused.status_code == 422 and "filter on category" in refused.json()["error"]
        tools = [r.tool_name for r in reversed(server.rows(session_id="rest-agent"))]
        assert tools == ["lookup_knowledge"]  # the reads above sent no session: rows of their own

    def test_health_counts_what_is_indexed(self, servers):
        server, _ = servers
        response = httpx.get(f"{server.url}/health", headers=BEARER, timeout=STEP_TIMEOUT)
        assert response.status_code == 200, response.text
        health = response.json()
        assert health["status"] == "ok" and health["storeReachable"] is True and health["collectionExists"] is True
        assert health["documents"] == 3 and health["chunks"] >= 3 and health["indexVersion"] > 0
        assert health["collection"] == "knowledge_chunks"

    def test_store_down_is_an_error_result_recorded_once_and_health_says_so(self, servers):
        _, down = servers
        with httpx.Client(base_url=down.url, timeout=STEP_TIMEOUT) as client:  # no token on this server: none sent
            failed = client.post("/lookup", json={"query": "disk full", "session_id": "rest-down"})
            assert failed.status_code == 503
            assert (
                failed.json()["evidenceStatus"] == "error" and "Knowledge retrieval failed" in failed.json()["message"]
            )
            retrieval = client.post("/retrieval", json=retrieval_body("disk while down"))
            assert retrieval.status_code == 503
            dify("error", retrieval.json())
            assert retrieval.json()["error_code"] == 5031
            health = client.get("/health")
            assert health.status_code == 503
            assert health.json()["storeReachable"] is False and health.json()["status"] == "unavailable"
            assert health.json()["chunks"] is None and health.json()["error"]
        assert [r.status for r in down.rows(session_id="rest-down")] == ["error"]
        assert [r.status for r in down.rows_of("disk while down")] == ["error"]


class TestIdentify:
    def test_who_a_request_is(self, tmp_path):
        from pipelines.access import ANONYMOUS, Principals
        from pipelines.entrypoints.rest_api import identify

        principals = Principals(tmp_path / "p.yaml")
        alice = principals.add("alice", ["finance"])
        bearer = {"alice": f"Bearer {alice}".encode(), "shared": b"Bearer shared-token", "other": b"Bearer nope"}
        # no token and no principals: everyone is anonymous, whatever it sends
        assert identify(b"", None) is ANONYMOUS and identify(bearer["other"], None) is ANONYMOUS
        # principals, no shared token: no header is anonymous, a principal's token is it, any other is refused
        assert identify(b"", None, principals) is ANONYMOUS
        assert identify(bearer["alice"], None, principals).name == "alice"  # type: ignore[union-attr]
        assert identify(bearer["other"], None, principals) is None
        # a shared token: it is anonymous, no header is refused
        assert identify(bearer["shared"], "shared-token", principals) is ANONYMOUS
        assert identify(b"", "shared-token", principals) is None
        assert identify(bearer["alice"], "shared-token", principals).groups == ("finance",)  # type: ignore[union-attr]
        assert identify(bearer["other"], "shared-token") is None

    def test_routes_hand_the_identified_caller_to_the_service(self, service, tmp_path):
        from pipelines.access import Principals

        principals = Principals(tmp_path / "p.yaml")
        token = principals.add("bob", ["hr"])
        app = http_app(build_server(tool=None), "127.0.0.1", None, service=service, principals=principals)  # type: ignore[arg-type]
        with TestClient(app, base_url="http://127.0.0.1:8765") as client:
            assert client.post("/lookup", json={"query": "q"}).status_code == 200
            client.post("/lookup", json={"query": "q"}, headers={"authorization": f"Bearer {token}"})
            client.get("/facets", headers={"authorization": f"Bearer {token}"})
            refused = client.post("/lookup", json={"query": "q"}, headers={"authorization": "Bearer nope"})
            dify = client.post("/retrieval", json=retrieval_body(), headers={"authorization": "Bearer nope"})
            served = client.post("/retrieval", json=retrieval_body(), headers={"authorization": f"Bearer {token}"})
        assert [p.name for p in service.principals] == [None, "bob", "bob", "bob"]
        assert refused.status_code == 401 and len(service.calls) == 3
        assert dify.status_code == 403 and dify.json()["error_code"] == 1002 and served.status_code == 200
