"""The lookup scenarios again, against a real Milvus standalone server started by the suite."""

from __future__ import annotations

import pytest

from tests.pipelines import test_lookup_pipeline

pytestmark = [pytest.mark.integration, pytest.mark.milvus_server]


class TestLookupPipelineOnMilvusServer(test_lookup_pipeline.TestLookupPipeline):
    @pytest.fixture(scope="class")
    @classmethod
    def milvus_uri(cls, milvus_server) -> str:
        return milvus_server.uri
