"""The agent's side of the tool through the real pipeline and store: filters, facets, budgets with cursors, citations
that can be followed (`read_evidence`, `read_document`), lean served results, the tool's name and description."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from sqlmodel import Session, select

from components.core.citation import Citation
from components.store.knowledge_index import KnowledgeIndex
from components.trace.trace_store import ToolInvocation, TraceStore
from pipelines.entrypoints.agent_tool import LookupKnowledgeTool, compact_result_json
from pipelines.indexing import KnowledgeIndexer
from pipelines.service import KnowledgeService
from pipelines.settings import Deployment
from tests.conftest import write_tiny_kb

pytestmark = pytest.mark.integration

DISK = "磁盘满了怎么办"
REFUND = "how long does a refund take to arrive"


@pytest.fixture(scope="module")
def service(knowledge_data, tmp_path_factory) -> KnowledgeService:
    traces = tmp_path_factory.mktemp("surface") / "traces.db"
    loaded = KnowledgeService.load(data_dir=knowledge_data, trace_db_url=f"sqlite:///{traces}")
    yield loaded
    loaded.close()


def rows(service: KnowledgeService) -> list[ToolInvocation]:
    store = TraceStore(service._recorder.database_url, None)
    try:
        with Session(store.engine) as session:
            return list(session.exec(select(ToolInvocation).order_by(ToolInvocation.id)))
    finally:
        store.close()


def keys(result: dict) -> list[str]:
    return [b["evidenceKey"] for b in result["evidenceBlocks"]]


def sources(result: dict) -> set[str]:
    return {b["source"] for b in result["evidenceBlocks"]}


class TestFilters:
    def test_a_category_filter_keeps_every_block_inside_it(self, service):
        result = service.lookup(REFUND, filters={"category": "payments"})
        assert result["found"] is True and sources(result)
        assert all(s.startswith("payments/") for s in sources(result))
        assert result["filters"]["requested"] == {"category": "payments"} and result["filters"]["documents"] == 4

    def test_an_explicit_filter_is_never_widened(self, service):
        # a disk question asked within the payments documents: whatever comes back comes from payments, and no attempt
        # ran without the filter
        result = service.lookup(DISK, filters={"category": "payments"})
        assert all(s.startswith("payments/") for s in sources(result))
        attempts = result["retrievalTrace"]["attempts"]
        assert attempts and all(a["filter"] for a in attempts)
        assert "unfiltered" not in [a["name"] for a in attempts]

    @pytest.mark.parametrize(
        ("filters", "prefix"),
        [({"source_prefix": "alerts/"}, "alerts/"), ({"source": ["alerts/disk-full.md"]}, "alerts/disk-full.md")],
    )
    def test_source_filters(self, service, filters, prefix):
        result = service.lookup(DISK, filters=filters)
        assert result["found"] is True and all(s.startswith(prefix) for s in sources(result))

    def test_tags_filter_on_the_documents_keywords(self, service):
        index = KnowledgeIndex.load(Path(service._index.path))
        tagged = next(d for d in index.documents if d.keywords)
        result = service.lookup(tagged.title, filters={"tags": tagged.keywords[0]})
        having = {d.source for d in index.documents if tagged.keywords[0].casefold() in map(str.casefold, d.keywords)}
        assert sources(result) <= having and result["filters"]["documents"] == len(having)

    def test_filters_that_match_nothing_say_so_and_name_what_exists(self, service):
        result = service.lookup(DISK, filters={"category": "no-such-category"})
        assert result["found"] is False and result["evidenceStatus"] == "no_evidence"
        assert "match no indexed document" in result["message"]
        for category in ("alerts", "payments", "after-sales", "product-faq", "observability"):
            assert category in result["message"]
        assert result["retrievalTrace"]["attempts"][0]["rawHits"] == 0

    def test_an_unknown_filter_key_is_a_rejected_call_that_is_recorded(self, service):
        before = len(rows(service))
        result = service.lookup(DISK, filters={"colour": "red"})
        assert result["evidenceStatus"] == "invalid_query" and "filter on category" in result["error"]
        assert len(rows(service)) == before + 1 and rows(service)[-1].status == "invalid_query"

    def test_without_filters_the_answer_is_unchanged(self, service):
        plain = service.lookup(DISK)
        again = service.lookup(DISK, filters=None, max_chars=None, cursor=None)
        assert keys(plain) == keys(again) and plain["filters"] is None


class TestBudgetAndCursor:
    def test_pages_bring_the_next_blocks_and_never_repeat_one(self, service):
        whole = service.lookup(REFUND, max_chars=20_000)
        first = service.lookup(REFUND, max_chars=400)
        assert first["moreAvailable"] is True and first["cursor"] and first["truncated"] is True
        assert sum(len(b["content"]) for b in first["evidenceBlocks"]) <= 400
        seen, page, pages = keys(first), first, 1
        while page["cursor"]:
            page = service.lookup(REFUND, cursor=page["cursor"], max_chars=400)
            assert not set(keys(page)) & set(seen)
            seen += keys(page)
            pages += 1
            assert pages < 40
        assert pages > 1 and set(keys(whole)) <= set(seen)

    def test_a_cursor_carries_its_filters_and_refuses_another_query(self, service):
        first = service.lookup(DISK, filters={"category": "alerts"}, max_chars=300)
        assert first["cursor"]
        nxt = service.lookup("", cursor=first["cursor"], max_chars=300)
        assert nxt["filters"]["requested"] == {"category": "alerts"} and all(
            s.startswith("alerts/") for s in sources(nxt)
        )
        other = service.lookup("something else entirely", cursor=first["cursor"])
        assert other["evidenceStatus"] == "invalid_query" and "continues the lookup of" in other["error"]

    @pytest.mark.parametrize("cursor", ["c1.broken", "not-a-cursor", "c1." + "A" * 200])
    def test_a_damaged_cursor_is_a_rejected_call_that_is_recorded(self, service, cursor):
        before = len(rows(service))
        result = service.lookup(DISK, cursor=cursor)
        assert result["evidenceStatus"] == "invalid_query" and "cursor" in result["error"]
        assert len(rows(service)) == before + 1

    @pytest.mark.parametrize("max_chars", ["400", 4.5, True])
    def test_a_budget_that_is_no_whole_number_is_refused(self, service, max_chars):
        assert service.lookup(DISK, max_chars=max_chars)["evidenceStatus"] == "invalid_query"

    def test_the_served_result_carries_each_piece_of_evidence_once(self, service):
        result = service.lookup(REFUND)
        served = compact_result_json(result)
        body = json.loads(served)
        assert "contextPack" not in body and body["evidenceBlocks"]
        for block in body["evidenceBlocks"]:
            assert served.count(json.dumps(block["content"], ensure_ascii=False)[1:-1][:200]) == 1
            assert Citation.parse(block["citation"]).source == block["source"]
        assert len(served) < len(json.dumps(result, ensure_ascii=False)) / 3


class TestFacetsAndReads:
    def test_facets_describe_what_is_indexed(self, service):
        facets = service.facets()
        index = KnowledgeIndex.load(Path(service._index.path))
        assert facets["documents"] == len(index.documents) == 20
        assert facets["chunks"] == sum(d.chunks for d in index.documents)
        assert {c["value"]: c["documents"] for c in facets["categories"]} == {
            "alerts": 5,
            "after-sales": 4,
            "payments": 4,
            "product-faq": 4,
            "observability": 3,
        }
        assert set(facets["languages"]) == {"en", "zh"} and facets["indexVersion"] > 0
        assert "source_prefix" in facets["filterKeys"] and facets["tags"]
        assert rows(service)[-1].tool_name == "list_facets"

    def test_read_evidence_returns_the_cited_block_whole_with_its_neighbours(self, service):
        block = service.lookup(REFUND, max_chars=300)["evidenceBlocks"][0]
        read = service.read_evidence(block["citation"], before=1, after=1)
        assert read["status"] == "evidence" and read["changed"] is False
        cited = [b for b in read["blocks"] if b["cited"]]
        assert len(cited) == 1 and cited[0]["citation"] == block["citation"]
        assert cited[0]["content"].startswith(block["content"].removesuffix(" …").strip()[:50])
        positions = [Citation.parse(b["citation"]).chunk_index for b in read["blocks"]]
        assert positions == sorted(positions) and len(positions) >= 2
        row = rows(service)[-1]
        assert row.tool_name == "read_evidence" and row.query.startswith(block["citation"])

    def test_read_document_returns_the_document_or_a_section(self, service):
        whole = service.read_document("alerts/disk-full.md", max_chars=50_000)
        assert whole["status"] == "evidence" and whole["truncated"] is False
        assert [Citation.parse(b["citation"]).chunk_index for b in whole["blocks"]] == list(range(len(whole["blocks"])))
        section = whole["sections"][1]
        part = service.read_document("alerts/disk-full.md", section=section)
        assert part["blocks"] and all(b["breadcrumb"].startswith(section) for b in part["blocks"])
        short = service.read_document("alerts/disk-full.md", max_chars=300)
        assert short["truncated"] is True and short["continueWith"]

    @pytest.mark.parametrize(
        ("call", "status"),
        [
            (lambda s: s.read_evidence("nowhere.md#0@abcdef123456"), "not_found"),
            (lambda s: s.read_evidence("not a citation"), "invalid_request"),
            (lambda s: s.read_evidence("alerts/disk-full.md#0@abc", before=99), "invalid_request"),
            (lambda s: s.read_document("nowhere.md"), "not_found"),
            (lambda s: s.read_document("alerts/disk-full.md", section="No Such Heading"), "not_found"),
            (lambda s: s.read_document(""), "invalid_request"),
        ],
    )
    def test_a_read_of_nothing_says_why_and_is_recorded(self, service, call, status):
        before = len(rows(service))
        read = call(service)
        assert read["status"] == status and read["found"] is False and read["message"]
        assert len(rows(service)) == before + 1 and rows(service)[-1].status == status

    def test_a_citation_of_an_edited_document_says_it_changed(self, tmp_path):
        knowledge = write_tiny_kb(tmp_path / "knowledge")
        data = tmp_path / "data"
        indexer = KnowledgeIndexer(Deployment.resolve(data))
        try:
            indexer.index(knowledge, progress=False)
            service = KnowledgeService.load(data_dir=data)
            try:
                citation = service.lookup("disk usage above 90 percent on a node")["evidenceBlocks"][0]["citation"]
                page = knowledge / "alerts" / "disk.md"
                page.write_text(page.read_text(encoding="utf-8") + "\nCall the on-call engineer.\n", encoding="utf-8")
                indexer.index(knowledge, progress=False)
                read = service.read_evidence(citation, before=0, after=5)
                assert read["status"] == "evidence" and read["changed"] is True
                assert "changed since this citation" in read["message"]
                assert not Citation.parse(read["blocks"][0]["citation"]).version.startswith(
                    Citation.parse(citation).version
                )
                assert any("on-call engineer" in b["content"] for b in read["blocks"])
                shutil.rmtree(knowledge / "alerts")
                indexer.index(knowledge, progress=False)
                assert service.read_evidence(citation)["status"] == "not_found"
            finally:
                service.close()
        finally:
            indexer.close()

    def test_a_damaged_knowledge_index_is_an_error_of_the_server_not_of_the_request(self, tmp_path):
        data = tmp_path / "data"
        indexer = KnowledgeIndexer(Deployment.resolve(data))
        try:
            indexer.index(write_tiny_kb(tmp_path / "knowledge"), progress=False)
        finally:
            indexer.close()
        service = KnowledgeService.load(data_dir=data)
        try:
            citation = service.lookup("disk usage above 90 percent on a node")["evidenceBlocks"][0]["citation"]
            (data / "knowledge_index.json").write_text("{damaged", encoding="utf-8")
            for read in (service.read_evidence(citation), service.read_document("alerts/disk.md")):
                assert read["status"] == "error" and "is damaged" in read["message"] and read["traceId"]
            with pytest.raises(ValueError, match="is damaged"):
                service.facets()
        finally:
            service.close()


class TestToolNameAndDescription:
    def test_the_description_names_the_knowledge_base(self, service):
        description = service.tool_description()
        assert "20 documents on alerts" in description and "English, Chinese" in description
        tool = LookupKnowledgeTool(service)
        assert tool.description == description
        assert set(tool.parameters["properties"]) == {"query", "session_id", "filters", "max_chars", "cursor"}
        assert set(tool.parameters["properties"]["filters"]["properties"]) == set(service.filter_keys())

    def test_two_knowledge_bases_are_two_tools(self, service, tmp_path):
        data = tmp_path / "data"
        indexer = KnowledgeIndexer(Deployment.resolve(data))
        try:
            indexer.index(write_tiny_kb(tmp_path / "knowledge"), progress=False)
        finally:
            indexer.close()
        other = KnowledgeService.load(data_dir=data)
        try:
            other.name_tool("lookup_tiny_kb")
            assert other.tool_name == "lookup_tiny_kb" and other.tool_description() != service.tool_description()
            assert "3 documents" in other.tool_description()
            other.lookup("disk usage above 90 percent on a node")
            assert rows(other)[-1].tool_name == "lookup_tiny_kb"
        finally:
            other.close()

    @pytest.mark.parametrize("name", ["", "has space", "x" * 65, "名字"])
    def test_a_name_no_client_accepts_is_refused(self, service, name):
        with pytest.raises(ValueError, match="must be 1 to 64 letters"):
            service.name_tool(name)
