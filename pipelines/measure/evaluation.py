"""`lookup-knowledge eval`: document-level retrieval quality of the pipeline next to plain baselines, in one run.

Configs, all on the same Milvus collection and embedding model:
- `pipeline`: `pipelines.yaml` as configured; its ranking is the candidate list the evidence gate judged (the
  `ranking` its trace row records, before the evidence caps that only shape what an agent sees);
- `dense`: plain embedding retrieval (no hints, no filter, no rerank);
- `bm25`: BM25 over the same chunks, on the retriever's lexical path (Milvus full-text search, or in-process).
A retrieved chunk counts for its document (its best chunk ranks it). Metrics come from Haystack's document
evaluators; queries without judged documents are left out and counted.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from haystack import Document, Pipeline
from haystack.components.evaluators import DocumentMRREvaluator, DocumentNDCGEvaluator, DocumentRecallEvaluator
from tqdm import tqdm

from components.core.embedding_backends import get_backend
from components.core.scores import document_key
from components.store.knowledge_collection import KnowledgeCollection
from components.store.knowledge_index import KnowledgeIndex
from pipelines import load_pipeline, lookup_with_details
from pipelines.access import LOCAL_OPERATOR, Principal
from pipelines.indexing import KnowledgeIndexer
from pipelines.settings import DEFAULT_LOOKUP_PIPELINE, Deployment

CUTOFF = 10
#: how deep the `dense` and `bm25` baselines rank (the shipped retriever's `top_k`)
BASELINE_TOP_K = 60
#: how many chunks the baselines return as blocks (the shipped deduper's `max_blocks`)
BASELINE_BLOCKS = 6


@dataclass(frozen=True)
class EvalQuery:
    """One labelled question."""

    qid: str
    query: str
    expected: list[str]
    gold_categories: list[str]
    type: str = ""
    #: documents a newer version replaces (supersession cases): they must never come first
    superseded: tuple[str, ...] = ()


def load_eval_set(path: str | Path) -> list[EvalQuery]:
    """
    Read an `eval.jsonl` file (format of `shared/eval/README.md`).

    :param path: The file.
    :returns: The queries, judged or not.
    :raises ValueError: Naming the line of a malformed entry.
    """
    queries = []
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            queries.append(
                EvalQuery(
                    qid=str(row.get("qid", number)),
                    query=str(row["query"]),
                    expected=[str(d) for d in row.get("expected_doc_ids") or []],
                    gold_categories=[str(c) for c in row.get("gold_categories") or []],
                    type=str(row.get("type") or ""),
                    superseded=tuple(str(d) for d in row.get("superseded_doc_ids") or []),
                )
            )
        except (ValueError, KeyError, TypeError) as err:
            msg = f"{path}:{number}: not a valid eval entry ({err})"
            raise ValueError(msg) from err
    return queries


def document_ranking(doc_ids: list[str], cutoff: int = CUTOFF) -> list[str]:
    """
    Turn a ranked list of chunks' document ids into a ranked list of documents (best chunk first).

    :param doc_ids: The document id of each retrieved chunk, best chunk first.
    :param cutoff: Most documents kept.
    :returns: Unique document ids in order of first appearance.
    """
    return list(dict.fromkeys(doc_ids))[:cutoff]


def score_rankings(rankings: list[list[str]], gold: list[list[str]]) -> dict[str, float]:
    """
    Compute nDCG@10, Recall@5, Recall@10 and MRR@10 with Haystack's document evaluators (binary relevance).

    :param rankings: Ranked document ids per query.
    :param gold: Relevant document ids per query (non-empty).
    :returns: The averaged metrics.
    """

    def docs(ids: list[str]) -> list[Document]:
        return [Document(id=i, content=i) for i in ids]

    truth = [docs(g) for g in gold]
    at10 = [docs(r[:10]) for r in rankings]
    at5 = [docs(r[:5]) for r in rankings]
    recall = DocumentRecallEvaluator(mode="multi_hit")
    return {
        "ndcg@10": DocumentNDCGEvaluator().run(ground_truth_documents=truth, retrieved_documents=at10)["score"],
        "recall@5": recall.run(ground_truth_documents=truth, retrieved_documents=at5)["score"],
        "recall@10": recall.run(ground_truth_documents=truth, retrieved_documents=at10)["score"],
        "mrr@10": DocumentMRREvaluator().run(ground_truth_documents=truth, retrieved_documents=at10)["score"],
    }


@dataclass(frozen=True)
class Answer:
    """What one config answered: its ranking, and what it would hand an agent."""

    ranking: list[str]  # the document of every ranked chunk, best first
    found: bool
    blocks: list[str]  # the document of every returned block
    relevance: str | None = None  # the pipeline's relevanceLevel


class _Baselines:
    """
    The `dense` and `bm25` configs, reading the deployment's collection (on the pipeline's default BM25 path). They
    never abstain: whatever they rank, their first `blocks` chunks are what they would return.
    """

    def __init__(self, deployment: Deployment, model: str, top_k: int, blocks: int) -> None:
        self.collection = KnowledgeCollection(uri=deployment.milvus_uri, index_path=str(deployment.index_path))
        self.backend = get_backend(model)
        self.top_k = top_k
        self.blocks = blocks
        self.doc_of = {r["id"]: r["doc_id"] for r in self.collection.scan(keys=("doc_id",))}

    def _answer(self, ranking: list[str]) -> Answer:
        return Answer(ranking=ranking, found=bool(ranking), blocks=ranking[: self.blocks])

    def dense(self, query: str) -> Answer:
        vector = self.backend.embed_queries([query])[0].tolist()
        hits = self.collection.dense_search(vector, self.top_k, path="sdk")
        return self._answer([document_key(d.meta, d.id) for d in hits])

    def bm25_search(self, query: str) -> Answer:
        pairs, _ = self.collection.lexical_search(query, self.top_k)
        return self._answer([self.doc_of.get(chunk, chunk) for chunk, _ in pairs])

    def close(self) -> None:
        self.collection.close()


@dataclass
class _Observed:
    """What one pipeline run showed besides its ranking: L0 and retry decisions, and the sidecar's report."""

    category_filter: str
    fallback_reason: str | None
    selected_attempt: str | None
    sidecar: dict[str, Any] | None
    chunk_docs: list[tuple[str, str]]  # (evidence key, document) of every candidate the gate judged, in rank order


