"""Incremental, failure-safe indexing of a knowledge folder.

A file is re-indexed only when its bytes changed. New chunks are written next to the old ones (chunk ids
include the file version), then the knowledge index file records the new version as active, and only then
are superseded chunks deleted. Whatever fails midway, the previous version stays searchable, and the
retriever returns only chunks of the active version, so old and new chunks of a document never mix.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout
from haystack import Document, Pipeline, logging
from tqdm import tqdm

from components.converters.markdown_loader import (
    KnowledgeFileError,
    MarkdownKnowledgeLoader,
    discover_knowledge_files,
    file_version,
    parse_knowledge_file,
)
from components.core.atomic_file import write_atomically
from components.core.embedding_backends import get_backend, model_dimension
from components.embedders.offline_document_embedder import OfflineDocumentEmbedder
from components.store.collection_statistics import CollectionStatistics
from components.store.knowledge_index import IndexedDocument, KnowledgeIndex, term_category_counts
from components.store.knowledge_store import KnowledgeStore
from components.store.lexical import Bm25ChunkIndex
from components.store.schema import CROSSLINGUAL_META_KEY
from components.store.vector_table import VectorTable
from components.writers.chunk_writer import ChunkWriter
from pipelines.loading import load_pipeline_file, node_of_type
from pipelines.settings import DEFAULT_INDEXING_PIPELINE, Deployment, lite_file_in

logger = logging.getLogger(__name__)

#: the file in the data folder that an index run holds while it writes
INDEX_LOCK_FILE = "index.lock"
#: how long the collection a rebuild replaced stays after the switch, for lookups that began before it
RETIRE_AFTER_S = 3.0
#: how often a run waiting for another run's lock says that it still waits
LOCK_NOTICE_S = 60.0
#: the note a rebuild leaves in the data folder while it runs: the collection it fills and the one it replaces
REBUILD_FILE = "rebuild.json"


@dataclass
class IndexSummary:
    """What one indexing run did."""

    files: int = 0
    indexed: int = 0
    chunks: int = 0
    skipped: int = 0
    deleted: int = 0
    stale_chunks_removed: int = 0
    characters: int = 0
    seconds: float = 0.0
    failures: list[dict[str, str]] = field(default_factory=list)
    cleanup_error: str | None = None
    bm25: str = ""  # BM25 inside Milvus: `milvus` (the collection has the full-text field) or `in-process` (none)
    bm25_index: str = ""  # the BM25 index file lookups search in-process (D55), in the index file's folder
    statistics: str = ""  # the collection's languages and noise ceiling, in one line
    crosslingual: bool = False  # whether the collection holds cross-lingual vectors
    duplicate_ids: dict[str, list[str]] = field(default_factory=dict)  # a doc id used by several files: their sources

    @property
    def failed(self) -> int:
        """Number of files that could not be indexed."""
        return len(self.failures)

    @property
    def chars_per_second(self) -> float:
        """Embedded characters per second of the whole run."""
        return self.characters / self.seconds if self.seconds > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        """Return the summary as plain JSON-ready data."""
        return {
            "files": self.files,
            "indexed": self.indexed,
            "chunks": self.chunks,
            "skipped": self.skipped,
            "failed": self.failed,
            "deleted": self.deleted,
            "stale_chunks_removed": self.stale_chunks_removed,
            "characters": self.characters,
            "seconds": round(self.seconds, 2),
            "chars_per_second": round(self.chars_per_second, 1),
            "failures": self.failures,
            "duplicate_ids": self.duplicate_ids,
            "cleanup_error": self.cleanup_error,
            "crosslingual": self.crosslingual,
            "bm25": self.bm25,
            "bm25_index": self.bm25_index,
            "statistics": self.statistics,
        }


def indexed_document(doc: Document, chunks: int) -> IndexedDocument:
    """
    The knowledge index entry of a document.

    :param doc: The document, or one of its chunks (they carry the document's fields in their meta).
    :param chunks: Number of its chunks written to the collection.
    :returns: The entry.
    """
    meta = doc.meta
    return IndexedDocument(
        doc_id=meta["doc_id"],
        source=meta["source"],
        title=meta.get("title", ""),
        category=meta.get("category", ""),
        keywords=meta.get("keywords", []),
        entities=meta.get("entities", []),
        doc_version=meta["doc_version"],
        chunks=chunks,
    )


def _bodies(root: Path, documents: dict[str, IndexedDocument]) -> dict[str, str]:
    """Markdown bodies of the active documents whose files still parse (for L0 term statistics)."""
    bodies = {}
    for source in documents:
        try:
            bodies[source] = parse_knowledge_file((root / source).read_bytes(), source).content or ""
        except (OSError, KnowledgeFileError):
            continue
    return bodies


def _recorded_uri(uri: str, folder: Path) -> str:
    """
    The store's URI as the index file records it.

    A Milvus Lite file inside the data folder is recorded relative to the folder, so that a data folder copied or
    moved elsewhere (a backup restored, a volume mounted at another path) is still the same store and its unchanged
    files are not embedded again; anything else is recorded as given.

    :param uri: The collection's URI.
    :param folder: The data folder (the index file's folder).
    :returns: The URI to record.
    """
    return lite_file_in(uri, folder) or uri


@dataclass(frozen=True)
class _Rebuild:
    """What a rebuild replaces: the active index (when of this store and model), its collection, its name."""

    recorded: KnowledgeIndex
    collection: KnowledgeStore
    replaced: str


def _damage(index_path: Path) -> str | None:
    """Why the knowledge index file cannot be read, or None when it can (or does not exist)."""
    try:
        KnowledgeIndex.load(index_path)
    except ValueError as err:
        return str(err)
    return None


def _kept_as_they_were(previous: Mapping[str, IndexedDocument], unusable: list[dict[str, str]]) -> set[str]:
    """The sources that keep their previous version: files that could not be read, and those in unreadable folders."""
    failed = {f["source"] for f in unusable}
    folders = tuple(source for source in failed if source.endswith("/") or source == "")
    return failed | {source for source in previous if folders and source.startswith(folders)}


@contextlib.contextmanager
def index_run_lock(data_dir: Path) -> Iterator[None]:
    """
    Hold the data folder's indexing lock: one index run at a time (two would write one collection at once).

    :param data_dir: The deployment's data folder.
    """
    data_dir.mkdir(parents=True, exist_ok=True)
    lock = FileLock(data_dir / INDEX_LOCK_FILE)
    waited = 0.0
    while True:
        try:
            lock.acquire(timeout=0 if not waited else LOCK_NOTICE_S)
            break
        except Timeout:
            # said again now and then: a run that hangs holds every later one, and the user should see that
            logger.warning(
                "Another index run is writing {folder}; waiting for it to finish ({seconds:.0f} s so far)",
                folder=data_dir,
                seconds=waited,
            )
            waited += LOCK_NOTICE_S
    try:
        yield
    finally:
        lock.release()


def _duplicate_ids(documents: dict[str, IndexedDocument]) -> dict[str, list[str]]:
    by_id: dict[str, list[str]] = {}
    for source, document in sorted(documents.items()):
        by_id.setdefault(document.doc_id, []).append(source)
    duplicates = {doc_id: sources for doc_id, sources in by_id.items() if len(sources) > 1}
    for doc_id, sources in duplicates.items():
        logger.warning("Document id {doc_id} is used by {sources}", doc_id=doc_id, sources=sources)
    return duplicates


class KnowledgeIndexer:
    """
    Runs the indexing pipeline (`pipelines/indexing.yaml`) incrementally over a knowledge folder.

    ### Usage example

    ```python
    indexer = KnowledgeIndexer(Deployment.resolve("data"))
    print(indexer.index("knowledge").as_dict())
    ```
    """

    def __init__(
        self,
        deployment: Deployment,
        pipeline_path: str | Path = DEFAULT_INDEXING_PIPELINE,
        component_params: dict[str, dict[str, Any]] | None = None,
        files_per_batch: int = 8,
        retire_after_s: float = RETIRE_AFTER_S,
    ) -> None:
        """
        Load the indexing pipeline for a deployment.

        :param deployment: Where the data goes.
        :param pipeline_path: The indexing pipeline YAML.
        :param component_params: Per-component init parameter overrides.
        :param files_per_batch: Files run through the pipeline together (the unit of progress; a batch that fails is
            run again file by file, so that one bad file fails alone).
        :param retire_after_s: After a rebuild switched to its new collection, how long the old one stays for
            lookups that began before the switch, before it is dropped.
        :raises ValueError: If the pipeline lacks a loader, embedder or writer, or the embedder's dimension does not
            match the collection's.
        """
        self.deployment = deployment
        self.pipeline: Pipeline = load_pipeline_file(pipeline_path, deployment, component_params)
        self._loader, _ = node_of_type(self.pipeline, MarkdownKnowledgeLoader)
        self._writer, self.writer = node_of_type(self.pipeline, ChunkWriter)
        self._embedder, self.embedder = self._embedders()
        self.crosslingual_embedder = next(
            (
                c
                for _, c in self.pipeline.walk()
                if isinstance(c, OfflineDocumentEmbedder) and c.embedding_meta_key == CROSSLINGUAL_META_KEY
            ),
            None,
        )
        self.embedding_model = self.embedder.model
        self.files_per_batch = files_per_batch
        self.retire_after_s = retire_after_s

    @property
    def collection(self) -> KnowledgeStore:
        """The collection the run writes: the writer's (during a rebuild, the new one it fills)."""
        return self.writer.collection

    def _embedders(self) -> tuple[str, OfflineDocumentEmbedder]:
        """Find the main embedder (and check the cross-lingual one against the collection's schema)."""
        embedders = [(n, c) for n, c in self.pipeline.walk() if isinstance(c, OfflineDocumentEmbedder)]
        main = [(n, c) for n, c in embedders if c.embedding_meta_key is None]
        crosslingual = [c for _, c in embedders if c.embedding_meta_key == CROSSLINGUAL_META_KEY]
        if len(main) != 1:
            msg = f"the indexing pipeline needs exactly one embedder that sets Document.embedding, it has {len(main)}"
            raise ValueError(msg)
        schema = self.collection.schema
        for option, model, dimension in (
            ("dimension", main[0][1].model, schema.dimension),
            *(("crosslingual_dimension", c.model, schema.crosslingual_dimension) for c in crosslingual),
        ):
            if model_dimension(model) != dimension:
                msg = (
                    f"the writer's collection has {option} {dimension}, the embedder's model {model!r} makes "
                    f"{model_dimension(model)}; set the collection's {option} to the model's"
                )
                raise ValueError(msg)
        if schema.crosslingual_field and not crosslingual:
            msg = (
                f"the collection's crosslingual_field {schema.crosslingual_field!r} needs an embedder with "
                f"embedding_meta_key {CROSSLINGUAL_META_KEY!r} in the indexing pipeline (crosslingual_embedder), "
                "or set crosslingual_field to '' for a collection without cross-lingual vectors"
            )
            raise ValueError(msg)
        return main[0]

    def _recorded(self) -> KnowledgeIndex:
        """The index file when it describes this run's store, collection family and model; else an empty index."""
        try:
            previous = KnowledgeIndex.load(self.deployment.index_path)
        except ValueError:  # damaged: `index` rebuilds
            return KnowledgeIndex()
        uri = self.collection.uri
        same_store = (
            previous.milvus_uri in (uri, _recorded_uri(uri, self.deployment.index_path.parent))
            and previous.configured_name() == self.collection.family()
            and previous.embedding_model == self.embedding_model
        )
        return previous if same_store else KnowledgeIndex()

    def _run_batch(self, root: Path, batch: list[Path], summary: IndexSummary) -> list[IndexedDocument]:
        sources = [str(p) for p in batch]
        try:
            out = self.pipeline.run(
                {self._loader: {"sources": sources, "root": str(root)}},
                include_outputs_from={self._loader, self._embedder},
            )
        except Exception as err:  # e.g. the embedder failed: nothing of this batch was written
            reason = str(getattr(err, "__cause__", None) or err)
            if len(batch) > 1:  # find the file that failed it: the others are indexed
                logger.warning("Indexing batch failed, running its files one by one: {reason}", reason=reason)
                return [entry for path in batch for entry in self._run_batch(root, [path], summary)]
            logger.warning("Indexing {source} failed: {reason}", source=batch[0].name, reason=reason)
            summary.failures.extend(
                {"source": p.relative_to(root).as_posix(), "reason": f"indexing failed: {reason}"} for p in batch
            )
            return []
        loaded, stored = out[self._loader], out[self._writer]
        summary.failures.extend(loaded["failures"])
        summary.failures.extend(stored["failures"])
        summary.characters += out.get(self._embedder, {}).get("meta", {}).get("characters", 0)
        written = {d["source"]: d["chunks"] for d in stored["documents_written"]}
        summary.chunks += sum(written.values())
        return [
            indexed_document(doc, written[doc.meta["source"]])
            for doc in loaded["documents"]
            if doc.meta["source"] in written
        ]

    def index(self, knowledge_dir: str | Path, rebuild: bool = False, progress: bool = True) -> IndexSummary:
        """
        Index the markdown files of a folder: changed and new files are (re-)embedded, deleted ones removed.

        One run at a time per data folder: a second run waits for the first (`index.lock`), then finds its work done.

        :param knowledge_dir: The knowledge root.
        :param rebuild: Index everything again into a new collection, written beside the active one (which lookups
            keep reading) and switched to when complete; the old one is then dropped.
        :param progress: Show a progress bar.
        :returns: The summary.
        :raises FileNotFoundError: If the folder does not exist.
        """
        started = time.perf_counter()
        root = Path(knowledge_dir).resolve()
        if not root.is_dir():
            msg = f"knowledge folder {root} does not exist"
            raise FileNotFoundError(msg)
        with index_run_lock(self.deployment.data_dir):
            damaged = _damage(self.deployment.index_path)
            if damaged:
                # which versions are active is unknown: everything is written again, into a new collection
                kept = self.deployment.index_path.with_name(
                    f"{self.deployment.index_path.name}.damaged-{time.time_ns()}"
                )
                logger.warning("{reason}; rebuilding (the damaged file is kept as {kept})", reason=damaged, kept=kept)
                os.replace(self.deployment.index_path, kept)
                rebuild = True
            self._drop_leftovers()
            if not rebuild:
                return self._index(root, started, progress)
            return self._rebuild(root, started, progress)

    def _rebuild(self, root: Path, started: float, progress: bool) -> IndexSummary:
        """Index everything into a new collection, switch to it, drop the old one; the writer's collection after."""
        configured = self.writer.collection
        target = configured.rebuild_target()
        replaced = self._active_collection()
        # named before it exists: a run killed from here on leaves what the next run drops (`_drop_leftovers`)
        self._note_rebuild(target.schema.collection_name, replaced)
        self.writer.collection = target
        try:
            summary = self._index(root, started, progress, rebuild=_Rebuild(self._recorded(), configured, replaced))
        finally:
            try:
                target.close()
            finally:
                self.writer.collection = configured
                configured.close()  # it described the replaced collection
        try:
            configured.warm_up()  # now the new one, which the index names
        except Exception as err:  # the switch is done: the next use connects again
            summary.cleanup_error = summary.cleanup_error or str(err)
        return summary

    def _active_collection(self) -> str:
        """The collection the index file names, when it is in this run's store ("" otherwise)."""
        index = KnowledgeIndex.load(self.deployment.index_path)
        uri = self.collection.uri
        same_store = index.milvus_uri in (uri, _recorded_uri(uri, self.deployment.index_path.parent))
        return index.collection_name if same_store else ""

    def _note_rebuild(self, collection: str, replacing: str) -> None:
        note = json.dumps({"milvus_uri": self.collection.uri, "collection": collection, "replacing": replacing})
        write_atomically(self.deployment.data_dir / REBUILD_FILE, lambda out: out.write(note.encode("utf-8")))

    def _drop_leftovers(self) -> None:
        """
        Drop what a rebuild stopped midway left (the collection it was filling, or the one it replaced when it was
        stopped after its switch): the collections its note names, but the one the index file names.
        """
        path = self.deployment.data_dir / REBUILD_FILE
        try:
            note = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return
        if isinstance(note, dict) and note.get("milvus_uri") == self.collection.uri:
            active = self._active_collection()
            names = [
                n for n in (note.get("collection"), note.get("replacing")) if isinstance(n, str) and n and n != active
            ]
            for name in self.collection.drop_collections(names):
                logger.info("Dropped collection {name}, left by a rebuild that was stopped", name=name)
        path.unlink(missing_ok=True)

    def _index(self, root: Path, started: float, progress: bool, rebuild: _Rebuild | None = None) -> IndexSummary:
        """One run, under the data folder's lock; with `rebuild`, into the writer's new collection."""
        previous = self._recorded() if rebuild is None else KnowledgeIndex()
        if previous.documents and not self.collection.exists():
            previous = KnowledgeIndex()  # the collection is gone: everything is indexed again
        self.writer.warm_up()
        old = previous.by_source()
        _, loader = node_of_type(self.pipeline, MarkdownKnowledgeLoader)
        sources, unusable = discover_knowledge_files(root, loader.max_file_bytes)
        versions = {}
        for path, source in list(sources.items()):
            try:
                versions[source] = file_version(path.read_bytes())
            except OSError as err:
                unusable.append({"source": source, "reason": err.strerror or str(err)})
                del sources[path]
        files = [*sources, *(f["source"] for f in unusable if f["source"] and not f["source"].endswith("/"))]
        todo = [
            p
            for p, source in sources.items()
            if (entry := old.get(source)) is None or entry.doc_version != versions[source]
        ]
        summary = IndexSummary(files=len(files), skipped=len(sources) - len(todo), failures=unusable)
        # a file or folder that could not be read keeps its documents' previous version
        unreadable = _kept_as_they_were(old, unusable)
        summary.bm25 = "milvus" if self.collection.full_text_field() else "in-process"
        summary.crosslingual = self.collection.has_crosslingual()
        summary.deleted = len(set(old) - set(versions) - unreadable)
        fresh: dict[str, IndexedDocument] = {}
        batches = [todo[i : i + self.files_per_batch] for i in range(0, len(todo), self.files_per_batch)]
        with tqdm(total=len(todo), desc="Indexing", unit="file", disable=not progress or not todo) as bar:
            for batch in batches:
                for entry in self._run_batch(root, batch, summary):
                    fresh[entry.source] = entry
                bar.update(len(batch))
                bar.set_postfix(chunks=summary.chunks, failed=summary.failed)
        summary.indexed = len(fresh)
        active = {src: doc for src, doc in old.items() if src in versions or src in unreadable}
        if rebuild is not None:  # what could not be read again keeps its version: carried into the new collection
            active.update(self._carry_over(rebuild, unusable, summary))
        active.update(fresh)
        summary.duplicate_ids = _duplicate_ids(active)
        unchanged = not fresh and not summary.deleted and bool(previous.term_categories)
        bodies = {} if unchanged else _bodies(root, {s: d for s, d in active.items() if s not in unreadable})
        index = self.record(
            list(active.values()),
            bodies,
            previous=previous,
            unchanged=unchanged,
            remove_stale=bool(fresh or summary.deleted or summary.failures),
            summary=summary,
            replacing=rebuild.replaced if rebuild is not None else None,
        )
        summary.statistics = index.statistics.summary() if index.statistics else ""
        summary.bm25_index = (index.statistics.bm25_index if index.statistics else None) or ""
        summary.seconds = time.perf_counter() - started
        return summary

    def _carry_over(
        self, rebuild: _Rebuild, unusable: list[dict[str, str]], summary: IndexSummary
    ) -> dict[str, IndexedDocument]:
        """
        Copy into the rebuild's collection the active chunks of the documents it could not read or index again (an
        unreadable file or folder, a file that failed), so that a rebuild loses no document a plain run would keep.
        """
        recorded = rebuild.recorded.by_source()
        failed = [{"source": f["source"]} for f in summary.failures]
        kept = {
            source: recorded[source]
            for source in _kept_as_they_were(recorded, [*unusable, *failed])
            if source in recorded
        }
        if not kept:
            return {}
        chunks = rebuild.collection.chunks_of({source: doc.doc_version for source, doc in kept.items()})
        written = self.writer.run(documents=chunks)
        for failure in written["failures"]:
            failure["reason"] = f"its previous version could not be kept: {failure['reason']}"
            summary.failures.append(failure)
        carried = {d["source"] for d in written["documents_written"]}
        return {source: doc for source, doc in kept.items() if source in carried}

    def record(
        self,
        documents: list[IndexedDocument],
        bodies: Mapping[str, str],
        previous: KnowledgeIndex | None = None,
        unchanged: bool = False,
        remove_stale: bool = False,
        summary: IndexSummary | None = None,
        replacing: str | None = None,
    ) -> KnowledgeIndex:
        """
        Record documents whose chunks are in the collection as the deployment's knowledge index, and count the
        collection's statistics.

        The index file is saved first: from then on lookups read these document versions (the switch). Then, with
        `remove_stale`, chunks of every other version are deleted; the collection is flushed, its statistics are
        counted over the active chunks with the lookup embedder (`compute_statistics`) and saved with the index.
        An index file that would not change is not written again, so running lookups need not reload anything.
        A rebuild (`replacing`) writes a collection no lookup reads yet: its statistics are counted first, and the
        index is saved once, complete; the replaced collection is dropped `retire_after_s` later.

        :param documents: The active documents, one per source (their chunks written).
        :param bodies: Markdown body per source, for the L0 term statistics (`term_category_counts`); a source
            without a body counts its hint fields only.
        :param previous: The index as it was before this run (default: none, everything is recorded anew).
        :param unchanged: Nothing changed since `previous`: its term statistics and collection statistics are kept
            (when made with the same embedding model) instead of counted again; `bodies` is not read.
        :param remove_stale: Delete the chunks of other versions once the index is saved (a failure is logged and
            put in `summary.cleanup_error`: stale chunks are never returned and the next run retries).
        :param summary: Receives `stale_chunks_removed` and `cleanup_error`.
        :param replacing: The collection a rebuild replaces ("" when none; None: not a rebuild).
        :returns: The saved index, statistics included.
        """
        previous = previous if previous is not None else KnowledgeIndex()
        index = KnowledgeIndex(
            milvus_uri=_recorded_uri(self.collection.uri, self.deployment.index_path.parent),
            collection_name=self.collection.schema.collection_name,
            configured_collection=self.collection.family(),
            collection_schema=asdict(self.collection.schema),
            embedding_model=self.embedding_model,
            documents=sorted(documents, key=lambda d: d.source),
            term_categories=previous.term_categories if unchanged else term_category_counts(documents, dict(bodies)),
        )
        if replacing is not None:
            return self._switch(index, replacing, summary)
        index.statistics = previous.statistics  # until they are counted again below
        if index != previous:  # an unchanged file keeps its mtime, so running lookups need not reload anything
            index.save(self.deployment.index_path)  # the switch: new versions active before old chunks go
        active_versions = index.active_versions()
        if remove_stale:
            try:
                removed = self.writer.remove_stale(active_versions)
                if summary is not None:
                    summary.stale_chunks_removed = removed
            except Exception as err:  # harmless: stale chunks are never returned and the next run retries
                logger.warning("Removing superseded chunks failed: {error}", error=err)
                if summary is not None:
                    summary.cleanup_error = str(err)
        self.collection.flush()
        index.statistics = self._statistics(previous, unchanged, active_versions)
        if index.statistics != previous.statistics:
            index.save(self.deployment.index_path)
        # the earlier runs' files, once the index names this run's (a lookup still reading one keeps its files open)
        VectorTable.remove_others(self.deployment.index_path.parent, index.statistics.vector_table)
        Bm25ChunkIndex.remove_others(self.deployment.index_path.parent, index.statistics.bm25_index)
        return index

    def _switch(self, index: KnowledgeIndex, replaced: str, summary: IndexSummary | None) -> KnowledgeIndex:
        """A rebuild's end: count the new collection's statistics, switch lookups to it, then drop the old one."""
        self.collection.flush()
        index.statistics = self._statistics(KnowledgeIndex(), False, index.active_versions())
        index.save(self.deployment.index_path)  # the switch: lookups read the new collection from their next call
        folder = self.deployment.index_path.parent
        try:
            if replaced and replaced != index.collection_name:
                time.sleep(self.retire_after_s)  # a lookup that began before the switch still searches the old one
                self.collection.drop_collections([replaced])
            (self.deployment.data_dir / REBUILD_FILE).unlink(missing_ok=True)
            VectorTable.remove_others(folder, index.statistics.vector_table)
            Bm25ChunkIndex.remove_others(folder, index.statistics.bm25_index)
        except Exception as err:  # the switch is done; the next run drops what is left (`_drop_leftovers`)
            logger.warning("Cleaning up after the rebuild failed: {error}", error=err)
            if summary is not None:
                summary.cleanup_error = str(err)
        return index

    def _statistics(
        self, previous: KnowledgeIndex, unchanged: bool, active_versions: dict[str, str]
    ) -> CollectionStatistics:
        """The collection's statistics: the previous run's when nothing changed, else counted again."""
        kept = previous.statistics
        folder = self.deployment.index_path.parent
        if (
            unchanged
            and kept
            and kept.embedding_model == self.embedding_model
            and kept.term_counts is not None
            and kept.vector_table
            and (folder / kept.vector_table).is_file()
            and kept.bm25_index
            and (folder / kept.bm25_index).is_dir()
        ):
            return kept
        backend = get_backend(self.embedding_model)
        return self.collection.compute_statistics(
            backend.embed_queries, self.embedding_model, active_versions, folder=folder
        )

    def close(self) -> None:
        """Release the Milvus connection."""
        self.writer.close()
