"""
Sphinx sites through the real indexing pipeline and store: Requests and Flask (English) and PaddlePaddle (Chinese) as
`.rst`, testfixtures as `.txt` pages, with the files their pages include. No reStructuredText or site markup in any
chunk, lines that point into the right file, and questions that find their page first.
"""

from __future__ import annotations

import re
import shutil

import pytest

from pipelines.indexing import KnowledgeIndexer
from pipelines.service import KnowledgeService
from pipelines.settings import Deployment
from tests.pipelines.real_documents import FIXTURES, RESIDUE, prose

pytestmark = pytest.mark.integration


#: reStructuredText no chunk may carry outside code: roles, directives, targets, section adornments, link ends
RST_RESIDUE = [
    r":[\w:.-]+:`",
    r"^\s*\.\. [\w:-]+::",
    r"^\s*\.\. _[^:]+:",
    r"^[=\-~^\"'`#*+]{4,}\s*$",
    r"`_{1,2}(?!\w)",
    r"^\s*:[\w-]+:( |$)",
]


#: the fixture's pages that show another file, and the files they show
_INCLUDED = {
    "flask/docs/changes.rst": ["flask/CHANGES.rst"],
    "flask/docs/license.rst": ["flask/LICENSE.txt"],
    "testfixtures/docs/index.txt": ["testfixtures/README.rst"],
    "testfixtures/docs/popen.txt": ["testfixtures/testfixtures/tests/test_popen_docs.py"],
    "testfixtures/docs/datetime.txt": ["testfixtures/testfixtures/tests/sample1.py"],
}


@pytest.fixture(scope="module")
def sphinx_site(tmp_path_factory):
    """
    The Sphinx documentation of Requests and Flask (English) and of PaddlePaddle (Chinese), as `.rst` files, and of
    testfixtures, whose pages are `.txt` files.
    """
    base = tmp_path_factory.mktemp("sphinx_site")
    ignored = shutil.ignore_patterns("LICENSE", "SOURCES.md")
    shutil.copytree(FIXTURES / "requests" / "docs", base / "knowledge" / "requests", ignore=ignored)
    shutil.copytree(FIXTURES / "paddle" / "docs", base / "knowledge" / "paddle", ignore=ignored)
    shutil.copytree(FIXTURES / "flask", base / "knowledge" / "flask", ignore=ignored)  # docs/ includes ../CHANGES.rst
    # `.txt` pages (its conf.py's source_suffix) that show its README and its code
    shutil.copytree(FIXTURES / "testfixtures", base / "knowledge" / "testfixtures", ignore=ignored)
    indexer = KnowledgeIndexer(Deployment.resolve(base / "data"))
    try:
        summary = indexer.index(base / "knowledge", progress=False)
        indexer.collection.warm_up()
        stored = indexer.collection.chunks_of(indexer.collection.active_versions())
    finally:
        indexer.close()
    loaded = KnowledgeService.load(data_dir=base / "data", trace_db_url=f"sqlite:///{base / 'traces.db'}")
    yield base / "knowledge", summary, stored, loaded
    loaded.close()