def _document_of(index_path: Path) -> Callable[[str], str]:
    """An evidence key's document (its `doc_id`, else its source), from the knowledge index the pipeline read."""
    doc_id = {doc.source: doc.doc_id for doc in KnowledgeIndex.load(index_path).documents}

    def document(key: str) -> str:
        source, _, index = key.rpartition("#")
        source = source if index.isdigit() else key
        return doc_id.get(source, source)

    return document


def _pipeline_runner(
    pipeline: Pipeline, index_path: Path, log: list[_Observed], principal: Principal
) -> Callable[[str], Answer]:
    """Each query through the pipeline, for `principal`; what eval needs is read off what its trace row records."""
    document = _document_of(index_path)

    def run(query: str) -> Answer:
        result, details = lookup_with_details(pipeline, query, principal=principal)
        trace = details.get("retrieval_trace") or {}
        sidecar = details.get("sidecar")
        log.append(
            _Observed(
                category_filter=(details.get("l0_hints") or {}).get("category_filter") or "",
                fallback_reason=trace.get("fallback_reason"),
                selected_attempt=trace.get("selected_attempt"),
                sidecar=sidecar or None,
                chunk_docs=[(key, document(key)) for key in details.get("ranking", [])],
            )
        )
        return Answer(
            ranking=[doc for _, doc in log[-1].chunk_docs],
            found=bool(result["found"]),
            blocks=[block["docId"] for block in result["evidenceBlocks"]],
            relevance=result["relevanceLevel"],
        )

    return run


