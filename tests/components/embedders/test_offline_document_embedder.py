from __future__ import annotations

import numpy as np
import pytest
from haystack import Document
from haystack.core.serialization import component_from_dict, component_to_dict

from components.embedders.offline_document_embedder import OfflineDocumentEmbedder
from components.embedders.offline_text_embedder import OfflineTextEmbedder

DOCS = [
    Document(content="当磁盘使用率超过百分之九十时，清理 /var/log 下的旧日志。", meta={"breadcrumb": "磁盘满 > 处理"}),
    Document(content="Refunds are returned to the original card within seven working days.", meta={}),
    Document(content="The CPU stays above 95 percent; find the hottest process with top.", meta={"breadcrumb": ""}),
]


class TestOfflineDocumentEmbedder:
    def test_init_defaults_and_invalid(self):
        embedder = OfflineDocumentEmbedder()
        assert embedder.model == "multilingual-e5-small"
        assert embedder.meta_fields_to_embed == ["breadcrumb"]
        with pytest.raises(ValueError, match="model='bert'"):
            OfflineDocumentEmbedder(model="bert")
        with pytest.raises(ValueError, match="batch_size=0"):
            OfflineDocumentEmbedder(batch_size=0)
        with pytest.raises(ValueError, match="embedding_meta_key=''"):
            OfflineDocumentEmbedder(embedding_meta_key=" ")

    def test_to_dict_from_dict(self):
        embedder = OfflineDocumentEmbedder(model="use-multilingual-v3", batch_size=4, embedding_meta_key="x")
        data = component_to_dict(embedder, "e")
        assert data["init_parameters"]["model"] == "use-multilingual-v3"
        restored = component_from_dict(OfflineDocumentEmbedder, data, "e")
        assert (restored.model, restored.batch_size, restored.embedding_meta_key) == ("use-multilingual-v3", 4, "x")

    def test_run_embeds_unit_vectors_and_keeps_inputs(self):
        result = OfflineDocumentEmbedder().run(DOCS)
        vectors = np.array([d.embedding for d in result["documents"]])
        assert vectors.shape == (3, 384)
        assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-3)
        assert all(d.embedding is None for d in DOCS)
        assert result["meta"]["characters"] > sum(len(d.content) for d in DOCS)

    def test_batching_does_not_change_vectors(self):
        one = OfflineDocumentEmbedder(batch_size=1).run(DOCS)["documents"]
        many = OfflineDocumentEmbedder(batch_size=16).run(DOCS)["documents"]
        for a, b in zip(one, many, strict=True):
            assert np.allclose(a.embedding, b.embedding, atol=1e-3)

    def test_breadcrumb_is_embedded(self):
        plain = OfflineDocumentEmbedder(meta_fields_to_embed=[]).run(DOCS[:1])["documents"][0]
        crumb = OfflineDocumentEmbedder().run(DOCS[:1])["documents"][0]
        assert not np.allclose(plain.embedding, crumb.embedding, atol=1e-3)

    def test_multilingual_retrieval_ranks_the_right_passage_first(self):
        docs = OfflineDocumentEmbedder().run(DOCS)["documents"]
        text = OfflineTextEmbedder()
        for query, expected in [
            ("磁盘满了怎么办", 0),
            ("how long does a refund take", 1),
            ("the processor is overloaded", 2),
            ("disk space is running out", 0),
        ]:
            q = np.array(text.run(query)["embedding"])
            scores = [float(np.dot(q, d.embedding)) for d in docs]
            assert int(np.argmax(scores)) == expected, (query, scores)

    def test_use_model_alternative(self):
        docs = OfflineDocumentEmbedder(model="use-multilingual-v3").run(DOCS)["documents"]
        assert len(docs[0].embedding) == 512

    def test_embedding_meta_key_keeps_the_main_embedding(self):
        first = OfflineDocumentEmbedder().run(DOCS[:2])["documents"]
        second = OfflineDocumentEmbedder(model="use-multilingual-v3", embedding_meta_key="crosslingual_embedding")
        docs = second.run(first)["documents"]
        for before, after in zip(first, docs, strict=True):
            assert after.embedding == before.embedding  # the e5 vector stays where the writer reads it
            assert len(after.meta["crosslingual_embedding"]) == 512
            assert "crosslingual_embedding" not in before.meta

    def test_empty_and_invalid_input(self):
        assert OfflineDocumentEmbedder().run([])["documents"] == []
        with pytest.raises(TypeError, match="list of Documents"):
            OfflineDocumentEmbedder().run("text")  # type: ignore[arg-type]
