"""Every unreadable knowledge entry is reported with its name and reason while the run goes on (real indexing)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from components.store.knowledge_index import KnowledgeIndex
from components.store.milvus_chunk_store import MilvusChunkStore
from components.store.schema import CollectionSchema
from pipelines.indexing import KnowledgeIndexer
from pipelines.settings import Deployment

REPO_ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.integration

GOOD = "---\nid: {id}\ntitle: {title}\ncategory: ops\n---\n# {title}\n\nRestart the worker when the queue stalls.\n"
BOMB = (
    "---\na: &a [x, x, x, x, x, x, x, x, x]\n"
    + "".join(
        f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
        for p, c in zip("abcdefgh", "bcdefghi", strict=True)
    )
    + "---\n# Bomb\n\nbody\n"
)


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile")
    kb = root / "knowledge"
    (kb / "ops").mkdir(parents=True)
    (kb / "ops" / "good.md").write_text(GOOD.format(id="good", title="Good"), encoding="utf-8")
    (kb / "ops" / "twin-a.md").write_text(GOOD.format(id="twin", title="Twin A"), encoding="utf-8")
    (kb / "ops" / "twin-b.md").write_text(GOOD.format(id="twin", title="Twin B"), encoding="utf-8")
    (kb / "ops" / "sub").mkdir()
    (kb / "ops" / "folder.md").symlink_to(kb / "ops" / "sub")  # a link to a folder is reported, never followed
    (kb / "ops" / "notes.md").mkdir()  # a folder named like a file is a folder: walked, nothing in it
    (kb / "ops" / "dangling.md").symlink_to(kb / "ops" / "nowhere.md")
    (kb / "ops" / "loop.md").symlink_to(kb / "ops" / "loop.md")
    outside = root / "secret.md"
    outside.write_text(GOOD.format(id="secret", title="Secret"), encoding="utf-8")
    (kb / "ops" / "escape.md").symlink_to(outside)
    (kb / "ops" / "binary.md").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    (kb / "ops" / "latin1.md").write_bytes("# Caf\xe9\n\nna\xefve text\n".encode("latin-1"))
    (kb / "ops" / "empty.md").write_bytes(b"")
    (kb / "ops" / "huge.md").write_text("# Huge\n\n" + "word " * 120_000, encoding="utf-8")
    (kb / "ops" / "bomb.md").write_text(BOMB, encoding="utf-8")
    (kb / "ops" / "fat-frontmatter.md").write_text(
        "---\nnotes: " + "x" * 20_000 + "\n---\n# Fat\n\nbody\n", encoding="utf-8"
    )
    indexer = KnowledgeIndexer(Deployment.resolve(root / "data"))
    started = time.perf_counter()
    try:
        summary = indexer.index(kb, progress=False)
    finally:
        indexer.close()
    return summary, time.perf_counter() - started, kb


class TestKnowledgeFiles:
    def test_the_good_files_are_indexed_and_the_run_goes_on(self, hostile):
        summary, _, _ = hostile
        assert summary.indexed == 3  # good, twin-a, twin-b
        assert summary.files == 13

    @pytest.mark.parametrize(
        ("source", "reason"),
        [
            ("ops/folder.md", "is a directory"),
            ("ops/dangling.md", "dangling symlink"),
            ("ops/loop.md", "unresolvable path"),
            ("ops/escape.md", "symlink leaves the knowledge root"),
            ("ops/binary.md", "binary file"),
            ("ops/latin1.md", "not valid UTF-8"),
            ("ops/empty.md", "the file is empty"),
            ("ops/huge.md", "over the 524288-byte cap"),
            ("ops/bomb.md", "YAML aliases, over the cap of 8"),
            ("ops/fat-frontmatter.md", "frontmatter is over the 16384-byte cap"),
        ],
    )
    def test_each_bad_entry_is_reported_with_its_reason(self, hostile, source, reason):
        summary, _, _ = hostile
        reasons = {f["source"]: f["reason"] for f in summary.failures}
        assert source in reasons, reasons
        assert reason in reasons[source]

    def test_duplicate_ids_are_reported(self, hostile):
        summary, _, _ = hostile
        assert summary.duplicate_ids == {"twin": ["ops/twin-a.md", "ops/twin-b.md"]}

    def test_the_bomb_costs_nothing(self, hostile):
        _, seconds, _ = hostile
        assert seconds < 120  # the 80 MB expansion is never built (3 small files embedded)

    def test_a_second_run_reports_them_again_and_embeds_nothing(self, hostile, tmp_path):
        summary, _, kb = hostile
        indexer = KnowledgeIndexer(Deployment.resolve(tmp_path / "data"))
        try:
            first = indexer.index(kb, progress=False)
            again = indexer.index(kb, progress=False)
        finally:
            indexer.close()
        assert first.indexed == 3 and again.indexed == 0 and again.skipped == 3
        assert {f["source"] for f in again.failures} == {f["source"] for f in summary.failures}
        assert os.path.islink(kb / "ops" / "escape.md")


def _unprivileged(command: list[str]) -> list[str]:
    """Run a command without root's power to read what it may not (chmod 000 then means unreadable)."""
    if os.geteuid() != 0:
        return command
    caps = "-dac_override,-dac_read_search"
    return ["setpriv", f"--bounding-set={caps}", f"--inh-caps={caps}", *command]