def evaluate(
    dataset_dir: str | Path,
    data_dir: str | Path | None = None,
    pipeline_path: str | Path = DEFAULT_LOOKUP_PIPELINE,
    component_params: dict[str, dict[str, Any]] | None = None,
    progress: bool = True,
    limit: int | None = None,
    baselines: bool = True,
    negatives: list[str | Path] | None = None,
    principal: Principal | None = None,
) -> dict[str, Any]:
    """
    Index the dataset's knowledge (if not yet indexed) and score its questions with every config.

    :param dataset_dir: A folder with `knowledge/` and `eval.jsonl`.
    :param data_dir: Where the dataset is indexed (default `./data/eval/<dataset name>`).
    :param pipeline_path: The pipeline YAML measured as `pipeline`.
    :param component_params: Overrides for the pipeline's components.
    :param progress: Show progress bars.
    :param limit: Use only the first N judged queries (for quick checks).
    :param baselines: Also measure `dense` and `bm25` (off only for parameter sweeps).
    :param negatives: Files of unanswerable queries (`eval.jsonl` format, no judgments, `type` such as
        `off-domain`), run besides the dataset's own `negatives.jsonl` when it has one.
    :param principal: Whom the pipeline's lookups are for (default `LOCAL_OPERATOR`: every page; `eval --as NAME`
        measures what one principal finds).
    :returns: The report (JSON-ready).
    :raises FileNotFoundError: If the folder lacks `knowledge/` or `eval.jsonl`, or a negatives file is missing.
    """
    dataset = Path(dataset_dir).resolve()
    eval_file = dataset / "eval.jsonl"
    # a dataset folder holds knowledge/; a knowledge folder may also hold its own eval.jsonl (like knowledge/)
    knowledge = dataset / "knowledge" if (dataset / "knowledge").is_dir() else dataset
    for path in (knowledge, eval_file):
        if not path.exists():
            msg = f"{path} does not exist; a dataset folder needs knowledge/ and eval.jsonl"
            raise FileNotFoundError(msg)
    queries = load_eval_set(eval_file)
    judged = [q for q in queries if q.expected][:limit]
    negative_files = [dataset / "negatives.jsonl"] if (dataset / "negatives.jsonl").exists() else []
    negative_files += [Path(path) for path in negatives or []]
    unanswerable = [q for path in negative_files for q in load_eval_set(path)][:limit]
    deployment = Deployment.resolve(data_dir or Path("data") / "eval" / dataset.name)

    indexer = KnowledgeIndexer(deployment)
    summary = indexer.index(knowledge, progress=progress)
    model = indexer.embedding_model
    indexer.close()

    pipeline = load_pipeline(
        pipeline_path,
        data_dir=deployment.data_dir,
        milvus_uri=deployment.milvus_uri,
        trace_db_url=deployment.trace_db_url,
        component_params=component_params,
    )
    observed: list[_Observed] = []
    runners: dict[str, Callable[[str], Answer]] = {
        "pipeline": _pipeline_runner(pipeline, deployment.index_path, observed, principal or LOCAL_OPERATOR)
    }
    plain = _Baselines(deployment, model, BASELINE_TOP_K, BASELINE_BLOCKS) if baselines else None
    if plain is not None:  # the same collection and schema as the pipeline's
        runners.update(dense=plain.dense, bm25=plain.bm25_search)
    answers: dict[str, list[Answer]] = {name: [] for name in runners}
    latencies: dict[str, list[float]] = {name: [] for name in runners}
    for query in tqdm(judged, desc="Querying", unit="query", disable=not progress):
        for name, run in runners.items():
            started = time.perf_counter()
            answers[name].append(run(query.query))
            latencies[name].append((time.perf_counter() - started) * 1000)
    judged_log = list(observed)  # the L0 and sidecar figures are about the judged queries only
    abstained: dict[str, list[bool]] = {name: [] for name in runners}
    for query in tqdm(unanswerable, desc="Negatives", unit="query", disable=not progress):
        for name, run in runners.items():
            abstained[name].append(not run(query.query).found)
    if plain is not None:
        plain.close()

    rankings = {name: [document_ranking(a.ranking) for a in given] for name, given in answers.items()}
    gold = [q.expected for q in judged]
    configs = {}
    for name in runners:
        metrics = score_rankings(rankings[name], gold) if judged else {}
        metrics.update(evidence_stats(answers[name], judged))
        if unanswerable:
            metrics["no_evidence_rate"] = sum(abstained[name]) / len(unanswerable)
        metrics["latency_ms_p50"] = statistics.median(latencies[name]) if judged else 0.0
        configs[name] = {k: round(v, 4) for k, v in metrics.items()}
    return {
        "dataset": dataset.name,
        "queries": len(queries),
        "judged": len(judged),
        "unjudged_left_out": len([q for q in queries if not q.expected]),
        "index": summary.as_dict(),
        "configs": configs,
        "l0": _l0_stats(judged, judged_log, rankings["pipeline"]),
        "by_type": scores_by_type(judged, rankings),
        "negatives": negative_stats(unanswerable, abstained, [str(p) for p in negative_files]),
        "relevance": relevance_stats(answers["pipeline"], judged),
        "sidecar": sidecar_stats(judged, judged_log),
        "supersession": supersession_stats(answers, judged),
    }


