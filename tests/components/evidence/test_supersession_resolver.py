from __future__ import annotations

from datetime import date, timedelta
from pathlib import Path

import pytest
from haystack import Document
from haystack.core.serialization import component_from_dict, component_to_dict

from components.core.citation import chunk_ids
from components.evidence.supersession_resolver import SupersessionResolver
from components.store.knowledge_collection import KnowledgeCollection
from components.store.knowledge_index import IndexedDocument, KnowledgeIndex

OLD = (date.today() - timedelta(days=800)).isoformat()
PAST = (date.today() - timedelta(days=1)).isoformat()


class FakeCollection:
    """Reads nothing: a successor's chunks are never found (the pipeline test reads the real store)."""

    def __init__(self) -> None:
        self.fetched: list[list[str]] = []

    def fetch_scored(self, ids: list[str], vector: list[float]) -> list[Document]:
        self.fetched.append(ids)
        return []


def _page(source: str, **fields) -> IndexedDocument:
    return IndexedDocument(doc_id=source.removesuffix(".md"), source=source, doc_version="v1", chunks=2, **fields)


def _block(source: str, score: float = 0.9) -> Document:
    return Document(content=f"text of {source}", score=score, meta={"source": source, "hit_reasons": ["l1"]})


@pytest.fixture
def make(tmp_path: Path):
    def build(pages: list[IndexedDocument], **init) -> tuple[SupersessionResolver, FakeCollection]:
        path = tmp_path / "knowledge_index.json"
        KnowledgeIndex(documents=pages).save(path)
        collection = FakeCollection()
        return SupersessionResolver(collection, index_path=str(path), **init), collection  # type: ignore[arg-type]

    return build


class TestSupersessionResolver:
    def test_init_defaults(self):
        resolver = SupersessionResolver()
        assert (resolver.index_path, resolver.review_age_days) == ("data/knowledge_index.json", 365)
        assert isinstance(resolver.collection, KnowledgeCollection)

    @pytest.mark.parametrize(
        ("kwargs", "match"), [({"index_path": ""}, "index_path=''"), ({"review_age_days": 0}, "review_age_days=0")]
    )
    def test_invalid_init(self, kwargs, match):
        with pytest.raises(ValueError, match=match):
            SupersessionResolver(**kwargs)

    def test_to_dict_from_dict(self):
        collection = KnowledgeCollection(uri="http://127.0.0.1:19530", collection_name="kb")
        data = component_to_dict(SupersessionResolver(collection, index_path="x.json", review_age_days=None), "s")
        assert data["init_parameters"] == {
            "collection": collection.to_dict(),
            "index_path": "x.json",
            "review_age_days": None,
        }
        restored = component_from_dict(SupersessionResolver, data, "s")
        assert (restored.index_path, restored.review_age_days) == ("x.json", None)
        assert restored.collection.to_dict() == collection.to_dict()

    def test_empty_input_gives_empty_output(self, make):
        resolver, _ = make([])
        out = resolver.run(documents=[], query_embedding=[0.1])
        assert list(out["documents"]) == [] and out["lifecycle"]["replaced"] == []

    def test_current_pages_pass_unchanged(self, make):
        resolver, collection = make([_page("a.md"), _page("b.md")])
        blocks = [_block("a.md"), _block("b.md"), _block("unknown.md")]
        out = resolver.run(documents=blocks, query_embedding=[0.1])
        assert list(out["documents"]) == blocks and collection.fetched == []

    def test_a_retired_page_whose_successor_is_evidence_is_dropped(self, make):
        pages = [_page("old.md", status="superseded", superseded_by="new"), _page("new.md")]
        resolver, _ = make(pages)
        out = resolver.run(documents=[_block("old.md"), _block("new.md", 0.8)], query_embedding=[0.1])
        assert [d.meta["source"] for d in out["documents"]] == ["new.md"]
        assert out["lifecycle"]["dropped"] == [{"old": "old.md", "by": "new.md"}]

    @pytest.mark.parametrize(
        "old",
        [
            _page("old.md", status="superseded", superseded_by="missing"),
            _page("old.md", status="deprecated"),
            _page("old.md", valid_until=PAST),
            _page("old.md", status="superseded", superseded_by="draft.md"),  # a draft successor is no successor
        ],
    )
    def test_a_retired_page_without_successor_stays_marked(self, make, old):
        resolver, _ = make([old, _page("draft.md", status="draft")])
        [block] = resolver.run(documents=[_block("old.md")], query_embedding=[0.1])["documents"]
        assert block.meta["superseded"] is True and block.meta["hit_reasons"][-1].endswith("no successor indexed")

    def test_a_chain_of_successors_ends_at_the_current_page(self, make):
        pages = [
            _page("v1.md", status="superseded", superseded_by="v2"),
            _page("v2.md", status="superseded", superseded_by="v3.md"),
            _page("v3.md"),
        ]
        resolver, _ = make(pages)
        out = resolver.run(documents=[_block("v1.md"), _block("v3.md", 0.7)], query_embedding=[0.1])
        assert [d.meta["source"] for d in out["documents"]] == ["v3.md"]

    def test_a_cycle_of_successors_is_no_successor(self, make):
        pages = [
            _page("a.md", status="superseded", superseded_by="b"),
            _page("b.md", status="superseded", superseded_by="a"),
        ]
        resolver, _ = make(pages)
        [block] = resolver.run(documents=[_block("a.md")], query_embedding=[0.1])["documents"]
        assert block.meta["superseded"] is True

    def test_old_reviews_are_stale_and_inputs_not_mutated(self, make):
        resolver, _ = make([_page("a.md", updated=OLD), _page("b.md", reviewed_at=OLD, updated=PAST)])
        blocks = [_block("a.md"), _block("b.md")]
        out = resolver.run(documents=blocks, query_embedding=[0.1])
        assert [d.meta.get("reviewed") for d in out["documents"]] == [OLD, OLD]  # reviewed_at before updated
        assert all(d.meta["stale"] for d in out["documents"]) and "stale" not in blocks[0].meta
        never, _ = make([_page("a.md", updated=OLD)], review_age_days=None)
        assert "stale" not in never.run(documents=[_block("a.md")], query_embedding=[0.1])["documents"][0].meta

    def test_a_successor_hidden_from_the_caller_is_no_successor_and_is_not_named(self, make):
        pages = [_page("v1.md", status="superseded", superseded_by="v2.md"), _page("v2.md", access=["finance"])]
        resolver, collection = make(pages)
        hidden = chunk_ids("v2.md", "v1", 2)
        out = resolver.run(documents=[_block("v1.md")], query_embedding=[0.1], hidden=hidden)
        [block] = out["documents"]
        assert block.meta["superseded"] is True and collection.fetched == []  # never read for this caller
        assert "v2" not in str(block.meta) and out["lifecycle"]["superseded"] == ["v1.md"]
        assert out["lifecycle"]["replaced"] == [] and out["lifecycle"]["dropped"] == []
        # for a caller who may read it, the successor is looked up (this fake store then finds none of its chunks)
        resolver.run(documents=[_block("v1.md")], query_embedding=[0.1], hidden=[])
        assert collection.fetched == [hidden]
