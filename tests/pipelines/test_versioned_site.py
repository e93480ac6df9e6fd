"""
A Docusaurus site that keeps earlier releases of a page (HAMi's `versioned_docs/`) and Chinese translations, through
the real indexing pipeline and store: a page's releases fill at most one page's share of the evidence, the current
release comes first unless the question names another, and a text is given once.
"""

from __future__ import annotations

import shutil
import uuid
from collections import Counter

import pytest

from components.core.versions import version_key
from pipelines.indexing import KnowledgeIndexer
from pipelines.service import KnowledgeService
from pipelines.settings import Deployment
from tests.pipelines.real_documents import FIXTURES

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def versioned_site(tmp_path_factory):
    """HAMi's Docusaurus site with its current pages, their Chinese translations and three releases of one page."""
    base = tmp_path_factory.mktemp("versioned_site")
    shutil.copytree(FIXTURES / "hami", base / "knowledge", ignore=shutil.ignore_patterns("LICENSE", "SOURCES.md"))
    indexer = KnowledgeIndexer(Deployment.resolve(base / "data"))
    try:
        summary = indexer.index(base / "knowledge", progress=False)
    finally:
        indexer.close()
    assert summary.failures == [] and summary.indexed == 7
    loaded = KnowledgeService.load(data_dir=base / "data", trace_db_url=f"sqlite:///{base / 'traces.db'}")
    yield loaded
    loaded.close()


class TestVersionedSite:
    @pytest.mark.parametrize(
        "question",
        ["What happens to running GPU tasks when I uninstall HAMi?", "卸载 HAMi 之后，正在运行的 GPU 任务怎么处理？"],
    )
    def test_a_page_kept_in_several_releases_fills_at_most_one_pages_share_of_the_evidence(
        self, versioned_site, question
    ):
        # docs/ and versioned_docs/version-v1.3.0, -v2.5.0 and -v2.9.0 hold four releases of the uninstall page
        result = versioned_site.lookup(question, session_id=None)
        assert result["found"] is True
        sources = [block["source"] for block in result["evidenceBlocks"]]
        assert sources and all(source.endswith("installation/uninstall.md") for source in sources)
        releases = Counter(version_key(source) for source in sources)  # each language's releases of the page
        assert max(releases.values()) <= 2, sources
        assert result["relevanceLevel"] != "low"  # the lead is over another page, not over an earlier release
        texts = [block["content"] for block in result["evidenceBlocks"]]
        assert len(set(texts)) == len(texts)  # v2.9.0 holds the current page's text: it is given once (D98)

    @pytest.mark.parametrize(
        ("question", "release"),
        [
            # the two oldest releases' pages scored highest here: the current page is what a reader wants
            ("How do I uninstall HAMi?", "docs/installation/uninstall.md"),
            # its troubleshooting section is word for word the same in v2.9.0: given once
            ("GPU resources are still in use after uninstalling HAMi", "docs/installation/uninstall.md"),
            ("How do I uninstall HAMi 2.5?", "versioned_docs/version-v2.5.0/installation/uninstall.md"),
            # v1.3.0's page scores more than the gate's max_gap below the current one's: the question lifts it
            ("How do I uninstall HAMi v1.3.0?", "versioned_docs/version-v1.3.0/installation/uninstall.md"),
        ],
    )
    def test_the_current_release_comes_first_unless_the_question_names_another(self, versioned_site, question, release):
        result = versioned_site.lookup(question, session_id=None)
        blocks = result["evidenceBlocks"]
        assert blocks and blocks[0]["source"] == release, [block["source"] for block in blocks]
        texts = [block["content"] for block in blocks]
        assert len(set(texts)) == len(texts)  # a release's text another release already gave is not given twice

    def test_a_text_given_in_a_session_is_not_given_again_from_another_release(self, versioned_site):
        # v2.9.0's troubleshooting section is word for word the current page's: once the session has it from docs/,
        # asking for v2.9.0 must not bring the same text under v2.9.0's evidence key
        session = f"releases-{uuid.uuid4().hex[:8]}"
        first = versioned_site.lookup("GPU resources are still in use after uninstalling HAMi", session_id=session)
        given = {block["content"] for block in first["evidenceBlocks"]}
        assert first["evidenceBlocks"][0]["source"] == "docs/installation/uninstall.md"
        again = versioned_site.lookup(
            "GPU resources are still in use after uninstalling HAMi v2.9.0", session_id=session
        )
        alone = versioned_site.lookup("GPU resources are still in use after uninstalling HAMi v2.9.0", session_id=None)
        assert alone["evidenceBlocks"][0]["source"] == "versioned_docs/version-v2.9.0/installation/uninstall.md"
        assert alone["evidenceBlocks"][0]["content"] in given  # without the session, v2.9.0's copy comes first
        assert not given & {block["content"] for block in again["evidenceBlocks"]}, again["evidenceBlocks"]
