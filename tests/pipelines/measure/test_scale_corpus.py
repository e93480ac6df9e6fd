from __future__ import annotations

import hashlib
import json
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from components.core.citation import chunk_id
from components.store.knowledge_index import KnowledgeIndex
from components.store.schema import CROSSLINGUAL_META_KEY
from pipelines import load_pipeline, lookup
from pipelines.indexing import KnowledgeIndexer
from pipelines.measure.scale_corpus import ScaleCorpus, ScalePool, build_scale_corpus, embed_pool, main, scale_documents
from pipelines.settings import Deployment
from tests.conftest import KNOWLEDGE_DIR

pytestmark = pytest.mark.integration

CHUNKS = 600
#: answered by alerts/slow-responses.md; the pool is the repository's alerts/ folder (5 files, 50 chunks): embedding
#: all 20 files with both models takes minutes on a small machine, and 600 chunks still make 11 synthetic copies
QUESTION = "kb-q7"


def eval_question(qid: str) -> dict:
    with (KNOWLEDGE_DIR / "eval.jsonl").open(encoding="utf-8") as handle:
        return next(q for q in map(json.loads, handle) if q["qid"] == qid)


def unit(vector) -> np.ndarray:
    vector = np.asarray(vector, dtype=np.float64)
    return vector / np.linalg.norm(vector)


