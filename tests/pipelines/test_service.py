"""`KnowledgeService`: the one service behind the CLI, MCP, REST, hayhooks and the Agent tool."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from components.trace.trace_store import TraceStore
from pipelines.entrypoints.agent_tool import LookupKnowledgeTool
from pipelines.service import KnowledgeService
from pipelines.settings import Deployment
from tests.conftest import index_tiny_kb

QUESTION = "disk usage above 90 percent on a node"

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return index_tiny_kb(tmp_path_factory.mktemp("service"))


@pytest.fixture
def service(data, tmp_path) -> KnowledgeService:
    loaded = KnowledgeService.load(data_dir=data, trace_db_url=f"sqlite:///{tmp_path / 'traces.db'}")
    yield loaded
    loaded.close()


def _overlap(service: KnowledgeService, sessions: tuple[str | None, str | None], call=None) -> bool:
    """Whether two lookups of these sessions were inside the pipeline at the same time (they wait for each other)."""
    call = call or service.lookup
    embedder = service.pipeline.get_component("embedder")
    run = embedder.run
    inside = threading.Barrier(2, timeout=3)
    met: list[bool] = []

    def meet_then_run(**kwargs):
        try:
            inside.wait()
            met.append(True)
        except threading.BrokenBarrierError:
            met.append(False)
        return run(**kwargs)

    embedder.run = meet_then_run
    try:
        threads = [threading.Thread(target=call, args=(QUESTION, s)) for s in sessions]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        embedder.run = run
    return all(met)


class TestKnowledgeService:
    def test_a_lookup_is_answered_and_recorded_once(self, service, tmp_path):
        result = service.lookup(QUESTION, session_id="s1")
        assert result["evidenceStatus"] == "evidence" and result["evidenceBlocks"][0]["source"] == "alerts/disk.md"
        rows = TraceStore(f"sqlite:///{tmp_path / 'traces.db'}").list()
        assert [(row.id, row.session_id) for row in rows] == [(result["traceId"], "s1")]

    def test_calls_of_different_sessions_run_at_the_same_time(self, service):
        assert _overlap(service, ("a", "b"))
        assert _overlap(service, (None, None))

    def test_calls_of_one_session_wait_for_each_other_whatever_its_spelling(self, service):
        assert not _overlap(service, ("s", "s"))
        assert not _overlap(service, ("s", " s "))  # one session, normalized

    def test_the_agent_tool_and_the_rest_routes_call_the_service(self, service):
        tool = LookupKnowledgeTool(service)
        assert tool.service is service and tool.lookup_result(QUESTION)["evidenceStatus"] == "evidence"
        assert _overlap(service, ("x", "y"), call=tool.lookup_result)  # the tool takes no lock of its own

    def test_health_and_what_is_indexed(self, service, data):
        health = service.health()
        assert (health["status"], health["documents"], health["collectionExists"]) == ("ok", 3, True)
        assert set(service.documents()) == {"alerts/disk.md", "payments/refund.md", "faq/plans.md"}
        assert service.knowledge_ids() == {"lookup-knowledge", service.collection_name}
        assert Deployment.resolve(data).index_path.exists()

    def test_a_pipeline_that_is_not_a_lookup_pipeline_is_refused_naming_what_it_lacks(self):
        from haystack import Pipeline

        with pytest.raises(ValueError, match="QueryTransformer"):
            KnowledgeService(Pipeline())


def test_a_pipeline_without_the_filter_resolver_is_refused_on_a_base_with_restricted_pages(data, tmp_path):
    from components.store.knowledge_index import KnowledgeIndex
    from pipelines.api import load_pipeline

    folder = tmp_path / "data"
    folder.mkdir()
    index = KnowledgeIndex.load(data / "knowledge_index.json")
    index.documents[0] = index.documents[0].model_copy(update={"access": ["hr"]})
    index.save(folder / "knowledge_index.json")
    pipeline = load_pipeline(data_dir=folder, warm_up=False)
    pipeline.remove_component("filter_resolver")
    service = KnowledgeService(pipeline, Deployment.resolve(folder))
    result = service.lookup("disk full")
    assert result["evidenceStatus"] == "invalid_query" and "DocumentFilterResolver" in result["error"]
    assert TraceStore(Deployment.resolve(folder).trace_db_url).list()[0].status == "invalid_query"  # recorded
