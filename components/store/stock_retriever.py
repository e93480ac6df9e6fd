"""milvus-haystack's own embedding retriever on a knowledge collection, as it comes: the bare Haystack baseline."""

from __future__ import annotations

from milvus_haystack import MilvusDocumentStore, MilvusEmbeddingRetriever

from components.store.lite_host import LiteHostLease
from components.store.schema import is_lite_uri


def stock_retriever(
    uri: str, collection_name: str, top_k: int
) -> tuple[MilvusEmbeddingRetriever, LiteHostLease | None]:
    """
    milvus-haystack's `MilvusEmbeddingRetriever` over its stock `MilvusDocumentStore`, on a collection of this project.

    What `lookup-knowledge bench` times a lookup against: plain Haystack on the same store, with no metadata
    handling, filters, hybrid search or evidence rules of this project.

    :param uri: The store's URI (a Milvus Lite folder is reached through its host, which every process shares).
    :param collection_name: The collection.
    :param top_k: Hits per search.
    :returns: The retriever (not warmed up), and the lease on the Lite folder's host to keep while it is used (None
        for a server).
    """
    lease = LiteHostLease.acquire(uri) if is_lite_uri(uri) else None
    store = MilvusDocumentStore(
        connection_args={"uri": lease.uri if lease else uri},
        collection_name=collection_name,
        text_field="content",
        index_params={"metric_type": "L2", "index_type": "AUTOINDEX", "params": {}},
    )
    return MilvusEmbeddingRetriever(document_store=store, top_k=top_k), lease
