"""`CollectionWrites`: every way a `KnowledgeCollection` is written (created, filled, cleaned, dropped, counted)."""

from __future__ import annotations

import json
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

import numpy as np
from haystack import Document, logging

from components.store.collection_base import CATEGORY_KEY, REBUILD_MARK, forget_descriptions, is_active
from components.store.collection_statistics import CollectionStatistics, compute_statistics
from components.store.json_metadata_document_store import category_column_value
from components.store.lexical import Bm25Corpus, lexical_text, tokenize
from components.store.milvus_chunk_store import CollectionDescription, MilvusChunkStore
from components.store.schema import CROSSLINGUAL_META_KEY, CollectionSchema
from components.store.vector_table import VectorTable, table_rows

if TYPE_CHECKING:
    from components.store.knowledge_index import IndexVersionCache

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


@dataclass
class WriteReport:
    """What `write_documents` did: chunks written, per document written, and the documents that failed."""

    written: int = 0
    documents_written: list[dict[str, Any]] = field(default_factory=list)
    failures: list[dict[str, str]] = field(default_factory=list)


class CollectionWrites:
    """
    The writes of a `KnowledgeCollection`, the class it is mixed into (which owns the connection, the schema and the
    cache these use).

    Chunks are written all or nothing per document: the chunks of one document are inserted together, and the
    documents of one call share inserts of up to `ROWS_PER_INSERT` rows. If an insert fails, whatever part of it landed
    is deleted again and its documents are inserted one by one, so only a document whose own insert fails is reported
    (when the clean-up fails as well, every document of that insert is). The previous version of a failed document
    (whose chunk ids differ, because ids include the file version) stays untouched. Removing superseded versions is a
    separate, later step (`remove_stale`), run once the new versions are recorded as active.
    """

    if TYPE_CHECKING:  # what the collection provides
        uri: str
        _schema: CollectionSchema
        _cache: IndexVersionCache

        @property
        def store(self) -> MilvusChunkStore: ...

        @property
        def schema(self) -> CollectionSchema: ...

        def warm_up(self) -> None: ...

        def to_dict(self) -> dict[str, Any]: ...

        @classmethod
        def from_dict(cls, data: dict[str, Any]) -> Self: ...

        def family(self) -> str: ...

        def description(self) -> CollectionDescription | None: ...

        def has_crosslingual(self) -> bool: ...

        def has_category_column(self) -> bool: ...

        def vector_fields(self, dense: bool = True, crosslingual: bool = True) -> list[str]: ...

    def create_if_missing(self) -> None:
        """
        Create the collection with the configured schema if it does not exist, then check it (`warm_up`).

        :raises CollectionMismatchError: If an existing collection differs from the configuration.
        """
        if self.store.ensure_collection():
            self._cache.clear()
        self.warm_up()

    def drop(self) -> None:
        """Drop the collection if it exists (everything cached about it is forgotten)."""
        self.store.drop()
        forget_descriptions(self.uri, [self._schema.collection_name])
        self._cache.clear()

    def rebuild_target(self) -> Self:
        """
        A new, empty collection of this one's family and configuration, for a rebuild to fill beside the active one
        (which lookups keep reading until the index file names the new one).

        :returns: The collection, not yet created (its writer's `warm_up` creates it).
        """
        taken = set(self.store.list_collections())
        number = time.time_ns() // 1_000_000
        while f"{self.family()}{REBUILD_MARK}{number}" in taken:
            number += 1
        data = self.to_dict()
        data["init_parameters"]["collection_name"] = f"{self.family()}{REBUILD_MARK}{number}"
        return type(self).from_dict(data)

    def drop_collections(self, names: Sequence[str]) -> list[str]:
        """
        Drop other collections of the same database (e.g. the one a rebuild replaced), those that exist.

        :param names: Their names.
        :returns: The names dropped.
        """
        existing = set(self.store.list_collections())
        dropped = [name for name in names if name in existing]
        for name in dropped:
            self.store.drop_named(name)
        if dropped:
            forget_descriptions(self.uri, dropped)
            self._cache.clear()
        return dropped

    def compute_statistics(
        self,
        embed_queries: Callable[[list[str]], np.ndarray],
        embedding_model: str,
        active: dict[str, str],
        folder: str | Path | None = None,
        texts: dict[str, list[tuple[int, str]]] | None = None,
    ) -> CollectionStatistics:
        """
        Count the statistics over the collection's active chunks (one pass over the rows, a batch at a time).

        :param embed_queries: The lookup embedder's query encoder.
        :param embedding_model: Its name.
        :param active: The active version per source; rows of other versions are left out, rows without a
            version (written by another tool) counted.
        :param folder: Also write, into this folder, the active chunks' vectors (every vector field) as a
            `VectorTable` file and their BM25 index (`Bm25ChunkIndex.save`), named in the statistics' `vector_table`
            and `bm25_index` (None: neither).
        :param texts: Also gather, per source, each active chunk's `(chunk_index, breadcrumb + "\n" + content)`
            into this mapping (what the L0 term statistics read: the document as it was written, headings included).
        :returns: The statistics.
        """
        s = self._schema
        fields = self.vector_fields(dense=True, crosslingual=True) if folder is not None else [s.vector_field]
        dimensions = {s.vector_field: s.dimension, s.crosslingual_field: s.crosslingual_dimension}
        parts: list[np.ndarray] = []
        corpus = Bm25Corpus()

        def batches() -> Iterator[list[tuple[str, list[float], list[str]]]]:
            for rows in self.store.iter_rows(with_content=True, vector_fields=fields):
                kept = [row for row in rows if is_active(row["metadata"], active)]
                if texts is not None:
                    for row in kept:
                        meta = row["metadata"]
                        text = f"{meta.get('breadcrumb') or ''}\n{row['content']}"
                        texts.setdefault(str(meta.get("source") or row["id"]), []).append(
                            (int(meta.get("chunk_index") or 0), text)
                        )
                batch = [(row["content"], row["vectors"][s.vector_field], tokenize(row["content"])) for row in kept]
                if folder is not None and kept:
                    parts.append(
                        table_rows([(row["id"], row["vectors"]) for row in kept], {f: dimensions[f] for f in fields})
                    )
                    for row, (_, _, terms) in zip(kept, batch, strict=True):
                        corpus.add(row["id"], terms, str(row["metadata"].get(CATEGORY_KEY, "")))
                yield batch

        statistics = compute_statistics(batches(), embed_queries, embedding_model)
        if folder is not None and parts:
            statistics.vector_table = VectorTable.write(folder, parts)
            statistics.bm25_index = corpus.index().save(folder)
        return statistics

    def flush(self) -> None:
        """Make what was written searchable at full speed (Milvus searches unflushed rows about ten times slower)."""
        self.store.flush()

    def _full_text_fields(self) -> tuple[str, str] | None:
        """`(lexical_field, sparse_field)` of the collection's BM25 function, or None without one."""
        description = self.description()
        return description.full_text if description is not None else None

    def _crosslingual_vector(self, doc: Document) -> list[float] | None:
        """The chunk's cross-lingual vector when the collection has the field (then it is required)."""
        if not self.has_crosslingual():
            return None
        vector = doc.meta.get(CROSSLINGUAL_META_KEY)
        expected = self.schema.crosslingual_dimension
        if not isinstance(vector, list) or len(vector) != expected:
            got = len(vector) if isinstance(vector, list) else None
            msg = (
                f"chunk {doc.id} has no cross-lingual vector of dimension {expected} in meta "
                f"{CROSSLINGUAL_META_KEY!r} (got {got}); the collection has the field "
                f"{self.schema.crosslingual_field!r}: run the indexing pipeline's crosslingual_embedder, "
                "or create the collection with crosslingual_field ''"
            )
            raise ValueError(msg)
        return vector

    def _row(self, doc: Document, full_text: tuple[str, str] | None) -> dict[str, Any]:
        s = self.schema
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
        if self.has_category_column():
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
            self.store.insert(rows)
        except Exception:
            self._clean_up(rows, what)
            raise

    def _clean_up(self, rows: list[dict[str, Any]], what: str) -> bool:
        """Delete rows that may have landed; whether that worked."""
        id_field = self.schema.id_field
        try:
            self.store.delete_ids(row[id_field] for row in rows)
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
            self.store.insert(rows)
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

    def write_documents(self, documents: Iterable[Document]) -> WriteReport:
        """
        Insert embedded chunks, all or nothing per document (the collection is created first if missing).

        :param documents: Embedded chunks with `source` and `doc_version` in their meta (`embedding` of the
            collection's dimension; the cross-lingual vector in meta `crosslingual_embedding` when the collection has
            the field).
        :returns: What was written: chunks, `{source, doc_version, chunks, meta}` per document written (`meta`: its
            first chunk's metadata, the document's fields among them), and `{source, reason}` per document that
            failed.
        """
        by_source: dict[str, list[Document]] = defaultdict(list)
        for doc in documents:
            by_source[str(doc.meta.get("source", doc.id))].append(doc)
        errors: dict[str, Exception] = {}
        if by_source:
            self.create_if_missing()
            full_text = self._full_text_fields()
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
        report = WriteReport()
        for source, chunks in by_source.items():
            if source in errors:
                error = errors[source]
                logger.warning("Writing chunks of {source} failed: {error}", source=source, error=error)
                report.failures.append({"source": source, "reason": f"write failed: {error}"})
                continue
            report.written += len(chunks)
            first = {k: v for k, v in chunks[0].meta.items() if k != CROSSLINGUAL_META_KEY}
            report.documents_written.append(
                {"source": source, "doc_version": first.get("doc_version"), "chunks": len(chunks), "meta": first}
            )
        return report

    def remove_stale(self, active: Mapping[str, str]) -> int:
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
