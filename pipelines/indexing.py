"""Incremental, failure-safe indexing of a knowledge folder.

A file is re-indexed only when its bytes changed. New chunks are written next to the old ones (chunk ids
include the file version), then the knowledge index file records the new version as active, and only then
are superseded chunks deleted. Whatever fails midway, the previous version stays searchable, and the
retriever returns only chunks of the active version, so old and new chunks of a document never mix.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.metadata
import inspect
import json
import mimetypes
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from filelock import FileLock, Timeout
from haystack import Document, Pipeline, logging
from haystack.dataclasses import ByteStream
from tqdm import tqdm

from components.converters.markdown_knowledge_converter import MarkdownKnowledgeConverter
from components.converters.rst_knowledge_converter import RstKnowledgeConverter
from components.core.atomic_file import write_atomically
from components.core.embedding_backends import SUPPORTED_MODELS, model_dimension
from components.core.file_version import file_version_of
from components.core.sphinx_conf import nearest_configuration, source_suffixes
from components.embedders.offline_text_embedder import OfflineTextEmbedder
from components.store.knowledge_index import IndexedDocument, KnowledgeIndex, term_category_counts
from components.store.knowledge_store import KnowledgeStore
from components.store.lexical import Bm25ChunkIndex
from components.store.schema import CROSSLINGUAL_META_KEY
from components.store.vector_table import VectorTable
from pipelines.knowledge_files import (
    DEFAULT_PARTIAL_FOLDERS,
    find_knowledge_files,
    headless_folders,
    included_pages,
    is_partial,
)
from pipelines.loading import load_pipeline_file
from pipelines.settings import ALLOWED_MODULES, DEFAULT_INDEXING_PIPELINE, Deployment, lite_file_in

logger = logging.getLogger(__name__)

#: the file in the data folder that an index run holds while it writes
INDEX_LOCK_FILE = "index.lock"
#: how long the collection a rebuild replaced stays after the switch, for lookups that began before it
RETIRE_AFTER_S = 3.0
#: how often a run waiting for another run's lock says that it still waits
LOCK_NOTICE_S = 60.0
#: the note a rebuild leaves in the data folder while it runs: the collection it fills and the one it replaces
REBUILD_FILE = "rebuild.json"
#: the largest file an index run hands to its pipeline (a converter's own cap may be smaller)
MAX_FILE_BYTES = 64 * 1024 * 1024


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
    unsupported: list[dict[str, str]] = field(default_factory=list)  # files of a type no converter takes: source, type
    not_indexed: list[dict[str, str]] = field(default_factory=list)  # read, but no text to index (a section page)
    estimate: dict[str, Any] = field(default_factory=dict)  # what the run expected before it began (`estimate_of`)
    warnings: list[dict[str, str]] = field(default_factory=list)  # indexed, with something to fix (an include)
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
            "unsupported": self.unsupported,
            "not_indexed": self.not_indexed,
            "estimate": self.estimate,
            "warnings": self.warnings,
            "duplicate_ids": self.duplicate_ids,
            "cleanup_error": self.cleanup_error,
            "crosslingual": self.crosslingual,
            "bm25": self.bm25,
            "bm25_index": self.bm25_index,
            "statistics": self.statistics,
        }


#: bytes on disk per second assumed before a first run has measured them: whole `index` runs of two public
#: documentation sites on a 2-core machine (WasmEdge 1,610, HAMi 1,580; docs/decisions.md D92), rounded down;
#: `bench` reports this machine's
DEFAULT_BYTES_PER_SECOND = 1500.0
#: a run indexing fewer bytes than this tells too little about the rate to keep it
RATE_SAMPLE_BYTES = 5000


def estimate_of(paths: list[Path], bytes_per_second: float) -> dict[str, Any]:
    """
    What an index run of these files should take: their size on disk at the rate of the last run (or the default).

    The rate is measured in the same unit, bytes on disk per second of a whole run, so that what a converter leaves
    out (a licence comment, markup, a PDF's binary layer) counts alike in the estimate and in the rate.

    :param paths: The files the run indexes.
    :param bytes_per_second: The measured rate (0: none yet).
    :returns: `files`, `bytes`, `bytes_per_second`, `rate` (`measured by the last run` or `default`) and `minutes`.
    """
    size = _size_on_disk(paths)
    rate = bytes_per_second if bytes_per_second > 0 else DEFAULT_BYTES_PER_SECOND
    return {
        "files": len(paths),
        "bytes": size,
        "bytes_per_second": round(rate, 1),
        "rate": "measured by the last run" if bytes_per_second > 0 else "default",
        "minutes": round(size / rate / 60, 1),
    }


def _size_on_disk(paths: list[Path]) -> int:
    size = 0
    for path in paths:
        with contextlib.suppress(OSError):  # gone since it was listed: the run reports it
            size += path.stat().st_size
    return size


#: the files the include scan reads: those the markdown converter takes
_MARKDOWN_SUFFIXES = (".md", ".mdx", ".markdown", ".qmd", ".rmd")
_RST_SUFFIXES = (".rst",)
#: the router's output for reStructuredText, to which a Sphinx site's pages of another suffix are sent
_RST_MIME = "text/x-rst"


def _is_rst_page(path: Path, sphinx_pages: set[Path]) -> bool:
    return path.suffix.lower() in _RST_SUFFIXES or path in sphinx_pages


class _IncludedVersions:
    """The versions of included files, each hashed once per index run however many pages include it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._versions: dict[str, str] = {}

    def __getitem__(self, name: str) -> str:
        """A file's version, or `missing` when it cannot be read (an include that was deleted)."""
        if name not in self._versions:
            try:
                self._versions[name] = file_version_of(self.root / name)
            except OSError:
                self._versions[name] = "missing"
        return self._versions[name]

    def changed(self, entry: IndexedDocument) -> bool:
        """Whether a file the document includes changed since it was indexed."""
        return any(self[name] != version for name, version in entry.includes.items())


#: init parameters that set how fast a component works, not what it makes: a change to one re-indexes nothing
_PACE = frozenset(("batch_size", "progress_bar"))
#: the project's helpers every converter and cleaner shares: a change to one changes what pages become
_SHARED_CODE = Path(__file__).resolve().parent.parent / "components" / "core"


def pipeline_digest(pipeline: Pipeline, writer: str) -> str:
    """
    What made a document's chunks: this package's version, the indexing pipeline's configuration (components and
    connections; the writer's store aside, which `_recorded` tells apart with the embedding model) and the source of
    its components' modules and of the shared helpers. A document indexed under another digest is indexed again, so
    an upgrade, or an edit to `indexing.yaml`, reaches every page rather than the edited ones only.

    :param pipeline: The indexing pipeline.
    :param writer: The name of its component writing to the knowledge store.
    :returns: 16 hex characters.
    """
    spec = pipeline.to_dict()
    spec["components"] = {
        name: {**c, "init_parameters": {k: v for k, v in c.get("init_parameters", {}).items() if k not in _PACE}}
        for name, c in spec["components"].items()
        if name != writer
    }
    try:
        version = importlib.metadata.version("lookup-knowledge")
    except importlib.metadata.PackageNotFoundError:  # run from a checkout without installing it
        version = ""
    digest = hashlib.sha256(json.dumps([version, spec], sort_keys=True, default=str).encode("utf-8"))
    files = {Path(inspect.getfile(type(c))).resolve() for n, c in pipeline.walk() if n != writer}
    files |= set(_SHARED_CODE.glob("*.py"))
    for path in sorted(f for f in files if f.suffix == ".py" and f.is_file()):
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def indexed_document(meta: Mapping[str, Any], chunks: int) -> IndexedDocument:
    """
    The knowledge index entry of a document.

    :param meta: The document's metadata, or one of its chunks' (they carry the document's fields).
    :param chunks: Number of its chunks written to the collection.
    :returns: The entry.
    """
    source = str(meta["source"])
    return IndexedDocument(
        doc_id=str(meta.get("doc_id") or source),
        source=source,
        title=str(meta.get("title") or ""),
        category=str(meta.get("category") or ""),
        keywords=[str(k) for k in meta.get("keywords") or []],
        entities=[str(e) for e in meta.get("entities") or []],
        updated=str(meta.get("updated") or ""),
        fields={str(k): [str(v) for v in values] for k, values in (meta.get("fields") or {}).items()},
        status=str(meta.get("status") or ""),
        superseded_by=str(meta.get("superseded_by") or ""),
        valid_from=str(meta.get("valid_from") or ""),
        valid_until=str(meta.get("valid_until") or ""),
        reviewed_at=str(meta.get("reviewed_at") or ""),
        access=[str(g) for g in meta.get("access") or []],
        doc_version=str(meta["doc_version"]),
        chunks=chunks,
    )


def _outputs_named(pipeline: Pipeline, socket: str) -> list[str]:
    """The components that have an output of this name (what the indexer reads off a run, whatever the nodes are)."""
    return [name for name in pipeline.graph.nodes if socket in pipeline.graph.nodes[name]["output_sockets"]]


def _entry(pipeline: Pipeline) -> str:
    """The one component that takes the files: its `sources` input is not fed by another component."""
    names = [name for name, inputs in pipeline.inputs().items() if "sources" in inputs]
    if len(names) != 1:
        msg = (
            f"the indexing pipeline needs exactly one component taking the files (an unconnected `sources` input, "
            f"such as a FileTypeRouter's), it has {names}"
        )
        raise ValueError(msg)
    return names[0]


def _writer(pipeline: Pipeline) -> tuple[str, Any]:
    """The one component that writes to the store (its output `documents_written` says what it wrote)."""
    names = _outputs_named(pipeline, "documents_written")
    if len(names) != 1 or not isinstance(getattr(pipeline.get_component(names[0]), "collection", None), KnowledgeStore):
        msg = f"the indexing pipeline needs exactly one writer to a knowledge store (ChunkWriter), it has {names}"
        raise ValueError(msg)
    return names[0], pipeline.get_component(names[0])


def _document_embedders(pipeline: Pipeline) -> list[tuple[str, Any]]:
    """The components that embed documents: `documents` in and out, and a `model`."""
    found = []
    for name, comp in pipeline.walk():
        node = pipeline.graph.nodes[name]
        takes, gives = "documents" in node["input_sockets"], "documents" in node["output_sockets"]
        if takes and gives and getattr(comp, "model", None) is not None:
            found.append((name, comp))
    return found


def _query_embedder(pipeline: Pipeline, document_model: str) -> Any:
    """
    The query side of the pipeline's embedder, for the noise calibration: the YAML's `metadata.query_embedder`, else
    the offline model's own query encoder.
    """
    spec = (pipeline.metadata or {}).get("query_embedder")
    if spec is None:
        if document_model not in SUPPORTED_MODELS:
            msg = (
                f"the indexing pipeline's embedder uses {document_model!r}: name its query side under "
                "`metadata.query_embedder` in the indexing YAML (a text embedder of the same model), for the noise "
                "calibration"
            )
            raise ValueError(msg)
        return OfflineTextEmbedder(model=document_model)
    holder = Pipeline.from_dict(
        {"components": {"query_embedder": spec}, "connections": []}, allowed_modules=list(ALLOWED_MODULES)
    )
    return holder.get_component("query_embedder")


def _unit_rows(vectors: list[list[float]]) -> np.ndarray:
    """Query vectors as unit rows (the noise calibration compares unit vectors); unit ones are kept bit for bit."""
    matrix = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    off = np.abs(norms - 1.0) > 1e-4
    return np.where(off, matrix / np.where(norms > 0, norms, 1.0), matrix)


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


def _type_of(path: Path) -> str:
    """A file's type as a user names it: its MIME type when known, else its extension."""
    mime, _ = mimetypes.guess_type(path.name)
    return mime or path.suffix or "no extension"


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
        max_file_bytes: int = MAX_FILE_BYTES,
    ) -> None:
        """
        Load the indexing pipeline for a deployment.

        The pipeline's parts are found by what they take and give, not by their class: the one component taking the
        files (`sources`, a router), the one writing to the knowledge store (`documents_written`), every component
        reporting `failures`, and the document embedders (`documents` in and out, and a `model`): the one setting
        `Document.embedding` and the cross-lingual one (`embedding_meta_key`).

        :param deployment: Where the data goes.
        :param pipeline_path: The indexing pipeline YAML.
        :param component_params: Per-component init parameter overrides.
        :param files_per_batch: Files run through the pipeline together (the unit of progress; a batch that fails is
            run again file by file, so that one bad file fails alone).
        :param retire_after_s: After a rebuild switched to its new collection, how long the old one stays for
            lookups that began before the switch, before it is dropped.
        :param max_file_bytes: Largest file handed to the pipeline (larger ones are reported as failed, never read);
            each converter has a cap of its own as well.
        :raises ValueError: If the pipeline lacks one of those parts, or an embedder's dimension does not match the
            collection's.
        """
        self.deployment = deployment
        self.pipeline: Pipeline = load_pipeline_file(pipeline_path, deployment, component_params)
        self._entry = _entry(self.pipeline)
        self._writer, self.writer = _writer(self.pipeline)
        self._reporters = _outputs_named(self.pipeline, "failures")
        self._skippers = _outputs_named(self.pipeline, "skipped")
        self._warners = _outputs_named(self.pipeline, "warnings")
        self._embedder, self.embedder = self._embedders()
        self.files_per_batch = files_per_batch
        self.retire_after_s = retire_after_s
        self.max_file_bytes = max_file_bytes
        self._model: str | None = None
        self._query_embedder: Any = None
        self._partials: list[dict[str, str]] = []
        self._announce: Callable[[dict[str, Any]], None] | None = None
        self._included = _IncludedVersions(Path())
        self._sphinx_pages: set[Path] = set()

    @functools.cached_property
    def digest(self) -> str:
        """What makes this pipeline's chunks (`pipeline_digest`): a page indexed under another is indexed again."""
        return pipeline_digest(self.pipeline, self._writer)

    @property
    def collection(self) -> KnowledgeStore:
        """The collection the run writes: the writer's (during a rebuild, the new one it fills)."""
        return self.writer.collection

    def _embedders(self) -> tuple[str, Any]:
        """Find the main embedder (and check the offline ones' dimensions against the collection's schema)."""
        embedders = _document_embedders(self.pipeline)
        crosslingual = [c for _, c in embedders if getattr(c, "embedding_meta_key", None) == CROSSLINGUAL_META_KEY]
        main = [(n, c) for n, c in embedders if getattr(c, "embedding_meta_key", None) is None]
        if len(main) != 1:
            msg = (
                "the indexing pipeline needs exactly one document embedder that sets Document.embedding, it has "
                f"{[n for n, _ in main]}"
            )
            raise ValueError(msg)
        schema = self.collection.schema
        checks = [("dimension", main[0][1].model, schema.dimension)]
        checks += [("crosslingual_dimension", c.model, schema.crosslingual_dimension) for c in crosslingual]
        for option, model, dimension in checks:
            if model in SUPPORTED_MODELS and model_dimension(model) != dimension:
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

    @property
    def embedding_model(self) -> str:
        """
        The model the collection's vectors come from, as the embedder names it: an offline model's own name; for any
        other embedder, the `model` its output reports for one embedded probe (an embedding server's name for what it
        serves), its configured `model` otherwise. Checked against the collection's dimension.
        """
        if self._model is None:
            configured = str(self.embedder.model)
            if configured in SUPPORTED_MODELS:
                self._model = configured
            else:
                self._model = self._probe_model(configured)
        return self._model

    def _probe_model(self, configured: str) -> str:
        if callable(getattr(self.embedder, "warm_up", None)):
            self.embedder.warm_up()
        out = self.embedder.run(documents=[Document(content="embedding model check", meta={"source": "-"})])
        [probe] = out["documents"]
        dimension = self.collection.schema.dimension
        if len(probe.embedding or []) != dimension:
            msg = (
                f"the embedder ({configured!r}) makes vectors of dimension {len(probe.embedding or [])}, the writer's "
                f"collection has dimension {dimension}; set the collection's dimension to the model's"
            )
            raise ValueError(msg)
        return str((out.get("meta") or {}).get("model") or configured)

    def _embed_queries(self, texts: list[str]) -> np.ndarray:
        """The lookup side's vectors of some queries, as unit rows (for the noise calibration)."""
        if self._query_embedder is None:
            self._query_embedder = _query_embedder(self.pipeline, self.embedding_model)
            if callable(getattr(self._query_embedder, "warm_up", None)):
                self._query_embedder.warm_up()
        return _unit_rows([self._query_embedder.run(text=text)["embedding"] for text in texts])

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

    def _run_batch(
        self, batch: list[Path], sources: Mapping[Path, str], versions: Mapping[str, str], summary: IndexSummary
    ) -> list[IndexedDocument]:
        """Run files through the pipeline, each with its `source` and `doc_version`; the entries of those written."""
        names = [sources[p] for p in batch]
        inputs = {
            self._entry: {
                "sources": [self._entry_source(p) for p in batch],
                "meta": [{"source": name, "doc_version": versions[name]} for name in names],
            }
        }
        try:
            reporting = {*self._reporters, *self._skippers, *self._warners, self._embedder}
            out = self.pipeline.run(inputs, include_outputs_from=reporting)
        except Exception as err:  # e.g. the embedder failed: nothing of this batch was written
            reason = str(getattr(err, "__cause__", None) or err)
            if len(batch) > 1:  # find the file that failed it: the others are indexed
                logger.warning("Indexing batch failed, running its files one by one: {reason}", reason=reason)
                return [entry for path in batch for entry in self._run_batch([path], sources, versions, summary)]
            logger.warning("Indexing {source} failed: {reason}", source=names[0], reason=reason)
            summary.failures.extend({"source": name, "reason": f"indexing failed: {reason}"} for name in names)
            return []
        failed = [f for reporter in self._reporters for f in out.get(reporter, {}).get("failures", [])]
        summary.failures.extend(failed)
        skipped = [f for name in self._skippers for f in out.get(name, {}).get("skipped", [])]
        summary.not_indexed.extend(skipped)
        summary.warnings.extend(w for name in self._warners for w in out.get(name, {}).get("warnings", []))
        summary.characters += (out.get(self._embedder, {}).get("meta") or {}).get("characters", 0)
        written = out.get(self._writer, {}).get("documents_written", [])
        summary.chunks += sum(d["chunks"] for d in written)
        accounted = {d["source"] for d in written} | {f["source"] for f in [*failed, *skipped]}
        for name in names:  # a converter that drops a file without a word (Haystack's log and skip)
            if name not in accounted:
                summary.failures.append({"source": name, "reason": "the pipeline made no chunk of it"})
        entries = [
            indexed_document({**d["meta"], "source": d["source"], "doc_version": d["doc_version"]}, d["chunks"])
            for d in written
        ]
        for entry, d in zip(entries, written, strict=True):
            entry.pipeline = self.digest
            # a file it shows, or one whose edit or creation may change it (a Sphinx `conf.py`): either re-indexes it
            included = [*(d["meta"].get("included_files") or []), *(d["meta"].get("watched_files") or [])]
            entry.includes = {name: self._included[name] for name in included if isinstance(name, str)}
        return entries

    @property
    def document_embedders(self) -> list[Any]:
        """The pipeline's document embedders: the one setting `Document.embedding` first, then the others."""
        others = [c for _, c in _document_embedders(self.pipeline) if c is not self.embedder]
        return [self.embedder, *others]

    def run_without_writing(self, root: Path, paths: list[Path], embed: bool = True) -> tuple[list[Document], list]:
        """
        Run files through a copy of the pipeline that writes nothing (for measuring it, and for building test sets).

        :param root: The knowledge root the files lie under.
        :param paths: The files.
        :param embed: Run the embedders too (False: stop at the chunks).
        :returns: The chunks (embedded with `embed`) and the failures `{"source", "reason"}` of the components that
            report them.
        """
        dry = Pipeline.from_dict(self.pipeline.to_dict(), allowed_modules=list(ALLOWED_MODULES))
        dry.remove_component(self._writer)
        if not embed:
            for name, _ in _document_embedders(dry):
                dry.remove_component(name)
        meta = [{"source": p.relative_to(root).as_posix(), "doc_version": file_version_of(p)} for p in paths]
        self._sphinx_pages = self._sphinx_pages_of(root, paths)
        out = dry.run({self._entry: {"sources": [self._entry_source(p) for p in paths], "meta": meta}})
        chunks = [doc for outputs in out.values() for doc in outputs.get("documents", [])]
        failures = [f for outputs in out.values() for f in outputs.get("failures", [])]
        return chunks, failures

    def _supported(self, paths: list[Path]) -> tuple[list[Path], list[Path]]:
        """
        The files the pipeline's entry takes, and those it leaves unclassified (a router's `unclassified` output: no
        converter for their type); everything is taken when the entry has no such output.
        """
        if "unclassified" not in self.pipeline.graph.nodes[self._entry]["output_sockets"] or not paths:
            return paths, []
        entry: Any = self.pipeline.get_component(self._entry)
        left = {Path(str(p)) for p in entry.run(sources=paths).get("unclassified", [])}
        return [p for p in paths if p not in left], [p for p in paths if p in left]

    def index(
        self,
        knowledge_dir: str | Path,
        rebuild: bool = False,
        progress: bool = True,
        announce: Callable[[dict[str, Any]], None] | None = None,
    ) -> IndexSummary:
        """
        Index the markdown files of a folder: changed and new files are (re-)embedded, deleted ones removed.

        One run at a time per data folder: a second run waits for the first (`index.lock`), then finds its work done.

        :param knowledge_dir: The knowledge root.
        :param rebuild: Index everything again into a new collection, written beside the active one (which lookups
            keep reading) and switched to when complete; the old one is then dropped.
        :param progress: Show a progress bar.
        :param announce: Called with the run's estimate (`estimate_of`) before anything is embedded, when there is
            something to embed.
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
            self._announce = announce
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
        recorded = self._recorded()
        previous = recorded if rebuild is None else KnowledgeIndex()
        if previous.documents and not self.collection.exists():
            previous = KnowledgeIndex()  # the collection is gone: everything is indexed again
        self.writer.warm_up()
        old = previous.by_source()
        self._partials = []
        self._included = _IncludedVersions(root)
        sources, unusable, unsupported = self._discover(root)
        self._sphinx_pages = self._sphinx_pages_of(root, sources)
        versions = self._versions(sources, unusable)
        sources = self._without_included_pages(sources, versions)
        files = [*sources, *(f["source"] for f in unusable if f["source"] and not f["source"].endswith("/"))]
        todo = [
            p
            for p, source in sources.items()
            if (entry := old.get(source)) is None
            or entry.doc_version != versions[source]
            or entry.pipeline != self.digest
            or self._included.changed(entry)
        ]
        if remade := sum(1 for source in sources.values() if source in old and old[source].pipeline != self.digest):
            logger.info(
                "{count} files are indexed again: the indexing pipeline or its code changed since they were indexed",
                count=remade,
            )
        summary = IndexSummary(
            files=len(files),
            skipped=len(sources) - len(todo),
            failures=unusable,
            unsupported=unsupported,
            not_indexed=self._partials,
        )
        # a file or folder that could not be read keeps its documents' previous version
        unreadable = _kept_as_they_were(old, unusable)
        summary.bm25 = "milvus" if self.collection.full_text_field() else "in-process"
        summary.crosslingual = self.collection.has_crosslingual()
        summary.deleted = len(set(old) - set(versions) - unreadable)
        fresh: dict[str, IndexedDocument] = {}
        # an index file written before rates were in bytes has the embedded characters' rate only
        summary.estimate = estimate_of(todo, recorded.bytes_per_second or recorded.chars_per_second)
        if todo and self._announce is not None:
            self._announce(summary.estimate)
        batches = [todo[i : i + self.files_per_batch] for i in range(0, len(todo), self.files_per_batch)]
        with tqdm(total=len(todo), desc="Indexing", unit="file", disable=not progress or not todo) as bar:
            for batch in batches:
                for entry in self._run_batch(batch, sources, versions, summary):
                    fresh[entry.source] = entry
                bar.update(len(batch))
                bar.set_postfix(chunks=summary.chunks, failed=summary.failed)
        summary.indexed = len(fresh)
        emptied = {f["source"] for f in summary.not_indexed} & set(old) & set(versions)  # no text now: chunks go
        summary.deleted += len(emptied)
        active = {src: doc for src, doc in old.items() if (src in versions or src in unreadable) and src not in emptied}
        if rebuild is not None:  # what could not be read again keeps its version: carried into the new collection
            active.update(self._carry_over(rebuild, unusable, summary))
        active.update(fresh)
        summary.duplicate_ids = _duplicate_ids(active)
        unchanged = not fresh and not summary.deleted and bool(previous.term_categories)
        summary.seconds = time.perf_counter() - started  # so far: the rate the next run's estimate uses
        index = self.record(
            list(active.values()),
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

    def _discover(self, root: Path) -> tuple[dict[Path, str], list[dict[str, str]], list[dict[str, str]]]:
        """
        The files of the folder the pipeline takes (by source), the entries that cannot be read (with why), and the
        files of a type no converter takes (with their type).
        """
        found = find_knowledge_files(root)
        partials = (self.pipeline.metadata or {}).get("partial_folders", DEFAULT_PARTIAL_FOLDERS)
        taken, left = self._supported(list(found.files))
        unsupported = [{"source": found.files[p], "type": _type_of(p)} for p in left]
        # a partial is read by the pages that include it, never a page of its own; only a file the pipeline takes is
        # one (Docusaurus' `_category_.yml` is sidebar settings, of a type no converter takes)
        headless = headless_folders(found.files)
        inside = {p for p in taken if is_partial(found.files[p], partials, headless)}
        self._partials.extend(
            {"source": found.files[p], "reason": "a partial: pages include it, it is no page"}
            for p in taken
            if p in inside
        )
        taken = [p for p in taken if p not in inside]
        entries = [Path(root, f["source"]) for f in found.unusable if not f["source"].endswith("/") and f["source"]]
        _, foreign = self._supported(entries)  # a dangling link of a type no converter takes is no knowledge file
        foreign_sources = {p.relative_to(root).as_posix() for p in foreign}
        unusable = [f for f in found.unusable if f["source"] not in foreign_sources]
        return {p: found.files[p] for p in taken}, unusable, unsupported

    def _without_included_pages(self, sources: dict[Path, str], versions: dict[str, str]) -> dict[Path, str]:
        """
        The files without those other pages show whole (`included_pages`), which are listed as not indexed with the
        page that shows them. The pipeline's markdown and reStructuredText converters tell what each of their pages
        shows (`included_files`: they parse only the pages that name an include, every run, since what a page shows
        can change with the files it includes; without such a converter in the pipeline, every file stays a page).
        """
        shows: dict[str, list[str]] = {}
        scanned: set[type] = set()  # one scan per format: the Quarto converter is a second markdown converter
        for _, converter in self.pipeline.walk():
            if not isinstance(converter, MarkdownKnowledgeConverter | RstKnowledgeConverter):
                continue
            if type(converter) in scanned:
                continue
            scanned.add(type(converter))
            markdown = isinstance(converter, MarkdownKnowledgeConverter)
            pages = [
                p
                for p, s in sources.items()
                if s in versions
                and (p.suffix.lower() in _MARKDOWN_SUFFIXES if markdown else _is_rst_page(p, self._sphinx_pages))
            ]
            meta = [{"source": sources[p], "doc_version": versions[sources[p]]} for p in pages]
            shows.update(converter.included_files(pages, meta))
        if not shows:
            return sources
        shown_by = included_pages(shows, set(sources.values()))
        self._partials.extend(
            {"source": name, "reason": f"included by {page}: its text is indexed there"}
            for name, page in sorted(shown_by.items())
        )
        return {path: source for path, source in sources.items() if source not in shown_by}

    def _sphinx_pages_of(self, root: Path, paths: Iterable[Path]) -> set[Path]:
        """
        The files a Sphinx site's `conf.py` names as its pages by another suffix than `.rst` (`source_suffix = ".txt"`,
        as Django's documentation has it): they go to the reStructuredText converter, not the plain text one. None
        when the pipeline's router has no `text/x-rst` output.
        """
        if _RST_MIME not in self.pipeline.graph.nodes[self._entry]["output_sockets"]:
            return set()
        confs: dict[Path, Path | None] = {}
        suffixes: dict[Path, frozenset[str]] = {}
        pages: set[Path] = set()
        for path in paths:
            suffix = path.suffix.lower()
            if not suffix or suffix in _RST_SUFFIXES or suffix in _MARKDOWN_SUFFIXES:
                continue
            if path.parent not in confs:
                confs[path.parent] = nearest_configuration(path, root).path
            conf = confs[path.parent]
            if conf is None:
                continue
            if conf not in suffixes:
                suffixes[conf] = source_suffixes(conf)
            if suffix in suffixes[conf]:
                pages.add(path)
        return pages

    def _entry_source(self, path: Path) -> str | ByteStream:
        """What the router gets for a file: its path, or for a Sphinx page of another suffix its bytes as `.rst`."""
        if path not in self._sphinx_pages:
            return str(path)
        try:
            return ByteStream.from_file_path(path, mime_type=_RST_MIME, meta={"file_path": str(path)})
        except OSError:
            return str(path)  # read where it is routed, and reported there

    def _versions(self, sources: dict[Path, str], unusable: list[dict[str, str]]) -> dict[str, str]:
        """Each file's version, hashed a block at a time (a file over `max_file_bytes`, or unreadable: `unusable`)."""
        versions = {}
        for path, source in list(sources.items()):
            try:
                size = path.stat().st_size
                if size > self.max_file_bytes:
                    reason = f"{size} bytes, over the index run's {self.max_file_bytes}-byte cap (max_file_bytes)"
                    unusable.append({"source": source, "reason": reason})
                    del sources[path]
                    continue
                versions[source] = file_version_of(path)
            except OSError as err:
                unusable.append({"source": source, "reason": err.strerror or str(err)})
                del sources[path]
        return versions

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
        `remove_stale`, chunks of every other version are deleted; the collection is flushed, and one pass over its
        active chunks counts its statistics (with the lookup side's embedder, `compute_statistics`) and the L0 term
        statistics (`term_category_counts`, over each document's chunks and headings: the documents as they were
        written, no file is read again), saved with the index. An index file that would not change is not written
        again, so running lookups need not reload anything. A rebuild (`replacing`) writes a collection no lookup
        reads yet: its statistics are counted first, and the index is saved once, complete; the replaced collection is
        dropped `retire_after_s` later.

        :param documents: The active documents, one per source (their chunks written).
        :param previous: The index as it was before this run (default: none, everything is recorded anew).
        :param unchanged: Nothing changed since `previous`: its statistics and term statistics are kept (when made
            with the same embedding model, their files still there) instead of counted again.
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
            term_categories=previous.term_categories,  # until they are counted again below
            chars_per_second=previous.chars_per_second,
            bytes_per_second=previous.bytes_per_second,
        )
        indexed_bytes = (summary.estimate.get("bytes") or 0) if summary is not None else 0
        if summary is not None and indexed_bytes >= RATE_SAMPLE_BYTES and summary.seconds > 0:
            index.chars_per_second = round(summary.characters / summary.seconds, 1)
            index.bytes_per_second = round(indexed_bytes / summary.seconds, 1)
        if replacing is not None:
            return self._switch(index, replacing, summary)
        index.statistics = previous.statistics
        if index != previous:  # an unchanged file keeps its mtime, so running lookups need not reload anything
            index.save(self.deployment.index_path)  # the switch: new versions active before old chunks go
        if remove_stale:
            try:
                removed = self.writer.remove_stale(index.active_versions())
                if summary is not None:
                    summary.stale_chunks_removed = removed
            except Exception as err:  # harmless: stale chunks are never returned and the next run retries
                logger.warning("Removing superseded chunks failed: {error}", error=err)
                if summary is not None:
                    summary.cleanup_error = str(err)
        self.collection.flush()
        self._count(index, previous if unchanged else None)
        if (index.statistics, index.term_categories) != (previous.statistics, previous.term_categories):
            index.save(self.deployment.index_path)
        # the earlier runs' files, once the index names this run's (a lookup still reading one keeps its files open)
        assert index.statistics is not None
        VectorTable.remove_others(self.deployment.index_path.parent, index.statistics.vector_table)
        Bm25ChunkIndex.remove_others(self.deployment.index_path.parent, index.statistics.bm25_index)
        return index

    def _switch(self, index: KnowledgeIndex, replaced: str, summary: IndexSummary | None) -> KnowledgeIndex:
        """A rebuild's end: count the new collection's statistics, switch lookups to it, then drop the old one."""
        self.collection.flush()
        self._count(index, None)
        index.save(self.deployment.index_path)  # the switch: lookups read the new collection from their next call
        assert index.statistics is not None
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

    def _count(self, index: KnowledgeIndex, kept_from: KnowledgeIndex | None) -> None:
        """
        Put the collection's statistics and the L0 term statistics into `index`: `kept_from`'s when they are still
        valid (nothing changed, the same embedding model, their files still there), else counted in one pass.
        """
        folder = self.deployment.index_path.parent
        kept = kept_from.statistics if kept_from is not None else None
        if (
            kept_from is not None
            and kept
            and kept.embedding_model == self.embedding_model
            and kept.term_counts is not None
            and kept.vector_table
            and (folder / kept.vector_table).is_file()
            and kept.bm25_index
            and (folder / kept.bm25_index).is_dir()
        ):
            index.statistics, index.term_categories = kept, kept_from.term_categories
            return
        texts: dict[str, list[tuple[int, str]]] = {}
        index.statistics = self.collection.compute_statistics(
            self._embed_queries, self.embedding_model, index.active_versions(), folder=folder, texts=texts
        )
        bodies = {source: "\n\n".join(text for _, text in sorted(parts)) for source, parts in texts.items()}
        index.term_categories = term_category_counts(index.documents, bodies)

    def close(self) -> None:
        """Release the Milvus connection."""
        self.writer.close()
