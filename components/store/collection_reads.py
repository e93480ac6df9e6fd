"""`CollectionReads`: every way a `KnowledgeCollection` is read (dense search, BM25, chunks and vectors by id)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
from haystack import Document, logging
from haystack.utils import Secret
from haystack.utils.filters import document_matches_filter
from milvus_haystack import MilvusEmbeddingRetriever
from pymilvus import MilvusException

from components.core.fusion import BEST_KEY, BM25_KEY, IDEAL_KEY
from components.core.scores import normalized_similarity, raw_from_normalized
from components.store.collection_base import (
    CATEGORY_KEY,
    COLLECTION_NOT_FOUND,
    DENSE_PATHS,
    LEXICAL_SOURCES,
    WARM_UP_QUERY,
    forget_descriptions,
    is_active,
    scope_of,
)
from components.store.json_metadata_document_store import JsonMetadataMilvusDocumentStore, json_filter_expression
from components.store.lexical import Bm25ChunkIndex, Bm25Corpus, TermStatistics, lexical_text, tokenize
from components.store.milvus_chunk_store import NOT_LOADED, CollectionDescription, MilvusChunkStore
from components.store.schema import CROSSLINGUAL_META_KEY, SEMANTICS, CollectionSchema, client_options
from components.store.vector_table import VectorTable

if TYPE_CHECKING:
    from components.store.collection_statistics import CollectionStatistics
    from components.store.knowledge_index import IndexVersionCache

logger = logging.getLogger(__name__)

T = TypeVar("T")


class CollectionReads:
    """
    The reads of a `KnowledgeCollection`, the class it is mixed into (which owns the connection, the schema, the
    versions and the cache these use).

    Dense search runs on the `haystack` path (milvus-haystack's `MilvusEmbeddingRetriever` over a store that reads
    the JSON metadata column) or the `sdk` path (pymilvus); both return Documents whose `score` is the normalized
    similarity in [0, 1] and whose meta carries the raw score, what it means and the path. BM25 runs inside Milvus on
    the collection's full-text field, or in-process: on the BM25 index the index run wrote beside the index file, or on
    one built from the collection's chunks where Milvus has no full-text field.
    """

    if TYPE_CHECKING:  # what the collection provides
        uri: str
        token: Secret | None
        consistency_level: str
        _schema: CollectionSchema
        _cache: IndexVersionCache

        @property
        def store(self) -> MilvusChunkStore: ...

        def _require(self) -> CollectionDescription: ...

        def _filter_schema(self) -> CollectionSchema: ...

        def full_text_field(self) -> str: ...

        def vector_fields(self, dense: bool = True, crosslingual: bool = True) -> list[str]: ...

        def vector_table(self) -> VectorTable | None: ...

        def bm25_index(self) -> Bm25ChunkIndex | None: ...

        def statistics(self) -> CollectionStatistics | None: ...

        def active_versions(self) -> Mapping[str, str]: ...

        def exists(self) -> bool: ...

    def _haystack_retriever(self) -> MilvusEmbeddingRetriever:
        description = self._require()
        s = self._schema
        connection: dict[str, Any] = {"uri": self.store.endpoint(), **client_options(self.uri)}
        if self.token is not None and self.token.resolve_value():
            connection["token"] = self.token
        store = JsonMetadataMilvusDocumentStore(
            metadata_field=s.metadata_field,
            category_field=self._filter_schema().category_field,
            vector_index=description.vector_index,
            connection_args=connection,
            collection_name=s.collection_name,
            primary_field=s.id_field,
            text_field=s.content_field,
            vector_field=s.vector_field,
            index_params={"metric_type": s.metric_type, "index_type": s.index_type, "params": {}},
            consistency_level=self.consistency_level,
        )
        # no init filters: the retriever's `filters or self.filters` must never re-apply an old filter
        return MilvusEmbeddingRetriever(document_store=store, filters=None)

    def _cached_haystack_retriever(self) -> MilvusEmbeddingRetriever:
        return self._cache.get("haystack_retriever", self._haystack_retriever)

    def connect(self, path: str) -> None:
        """
        Open a dense search path now rather than at the first search.

        :param path: `haystack` or `sdk`.
        :raises LookupError: If the collection does not exist.
        """
        if path == "haystack":
            self._cached_haystack_retriever()
        else:
            self._require()
            self.store.load()

    def dense_search(
        self,
        vector: list[float],
        top_k: int,
        filters: dict[str, Any] | None = None,
        path: str = "sdk",
    ) -> list[Document]:
        """
        Vector search.

        :param vector: The query vector.
        :param top_k: Number of hits.
        :param filters: Haystack filters on `meta.<key>` (values are always quoted literals, never pasted text).
        :param path: `haystack` (milvus-haystack) or `sdk` (pymilvus).
        :returns: Documents, best first: `score` is the normalized similarity, meta has `raw_score`,
            `score_semantics` and `retrieval_path`.
        :raises ValueError: For an unknown path.
        :raises LookupError: If the collection does not exist.
        """
        if path not in DENSE_PATHS:
            msg = f"path={path!r} is not a dense search path; use one of {list(DENSE_PATHS)}"
            raise ValueError(msg)
        search = self._search_haystack if path == "haystack" else self._search_sdk
        return self._again_if_replaced(lambda: search(vector, top_k, filters))

    def _again_if_replaced(self, call: Callable[[], T]) -> T:
        """
        Run a search; when its collection is gone because a rebuild replaced it between the index file's switch and
        this search, describe the collection the index now names and run it once more.
        """
        try:
            return call()
        except MilvusException as err:
            if err.code != COLLECTION_NOT_FOUND:
                raise
            forget_descriptions(self.uri, [self._schema.collection_name])
            self._cache.clear()
            return call()

    def _search_haystack(self, vector: list[float], top_k: int, filters: dict[str, Any] | None) -> list[Document]:
        self.store.endpoint()  # a Milvus Lite host that went away is replaced (the retriever dials the same socket)
        retriever = self._cached_haystack_retriever()
        metric = self._schema.metric_type
        try:
            found = retriever.run(query_embedding=vector, filters=filters, top_k=top_k)["documents"]
        except MilvusException as err:
            if err.code != NOT_LOADED:
                raise
            self.store.unload()  # a restarted server forgot that it was loaded
            self.store.load()
            found = retriever.run(query_embedding=vector, filters=filters, top_k=top_k)["documents"]
        semantics = SEMANTICS[metric]
        out = []
        for doc in found:  # the retriever's Documents are this search's own: completed in place, not copied
            similarity = float(doc.score or 0.0)
            doc.meta.update(
                raw_score=raw_from_normalized(similarity, metric), score_semantics=semantics, retrieval_path="haystack"
            )
            clipped = min(1.0, max(0.0, similarity))
            out.append(doc if doc.score == clipped else replace(doc, score=clipped))
        return out

    def _search_sdk(self, vector: list[float], top_k: int, filters: dict[str, Any] | None) -> list[Document]:
        self._require()
        metric = self._schema.metric_type
        expr = json_filter_expression(filters, self._filter_schema())
        hits = self.store.search(vector, top_k=top_k, expr=expr)
        return [
            Document(
                id=hit["id"],
                content=hit["content"],
                score=normalized_similarity(hit["distance"], metric),
                meta={
                    **hit["metadata"],
                    "raw_score": hit["distance"],
                    "score_semantics": SEMANTICS[metric],
                    "retrieval_path": "sdk",
                },
            )
            for hit in hits
        ]

    def fetch_scored(self, ids: list[str], vector: list[float]) -> list[Document]:
        """
        Fetch chunks by id and score them against a query vector, as Milvus would (for chunks found another way).

        :param ids: Chunk ids.
        :param vector: The query vector.
        :returns: Documents with the normalized similarity as `score` and `raw_score`, `score_semantics` in meta;
            ids that do not exist are left out.
        """
        table = self.vector_table()
        dense_field = self._schema.vector_field
        table = table if table is not None and dense_field in table.fields else None
        rows = self.store.get_rows(ids, dense=table is None)
        if not rows:
            return []
        metric = self._schema.metric_type
        query = np.asarray(vector, dtype=np.float32)
        stored = np.asarray(
            [r["vector"] for r in rows] if table is None else self._dense_vectors([r["id"] for r in rows], table),
            dtype=np.float32,
        )
        raw = ((stored - query) ** 2).sum(axis=1) if metric == "L2" else stored @ query
        return [
            Document(
                id=row["id"],
                content=row["content"],
                score=normalized_similarity(float(value), metric),
                meta={
                    **row["metadata"],
                    "raw_score": float(value),
                    "score_semantics": SEMANTICS[metric],
                },
            )
            for row, value in zip(rows, raw, strict=True)
        ]

    def _dense_vectors(self, ids: list[str], table: VectorTable) -> list[Any]:
        """
        The dense vectors of `ids` from the index run's table, those it lacks from Milvus.

        The table holds every chunk of its index version, and a chunk id names its version: a chunk it lacks was
        written after the table (by a re-index under way).
        """
        found: dict[str, Any] = table.vectors(ids, self._schema.vector_field)
        missing = [i for i in ids if i not in found]
        if missing:
            found.update(self.store.get_vectors(missing)[self._schema.vector_field])
        return [found[i] for i in ids]

    def with_lexical(
        self,
        hits: list[Document],
        pairs: list[tuple[str, float]],
        query: str,
        vector: list[float],
        source: str = "auto",
    ) -> list[Document]:
        """
        Join a BM25 search's hits to a dense search's: every chunk's BM25 facts, and the chunks only BM25 found.

        Each chunk gets, in meta, its raw BM25 score `bm25` (0 when BM25 did not find it), the largest score the
        query's terms can reach in this collection `lexical_ideal` (from its term statistics), the search's best score
        `lexical_best`, and `lexical_coverage` = bm25 / lexical_ideal (at most 1: how much of the query it matches).
        The chunks only BM25 found are fetched and scored against the query vector (`fetch_scored`), with
        `retrieval_path` `bm25` and their `similarity`.

        :param hits: The dense hits (their meta is completed in place: they are the search's own).
        :param pairs: `lexical_search`'s `(chunk_id, bm25)` pairs, best first.
        :param query: The query text.
        :param vector: The query vector.
        :param source: The `lexical_source` the pairs came from (its term statistics are used).
        :returns: The dense hits, then the chunks only BM25 found; `hits` itself when BM25 found nothing.
        """
        if not pairs:
            return hits
        ideal = self.term_statistics(source).ideal_score(tokenize(query))
        best = pairs[0][1]
        bm25 = dict(pairs)
        dense = {d.id for d in hits}
        lexical_only = self.fetch_scored([cid for cid in bm25 if cid not in dense], vector)
        for doc in lexical_only:
            doc.meta.update(retrieval_path="bm25", similarity=doc.score)
        joined = hits + lexical_only
        for doc in joined:
            score = bm25.get(doc.id, 0.0)
            coverage = round(min(1.0, score / ideal), 4) if ideal > 0 else 0.0
            doc.meta.update({BM25_KEY: score, IDEAL_KEY: ideal, BEST_KEY: best, "lexical_coverage": coverage})
        return joined

    def candidate_vectors(self, ids: list[str], fields: Sequence[str]) -> dict[str, dict[str, Any]]:
        """
        Stored vectors of some chunks: from the index run's vector table, from the collection for any it lacks.

        :param ids: Chunk ids.
        :param fields: Vector fields of the collection (`vector_fields()`).
        :returns: Per field, the vector of every id found (a float32 array from the table, a list from the store).
        """
        table = self.vector_table()
        vectors: dict[str, dict[str, Any]] = {}
        for field in fields:
            found: dict[str, Any] = (
                dict(table.vectors(ids, field)) if table is not None and field in table.fields else {}
            )
            missing = [i for i in ids if i not in found]  # written after the table (an index run under way)
            if missing:
                found.update(self.store.get_vectors(missing, [field])[field])
            vectors[field] = {i: found[i] for i in ids if i in found}  # in the order asked, wherever each came from
        return vectors

    def crosslingual_vectors(self, ids: list[str]) -> dict[str, list[float]]:
        """
        Fetch the cross-lingual vectors of some chunks.

        :param ids: Chunk ids.
        :returns: Vector per id found; empty when the collection has no cross-lingual field.
        """
        fields = self.vector_fields(dense=False, crosslingual=True)
        return self.store.get_vectors(ids, fields)[fields[0]] if fields and ids else {}

    def chunks_of(self, versions: Mapping[str, str]) -> list[Document]:
        """
        The stored chunks of some document versions, with their vectors, as the writer takes them (to carry them
        into another collection).

        :param versions: Source to version.
        :returns: The chunks: `embedding` the dense vector, the cross-lingual one (where stored) in meta
            `CROSSLINGUAL_META_KEY`.
        """
        ids = [
            row["id"]
            for row in self.scan(keys=("source", "doc_version"))
            if versions.get(row["source"] or "") == row["doc_version"]
        ]
        s = self._schema
        fields = self.vector_fields(dense=False, crosslingual=True)
        chunks = []
        for row in self.store.get_rows(ids, vector_fields=fields):
            meta = dict(row["metadata"])
            if s.crosslingual_field in row["vectors"]:
                meta[CROSSLINGUAL_META_KEY] = row["vectors"][s.crosslingual_field]
            chunks.append(Document(id=row["id"], content=row["content"], embedding=row["vector"], meta=meta))
        return chunks

    def fetch(self, ids: list[str]) -> list[Document]:
        """
        Fetch chunks by id, without vectors.

        :param ids: Chunk ids.
        :returns: Documents in the order of `ids`; ids that do not exist are left out.
        """
        rows = {r["id"]: r for r in self.store.get_rows(ids, dense=False)}
        return [Document(id=i, content=rows[i]["content"], meta=rows[i]["metadata"]) for i in ids if i in rows]

    def _built_index(self) -> tuple[Bm25ChunkIndex, dict[str, dict[str, Any]], TermStatistics]:
        """In-process BM25 over every row of the collection, with each row's metadata and the term statistics."""
        rows = self.store.scan_metadata(keys=None, with_content=True)
        corpus = Bm25Corpus()
        for row in rows:
            corpus.add(row["id"], tokenize(row["content"]), str(row["metadata"].get(CATEGORY_KEY, "")))
        return corpus.index(), {r["id"]: r["metadata"] for r in rows}, corpus.statistics()

    def _local_index(self) -> Bm25ChunkIndex:
        """The index run's BM25 index file, else one built from the collection (once per index version)."""
        return self.bm25_index() or self._cache.get("local_bm25", self._built_index)[0]

    def _lexical_path(self, source: str) -> str:
        if source not in LEXICAL_SOURCES:
            msg = f"lexical_source={source!r} is not supported; use one of {list(LEXICAL_SOURCES)}"
            raise ValueError(msg)
        if source == "local" or (source == "auto" and self.bm25_index() is not None):
            return "local"
        if self.full_text_field():
            return "milvus"
        if source == "milvus":
            msg = (
                f"collection {self._schema.collection_name!r} has no BM25 full-text field; re-index it "
                "(`lookup-knowledge index --rebuild`) on Milvus 2.5+ or Milvus Lite, or set lexical_source to auto "
                "or local"
            )
            raise LookupError(msg)
        return "local"

    def lexical_search(
        self, query: str, top_k: int, filters: dict[str, Any] | None = None, source: str = "auto"
    ) -> tuple[list[tuple[str, float]], str]:
        """
        BM25 search, inside Milvus or in-process.

        :param query: The query text.
        :param top_k: Most hits.
        :param filters: Haystack filters on `meta.<key>`.
        :param source: `milvus` (the collection's BM25 full-text field), `local` (in-process: the index run's BM25
            index file, else an index built from the collection's chunks once per index version) or `auto` (local
            with the index file, else milvus when the collection has the field, else local).
        :returns: `(chunk_id, bm25_score)` pairs, best first, and the path that ran (`milvus` or `local`).
        :raises LookupError: If `source` is `milvus` and the collection has no full-text field, or the collection
            does not exist.
        """
        path = self._lexical_path(source)
        if path == "milvus":
            terms = lexical_text(query)
            if not terms:
                return [], path
            return self._again_if_replaced(
                lambda: self.store.full_text_search(
                    terms,
                    self.full_text_field(),
                    top_k=top_k,
                    expr=json_filter_expression(filters, self._filter_schema()),
                )
            ), path
        scope = scope_of(filters)
        if scope is not None:
            index = self._local_index()
            return index.search(query, top_k, category=scope.category, ids=scope.ids, excluded=scope.excluded), path
        # any other filter: the built index, which has every chunk's metadata to test it on
        index, metadata, _ = self._cache.get("local_bm25", self._built_index)
        pairs = index.search(query, top_k=top_k * 5)
        pairs = [
            (cid, s) for cid, s in pairs if document_matches_filter(filters or {}, Document(id=cid, meta=metadata[cid]))
        ]
        return pairs[:top_k], path

    def prepare_lexical(self, source: str = "auto", statistics: bool = False) -> str:
        """
        Read now what the first lexical search would otherwise wait for: the in-process index, or term statistics,
        and Milvus' own BM25 index (Milvus Lite builds each segment's at its first search: seconds at 100k chunks).
        Once per index version: `Pipeline.run` warms every component up before every run.

        :param source: The lexical source, as for `lexical_search`.
        :param statistics: Also count the term statistics (needed to normalize BM25 by the query's ideal score).
        :returns: The path lexical searches take (`milvus` or `local`).
        """
        path = self._lexical_path(source)
        if path == "local":
            self._local_index()
        if statistics:
            self.term_statistics(source)
        if path == "milvus":
            self._cache.get("milvus_bm25_warmed", lambda: self.lexical_search(WARM_UP_QUERY, 1, source="milvus"))
        return path

    def term_statistics(self, source: str = "auto") -> TermStatistics:
        """
        BM25 term statistics of the collection's chunks: as the index run counted them, else (an index written
        before they were stored, or by another tool) counted here once per index version; those of the built index
        when lexical searches use it.

        :param source: The lexical source in use; with the in-process index the statistics come from it.
        :returns: The statistics.
        """
        if self._lexical_path(source) == "local" and self.bm25_index() is None:
            return self._cache.get("local_bm25", self._built_index)[2]
        return self._cache.get("term_statistics", self._count_terms)

    def _count_terms(self) -> TermStatistics:
        statistics = self.statistics()
        if statistics is not None and statistics.term_counts is not None:  # counted by the index run
            return statistics.term_counts.term_statistics()
        rows = self.store.scan_metadata(keys=(), with_content=True)
        return TermStatistics(tokenize(r["content"]) for r in rows)

    def scan(self, keys: tuple[str, ...] = ("source", "doc_version"), with_content: bool = False) -> list[dict]:
        """
        Every row's id and some metadata keys, never the vectors.

        :param keys: Metadata keys to return.
        :param with_content: Also return the chunk text as `content`.
        :returns: `{id, <keys>...}` per row.
        """
        self._require()
        return self.store.scan_metadata(keys=keys, with_content=with_content)

    def count(self) -> int:
        """
        :returns: The number of rows (0 when the collection does not exist).
        """
        return self.store.count() if self.exists() else 0

    def drop_superseded(
        self, docs: list[Document], searched_under: Mapping[str, str] | None = None
    ) -> tuple[list[Document], int]:
        """
        Keep, per document, the chunks of one version: the active one, else the one active when the search began.

        A re-index by another process can switch versions while a search runs: a search that began before the new
        chunks were written finds only the old ones, which the index no longer names. With `searched_under` (the
        `active_versions` read before the search) such a document keeps its old version instead of vanishing from
        the result; a document whose new version was found keeps only that one. Rows without a version (written by
        another tool) are kept.

        :param docs: Retrieved chunks with `source` and `doc_version` in their meta.
        :param searched_under: The active versions when the search began (None: only the current ones count).
        :returns: The kept chunks and how many were dropped.
        """
        active = self.active_versions()
        if not active:
            return docs, 0
        searched = searched_under or {}
        found = {(d.meta.get("source", ""), d.meta.get("doc_version")) for d in docs}
        # only the found documents' sources: the index may name 10k documents, a lookup finds a few dozen chunks
        kept_version = {}
        for source, _ in found:
            current = active.get(source)
            if current is not None and ((source, current) in found or source not in searched):
                kept_version[source] = current
            elif source in searched:
                kept_version[source] = searched[source]
        kept = [d for d in docs if is_active(d.meta, kept_version)]
        return kept, len(docs) - len(kept)