class TestSphinxSite:
    def test_every_rst_page_is_indexed_with_its_title(self, sphinx_site):
        _, summary, stored, _ = sphinx_site
        assert (summary.files, summary.indexed, summary.failures, summary.warnings) == (12, 12, [], [])
        # Flask's changes.rst and license.rst are a title and an include each: the included files are read there
        assert sorted((s["source"], s["reason"]) for s in summary.not_indexed) == [
            ("flask/CHANGES.rst", "included by flask/docs/changes.rst: its text is indexed there"),
            ("flask/LICENSE.txt", "included by flask/docs/license.rst: its text is indexed there"),
            ("testfixtures/README.rst", "included by testfixtures/docs/index.txt: its text is indexed there"),
        ]
        unsupported = {u["source"] for u in summary.unsupported}
        assert {"testfixtures/docs/conf.py", "testfixtures/testfixtures/tests/sample1.py"} <= unsupported
        markup = {c.meta["source"]: c.meta["markup"] for c in stored}
        assert markup["testfixtures/docs/popen.txt"] == markup["testfixtures/docs/index.txt"] == "rst"
        titles = {c.meta["source"]: c.meta["title"] for c in stored}
        assert titles["requests/user/quickstart.rst"] == "Quickstart"
        assert titles["requests/community/faq.rst"] == "Frequently Asked Questions"
        assert titles["paddle/guides/flags/memory_cn.rst"] == "存储管理"

    def test_no_chunk_carries_rst_markup_outside_code(self, sphinx_site):
        _, _, stored, _ = sphinx_site
        for chunk in stored:
            text = prose(chunk.content)
            for pattern in RST_RESIDUE + RESIDUE:
                assert not re.search(pattern, text, re.MULTILINE), (chunk.meta["source"], pattern, text[:300])

    def test_breadcrumbs_are_the_pages_section_titles(self, sphinx_site):
        knowledge, _, stored, _ = sphinx_site
        for chunk in stored:
            files = [chunk.meta["source"], *_INCLUDED.get(chunk.meta["source"], [])]
            texts = [(knowledge / name).read_text("utf-8") for name in files]
            titles = {line.strip().replace("``", "") for text in texts for line in text.split("\n")}  # ``x``: x
            for part in chunk.meta["breadcrumb"].split(" > "):
                assert part in titles, (chunk.meta["source"], chunk.meta["breadcrumb"])
        crumbs = {c.meta["breadcrumb"] for c in stored if c.meta["source"] == "requests/community/faq.rst"}
        assert "Frequently Asked Questions > Custom User-Agents?" in crumbs
        ngc = {c.meta["breadcrumb"] for c in stored if c.meta["source"].endswith("instalL_NGC_PaddlePaddle_ch.rst")}
        assert "NGC 飞桨容器安装指南 > 安装步骤" in ngc  # over- and underlined titles
        changes = {c.meta["breadcrumb"] for c in stored if c.meta["source"] == "flask/docs/changes.rst"}
        assert "Changes > Version 3.1.3" in changes  # the changelog's sections under the including page's title

    def test_a_chunks_line_range_holds_its_text_in_the_file(self, sphinx_site):
        knowledge, _, stored, _ = sphinx_site
        checked = 0
        for chunk in stored:
            lines = (knowledge / chunk.meta["source"]).read_text(encoding="utf-8").splitlines()
            start, end = chunk.meta["line_start"], chunk.meta["line_end"]
            assert 1 <= start <= end <= len(lines), (chunk.meta["source"], start, end)
            # a line kept verbatim (code, plain prose) must lie within the range
            verbatim = [t.strip() for t in chunk.content.split("\n") if len(t.strip()) >= 20]
            held = [t for t in verbatim if sum(line.strip() == t for line in lines) == 1]
            for text in held:
                at = next(n for n, line in enumerate(lines, start=1) if line.strip() == text)
                assert start <= at <= end, (chunk.meta["source"], text, start, end)
            # a line of an included file (and not of the page) lies at an include directive's line
            shown = {
                line.strip()
                for name in _INCLUDED.get(chunk.meta["source"], [])
                for line in (knowledge / name).read_text(encoding="utf-8").splitlines()
            } - {line.strip() for line in lines}
            if any(text in shown for text in verbatim):
                directives = [n for n, line in enumerate(lines, start=1) if "include::" in line]
                assert any(start <= at <= end for at in directives), (chunk.meta["source"], start, end)
                checked += 1
            else:
                checked += bool(held)
        assert checked >= len(stored) * 0.8

    @pytest.mark.parametrize(
        ("question", "page"),
        [
            ("How do I use HTTP Digest authentication?", "requests/user/authentication.rst"),
            ("How do I upload a multipart-encoded file?", "requests/user/quickstart.rst"),
            ("How do I stream a response from a Flask view?", "flask/docs/patterns/streaming.rst"),
            ("Does Flask's redirect return a 303 status code by default?", "flask/docs/changes.rst"),
            ("Can I redistribute Flask in binary form?", "flask/docs/license.rst"),
            ("How do I mock subprocess.Popen in my tests?", "testfixtures/docs/popen.txt"),
            ("How do I test code that uses datetime.now()?", "testfixtures/docs/datetime.txt"),
            ("What does the hostname doesn't match error mean?", "requests/community/faq.rst"),
            ("如何设置 FLAGS_allocator_strategy 分配器策略？", "paddle/guides/flags/memory_cn.rst"),
            ("如何通过 L2 范数裁剪梯度？", "paddle/guides/advanced/gradient_clip_cn.rst"),
            (
                "How do I run the NGC PaddlePaddle container with Docker?",
                "paddle/install/instalL_NGC_PaddlePaddle_ch.rst",
            ),
        ],
    )
    def test_a_question_finds_its_page_first(self, sphinx_site, question, page):
        _, _, _, service = sphinx_site
        result = service.lookup(question, session_id=None)
        assert result["found"] is True
        assert result["evidenceBlocks"][0]["source"] == page, [b["source"] for b in result["evidenceBlocks"]]
        assert result["evidenceBlocks"][0]["location"].startswith("line")
