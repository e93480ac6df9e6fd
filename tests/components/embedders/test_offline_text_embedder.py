from __future__ import annotations

import numpy as np
import pytest
from haystack import Pipeline, component
from haystack.core.serialization import component_from_dict, component_to_dict

from components.core.embedding_backends import get_backend
from components.core.query_vector import QueryVector
from components.embedders.offline_text_embedder import OfflineTextEmbedder


class TestOfflineTextEmbedder:
    def test_init_and_invalid(self):
        assert OfflineTextEmbedder().model == "multilingual-e5-small"
        with pytest.raises(ValueError, match="model='gpt'"):
            OfflineTextEmbedder(model="gpt")

    def test_to_dict_from_dict(self):
        data = component_to_dict(OfflineTextEmbedder(model="use-multilingual-v3"), "t")
        assert data["init_parameters"] == {"model": "use-multilingual-v3"}
        assert component_from_dict(OfflineTextEmbedder, data, "t").model == "use-multilingual-v3"

    def test_run_uses_the_query_form(self):
        vector = np.array(OfflineTextEmbedder().run("disk full on /var")["embedding"])
        assert vector.shape == (384,)
        backend = get_backend("multilingual-e5-small")
        assert np.allclose(vector, backend.embed_queries(["disk full on /var"])[0], atol=1e-4)
        assert not np.allclose(vector, backend.embed_passages(["disk full on /var"])[0], atol=1e-3)

    def test_the_vector_output_holds_the_same_values_and_a_pipeline_passes_it_on_uncopied(self):
        out = OfflineTextEmbedder().run("磁盘满了怎么办")
        assert out["vector"].to_list() == out["embedding"] and out["vector"].model == "multilingual-e5-small"
        received = []

        @component
        class Receiver:
            @component.output_types(n=int)
            def run(self, query_embedding: list[float] | QueryVector) -> dict:
                received.append(query_embedding)
                return {"n": len(query_embedding)}

        pipeline = Pipeline()
        pipeline.add_component("embedder", OfflineTextEmbedder())
        pipeline.add_component("receiver", Receiver())
        pipeline.connect("embedder.vector", "receiver.query_embedding")
        assert pipeline.run({"embedder": {"text": "disk full"}})["receiver"]["n"] == 384
        assert isinstance(received[0], QueryVector) and len(received[0].values) == 384

    def test_empty_and_invalid_input(self):
        assert OfflineTextEmbedder().run("  ")["embedding"] == []
        assert len(OfflineTextEmbedder().run("  ")["vector"]) == 0
        with pytest.raises(TypeError, match="expects a string"):
            OfflineTextEmbedder().run(["a"])  # type: ignore[arg-type]
