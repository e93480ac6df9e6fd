"""Synthetic knowledge collections of any size, for lookups measured at 1k, 10k and 100k chunks (issue 15).

Embedding 100k chunks with the real models takes hours on a small machine, so a scale collection is made of real
text recombined. The knowledge folder is loaded, chunked and embedded once by the indexing pipeline's own loader,
chunker and embedders (the *pool*). Copy 0 is the pool unchanged, so the eval questions keep their judged answers,
with their real doc ids and sources. Every further document `j` is derived from pool document `j mod D`: the same
number of chunks, category, keywords and entities, its own doc id (`<doc_id>~<j>`), source (`scale/<j>/<source>`),
title (`<title> · <j>`) and version; its chunk `i` is the pool document's chunk `i` followed by a partner pool chunk
drawn with `random.Random(seed)`, and its vectors are **not embedded**: they are the L2-normalized sums of the two
pool chunks' vectors (e5 and cross-lingual alike). Everything is written through the indexing pipeline's real
`ChunkWriter` and recorded by `KnowledgeIndexer.record`, as `lookup-knowledge index` records it, so
`pipelines.load_pipeline(data_dir=...)` and `lookup-knowledge ask --data-dir` work on it unchanged.

```bash
python -m pipelines.measure.scale_corpus knowledge --chunks 10000 --data-dir /tmp/scale10k
```
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from haystack import Document, logging
from tqdm import tqdm

from components.core.citation import chunk_id
from components.core.file_version import file_version
from components.store.knowledge_index import IndexedDocument
from components.store.schema import CROSSLINGUAL_META_KEY
from pipelines.indexing import KnowledgeIndexer, indexed_document
from pipelines.knowledge_files import find_knowledge_files
from pipelines.settings import Deployment

logger = logging.getLogger(__name__)

#: documents handed to the writer per `run` (a few thousand chunks): memory stays bounded whatever the size
DOCUMENTS_PER_BATCH = 200


@dataclass(frozen=True)
class ScalePool:
    """The real chunks of a knowledge folder, embedded once by the indexing pipeline, that scale collections use."""

    root: Path
    documents: list[list[Document]]  # per loaded document (by source), its embedded chunks; none is empty
    models: tuple[str, ...]  # the embedders' models: e5 first, then the cross-lingual one if the pipeline has it
    failures: list[dict[str, str]] = field(default_factory=list)  # files the pipeline could not convert
    seconds: float = 0.0  # spent loading, chunking and embedding

    @property
    def chunks(self) -> int:
        """Number of real chunks."""
        return sum(len(chunks) for chunks in self.documents)


@dataclass
class ScaleCorpus:
    """What `build_scale_corpus` built, and how long each phase took."""

    chunks: int
    documents: int
    pool_chunks: int
    pool_documents: int
    seed: int
    seconds_embed_pool: float
    seconds_write: float
    seconds_index: float  # term statistics, index file, flush and collection statistics (`KnowledgeIndexer.record`)
    vectors: str  # how the vectors were made
    data_dir: str = ""
    failures: list[dict[str, str]] = field(default_factory=list)  # knowledge files left out of the pool

    def as_dict(self) -> dict[str, Any]:
        """
        Return the summary as plain JSON-ready data.

        :returns: The fields, seconds rounded to hundredths.
        """
        data = asdict(self)
        for key in ("seconds_embed_pool", "seconds_write", "seconds_index"):
            data[key] = round(data[key], 2)
        return data


def _check_chunks(chunks: int) -> None:
    if isinstance(chunks, bool) or not isinstance(chunks, int) or chunks < 1:
        msg = f"chunks={chunks!r} must be a positive number of chunks, e.g. 10000"
        raise ValueError(msg)


def embed_pool(knowledge_dir: str | Path, indexer: KnowledgeIndexer, progress: bool = False) -> ScalePool:
    """
    Load, chunk and embed a knowledge folder with the indexing pipeline's own components, writing nothing.

    :param knowledge_dir: The knowledge root.
    :param indexer: The indexer whose pipeline's loader, chunker, `embedder` and cross-lingual embedder are used.
    :param progress: Show a progress bar.
    :returns: The pool.
    :raises FileNotFoundError: If the folder does not exist.
    :raises ValueError: If the folder has no file that makes a chunk.
    """
    started = time.perf_counter()
    root = Path(knowledge_dir).resolve()
    if not root.is_dir():
        msg = f"knowledge folder {root} does not exist"
        raise FileNotFoundError(msg)
    found = find_knowledge_files(root)
    paths = list(found.files)
    failures = list(found.unusable)
    step = indexer.files_per_batch
    documents: list[list[Document]] = []
    with tqdm(total=len(paths), desc="Embedding the pool", unit="file", disable=not progress) as bar:
        for start in range(0, len(paths), step):
            chunks, failed = indexer.run_without_writing(root, paths[start : start + step])
            failures.extend(failed)
            by_source: dict[str, list[Document]] = {}
            for chunk in chunks:
                by_source.setdefault(chunk.meta["source"], []).append(chunk)
            documents.extend(by_source.values())
            bar.update(len(paths[start : start + step]))
    if not documents:
        msg = f"knowledge folder {root} has no markdown file that makes a chunk; failures: {failures}"
        raise ValueError(msg)
    for failure in failures:
        logger.warning("Left out of the pool: {source}: {reason}", source=failure["source"], reason=failure["reason"])
    models = tuple(str(e.model) for e in indexer.document_embedders)
    return ScalePool(root, documents, models, failures, time.perf_counter() - started)


def vectors_statement(pool: ScalePool) -> str:
    """
    Say how a scale collection's vectors were made.

    :param pool: The pool.
    :returns: One sentence.
    """
    models = " and ".join(pool.models)
    return (
        f"copy 0: the {pool.chunks} real chunks embedded by the indexing pipeline ({models}); synthetic chunks "
        "(pool chunk + a seeded partner pool chunk) are not embedded: each vector is the L2-normalized sum of the "
        "two pool chunks' vectors, per model"
    )


def _unit_rows(vectors: np.ndarray) -> list[list[float]]:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return (vectors / np.where(norms > 0, norms, 1.0)).tolist()


def _retitled(breadcrumb: str, title: str, new_title: str) -> str:
    if title and (breadcrumb == title or breadcrumb.startswith(f"{title} > ")):
        return new_title + breadcrumb[len(title) :]
    return breadcrumb


def _cut(chunks: list[Document], count: int) -> list[Document]:
    """The first `count` chunks of a document, `total_chunks` saying how many it has now."""
    if count >= len(chunks):
        return chunks
    return [replace(c, meta={**c.meta, "total_chunks": count}) for c in chunks[:count]]


def scale_documents(pool: ScalePool, chunks: int, seed: int = 15) -> Iterator[list[Document]]:
    """
    Generate a scale collection's chunks, one document at a time: the pool, then synthetic documents.

    Deterministic: the same pool, `chunks` and `seed` give the same chunks, ids and vectors (and a smaller
    collection is a prefix of a larger one, but for its last document). The last document is cut so that there are
    exactly `chunks` chunks (its `total_chunks` says how many it kept); fewer chunks than the pool has give the
    first `chunks` real chunks.

    :param pool: The embedded real chunks.
    :param chunks: Number of chunks in all.
    :param seed: Seed of the partner choice.
    :returns: Per document its chunks, embedded (`embedding`, and meta `crosslingual_embedding` when the pool has
        cross-lingual vectors), with the meta the chunker makes.
    :raises ValueError: If `chunks` is not a positive integer.
    """
    _check_chunks(chunks)
    return _generate(pool, chunks, seed)


def _generate(pool: ScalePool, chunks: int, seed: int) -> Iterator[list[Document]]:
    flat = [chunk for doc in pool.documents for chunk in doc]
    starts = np.cumsum([0] + [len(doc) for doc in pool.documents])
    dense = np.asarray([c.embedding for c in flat], dtype=np.float64)
    crosslingual = (
        np.asarray([c.meta[CROSSLINGUAL_META_KEY] for c in flat], dtype=np.float64)
        if all(CROSSLINGUAL_META_KEY in c.meta for c in flat)
        else None
    )
    rng = random.Random(seed)  # noqa: S311 - a reproducible corpus, not a secret
    remaining, j = chunks, 0
    while remaining > 0:
        d = j % len(pool.documents)
        base = pool.documents[d]
        count = min(len(base), remaining)
        if j < len(pool.documents):
            yield _cut(base, count)
        else:
            yield _synthetic(base, j, count, rng, int(starts[d]), flat, dense, crosslingual)
        remaining -= count
        j += 1


def _synthetic(
    base: list[Document],
    j: int,
    count: int,
    rng: random.Random,
    start: int,
    flat: list[Document],
    dense: np.ndarray,
    crosslingual: np.ndarray | None,
) -> list[Document]:
    """Synthetic document `j` from the pool document `base` (whose first chunk is `flat[start]`)."""
    meta = base[0].meta
    title, source = str(meta.get("title") or ""), f"scale/{j}/{meta['source']}"
    new_title = f"{title} · {j}"
    partners = []
    for i in range(count):
        # any pool chunk but the chunk itself (whose sum with itself would be the real vector again)
        if len(flat) == 1:
            partners.append(0)
            continue
        partner = rng.randrange(len(flat) - 1)
        partners.append(partner + 1 if partner >= start + i else partner)
    contents = [f"{base[i].content or ''}\n\n{flat[p].content or ''}" for i, p in enumerate(partners)]
    version = file_version("\n\n".join(contents).encode("utf-8"))
    own = np.arange(start, start + count)
    embeddings = _unit_rows(dense[own] + dense[partners])
    crosslingual_vectors = _unit_rows(crosslingual[own] + crosslingual[partners]) if crosslingual is not None else None
    out = []
    for i, content in enumerate(contents):
        chunk_meta = {k: v for k, v in base[i].meta.items() if k != CROSSLINGUAL_META_KEY}
        chunk_meta.update(
            doc_id=f"{chunk_meta['doc_id']}~{j}",
            source=source,
            title=new_title,
            breadcrumb=_retitled(str(chunk_meta.get("breadcrumb") or ""), title, new_title),
            total_chunks=count,
            content_hash=hashlib.sha256(content.encode()).hexdigest()[:16],
            doc_version=version,
        )
        if crosslingual_vectors is not None:
            chunk_meta[CROSSLINGUAL_META_KEY] = crosslingual_vectors[i]
        out.append(Document(id=chunk_id(source, i, version), content=content, embedding=embeddings[i], meta=chunk_meta))
    return out


def _write(indexer: KnowledgeIndexer, batch: list[list[Document]]) -> None:
    out = indexer.writer.run(documents=[chunk for doc in batch for chunk in doc])
    if out["failures"]:
        failure = out["failures"][0]
        msg = (
            f"writing the scale collection failed for {len(out['failures'])} documents, e.g. {failure['source']}: "
            f"{failure['reason']}"
        )
        raise RuntimeError(msg)


def build_scale_corpus(
    knowledge_dir: str | Path,
    chunks: int,
    deployment: Deployment,
    seed: int = 15,
    progress: bool = False,
    pool: ScalePool | None = None,
) -> ScaleCorpus:
    """
    Build a synthetic knowledge collection of exactly `chunks` chunks in a deployment, replacing what it held.

    The real chunks of `knowledge_dir` come first, unchanged; synthetic documents made of them follow
    (`scale_documents`). The deployment's collection is dropped and created again as `lookup-knowledge index`
    creates it (BM25 function included where Milvus has it), the chunks are written through the indexing pipeline's
    `ChunkWriter` a few hundred documents at a time, and the knowledge index file, term statistics and
    collection statistics are recorded by `KnowledgeIndexer.record`, as an indexing run records them.

    :param knowledge_dir: The knowledge root whose chunks are recombined.
    :param chunks: Number of chunks in all; fewer than the folder has gives its first `chunks` real chunks.
    :param deployment: Where the collection and the index file go.
    :param seed: Seed of the partner choice: the same arguments build the same collection.
    :param progress: Show progress bars.
    :param pool: The folder's chunks already embedded (`embed_pool`), to build several collections from one
        embedding; its seconds are then reported as `seconds_embed_pool`.
    :returns: What was built, and the seconds of each phase.
    :raises ValueError: If `chunks` is not a positive integer, `pool` was embedded from another folder, or the
        folder makes no chunk.
    :raises FileNotFoundError: If the folder does not exist.
    :raises RuntimeError: If the writer could not write a document (what it wrote of the collection stays; the
        deployment then has no index file).
    """
    _check_chunks(chunks)
    root = Path(knowledge_dir).resolve()
    if pool is not None and pool.root != root:
        msg = f"pool was embedded from {pool.root}, not from knowledge_dir {root}; embed it from the same folder"
        raise ValueError(msg)
    indexer = KnowledgeIndexer(deployment)
    try:
        pool = pool if pool is not None else embed_pool(root, indexer, progress)
        started = time.perf_counter()
        indexer.collection.drop()
        # the previous index file describes chunks that are gone: were it left, a build that fails midway would let
        # `lookup-knowledge index` skip files it believes indexed
        deployment.index_path.unlink(missing_ok=True)
        indexer.writer.warm_up()
        entries: list[IndexedDocument] = []
        batch: list[list[Document]] = []
        with tqdm(total=chunks, desc="Writing", unit="chunk", disable=not progress) as bar:
            for doc in scale_documents(pool, chunks, seed):
                entries.append(indexed_document(doc[0].meta, len(doc)))
                batch.append(doc)
                if len(batch) == DOCUMENTS_PER_BATCH:
                    _write(indexer, batch)
                    bar.update(sum(len(d) for d in batch))
                    batch = []
            if batch:
                _write(indexer, batch)
                bar.update(sum(len(d) for d in batch))
        written = time.perf_counter()
        indexer.record(entries)
        finished = time.perf_counter()
    finally:
        indexer.close()
    return ScaleCorpus(
        chunks=sum(e.chunks for e in entries),
        documents=len(entries),
        pool_chunks=pool.chunks,
        pool_documents=len(pool.documents),
        seed=seed,
        seconds_embed_pool=pool.seconds,
        seconds_write=written - started,
        seconds_index=finished - written,
        vectors=vectors_statement(pool),
        data_dir=str(deployment.data_dir),
        failures=pool.failures,
    )


def main(argv: list[str] | None = None) -> int:
    """
    Build a scale collection from the command line and print its summary as JSON.

    :param argv: Arguments (default: the process').
    :returns: The exit code.
    """
    parser = argparse.ArgumentParser(
        prog="python -m pipelines.measure.scale_corpus",
        description="Build a synthetic knowledge collection of N chunks (real text recombined) for scale benchmarks.",
    )
    parser.add_argument("knowledge", metavar="KNOWLEDGE_DIR", help="the knowledge folder whose chunks are recombined")
    parser.add_argument("--chunks", type=int, required=True, help="number of chunks in all")
    parser.add_argument("--data-dir", required=True, help="the deployment's data folder (its collection is replaced)")
    parser.add_argument("--seed", type=int, default=15, help="seed of the partner choice (default 15)")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    args = parser.parse_args(argv)
    deployment = Deployment.resolve(args.data_dir)
    try:
        corpus = build_scale_corpus(args.knowledge, args.chunks, deployment, args.seed, progress=not args.quiet)
    except (ValueError, FileNotFoundError) as err:
        parser.error(str(err))
    print(json.dumps(corpus.as_dict(), ensure_ascii=False, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
