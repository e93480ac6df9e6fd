"""Side-by-side performance figures: the full lookup pipeline next to a bare Haystack retrieval pipeline.

All run in the same process, on the same Milvus collection and the same embedding model, in an order rotated
query by query so that machine noise hits them alike: the lookup pipeline as configured (BM25 inside Milvus, sidecar
off), the same with in-process BM25 (`lexical_source: local`), the same without the sidecar component at all,
bare embedding retrieval, and optionally the lookup pipeline with other parameters (`--compare`), so that a
configuration change is timed side by side with the shipped one. Reported: medians, p90s, ratios.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from haystack import Pipeline
from milvus_haystack import MilvusDocumentStore, MilvusEmbeddingRetriever

from components.filtered_retry_retriever import FilteredRetryRetriever
from components.offline_text_embedder import OfflineTextEmbedder
from components.sidecar_retriever import SidecarRetriever
from pipelines import load_pipeline, lookup
from pipelines.indexing import KnowledgeIndexer
from pipelines.loading import node_of_type
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
    knowledge_dir: str | Path | None = None,
    rounds: int = 3,
    data_dir: str | Path | None = None,
    compare: dict[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """
    Index a knowledge folder into a fresh data folder, then time lookups of its eval questions.

    :param knowledge_dir: The knowledge folder (default: the repository's `knowledge/`); its `eval.jsonl`
        supplies the queries.
    :param rounds: How many times every query runs through each pipeline.
    :param data_dir: Where to index (default: a new temporary folder).
    :param compare: Parameter overrides (`{component: {param: value}}`) of one more lookup pipeline timed beside
        the others (`lookup_pipeline_compared`).
    :returns: The figures.
    """
    kb = Path(knowledge_dir or REPO_ROOT / "knowledge")
    queries = [json.loads(line)["query"] for line in (kb / "eval.jsonl").read_text(encoding="utf-8").splitlines()]
    deployment = Deployment.resolve(data_dir or tempfile.mkdtemp(prefix="lookup-bench-"))
    indexer = KnowledgeIndexer(deployment)
    summary = indexer.index(kb, progress=False)
    collection, model = indexer.collection.schema.collection_name, indexer.embedding_model
    indexer.close()

    full = load_pipeline(data_dir=deployment.data_dir, milvus_uri=deployment.milvus_uri)
    retriever_name, retriever = node_of_type(full, FilteredRetryRetriever)
    local = load_pipeline(
        data_dir=deployment.data_dir,
        milvus_uri=deployment.milvus_uri,
        component_params={retriever_name: {"lexical_source": "local"}},
    )
    without_sidecar = load_pipeline(data_dir=deployment.data_dir, milvus_uri=deployment.milvus_uri)
    # and its connections: the switched-off sidecar's whole cost
    without_sidecar.remove_component(node_of_type(without_sidecar, SidecarRetriever)[0])
    bare = _bare_pipeline(deployment, collection, model, retriever.top_k)
    runners: dict[str, Callable[[str], object]] = {
        "bare_haystack": lambda q: bare.run({"embedder": {"text": q}}),
        "lookup_pipeline": lambda q: lookup(full, q),
        "lookup_pipeline_local_bm25": lambda q: lookup(local, q),
        "lookup_pipeline_without_sidecar": lambda q: lookup(without_sidecar, q),
    }
    if compare:
        compared = load_pipeline(
            data_dir=deployment.data_dir, milvus_uri=deployment.milvus_uri, component_params=compare
        )
        runners["lookup_pipeline_compared"] = lambda q: lookup(compared, q)
    for query in queries[:3]:  # warm every path before timing
        for run in runners.values():
            run(query)

    names = list(runners)
    timings: dict[str, list[float]] = {name: [] for name in names}
    for round_no in range(rounds):
        for i, query in enumerate(queries):
            shift = (i + round_no) % len(names)  # rotate the order so machine noise hits all alike
            for name in names[shift:] + names[:shift]:
                started = time.perf_counter()
                runners[name](query)
                timings[name].append((time.perf_counter() - started) * 1000)
    medians = {name: statistics.median(values) for name, values in timings.items()}
    figures: dict[str, Any] = {
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
        "p50_ratio_milvus_bm25_to_local_bm25": round(
            medians["lookup_pipeline"] / medians["lookup_pipeline_local_bm25"], 2
        ),
        "p50_ratio_sidecar_off_to_no_sidecar": round(
            medians["lookup_pipeline"] / medians["lookup_pipeline_without_sidecar"], 2
        ),
    }
    if compare:
        figures["compared_overrides"] = compare
        figures["p50_ratio_lookup_to_compared"] = round(
            medians["lookup_pipeline"] / medians["lookup_pipeline_compared"], 2
        )
    return figures
