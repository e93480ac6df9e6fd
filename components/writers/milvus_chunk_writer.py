from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

from haystack import Document, component, default_from_dict, default_to_dict, logging

from components.store.json_metadata_document_store import category_column_value
from components.store.knowledge_collection import KnowledgeCollection, deserialize_collection_inplace
from components.store.lexical import lexical_text
from components.store.schema import CROSSLINGUAL_META_KEY

logger = logging.getLogger(__name__)

#: most rows sent to Milvus in one insert request (the chunks of several documents; one document is never split)
ROWS_PER_INSERT = 1000


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
    Writes embedded chunks to the Milvus knowledge collection, all or nothing per document.

    Rows follow the collection's schema (`id`, `content`, `vector`, `metadata` JSON; names configurable). Where the
    Milvus version supports full-text search, a new collection also gets `lexical_field` (the chunk's BM25 terms,
    written here) and `sparse_field` (filled from it by Milvus' BM25 function). A collection with a
    `crosslingual_field` gets each chunk's cross-lingual vector from its meta `crosslingual_embedding` (moved out of
    the metadata). The chunks of one document are always inserted together, and the documents of one `run` share
    inserts of up to `ROWS_PER_INSERT` rows (one request to Milvus per insert, however many documents it holds). If
    an insert fails, whatever part of it landed is deleted again and its documents are inserted one by one, so only
    a document whose own insert fails is reported in `failures` (when the clean-up fails as well, every document of
    that insert is). The previous version of a failed document (whose chunk ids differ, because ids include the
    file version) stays untouched. Removing superseded versions is a separate, later step (`remove_stale`), run
    once the new versions are recorded as active.

    ### Usage example

    ```python
    from components.writers.milvus_chunk_writer import MilvusChunkWriter
    from components.store.knowledge_collection import KnowledgeCollection, deserialize_collection_inplace

    writer = MilvusChunkWriter(KnowledgeCollection(uri="data/milvus.db", dimension=384, metric_type="L2"))
    writer.warm_up()
    print(writer.run(documents=embedded_chunks)["written"])
    ```
    """

    def __init__(self, collection: KnowledgeCollection | None = None) -> None:
        """
        Create the writer; it connects in `warm_up`.

        :param collection: The collection written to, created if missing with its schema (default:
            `KnowledgeCollection(dimension=384, metric_type="L2")`, the original's). An existing collection keeps
            its schema; `warm_up` fails if it differs from the configured one.
        """
        self.collection = collection if collection is not None else KnowledgeCollection(dimension=384, metric_type="L2")

    def to_dict(self) -> dict[str, Any]:
        """
        Serialize the writer with its collection.

        :returns: The serialized component.
        """
        return default_to_dict(self, collection=self.collection)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MilvusChunkWriter:
        """
        Deserialize the writer and its collection.

        :param data: From `to_dict`.
        :returns: The writer.
        """
        params = dict(data.get("init_parameters", {}))
        deserialize_collection_inplace(params)
        return default_from_dict(cls, {**data, "init_parameters": params})

    def warm_up(self) -> None:
        """
        Connect and create the collection if it does not exist.

        :raises CollectionMismatchError: If the existing collection differs from the configured schema.
        """
        self.collection.create_if_missing()

    @property
    def full_text_fields(self) -> tuple[str, str] | None:
        """`(lexical_field, sparse_field)` of the collection's BM25 function, or None without one."""
        description = self.collection.description()
        return description.full_text if description is not None else None

    def _crosslingual_vector(self, doc: Document) -> list[float] | None:
        """The chunk's cross-lingual vector when the collection has the field (then it is required)."""
        if not self.collection.has_crosslingual():
            return None
        vector = doc.meta.get(CROSSLINGUAL_META_KEY)
        expected = self.collection.schema.crosslingual_dimension
        if not isinstance(vector, list) or len(vector) != expected:
            got = len(vector) if isinstance(vector, list) else None
            msg = (
                f"chunk {doc.id} has no cross-lingual vector of dimension {expected} in meta "
                f"{CROSSLINGUAL_META_KEY!r} (got {got}); the collection has the field "
                f"{self.collection.schema.crosslingual_field!r}: run the indexing pipeline's crosslingual_embedder, "
                "or create the collection with crosslingual_field ''"
            )
            raise ValueError(msg)
        return vector

    def close(self) -> None:
        """Release the connection."""
        self.collection.close()

    def _row(self, doc: Document, full_text: tuple[str, str] | None) -> dict[str, Any]:
        s = self.collection.schema
        if not doc.embedding or len(doc.embedding) != s.dimension:
            got = len(doc.embedding or [])
            msg = f"chunk {doc.id} has an embedding of dimension {got}, the collection expects {s.dimension}"
            raise ValueError(msg)
        meta = {k: v for k, v in doc.meta.items() if k != CROSSLINGUAL_META_KEY}
        row = {
            s.id_field: doc.id,
            s.content_field: doc.content or "",
            s.vector_field: doc.embedding,
            s.metadata_field: _json_safe(meta),
        }
        if self.collection.has_category_column():
            row[s.category_field] = category_column_value(meta, s)
        crosslingual = self._crosslingual_vector(doc)
        if crosslingual is not None:
            row[s.crosslingual_field] = crosslingual
        if full_text is not None:
            row[full_text[0]] = lexical_text(doc.content or "")
        return row

    def _insert(self, rows: list[dict[str, Any]], what: str) -> None:
        """Insert rows in one request; if it fails, delete whatever landed, then raise."""
        try:
            self.collection.store.insert(rows)
        except Exception:
            self._clean_up(rows, what)
            raise

    def _clean_up(self, rows: list[dict[str, Any]], what: str) -> bool:
        """Delete rows that may have landed; whether that worked."""
        id_field = self.collection.schema.id_field
        try:
            self.collection.store.delete_ids(row[id_field] for row in rows)
        except Exception as cleanup_error:
            # the leftovers carry a version that never becomes active; `remove_stale` deletes them later
            logger.warning("Could not clean up partial chunks of {what}: {error}", what=what, error=cleanup_error)
            return False
        return True

    def _insert_group(self, group: list[tuple[str, list[dict[str, Any]]]], errors: dict[str, Exception]) -> None:
        """Insert several documents' rows in one request; if it fails, each document on its own."""
        if len(group) == 1:
            source, rows = group[0]
            try:
                self._insert(rows, source)
            except Exception as err:
                errors[source] = err
            return
        rows = [row for _, document_rows in group for row in document_rows]
        try:
            self.collection.store.insert(rows)
            return
        except Exception as err:
            if not self._clean_up(rows, f"{len(group)} documents"):
                # rows of documents written again now would stay beside their leftovers: all of them fail instead
                errors.update((source, err) for source, _ in group)
                return
        for source, document_rows in group:
            try:
                self._insert(document_rows, source)
            except Exception as err:
                errors[source] = err

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
        errors: dict[str, Exception] = {}
        if by_source:
            self.warm_up()
            full_text = self.full_text_fields
            group: list[tuple[str, list[dict[str, Any]]]] = []
            size = 0
            for source, chunks in by_source.items():
                try:
                    rows = [self._row(doc, full_text) for doc in chunks]
                except Exception as err:
                    errors[source] = err
                    continue
                if group and size + len(rows) > ROWS_PER_INSERT:
                    self._insert_group(group, errors)
                    group, size = [], 0
                group.append((source, rows))
                size += len(rows)
            if group:
                self._insert_group(group, errors)
        written, done, failures = 0, [], []
        for source, chunks in by_source.items():
            if source in errors:
                error = errors[source]
                logger.warning("Writing chunks of {source} failed: {error}", source=source, error=error)
                failures.append({"source": source, "reason": f"write failed: {error}"})
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
            for row in self.collection.store.scan_metadata()
            if row.get("doc_version") and active.get(row.get("source") or "") != row["doc_version"]
        ]
        self.collection.store.delete_ids(stale)
        return len(stale)