def supersession_stats(answers: dict[str, list[Answer]], judged: list[EvalQuery]) -> dict[str, Any] | None:
    """
    How each config fares on supersession cases (queries naming `superseded_doc_ids`).

    :param answers: Each config's answers, in the order of `judged`.
    :param judged: The judged queries.
    :returns: None without such cases; else `queries` and per config `superseded_first_rate` (the first returned
        block is a superseded document's: it must be 0), `successor_first_rate` (it is the successor's) and
        `superseded_returned_rate` (a superseded document is among the blocks at all).
    """
    cases = [i for i, q in enumerate(judged) if q.superseded]
    if not cases:
        return None

    def rates(given: list[Answer]) -> dict[str, float]:
        first = [given[i].blocks[0] if given[i].blocks else "" for i in cases]
        old_first = sum(f in judged[i].superseded for f, i in zip(first, cases, strict=True))
        new_first = sum(f in judged[i].expected for f, i in zip(first, cases, strict=True))
        old_returned = sum(any(b in judged[i].superseded for b in given[i].blocks) for i in cases)
        return {
            "superseded_first_rate": round(old_first / len(cases), 4),
            "successor_first_rate": round(new_first / len(cases), 4),
            "superseded_returned_rate": round(old_returned / len(cases), 4),
        }

    return {"queries": len(cases), "configs": {name: rates(given) for name, given in answers.items()}}


def evidence_stats(answers: list[Answer], judged: list[EvalQuery]) -> dict[str, float]:
    """
    How often a config says it found something for an answerable query, and how good what it returns is.

    :param answers: One config's answers, aligned with `judged`.
    :param judged: The judged queries.
    :returns: `found_rate` (share of judged queries answered with evidence), `block_precision` (share of returned
        blocks from judged-relevant documents, over the queries with blocks) and `block_recall` (share of a query's
        judged documents among its returned blocks, over all judged queries).
    """
    if not judged:
        return {}
    with_blocks = [(a, q) for a, q in zip(answers, judged, strict=True) if a.found and a.blocks]
    precision = [sum(doc in q.expected for doc in a.blocks) / len(a.blocks) for a, q in with_blocks]
    recall = [
        len(set(a.blocks) & set(q.expected)) / len(set(q.expected)) if a.found else 0.0
        for a, q in zip(answers, judged, strict=True)
    ]
    return {
        "found_rate": sum(a.found for a in answers) / len(judged),
        "block_precision": statistics.mean(precision) if precision else 0.0,
        "block_recall": statistics.mean(recall),
    }


def negative_stats(queries: list[EvalQuery], abstained: dict[str, list[bool]], files: list[str]) -> dict[str, Any]:
    """
    How often each config answers an unanswerable query with no evidence, per kind of negative.

    :param queries: The negative queries.
    :param abstained: Per config, whether it returned no evidence, aligned with `queries`.
    :param files: Where the negatives came from.
    :returns: `{files, queries, by_type: {type: {queries, no_evidence_rate: {config: rate}}}}`.
    """
    groups: dict[str, list[int]] = {}
    for i, query in enumerate(queries):
        groups.setdefault(query.type or "negative", []).append(i)
    return {
        "files": files,
        "queries": len(queries),
        "by_type": {
            kind: {
                "queries": len(picked),
                "no_evidence_rate": {
                    name: round(sum(flags[i] for i in picked) / len(picked), 4) for name, flags in abstained.items()
                },
            }
            for kind, picked in sorted(groups.items())
        },
    }


def relevance_stats(answers: list[Answer], judged: list[EvalQuery]) -> dict[str, Any]:
    """
    Whether the pipeline's `relevanceLevel` means what it says: quality per level (`high` should beat `medium`,
    which should beat `low`).

    :param answers: The pipeline's answers, aligned with `judged`.
    :param judged: The judged queries.
    :returns: `{level: {queries, hit@1, ndcg@10}}`, where hit@1 is whether the first returned block is from a
        judged-relevant document.
    """
    levels: dict[str, list[int]] = {}
    for i, answer in enumerate(answers):
        levels.setdefault(answer.relevance or "none", []).append(i)
    order = ("high", "medium", "low", "none")
    return {
        level: {
            "queries": len(picked),
            "hit@1": round(
                sum(bool(answers[i].blocks) and answers[i].blocks[0] in judged[i].expected for i in picked)
                / len(picked),
                4,
            ),
            "ndcg@10": round(
                score_rankings(
                    [document_ranking(answers[i].ranking) for i in picked], [judged[i].expected for i in picked]
                )["ndcg@10"],
                4,
            ),
        }
        for level in order
        if (picked := levels.get(level))
    }