@pytest.fixture(scope="module")
def knowledge(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("scale-kb")
    shutil.copytree(KNOWLEDGE_DIR / "alerts", root / "alerts")
    return root.resolve()


@pytest.fixture(scope="module")
def pool(knowledge, tmp_path_factory) -> ScalePool:
    """The alerts files chunked and embedded once for the module, by the indexing pipeline's components."""
    indexer = KnowledgeIndexer(Deployment.resolve(tmp_path_factory.mktemp("pool") / "data"))
    try:
        return embed_pool(knowledge, indexer)
    finally:
        indexer.close()


@pytest.fixture(scope="module")
def built(knowledge, pool, tmp_path_factory) -> tuple[ScaleCorpus, Deployment]:
    deployment = Deployment.resolve(tmp_path_factory.mktemp("scale") / "data")
    return build_scale_corpus(knowledge, CHUNKS, deployment, pool=pool), deployment


@pytest.fixture(scope="module")
def rows(built) -> list[dict]:
    """Every row of the built collection: id, metadata and content."""
    indexer = KnowledgeIndexer(built[1])
    try:
        indexer.collection.warm_up()
        assert indexer.collection.full_text_field()  # BM25 inside Milvus, as `index` creates the collection
        return indexer.collection.scan(keys=None, with_content=True)
    finally:
        indexer.close()


def pool_chunks(pool: ScalePool) -> list:
    return [chunk for doc in pool.documents for chunk in doc]


class TestScaleCorpus:
    def test_the_collection_holds_exactly_n_chunks_all_recorded_in_the_index(self, built, rows, pool):
        corpus, deployment = built
        assert corpus.chunks == len(rows) == CHUNKS
        assert corpus.pool_chunks == pool.chunks == 50 and corpus.pool_documents == 5
        assert "not embedded" in corpus.vectors and "multilingual-e5-small" in corpus.vectors
        index = KnowledgeIndex.load(deployment.index_path)
        assert sum(d.chunks for d in index.documents) == CHUNKS and len(index.documents) == corpus.documents
        assert index.statistics is not None and index.statistics.chunks == CHUNKS
        assert index.term_categories and index.collection_name == "knowledge_chunks"
        active = index.active_versions()
        assert all(row["metadata"]["doc_version"] == active[row["metadata"]["source"]] for row in rows)
        per_source = Counter(row["metadata"]["source"] for row in rows)
        assert per_source == {d.source: d.chunks for d in index.documents}
        for row in rows:  # the last document is cut: its chunks say how many it kept
            assert row["metadata"]["total_chunks"] == per_source[row["metadata"]["source"]]
        assert sorted(per_source.values())[0] < max(len(doc) for doc in pool.documents)

    def test_copy_zero_is_the_real_chunks_unchanged(self, rows, pool):
        by_id = {row["id"]: row for row in rows}
        for chunk in pool_chunks(pool):
            row = by_id[chunk.id]
            assert row["content"] == chunk.content
            meta = {k: v for k, v in chunk.meta.items() if k != CROSSLINGUAL_META_KEY}
            assert row["metadata"] == json.loads(json.dumps(meta))
        assert "alerts-slow-responses" in {row["metadata"]["doc_id"] for row in rows}

    def test_synthetic_chunks_recombine_pool_chunks_and_sum_their_vectors(self, pool):
        real = pool_chunks(pool)
        by_content: dict[str, list] = {}
        for chunk in real:
            by_content.setdefault(chunk.content, []).append(chunk)
        documents = list(scale_documents(pool, CHUNKS))
        for j, doc in enumerate(documents[len(pool.documents) :], start=len(pool.documents)):
            base = pool.documents[j % len(pool.documents)]
            base_meta = base[0].meta
            assert len(doc) == len(base) or doc is documents[-1]
            for i, chunk in enumerate(doc):
                meta = chunk.meta
                assert meta["doc_id"] == f"{base_meta['doc_id']}~{j}"
                assert meta["source"] == f"scale/{j}/{base_meta['source']}"
                assert meta["title"] == f"{base_meta['title']} · {j}"
                assert meta["breadcrumb"].startswith(meta["title"])
                assert (meta["category"], meta["keywords"], meta["entities"]) == (
                    base_meta["category"],
                    base_meta["keywords"],
                    base_meta["entities"],
                )
                assert meta["chunk_index"] == i and meta["total_chunks"] == len(doc)
                assert meta["content_hash"] == hashlib.sha256(chunk.content.encode()).hexdigest()[:16]
                assert chunk.id == chunk_id(meta["source"], i, meta["doc_version"])
                assert chunk.content.startswith(base[i].content + "\n\n")
                tail = chunk.content[len(base[i].content) + 2 :]
                partners = [p for p in by_content[tail] if p is not base[i]]
                assert any(
                    np.allclose(chunk.embedding, unit(np.add(base[i].embedding, p.embedding)))
                    and np.allclose(
                        meta[CROSSLINGUAL_META_KEY],
                        unit(np.add(base[i].meta[CROSSLINGUAL_META_KEY], p.meta[CROSSLINGUAL_META_KEY])),
                    )
                    for p in partners
                )
            assert len({c.meta["doc_version"] for c in doc}) == 1

    def test_the_same_arguments_give_the_same_collection(self, pool, rows):
        def ids(seed: int) -> list[str]:
            return [chunk.id for doc in scale_documents(pool, CHUNKS, seed) for chunk in doc]

        assert ids(15) == ids(15)
        assert set(ids(15)) == {row["id"] for row in rows}
        other = ids(16)
        real = {chunk.id for chunk in pool_chunks(pool)}
        assert set(other) & set(ids(15)) == real  # another seed: other partners, other synthetic documents

    def test_fewer_chunks_than_the_pool_give_the_first_real_chunks(self, pool):
        documents = list(scale_documents(pool, 15))
        chunks = [chunk for doc in documents for chunk in doc]
        assert [c.id for c in chunks] == [c.id for c in pool_chunks(pool)[:15]]
        assert all(c.meta["total_chunks"] == len(documents[-1]) for c in documents[-1])

    def test_a_lookup_finds_the_judged_document(self, built):
        question = eval_question(QUESTION)
        pipeline = load_pipeline(data_dir=built[1].data_dir)
        result = lookup(pipeline, question["query"])
        assert result["found"] is True
        assert set(question["expected_doc_ids"]) & {block["docId"] for block in result["evidenceBlocks"]}

    @pytest.mark.parametrize("chunks", [0, -5])
    def test_invalid_chunks_are_rejected_naming_the_parameter(self, knowledge, pool, tmp_path, chunks):
        with pytest.raises(ValueError, match="chunks"):
            build_scale_corpus(knowledge, chunks, Deployment.resolve(tmp_path / "data"), pool=pool)
        with pytest.raises(ValueError, match="chunks"):
            scale_documents(pool, chunks)
        with pytest.raises(SystemExit) as exit_info:
            main([str(knowledge), "--chunks", str(chunks), "--data-dir", str(tmp_path / "data")])
        assert exit_info.value.code == 2
        assert not (tmp_path / "data").exists()  # nothing was written or embedded

    def test_a_pool_from_another_folder_is_rejected(self, pool, tmp_path):
        with pytest.raises(ValueError, match="pool"):
            build_scale_corpus(tmp_path, 10, Deployment.resolve(tmp_path / "data"), pool=pool)
