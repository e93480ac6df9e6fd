"""Side-by-side performance figures: the full lookup pipeline next to a bare Haystack retrieval pipeline.

Both run in the same process, on the same Milvus collection and the same embedding model, alternating query by
query so that machine noise hits both alike. Reported: medians, p90s and their ratio.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from haystack import Pipeline
from milvus_haystack import MilvusDocumentStore, MilvusEmbeddingRetriever

from components.offline_text_embedder import OfflineTextEmbedder
from pipelines import load_pipeline, lookup
from pipelines.indexing import KnowledgeIndexer
from pipelines.settings import REPO_ROOT, Deployment


def _bare_pipeline(deployment: Deployment, collection: str, model: str, top_k: int) -> Pipeline:
    store = MilvusDocumentStore(
        connection_args={"uri": deployment.milvus_uri},
        collection_name=collection,
        text_field="content",
        index_params={"metric_type": "L2", "index_type": "AUTOINDEX", "params": {}},
    )
    bare = Pipeline()
    bare.add_component("embedder", OfflineTextEmbedder(model=model))
    bare.add_component("retriever", MilvusEmbeddingRetriever(document_store=store, top_k=top_k))
    bare.connect("embedder.embedding", "retriever.query_embedding")
    bare.warm_up()
    return bare


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run_bench(
    knowledge_dir: str | Path | None = None, rounds: int = 3, data_dir: str | Path | None = None
) -> dict[str, Any]:
    """
    Index a knowledge folder into a fresh data folder, then time lookups of its eval questions.

    :param knowledge_dir: The knowledge folder (default: the repository's `knowledge/`); its `eval.jsonl`
        supplies the queries.
    :param rounds: How many times every query runs through each pipeline.
    :param data_dir: Where to index (default: a new temporary folder).
    :returns: The figures.
    """
    kb = Path(knowledge_dir or REPO_ROOT / "knowledge")
    queries = [json.loads(line)["query"] for line in (kb / "eval.jsonl").read_text(encoding="utf-8").splitlines()]
    deployment = Deployment.resolve(data_dir or tempfile.mkdtemp(prefix="lookup-bench-"))
    indexer = KnowledgeIndexer(deployment)
    summary = indexer.index(kb, progress=False)
    collection, model = indexer.writer.collection_name, indexer.embedding_model
    indexer.close()

    full = load_pipeline(data_dir=deployment.data_dir, milvus_uri=deployment.milvus_uri)
    top_k = int(getattr(full.get_component("retriever"), "top_k", 10))
    bare = _bare_pipeline(deployment, collection, model, top_k)
    for query in queries[:3]:  # warm both paths before timing
        lookup(full, query)
        bare.run({"embedder": {"text": query}})

    timings: dict[str, list[float]] = {"bare_haystack": [], "lookup_pipeline": []}
    for round_no in range(rounds):
        for i, query in enumerate(queries):
            order = (
                ("bare_haystack", "lookup_pipeline")
                if (i + round_no) % 2 == 0
                else ("lookup_pipeline", "bare_haystack")
            )
            for name in order:
                started = time.perf_counter()
                if name == "bare_haystack":
                    bare.run({"embedder": {"text": query}})
                else:
                    lookup(full, query)
                timings[name].append((time.perf_counter() - started) * 1000)
    medians = {name: statistics.median(values) for name, values in timings.items()}
    return {
        "knowledge": str(kb),
        "documents": summary.files,
        "chunks": summary.chunks,
        "queries": len(queries),
        "rounds": rounds,
        "latency_ms": {
            name: {"p50": round(medians[name], 2), "p90": round(_percentile(values, 0.9), 2)}
            for name, values in timings.items()
        },
        "p50_ratio_lookup_to_bare": round(medians["lookup_pipeline"] / medians["bare_haystack"], 2),
        "p50_overhead_ms": round(medians["lookup_pipeline"] - medians["bare_haystack"], 2),
    }
