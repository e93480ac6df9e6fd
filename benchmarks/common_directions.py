"""Does a similarity without the collection's common directions tell answered questions from unanswered ones?

    lookup-knowledge index --knowledge ../shared/eval/gitlab_handbook/knowledge --data-dir /tmp/gitlab
    python benchmarks/common_directions.py /tmp/gitlab ../shared/eval/gitlab_handbook/eval.jsonl

For every judged query it takes the best chunk's cosine similarity to the query (e5, as indexed) three ways: as is;
with the collection's mean vector subtracted from both (`k=0`); and with the mean and the top `k` principal
directions of the chunks removed ("all but the top"). An answered question's best chunk is taken over every chunk;
an unanswered one is simulated by leaving out the judged documents (`leave-doc`: their neighbours stay, the hardest
case) or the judged documents' categories (`leave-cat`, as `benchmarks/build_negatives.py` removes them). Printed per
way: the AUC of answered over unanswered (1.0: a threshold separates them), the share of unanswered ones below the
similarity that 95 % and 90 % of the answered ones reach, where the noise probes' 95th percentile lies, and a
reference of the collection's own: the median of its chunks' best similarity to another document's chunks, with the
answered questions' first quartile measured from it (a reference that carried over would put it alike in every set).
docs/decisions.md D80 has the figures.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from components.embedders.offline_text_embedder import OfflineTextEmbedder
from components.store.collection_statistics import noise_probes
from pipelines.indexing import KnowledgeIndexer
from pipelines.settings import Deployment

WAYS: list[int | None] = [None, 0, 1, 2, 3, 5, 8]


def _unit(rows: np.ndarray) -> np.ndarray:
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def _without(rows: np.ndarray, mean: np.ndarray, directions: np.ndarray) -> np.ndarray:
    centered = rows - mean
    return _unit(centered - (centered @ directions.T) @ directions)


def _auc(answered: np.ndarray, unanswered: np.ndarray) -> float:
    above = (answered[:, None] > unanswered[None, :]).mean()
    return float(above + 0.5 * (answered[:, None] == unanswered[None, :]).mean())


def _reference(chunk_side: np.ndarray, doc_ids: np.ndarray, sample: int = 1500) -> float:
    """The median of (a seeded sample of) the chunks' best similarity to another document's chunks."""
    rows = np.random.default_rng(0).choice(len(chunk_side), min(sample, len(chunk_side)), replace=False)
    scores = chunk_side[rows] @ chunk_side.T
    scores[doc_ids[rows][:, None] == doc_ids[None, :]] = -1.0
    return float(np.median(scores.max(axis=1)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("data_dir", type=Path, help="an indexed data folder")
    parser.add_argument("eval_file", type=Path, help="the set's eval.jsonl")
    args = parser.parse_args()
    indexer = KnowledgeIndexer(Deployment.resolve(args.data_dir))
    try:
        store = indexer.collection
        store.warm_up()
        chunks = store.chunks_of(store.active_versions())
    finally:
        indexer.close()
    vectors = _unit(np.asarray([c.embedding for c in chunks], dtype=np.float32))
    doc_ids = np.asarray([c.meta["doc_id"] for c in chunks])
    categories = np.asarray([c.meta["category"] for c in chunks])
    mean = vectors.mean(axis=0)
    principal = np.linalg.svd(vectors - mean, full_matrices=False)[2]
    queries = [json.loads(line) for line in args.eval_file.read_text(encoding="utf-8").splitlines() if line.strip()]
    queries = [q for q in queries if q.get("expected_doc_ids")]
    embedder = OfflineTextEmbedder()
    embedder.warm_up()
    asked = _unit(np.asarray([embedder.run(q["query"])["embedding"] for q in queries], dtype=np.float32))
    probes = _unit(np.asarray([embedder.run(p)["embedding"] for p in noise_probes()], dtype=np.float32))
    print(f"{args.data_dir}: {len(chunks)} chunks, {len(queries)} judged queries")
    for k in WAYS:
        if k is None:
            chunk_side, query_side, probe_side = vectors, asked, probes
        else:
            chunk_side, query_side, probe_side = (_without(m, mean, principal[:k]) for m in (vectors, asked, probes))
        scores = query_side @ chunk_side.T
        answered = scores.max(axis=1)
        line = [f"k={'raw' if k is None else k:>3}"]
        for name, left_out in (("leave-doc", doc_ids), ("leave-cat", categories)):
            keys = "expected_doc_ids" if name == "leave-doc" else "gold_categories"
            unanswered = np.asarray(
                [row[~np.isin(left_out, q[keys])].max() for row, q in zip(scores, queries, strict=True)]
            )
            below = [float((unanswered < np.quantile(answered, p)).mean()) for p in (0.05, 0.10)]
            line.append(f"{name} AUC {_auc(answered, unanswered):.3f} below@95 {below[0]:.2f} below@90 {below[1]:.2f}")
        noise = float(np.quantile((probe_side @ chunk_side.T).max(axis=1), 0.95))
        line.append(f"probes p95 {noise:.3f}, answered median {float(np.median(answered)):.3f}")
        reference = _reference(chunk_side, doc_ids)
        quartile = float(np.quantile(answered, 0.25)) - reference
        line.append(f"reference {reference:.3f}, answered q25 - reference {quartile:+.3f}")
        print(" | ".join(line))


if __name__ == "__main__":
    main()
