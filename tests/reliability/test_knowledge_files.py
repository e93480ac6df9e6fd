"""Every unreadable knowledge entry is reported with its name and reason while the run goes on (real indexing)."""

from __future__ import annotations

import os
import time

import pytest

from pipelines.indexing import KnowledgeIndexer
from pipelines.settings import Deployment

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
    (kb / "ops" / "folder.md").mkdir()
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
