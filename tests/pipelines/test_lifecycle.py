"""Pages with a life: drafts and archived pages are not evidence, a superseded page gives way to its successor, old
reviews are flagged stale — through the real pipeline and store."""

from __future__ import annotations

import textwrap
from datetime import date, timedelta
from pathlib import Path

import pytest
from haystack import Document

from components.core.embedding_backends import get_backend
from components.evidence.supersession_resolver import SupersessionResolver
from components.store.knowledge_collection import KnowledgeCollection
from components.store.knowledge_index import KnowledgeIndex
from pipelines.indexing import KnowledgeIndexer
from pipelines.service import KnowledgeService
from pipelines.settings import Deployment

pytestmark = pytest.mark.integration

RECENT = (date.today() - timedelta(days=30)).isoformat()
TOMORROW = (date.today() + timedelta(days=1)).isoformat()
PAGES = {
    "ops/backup-v1.md": """\
        ---
        id: backup-v1
        title: Database Backup Policy
        status: superseded
        superseded_by: backup-v2
        ---
        # Database Backup Policy

        Nightly backups of the orders database are kept for 7 days on the backup server.
        """,
    "ops/backup-v2.md": f"""\
        ---
        id: backup-v2
        title: Object Storage Retention
        reviewed_at: {RECENT}
        ---
        # Object Storage Retention

        Snapshots live in the cold bucket for 30 days; the bucket policy deletes older objects automatically.
        """,
    "ops/key-rotation.md": """\
        ---
        title: Key Rotation
        status: draft
        ---
        # Key Rotation

        Rotate the payment gateway signing keys every 90 days with the vault CLI. DRAFT-ONLY-MARKER
        """,
    "ops/firewall.md": """\
        ---
        title: Firewall Change Requests
        status: archived
        ---
        # Firewall Change Requests

        Open a ticket in the network queue to change firewall rules; the network team approves it. ARCHIVED-MARKER
        """,
    "ops/oncall-2027.md": f"""\
        ---
        title: On-call Handbook 2027
        valid_from: {TOMORROW}
        ---
        # On-call Handbook 2027

        From next year the on-call rotation hands over every Monday at 10:00 in the incident channel. FUTURE-MARKER
        """,
    "ops/vpn.md": """\
        ---
        title: VPN Setup
        updated: 2020-01-15
        ---
        # VPN Setup

        Install the VPN client and connect to vpn.example.com with your employee account and a hardware token.
        """,
    "ops/printers.md": """\
        ---
        title: Office Printers
        status: deprecated
        ---
        # Office Printers

        Send print jobs to the queue printers.office.example.com from the office network; badges release them.
        """,
}


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("lifecycle")
    for name, text in PAGES.items():
        path = root / "knowledge" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    indexer = KnowledgeIndexer(Deployment.resolve(root / "data"))
    try:
        assert indexer.index(root / "knowledge", progress=False).indexed == len(PAGES)
    finally:
        indexer.close()
    return root / "data"


@pytest.fixture(scope="module")
def service(data) -> KnowledgeService:
    loaded = KnowledgeService.load(data_dir=data)
    yield loaded
    loaded.close()


def sources(result: dict) -> list[str]:
    return [b["source"] for b in result["evidenceBlocks"]]


