"""BM25 inside Milvus with its own analyzers next to BM25 on the project's terms, on an indexed eval dataset.

Usage: python benchmarks/milvus_analyzers.py DATASET_DIR --data-dir D

Copies the dataset's active chunks into temporary Milvus Lite collections that differ only in how the BM25 text is
analyzed — Milvus' jieba analyzer and its standard analyzer on the raw chunk text, and the standard analyzer on our
terms (`lexical_text`: English stems, Chinese character bigrams), which is what the project ships — searches each
judged query there and prints document-level nDCG@10 (Haystack's evaluator, best chunk per document).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pymilvus import DataType, Function, FunctionType, MilvusClient

from benchmarks.fusion_variants import load_dataset
from components.store.lexical import lexical_text
from pipelines.measure.evaluation import document_ranking, score_rankings

ANALYZERS: dict[str, tuple[dict, Callable[[str], str]]] = {
    "milvus jieba, raw text": ({"tokenizer": "jieba", "filter": ["lowercase"]}, str),
    "milvus standard, raw text": ({"tokenizer": "standard", "filter": ["lowercase"]}, str),
    "our terms (shipped)": ({"tokenizer": "standard"}, lexical_text),
}


def _collection(client: MilvusClient, name: str, analyzer: dict) -> None:
    schema = client.create_schema()
    schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=512)
    schema.add_field("text", DataType.VARCHAR, max_length=65535, enable_analyzer=True, analyzer_params=analyzer)
    schema.add_field("sparse", DataType.SPARSE_FLOAT_VECTOR)
    schema.add_function(
        Function(
            name="bm25", function_type=FunctionType.BM25, input_field_names=["text"], output_field_names=["sparse"]
        )
    )
    index = client.prepare_index_params()
    index.add_index("sparse", index_type="SPARSE_INVERTED_INDEX", metric_type="BM25")
    client.create_collection(name, schema=schema, index_params=index)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dataset")
    parser.add_argument("--data-dir", required=True)
    args = parser.parse_args()
    rows, queries = load_dataset(args.dataset, args.data_dir)
    doc_of = {r["id"]: r["metadata"].get("doc_id", r["id"]) for r in rows}
    gold = [q.expected for q in queries]
    print(f"{Path(args.dataset).name}: {len(queries)} judged queries, {len(rows)} chunks")
    with tempfile.TemporaryDirectory() as folder:
        client = MilvusClient(str(Path(folder) / "analyzers.db"))
        for number, (label, (analyzer, prepare)) in enumerate(ANALYZERS.items()):
            name = f"a{number}"
            _collection(client, name, analyzer)
            for start in range(0, len(rows), 500):
                batch = rows[start : start + 500]
                client.insert(name, [{"id": r["id"], "text": prepare(r["content"])} for r in batch])
            client.flush(name)
            rankings = []
            for query in queries:
                text = prepare(query.query)
                hits = client.search(name, data=[text], anns_field="sparse", limit=100) if text.strip() else [[]]
                rankings.append(document_ranking([doc_of[h["id"]] for h in hits[0]]))
            print(f"{label:<28} BM25 nDCG@10 {score_rankings(rankings, gold)['ndcg@10']:.4f}", flush=True)
        client.close()


if __name__ == "__main__":
    main()
