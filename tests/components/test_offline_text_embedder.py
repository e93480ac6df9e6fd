from __future__ import annotations

import numpy as np
import pytest
from haystack.core.serialization import component_from_dict, component_to_dict

from components.core.embedding_backends import get_backend
from components.offline_text_embedder import OfflineTextEmbedder


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

    def test_empty_and_invalid_input(self):
        assert OfflineTextEmbedder().run("  ")["embedding"] == []
        with pytest.raises(TypeError, match="expects a string"):
            OfflineTextEmbedder().run(["a"])  # type: ignore[arg-type]