def scores_by_type(judged: list[EvalQuery], rankings: dict[str, list[list[str]]]) -> dict[str, Any]:
    """
    Break nDCG@10 down by query type, for sets whose queries carry a `type`.

    :param judged: The judged queries.
    :param rankings: Ranked document ids per config, aligned with `judged`.
    :returns: `{type: {"queries": n, "ndcg@10": {config: value}}}`; untyped queries are in no group.
    """
    groups: dict[str, list[int]] = {}
    for i, query in enumerate(judged):
        if query.type:
            groups.setdefault(query.type, []).append(i)
    return {
        kind: {
            "queries": len(picked),
            "ndcg@10": {
                name: round(
                    score_rankings([ranked[i] for i in picked], [judged[i].expected for i in picked])["ndcg@10"], 4
                )
                for name, ranked in rankings.items()
            },
        }
        for kind, picked in sorted(groups.items())
    }


def _l0_stats(judged: list[EvalQuery], log: list[_Observed], rankings: list[list[str]]) -> dict[str, Any]:
    n = len(log) or 1
    filtered = [(q, entry) for q, entry in zip(judged, log, strict=True) if entry.category_filter]
    correct = [q for q, entry in filtered if entry.category_filter in q.gold_categories]
    per_attempt: dict[str, Any] = {}
    for attempt in ("filtered", "unfiltered"):
        picked = [i for i, entry in enumerate(log) if entry.selected_attempt == attempt]
        if picked:
            scores = score_rankings([rankings[i] for i in picked], [judged[i].expected for i in picked])
            per_attempt[attempt] = {"queries": len(picked), "ndcg@10": round(scores["ndcg@10"], 4)}
    return {
        "filter_rate": round(len(filtered) / n, 4),
        "filter_precision": round(len(correct) / len(filtered), 4) if filtered else None,
        "retry_rate": round(sum(1 for entry in log if entry.fallback_reason) / n, 4),
        "selected_attempt_quality": per_attempt,
    }


def sidecar_stats(judged: list[EvalQuery], log: list[_Observed]) -> dict[str, Any] | None:
    """
    Aggregate the sidecar's comparison reports over a whole set, against the judgments.

    For every query the sidecar compared (status `ok`), its top `k` rows are set against the main ranking's top `k`
    chunks (`k` = the sidecar's `top_k`): the chunk overlap, and whether one side found a judged-relevant document
    that the other side's top `k` lacks.

    :param judged: The judged queries.
    :param log: What each pipeline run showed, aligned with `judged`.
    :returns: `{retriever, mode, collection, k, queries, status, mean_overlap_at_k, sidecar_found_main_missed,
        main_found_sidecar_missed, latency_ms_p50}` (rates over the compared queries), or None when the pipeline
        has no sidecar or it is off.
    """
    reports = [entry.sidecar for entry in log]
    first = next((r for r in reports if r and r.get("enabled")), None)
    if first is None:
        return None
    status: dict[str, int] = {}
    overlaps, sidecar_only, main_only, latencies = [], 0, 0, []
    k = 0
    for query, entry, report in zip(judged, log, reports, strict=True):
        state = (report or {}).get("status", "off")
        status[state] = status.get(state, 0) + 1
        if state != "ok" or report is None:
            continue
        rows = report["rows"]
        k = max(k, len(rows), report["comparison"]["main_count"])
        gold = set(query.expected)
        main_docs = {doc for _, doc in entry.chunk_docs[: report["comparison"]["main_count"]]}
        side_docs = {row["doc_id"] for row in rows}
        overlaps.append(report["comparison"]["overlap_ratio"])
        sidecar_only += bool((side_docs - main_docs) & gold)
        main_only += bool((main_docs - side_docs) & gold)
        latencies.append(report["latency_ms"])
    compared = len(overlaps)
    return {
        "retriever": first.get("retriever"),
        "mode": first.get("mode"),
        "collection": first.get("collection"),
        "k": k,
        "queries": len(log),
        "status": status,
        "mean_overlap_at_k": round(statistics.mean(overlaps), 4) if compared else None,
        "sidecar_found_main_missed": round(sidecar_only / compared, 4) if compared else None,
        "main_found_sidecar_missed": round(main_only / compared, 4) if compared else None,
        "latency_ms_p50": round(statistics.median(latencies), 2) if compared else None,
    }


