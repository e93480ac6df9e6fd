"""Indexing throughput next to the raw embedder's throughput on the same text, in one run.

Usage: python benchmarks/indexing_throughput.py KNOWLEDGE_DIR [--max-files N] [--raw-sample N] [--json FILE]

1. indexes KNOWLEDGE_DIR into a fresh temporary data folder (Milvus Lite) with `lookup-knowledge index`'s code;
2. chunks the same files the same way and times the bare embedding model on exactly the texts the pipeline embeds.
Prints files, chunks, seconds and characters per second of both, and their ratio (the pipeline's overhead).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from components.core.embedding_backends import get_backend
from components.heading_chunker import HeadingChunker
from components.markdown_loader import MarkdownKnowledgeLoader
from components.offline_document_embedder import OfflineDocumentEmbedder
from pipelines.indexing import KnowledgeIndexer
from pipelines.settings import Deployment


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("knowledge")
    parser.add_argument("--max-files", type=int, default=0, help="use only the first N files (0: all)")
    parser.add_argument("--json", default=None)
    parser.add_argument(
        "--raw-sample", type=int, default=0, help="time the raw model on N evenly spaced chunks only (0: all chunks)"
    )
    parser.add_argument("--keep-data", default=None, help="index into this (kept) data folder, not a temporary one")
    args = parser.parse_args()

    source = Path(args.knowledge).resolve()
    files = sorted(source.rglob("*.md"))
    if args.max_files:
        files = files[: args.max_files]
    work = Path(tempfile.mkdtemp(prefix="bench-index-"))
    kb = work / "knowledge"
    for path in files:
        target = kb / path.relative_to(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, target)

    indexer = KnowledgeIndexer(Deployment.resolve(args.keep_data or work / "data"))
    summary = indexer.index(kb, progress=True)
    indexer.close()

    docs = MarkdownKnowledgeLoader(root=str(kb)).run(sources=[str(p) for p in sorted(kb.rglob("*.md"))])["documents"]
    chunks = HeadingChunker().run(docs)["documents"]
    embedder = OfflineDocumentEmbedder()
    texts = [embedder._text_to_embed(c) for c in chunks]
    if args.raw_sample and args.raw_sample < len(texts):
        step = len(texts) / args.raw_sample
        texts = [texts[int(i * step)] for i in range(args.raw_sample)]
    backend = get_backend(embedder.model)
    started = time.perf_counter()
    for i in range(0, len(texts), embedder.batch_size):
        backend.embed_passages(texts[i : i + embedder.batch_size])
    raw_seconds = time.perf_counter() - started
    raw_chars = sum(len(t) for t in texts)

    result = {
        "knowledge": str(source),
        "files": summary.files,
        "failed": summary.failed,
        "chunks": summary.chunks,
        "index_seconds": round(summary.seconds, 1),
        "index_chars_per_second": round(summary.chars_per_second),
        "raw_embed_chunks": len(texts),
        "raw_embed_seconds": round(raw_seconds, 1),
        "raw_embed_chars_per_second": round(raw_chars / raw_seconds),
        "index_to_raw_throughput_ratio": round(summary.chars_per_second / (raw_chars / raw_seconds), 3),
    }
    print(json.dumps(result, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
