"""The indexing tests again, against a real Milvus standalone server started by the suite."""

from __future__ import annotations

import pytest

from tests.pipelines import test_indexing

pytestmark = [pytest.mark.integration, pytest.mark.milvus_server]


class TestKnowledgeIndexerOnMilvusServer(test_indexing.TestKnowledgeIndexer):
    full_text = False  # Milvus 2.3 has no BM25 function: the collection is created without it

    @pytest.fixture
    def milvus_uri_for(self, milvus_server):
        return lambda folder: milvus_server.uri
