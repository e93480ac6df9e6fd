from __future__ import annotations

from typing import Any

from haystack import Document, component, default_from_dict, default_to_dict

from components.store.knowledge_collection import KnowledgeCollection
from components.store.knowledge_store import KnowledgeStore, deserialize_store_inplace


@component
class ChunkWriter:
    """
    Writes embedded chunks to the knowledge store, all or nothing per document.

    Each chunk needs `source` and `doc_version` in its meta, an `embedding` of the store's dimension and, where the
    store keeps cross-lingual vectors, its cross-lingual vector in meta `crosslingual_embedding`. The chunks of one
    document are written together; a document whose chunks cannot all be written is reported in `failures`, and its
    previous version (whose chunk ids differ: ids include the file version) stays untouched. How rows are made and
    sent is the store's (`KnowledgeStore.write_documents`). Removing superseded versions is a separate, later step
    (`remove_stale`), run once the new versions are recorded as active.

    ### Usage example

    ```python
    from components.store.knowledge_collection import KnowledgeCollection
    from components.writers.chunk_writer import ChunkWriter

    writer = ChunkWriter(KnowledgeCollection(uri="data/milvus.db", dimension=384, metric_type="L2"))
    writer.warm_up()
    print(writer.run(documents=embedded_chunks)["written"])
    ```
    """

    def __init__(self, collection: KnowledgeStore | None = None) -> None:
        """
        Create the writer; it connects in `warm_up`.

        :param collection: The store written to, created if missing with its schema (default:
            `KnowledgeCollection(dimension=384, metric_type="L2")`, the original's). An existing collection keeps
            its schema; `warm_up` fails if it differs from the configured one.
        """
        self.collection: KnowledgeStore = (
            collection if collection is not None else KnowledgeCollection(dimension=384, metric_type="L2")
        )

    def to_dict(self) -> dict[str, Any]:
        """
        Serialize the writer with its store.

        :returns: The serialized component.
        """
        return default_to_dict(self, collection=self.collection)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ChunkWriter:
        """
        Deserialize the writer and its store.

        :param data: From `to_dict`.
        :returns: The writer.
        """
        params = dict(data.get("init_parameters", {}))
        deserialize_store_inplace(params)
        return default_from_dict(cls, {**data, "init_parameters": params})

    def warm_up(self) -> None:
        """
        Connect and create the collection if it does not exist.

        :raises CollectionMismatchError: If the existing collection differs from the configured schema.
        """
        self.collection.create_if_missing()

    def close(self) -> None:
        """Release the connection."""
        self.collection.close()

    @component.output_types(written=int, documents_written=list[dict[str, Any]], failures=list[dict[str, str]])
    def run(self, documents: list[Document]) -> dict[str, Any]:
        """
        Write the chunks, grouped by document.

        :param documents: Embedded chunks with `source` and `doc_version` in their meta.
        :returns: `written`: number of chunks written; `documents_written`: `{source, doc_version, chunks, meta}` per
            document (`meta`: its first chunk's metadata, which carries the document's fields); `failures`:
            `{source, reason}` per document whose chunks could not be written.
        """
        report = self.collection.write_documents(documents)
        return {"written": report.written, "documents_written": report.documents_written, "failures": report.failures}

    def remove_stale(self, active: dict[str, str]) -> int:
        """
        Delete every chunk whose document version is not the active one (rows of other tools, without a version,
        are left alone).

        :param active: Active version per source.
        :returns: Number of chunks deleted.
        """
        return self.collection.remove_stale(active)
