from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

from haystack import Document, component, logging

from components.milvus_chunk_store import CollectionSchema, MilvusChunkStore, lexical_text, token_from_env

logger = logging.getLogger(__name__)


def _json_safe(meta: dict[str, Any]) -> dict[str, Any]:
    safe = {}
    for key, value in meta.items():
        try:
            json.dumps(value)
            safe[key] = value
        except TypeError:  # e.g. a date from YAML frontmatter
            safe[key] = str(value)
    return safe


@component
class MilvusChunkWriter:
    """
    Writes embedded chunks to the Milvus knowledge collection, one document at a time, all or nothing.

    Rows follow the original schema (`id`, `content`, `vector`, `metadata` JSON; names configurable). Where the
    Milvus version supports full-text search, a new collection also gets `lexical_field` (the chunk's BM25 terms,
    written here) and `sparse_field` (filled from it by Milvus' BM25 function). The chunks of
    one document are inserted together; if the insert fails, whatever part of it landed is deleted again and the
    document is reported in `failures`, so the previous version of that document (whose chunk ids differ, because
    ids include the file version) stays untouched. Removing superseded versions is a separate, later step
    (`remove_stale`), run once the new versions are recorded as active.

    ### Usage example

    ```python
    from components.milvus_chunk_writer import MilvusChunkWriter

    writer = MilvusChunkWriter(uri="data/milvus.db")
    writer.warm_up()
    print(writer.run(documents=embedded_chunks)["written"])
    ```
    """

    def __init__(
        self,
        uri: str = "data/milvus.db",
        collection_name: str = "knowledge_chunks",
        dimension: int = 384,
        metric_type: str = "L2",
        index_type: str = "AUTOINDEX",
        id_field: str = "id",
        content_field: str = "content",
        vector_field: str = "vector",
        metadata_field: str = "metadata",
        lexical_field: str = "lexical",
        sparse_field: str = "sparse",
        token_env_var: str | None = "MILVUS_TOKEN",  # noqa: S107 - a variable name, not a secret
    ) -> None:
        """
        Create the writer; it connects in `warm_up`.

        :param uri: Milvus Lite `.db` path or a server URI.
        :param collection_name: The collection to write to (created if missing).
        :param dimension: Vector dimension (384 for multilingual-e5-small, 512 for USE).
        :param metric_type: `L2` (the original's), `IP` or `COSINE`.
        :param index_type: Vector index type, e.g. `AUTOINDEX`, `FLAT`, `IVF_FLAT`, `HNSW`.
        :param id_field: Primary key field name.
        :param content_field: Text field name.
        :param vector_field: Vector field name.
        :param metadata_field: JSON metadata field name.
        :param lexical_field: Text field of a new collection holding each chunk's BM25 terms (English stems,
            Chinese character bigrams); `""` (with `sparse_field` `""`) creates no full-text search in Milvus, and
            lexical retrieval then runs in-process. An existing collection keeps its schema.
        :param sparse_field: Sparse field of a new collection that Milvus' BM25 function fills from
            `lexical_field`.
        :param token_env_var: Environment variable holding a server token; the token is never stored in YAML.
        :raises ValueError: If a name or parameter is invalid.
        """
        if not uri:
            msg = "uri='' must name a Milvus Lite .db path or a server URI such as http://127.0.0.1:19530"
            raise ValueError(msg)
        self.uri = uri
        self.collection_name = collection_name
        self.dimension = dimension
        self.metric_type = metric_type
        self.index_type = index_type
        self.id_field = id_field
        self.content_field = content_field
        self.vector_field = vector_field
        self.metadata_field = metadata_field
        self.lexical_field = lexical_field
        self.sparse_field = sparse_field
        self.token_env_var = token_env_var
        self._schema = CollectionSchema.from_attributes(self)
        self._store: MilvusChunkStore | None = None
        self._full_text: tuple[str, str] | None = None

    @property
    def store(self) -> MilvusChunkStore:
        """The underlying chunk store (connects on first use)."""
        if self._store is None:
            self._store = MilvusChunkStore(self.uri, self._schema, token_from_env(self.token_env_var))
        return self._store

    def warm_up(self) -> None:
        """Connect and create the collection if it does not exist."""
        self.store.ensure_collection()
        self._full_text = self.store.full_text_fields()

    @property
    def full_text_fields(self) -> tuple[str, str] | None:
        """`(lexical_field, sparse_field)` of the collection's BM25 function as of `warm_up`, or None without one."""
        return self._full_text

    def close(self) -> None:
        """Release the connection."""
        if self._store is not None:
            self._store.close()
        self._store = None

    def _row(self, doc: Document) -> dict[str, Any]:
        if not doc.embedding or len(doc.embedding) != self.dimension:
            got = len(doc.embedding or [])
            msg = f"chunk {doc.id} has an embedding of dimension {got}, the collection expects {self.dimension}"
            raise ValueError(msg)
        row = {
            self.id_field: doc.id,
            self.content_field: doc.content or "",
            self.vector_field: doc.embedding,
            self.metadata_field: _json_safe(doc.meta),
        }
        if self._full_text is not None:
            row[self._full_text[0]] = lexical_text(doc.content or "")
        return row

    def _write_one(self, source: str, chunks: list[Document]) -> None:
        rows = [self._row(doc) for doc in chunks]
        try:
            self.store.insert(rows)
        except Exception:
            try:
                self.store.delete_ids(row[self.id_field] for row in rows)
            except Exception as cleanup_error:
                # the leftovers carry a version that never becomes active; `remove_stale` deletes them later
                logger.warning(
                    "Could not clean up partial chunks of {source}: {error}", source=source, error=cleanup_error
                )
            raise

    @component.output_types(written=int, documents_written=list[dict[str, Any]], failures=list[dict[str, str]])
    def run(self, documents: list[Document]) -> dict[str, Any]:
        """
        Insert the chunks, grouped by document.

        :param documents: Embedded chunks with `source` and `doc_version` in their meta.
        :returns: `written`: number of chunks inserted; `documents_written`: `{source, doc_version, chunks}` per
            document; `failures`: `{source, reason}` per document whose chunks could not be written.
        """
        by_source: dict[str, list[Document]] = defaultdict(list)
        for doc in documents:
            by_source[str(doc.meta.get("source", doc.id))].append(doc)
        written, done, failures = 0, [], []
        if by_source:
            self.warm_up()
        for source, chunks in by_source.items():
            try:
                self._write_one(source, chunks)
            except Exception as err:
                logger.warning("Writing chunks of {source} failed: {error}", source=source, error=err)
                failures.append({"source": source, "reason": f"write failed: {err}"})
                continue
            written += len(chunks)
            done.append({"source": source, "doc_version": chunks[0].meta.get("doc_version"), "chunks": len(chunks)})
        return {"written": written, "documents_written": done, "failures": failures}

    def remove_stale(self, active: dict[str, str]) -> int:
        """
        Delete every chunk written by this project whose document version is not the active one.

        Rows without a `doc_version` (written by another tool) are left alone.

        :param active: Active version per source.
        :returns: Number of rows deleted.
        """
        stale = [
            row["id"]
            for row in self.store.scan_metadata()
            if row.get("doc_version") and active.get(row.get("source") or "") != row["doc_version"]
        ]
        self.store.delete_ids(stale)
        return len(stale)