def format_table(report: dict[str, Any]) -> str:
    """
    Render the report as a terminal table.

    :param report: From `evaluate`.
    :returns: The table text.
    """
    columns = ("ndcg@10", "recall@5", "recall@10", "mrr@10", "latency_ms_p50")
    lines = [
        f"{report['dataset']}: {report['judged']} judged queries ({report['unjudged_left_out']} without "
        f"document judgments left out)",
        f"{'config':<12}" + "".join(f"{c:>16}" for c in columns),
    ]
    for name, metrics in report["configs"].items():
        lines.append(f"{name:<12}" + "".join(f"{metrics.get(c, 0):>16.4f}" for c in columns))
    l0 = report["l0"]
    precision = "n/a" if l0["filter_precision"] is None else f"{l0['filter_precision']:.3f}"
    lines.append(
        f"L0: filter_rate {l0['filter_rate']:.3f}, filter_precision {precision}, retry_rate {l0['retry_rate']:.3f}"
    )
    for kind, group in report.get("by_type", {}).items():
        scores = ", ".join(f"{name} {value:.3f}" for name, value in group["ndcg@10"].items())
        lines.append(f"  nDCG@10 on {kind} ({group['queries']} queries): {scores}")
    evidence = ("found_rate", "block_precision", "block_recall", "no_evidence_rate")
    lines.append(f"{'evidence':<12}" + "".join(f"{c:>18}" for c in evidence))
    for name, metrics in report["configs"].items():
        lines.append(
            f"{name:<12}" + "".join(f"{metrics[c]:>16.4f}" if c in metrics else f"{'-':>16}" for c in evidence)
        )
    supersession = report.get("supersession") or {}
    for name, rates in (supersession.get("configs") or {}).items():
        lines.append(
            f"  supersession ({supersession['queries']} queries) {name}: superseded first "
            f"{rates['superseded_first_rate']:.3f}, successor first {rates['successor_first_rate']:.3f}, superseded "
            f"returned {rates['superseded_returned_rate']:.3f}"
        )
    negatives = report.get("negatives") or {}
    for kind, group in (negatives.get("by_type") or {}).items():
        rates = ", ".join(f"{name} {value:.3f}" for name, value in group["no_evidence_rate"].items())
        lines.append(f"  no_evidence on {kind} negatives ({group['queries']} queries): {rates}")
    relevance = report.get("relevance") or {}
    if relevance:
        levels = "; ".join(
            f"{level} {v['queries']} queries hit@1 {v['hit@1']:.3f} nDCG@10 {v['ndcg@10']:.3f}"
            for level, v in relevance.items()
        )
        lines.append(f"relevanceLevel: {levels}")
    side = report.get("sidecar")
    if side:
        what = " ".join(str(part) for part in (side["retriever"], side["mode"] or "", f"on {side['collection']}"))
        compared = side["status"].get("ok", 0)
        if compared:
            lines.append(
                f"Sidecar ({what}): {compared} of {side['queries']} queries compared, mean overlap@{side['k']} "
                f"{side['mean_overlap_at_k']:.3f}; found a judged document the main path missed in "
                f"{side['sidecar_found_main_missed']:.1%} of them, the main path one the sidecar missed in "
                f"{side['main_found_sidecar_missed']:.1%}"
            )
        else:
            lines.append(f"Sidecar ({what}): nothing compared ({side['status']})")
    return "\n".join(lines)


def plot_report(report: dict[str, Any], path: str | Path) -> None:
    """
    Draw the configs' metrics side by side as a PNG.

    :param report: From `evaluate`.
    :param path: The PNG file.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = ("ndcg@10", "recall@5", "recall@10", "mrr@10")
    names = list(report["configs"])
    width = 0.8 / len(names)
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for i, name in enumerate(names):
        values = [report["configs"][name].get(m, 0) for m in metrics]
        bars = ax.bar([x + i * width for x in range(len(metrics))], values, width, label=name)
        ax.bar_label(bars, fmt="%.3f", fontsize=7)
    ax.set_xticks([x + width * (len(names) - 1) / 2 for x in range(len(metrics))], metrics)
    ax.set_ylim(0, 1)
    ax.set_title(f"{report['dataset']} — {report['judged']} judged queries")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