class TestLifecycle:
    def test_the_index_keeps_each_pages_life(self, data):
        pages = KnowledgeIndex.load(data / "knowledge_index.json").by_source()
        assert (pages["ops/backup-v1.md"].status, pages["ops/backup-v1.md"].superseded_by) == (
            "superseded",
            "backup-v2",
        )
        assert pages["ops/backup-v2.md"].reviewed_at == RECENT and pages["ops/oncall-2027.md"].valid_from == TOMORROW
        assert pages["ops/vpn.md"].updated == "2020-01-15" and pages["ops/vpn.md"].status == ""

    @pytest.mark.parametrize(
        ("query", "marker", "status"),
        [
            ("how often are the payment gateway signing keys rotated", "DRAFT-ONLY-MARKER", "draft"),
            ("how do I request a firewall rule change", "ARCHIVED-MARKER", "archived"),
            ("when does the on-call rotation hand over", "FUTURE-MARKER", None),
        ],
    )
    def test_drafts_archived_and_future_pages_are_not_evidence(self, service, query, marker, status):
        result = service.lookup(query)
        assert marker not in str(result)  # in no block, no pack, no message, no trace shown to the caller
        attempts = result["retrievalTrace"]["attempts"]
        assert attempts and all("hidden" in (a["filter"] or {}) for a in attempts)
        if status is not None:  # asked for by its status, the page is found
            asked = service.lookup(query, filters={"status": status})
            assert asked["found"] is True and marker in asked["evidenceBlocks"][0]["content"]

    def test_a_superseded_page_gives_way_to_its_successor(self, service):
        result = service.lookup("how many days are the nightly backups of the orders database kept")
        assert result["found"] is True
        assert "ops/backup-v1.md" not in sources(result) and sources(result)[0] == "ops/backup-v2.md"
        first = result["evidenceBlocks"][0]
        if first["replaces"]:  # the old page ranked first: its successor took its place, and says so
            assert first["replaces"] == "ops/backup-v1.md" and "replaces ops/backup-v1.md" in first["hitReasons"][0]
            assert "its successor ops/backup-v2.md is returned instead" in result["message"]

    def test_the_best_match_superseded_is_replaced_by_its_successor_at_its_rank(self, data):
        """The resolver alone, on the old page's block as the gate passes it: the successor's best chunk replaces it."""
        collection = KnowledgeCollection(uri=str(data / "milvus.db"), index_path=str(data / "knowledge_index.json"))
        resolver = SupersessionResolver(collection, index_path=str(data / "knowledge_index.json"))
        resolver.warm_up()
        try:
            old = collection.scan(keys=("source", "chunk_index"), with_content=True)
            [row] = [r for r in old if r["source"] == "ops/backup-v1.md" and r["chunk_index"] == 0]
            block = Document(id=row["id"], content=row["content"], score=0.95, meta={**row, "hit_reasons": ["l1"]})
            other = Document(content="x", score=0.9, meta={"source": "ops/vpn.md", "hit_reasons": []})
            vector = get_backend("multilingual-e5-small").embed_queries(["how long are backups kept"])[0].tolist()
            out = resolver.run(documents=[block, other], query_embedding=vector)
        finally:
            resolver.close()
        first, second = out["documents"]
        assert first.meta["source"] == "ops/backup-v2.md" and first.meta["replaces"] == "ops/backup-v1.md"
        assert first.score == 0.95 and 0.0 < first.meta["similarity"] <= 1.0  # its rank, its own similarity
        assert first.meta["hit_reasons"] == ["replaces ops/backup-v1.md (superseded)"]
        assert second.meta["source"] == "ops/vpn.md" and second.meta["stale"] is True
        assert out["lifecycle"]["replaced"] == [{"old": "ops/backup-v1.md", "by": "ops/backup-v2.md"}]

    def test_a_retired_page_without_successor_is_marked_and_said(self, service):
        result = service.lookup("how do I print from the office network")
        assert result["found"] is True and sources(result)[0] == "ops/printers.md"
        block = result["evidenceBlocks"][0]
        assert block["superseded"] is True and "deprecated: no successor indexed" in block["hitReasons"]
        assert "ops/printers.md is marked superseded with no successor indexed" in result["message"]
        assert "status: superseded, no successor indexed" in result["contextPack"]["packedText"]

    def test_evidence_not_reviewed_lately_is_flagged_stale(self, service):
        result = service.lookup("how do I connect to the VPN with a hardware token")
        block = next(b for b in result["evidenceBlocks"] if b["source"] == "ops/vpn.md")
        assert block["stale"] is True and block["reviewed"] == "2020-01-15"
        assert "stale: last reviewed 2020-01-15" in result["contextPack"]["packedText"]
        assert "ops/vpn.md: not reviewed lately (stale)" in result["message"]
        fresh = service.lookup("how many days do snapshots stay in the cold bucket")
        assert fresh["evidenceBlocks"][0]["source"] == "ops/backup-v2.md"
        assert fresh["evidenceBlocks"][0]["stale"] is False  # reviewed a month ago

    def test_facets_list_the_statuses(self, service):
        assert "status" in service.facets()["filterKeys"]