def _index_json(kb: Path, data: Path, *flags: str) -> dict:
    command = [
        sys.executable,
        "-m",
        "pipelines.entrypoints.cli",
        "index",
        "--knowledge",
        str(kb),
        "--data-dir",
        str(data),
        *flags,
    ]
    done = subprocess.run(
        _unprivileged([*command, "--json", "--quiet"]),
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


class TestNothingSilentlyLost:
    def test_an_unreadable_folder_or_file_keeps_its_documents_and_is_reported(self, tmp_path):
        kb, data = tmp_path / "knowledge", tmp_path / "data"
        for folder, name in (("ops", "restart"), ("ops", "rotate"), ("billing", "refunds"), ("billing", "invoices")):
            path = kb / folder / f"{name}.md"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(GOOD.format(id=name, title=name.title()), encoding="utf-8")
        first = _index_json(kb, data)
        assert first["indexed"] == 4
        (kb / "ops").chmod(0)
        (kb / "billing" / "invoices.md").chmod(0)
        try:
            second = _index_json(kb, data)
            rebuilt = _index_json(kb, data, "--rebuild")  # a new collection: what cannot be read is carried over
        finally:
            (kb / "ops").chmod(0o755)
            (kb / "billing" / "invoices.md").chmod(0o644)
        everything = {"ops/restart.md", "ops/rotate.md", "billing/refunds.md", "billing/invoices.md"}
        for summary in (second, rebuilt):
            reasons = {f["source"]: f["reason"] for f in summary["failures"]}
            assert "Permission denied" in reasons["ops/"] and "keep their version" in reasons["ops/"]
            assert "Permission denied" in reasons["billing/invoices.md"]
            assert summary["deleted"] == 0 and summary["stale_chunks_removed"] == 0
        assert rebuilt["indexed"] == 1  # billing/refunds.md, the one file it could read
        index = KnowledgeIndex.load(data / "knowledge_index.json")
        assert set(index.by_source()) == everything
        store = MilvusChunkStore(str(data / "milvus.db"), CollectionSchema(collection_name=index.collection_name))
        try:
            rows = store.scan_metadata()
        finally:
            store.close()
        assert Counter(row["source"] for row in rows) == {s: d.chunks for s, d in index.by_source().items()}

    def test_frontmatter_keys_that_are_not_strings_fail_nothing(self, tmp_path):
        """Eight files make one batch: the one with `1:` and `2024-01-01:` keys must not fail the other seven."""
        kb = tmp_path / "knowledge"
        kb.mkdir()
        for i in range(7):
            (kb / f"doc{i}.md").write_text(GOOD.format(id=f"doc{i}", title=f"Doc {i}"), encoding="utf-8")
        odd = "---\ntitle: Odd keys\n1: one\n2024-01-01: launch\nnested: {2: two}\n---\n# Odd keys\n\nBody text.\n"
        (kb / "odd.md").write_text(odd, encoding="utf-8")
        indexer = KnowledgeIndexer(Deployment.resolve(tmp_path / "data"))
        try:
            summary = indexer.index(kb, progress=False)
            rows = {row["source"]: row for row in indexer.collection.scan(keys=("source", "1", "2024-01-01", "nested"))}
        finally:
            indexer.close()
        assert summary.failures == [] and summary.indexed == 8
        assert (rows["odd.md"]["1"], rows["odd.md"]["2024-01-01"], rows["odd.md"]["nested"]) == (
            "one",
            "launch",
            {"2": "two"},
        )
