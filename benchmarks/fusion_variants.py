"""Compare ways of fusing dense similarity and BM25, offline, on an indexed eval dataset (exact search, all chunks).

Usage: python benchmarks/fusion_variants.py DATASET_DIR --data-dir D [--weights 0.02,0.04]

Reads every active chunk (vector, text, document) of the collection that `lookup-knowledge eval` built in D, embeds
the dataset's judged queries, scores every chunk densely and with BM25 (the project's terms, in-process), and prints
document-level nDCG@10 (Haystack's evaluator, best chunk per document) for each fusion variant and weight. Used for
the "fusion variants" record in docs/decisions.md: tune on one set, confirm on another.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from components.core.embedding_backends import get_backend
from components.store.knowledge_collection import KnowledgeCollection
from components.store.knowledge_index import KnowledgeIndex
from components.store.lexical import Bm25ChunkIndex, tokenize
from pipelines.measure.evaluation import EvalQuery, document_ranking, load_eval_set, score_rankings
from pipelines.settings import Deployment

Fusion = Callable[[np.ndarray, np.ndarray, np.ndarray, float], np.ndarray]


def _best_normalized(dense: np.ndarray, bm25: np.ndarray, ideal: np.ndarray, w: float) -> np.ndarray:
    best = bm25.max(axis=1, keepdims=True)
    return dense + w * bm25 / np.where(best > 0, best, 1)


def _ideal_normalized(dense: np.ndarray, bm25: np.ndarray, ideal: np.ndarray, w: float) -> np.ndarray:
    return dense + w * bm25 / ideal  # the shipped formula (`lexical_normalization: ideal`)


def _zscore(dense: np.ndarray, bm25: np.ndarray, ideal: np.ndarray, w: float) -> np.ndarray:
    def z(m: np.ndarray) -> np.ndarray:
        return (m - m.mean(axis=1, keepdims=True)) / (m.std(axis=1, keepdims=True) + 1e-9)

    return (1 - w) * z(dense) + w * z(bm25)


def _rrf(dense: np.ndarray, bm25: np.ndarray, ideal: np.ndarray, w: float) -> np.ndarray:
    def ranks(m: np.ndarray) -> np.ndarray:
        return np.argsort(np.argsort(-m, axis=1), axis=1)

    return 1 / (w + 1 + ranks(dense)) + 1 / (w + 1 + ranks(bm25))


VARIANTS: dict[str, Fusion] = {
    "best_normalized": _best_normalized,
    "ideal_normalized": _ideal_normalized,
    "zscore": _zscore,
    "rrf": _rrf,
}


def load_dataset(dataset: str, data_dir: str) -> tuple[list[dict[str, Any]], list[EvalQuery]]:
    """
    Read the active chunks of an indexed eval dataset and its judged queries.

    :param dataset: The dataset folder (with `eval.jsonl`).
    :param data_dir: Where `lookup-knowledge eval` indexed it.
    :returns: `{id, content, metadata, vector}` per active chunk, and the judged queries.
    """
    deployment = Deployment.resolve(data_dir)
    active = KnowledgeIndex.load(deployment.index_path).active_versions()
    collection = KnowledgeCollection(uri=deployment.milvus_uri, index_path=str(deployment.index_path))
    store = collection.store
    try:
        rows = [
            r
            for r in store.get_rows([r["id"] for r in store.scan_metadata()])
            if active.get(r["metadata"].get("source", "")) == r["metadata"].get("doc_version")
        ]
    finally:
        collection.close()
    return rows, [q for q in load_eval_set(Path(dataset) / "eval.jsonl") if q.expected]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dataset")
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--weights", default="0.02,0.04,0.15,0.2", help="weights (k for rrf) tried per variant")
    args = parser.parse_args()
    rows, queries = load_dataset(args.dataset, args.data_dir)
    vectors = np.asarray([r["vector"] for r in rows], dtype=np.float32)
    embedded = get_backend("multilingual-e5-small").embed_queries([q.query for q in queries])
    dense = (1 + np.asarray(embedded, dtype=np.float32) @ vectors.T) / 2
    bm25, ideal = _bm25([r["content"] for r in rows], [q.query for q in queries])
    docs = [r["metadata"].get("doc_id", r["id"]) for r in rows]
    gold = [q.expected for q in queries]

    def ndcg(scores: np.ndarray) -> float:
        rankings = [document_ranking([docs[j] for j in np.argsort(-row)[:200]]) for row in scores]
        return score_rankings(rankings, gold)["ndcg@10"]

    print(f"{Path(args.dataset).name}: {len(queries)} judged queries, {len(rows)} chunks")
    print(f"dense {ndcg(dense):.4f}   bm25 {ndcg(bm25):.4f}")
    for name, fuse in VARIANTS.items():
        cells = [f"{w:g}: {ndcg(fuse(dense, bm25, ideal, w)):.4f}" for w in map(float, args.weights.split(","))]
        print(f"{name:<18}" + "   ".join(cells), flush=True)


def _bm25(texts: list[str], queries: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """BM25 of every chunk for every query (Milvus' scale), and each query's largest possible score."""
    index = Bm25ChunkIndex.build([str(i) for i in range(len(texts))], texts)
    scores = np.zeros((len(queries), len(texts)), dtype=np.float32)
    ideal = np.ones((len(queries), 1), dtype=np.float32)
    for i, query in enumerate(queries):
        for chunk, score in index.search(query, top_k=len(texts)):
            scores[i, int(chunk)] = score
        ideal[i] = index.statistics.ideal_score(tokenize(query)) or 1.0
    return scores, ideal


if __name__ == "__main__":
    main()
