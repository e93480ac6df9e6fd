"""
Real public documentation through the real indexing pipeline and store: pages of a Hugo site (gohugoio/hugoDocs),
a Docusaurus site in Chinese and English (apache/apisix), an MkDocs Material site, a Jekyll site, PDFs, Word documents
and exported HTML pages, as their projects publish them (`tests/fixtures/real_docs/*/SOURCES.md` says where each file
comes from and under which licence). The chunks are read back and inspected for markup residue and false
breadcrumbs; questions the pages answer must find their page first, and questions they do not answer must come back
`found=false`.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from pipelines.indexing import IndexSummary, KnowledgeIndexer
from pipelines.service import KnowledgeService
from pipelines.settings import Deployment
from tests.pipelines.real_documents import FIXTURES, RESIDUE, prose

pytestmark = pytest.mark.integration

ECHO, ECHO_PAGE = "apisix/", "/latest/plugins/echo.md"  # the APISIX page in two language folders
#: a HAMi page and its translation where Docusaurus keeps translations
UNINSTALL, UNINSTALL_ZH = (
    "hami/docs/installation/uninstall.md",
    "hami/i18n/zh/docusaurus-plugin-content-docs/current/installation/uninstall.md",
)


def build_knowledge(root: Path) -> Path:
    """One knowledge folder of every fixture site and format, as a team would put them together."""
    shutil.copytree(FIXTURES / "hugo" / "content", root)  # the content root: Hugo includes resolve against it
    shutil.copytree(FIXTURES / "apisix" / "docs", root / "apisix")
    shutil.copytree(FIXTURES / "mkdocs" / "docs", root / "mkdocs")
    shutil.copytree(FIXTURES / "jekyll" / "docs", root / "jekyll")
    shutil.copytree(FIXTURES / "fastapi", root / "fastapi", ignore=shutil.ignore_patterns("LICENSE", "SOURCES.md"))
    shutil.copytree(FIXTURES / "kubernetes" / "content" / "zh-cn", root / "kubernetes")
    shutil.copytree(FIXTURES / "docusaurus" / "docs", root / "docusaurus")
    shutil.copytree(FIXTURES / "mdbook" / "guide" / "src", root / "mdbook")
    shutil.copytree(FIXTURES / "myst" / "docs", root / "myst")
    shutil.copytree(FIXTURES / "vitepress" / "docs", root / "vitepress")
    shutil.copytree(FIXTURES / "starlight" / "docs" / "src" / "content" / "docs", root / "starlight")
    shutil.copytree(FIXTURES / "mintlify", root / "mintlify", ignore=shutil.ignore_patterns("LICENSE", "SOURCES.md"))
    shutil.copytree(FIXTURES / "gitlab" / "handbook", root / "gitlab")
    shutil.copytree(FIXTURES / "gitbook" / "documentation", root / "ockam")
    shutil.copytree(FIXTURES / "just-the-docs" / "docs", root / "just-the-docs")
    shutil.copytree(FIXTURES / "docsify" / "docs", root / "docsify")
    shutil.copytree(FIXTURES / "docsy" / "docsy.dev" / "content" / "en" / "docs", root / "docsy")
    shutil.copytree(FIXTURES / "nextra" / "docs" / "app" / "docs", root / "nextra")
    shutil.copytree(FIXTURES / "hexo" / "source", root / "hexo")
    shutil.copytree(FIXTURES / "vuepress" / "docs", root / "vuepress")
    shutil.copytree(FIXTURES / "great-tables" / "docs", root / "great-tables")
    shutil.copytree(FIXTURES / "dplyr" / "vignettes", root / "dplyr")
    # HAMi's earlier releases of its uninstall page have a test of their own (`TestVersionedSite`)
    skipped = shutil.ignore_patterns("LICENSE", "SOURCES.md", "versioned_docs")
    shutil.copytree(FIXTURES / "hami", root / "hami", ignore=skipped)
    for kind, pattern in (("pdf", "*.pdf"), ("docx", "*.docx"), ("html", "*.html"), ("text", "doc/*.txt")):
        (root / "manuals").mkdir(exist_ok=True)
        for path in (FIXTURES / kind).glob(pattern):
            shutil.copy(path, root / "manuals" / path.name)
    return root


@pytest.fixture(scope="module")
def indexed(tmp_path_factory) -> tuple[Path, Path, IndexSummary]:
    base = tmp_path_factory.mktemp("real_docs")
    knowledge = build_knowledge(base / "knowledge")
    indexer = KnowledgeIndexer(Deployment.resolve(base / "data"))
    try:
        summary = indexer.index(knowledge, progress=False)
    finally:
        indexer.close()
    return knowledge, base / "data", summary


@pytest.fixture(scope="module")
def chunks(indexed) -> list:
    """Every chunk as the store holds it, read back."""
    _, data, _ = indexed
    indexer = KnowledgeIndexer(Deployment.resolve(data))
    try:
        store = indexer.collection
        store.warm_up()
        return store.chunks_of(store.active_versions())
    finally:
        indexer.close()


@pytest.fixture(scope="module")
def service(indexed, tmp_path_factory):
    _, data, _ = indexed
    traces = tmp_path_factory.mktemp("traces") / "traces.db"
    loaded = KnowledgeService.load(data_dir=data, trace_db_url=f"sqlite:///{traces}")
    yield loaded
    loaded.close()


def _of(chunks: list, source: str) -> list:
    found = [c for c in chunks if c.meta["source"] == source]
    assert found, f"no chunk of {source}"
    return found


class TestRealDocumentation:
    def test_every_page_and_file_is_indexed_or_says_why(self, indexed):
        _, _, summary = indexed
        assert summary.failures == []
        not_indexed = {entry["source"] for entry in summary.not_indexed}
        # hugoDocs' `_common` pages are text that pages include; Jekyll's `_includes` too
        assert {s for s in not_indexed if not s.startswith(("_common/", "jekyll/_includes/"))} == {
            "docusaurus/guides/markdown-features/_markdown-partial-example.mdx",  # a Docusaurus partial
            "mdbook/cli/arg-watcher.md",  # no chapter: `cli/serve.md` includes it
            "myst/syntax/example.txt",  # shown by the `{literalinclude}` of `syntax/organising_content.md`
            "myst/syntax/examples/example_relative_include.txt",  # and its `{include}`
            # what Docsify's `embed-files.md` embeds (`[filename](_media/example.md ':include')`)
            "docsify/_media/example.md",
            "docsify/_media/example-with-yaml.md",
            "docsify/_media/example.html",
        }
        reasons = {entry["source"]: entry["reason"] for entry in summary.not_indexed}
        assert reasons["mdbook/cli/arg-watcher.md"].startswith("included by mdbook/cli/")
        assert "_common/installation/homebrew.md" in not_indexed
        # FastAPI's code files are shown by the pages that include them, not indexed on their own
        assert {u["source"] for u in summary.unsupported} == {
            "jekyll/_data/ruby.yml",
            "fastapi/docs_src/cors/tutorial001_py310.py",
            "fastapi/docs_src/middleware/tutorial001_py310.py",
            "fastapi/docs_src/background_tasks/tutorial001_py310.py",
            "fastapi/docs_src/background_tasks/tutorial002_an_py310.py",
            "kubernetes/examples/application/job/cronjob.yaml",
            "mdbook/format/example.rs",
            "myst/syntax/examples/example.py",
            "myst/conf.py",
            "docsify/_media/example.js",  # embedded as code by docsify/embed-files.md
        }
        assert summary.warnings == []
        # Jekyll's version badge lives in the site's `_includes`, which the page finds from its own folder
        assert not [w for w in summary.warnings if "docs_version_badge" in w["reason"]]

    def test_no_chunk_carries_markup_outside_code(self, chunks):
        for chunk in chunks:
            text = prose(chunk.content)
            for pattern in RESIDUE:
                match = re.search(pattern, text, re.MULTILINE)
                assert match is None, f"{chunk.meta['source']}: {pattern!r} in {text[:300]!r}"

    def test_breadcrumbs_are_real_headings_never_licence_lines(self, chunks):
        for chunk in (c for c in chunks if c.meta["markup"] == "markdown"):  # a text file's first line may be `# x`
            crumb = chunk.meta["breadcrumb"]
            # (a tag a heading shows in code is text: Just the Docs' "Heading with `<inline code snippet>` in it.")
            tags = re.sub(r"<inline code snippet>", "", crumb)
            assert "License" not in crumb and "#" not in crumb and not re.search(r"<!--|<\w+\s[^>]*>", tags), crumb
            # headings read as text: no code spans, links or emphasis (vite's docs: `hotUpdate`, GitLab's `**X**`)
            assert not re.search(r"`|\]\(|\*\*", f"{crumb} {chunk.meta['title']}"), crumb
        cors = {c.meta["breadcrumb"] for c in _of(chunks, "apisix/zh/latest/plugins/cors.md")}
        assert {"cors > 描述", "cors > 属性", "cors > 示例 > 为路由启用 CORS"} <= cors
        assert all(crumb.startswith("cors") for crumb in cors)

    def test_a_hugo_include_brings_its_text_under_the_including_heading_and_line(self, indexed, chunks):
        knowledge, _, _ = indexed
        brew = [c for c in _of(chunks, "installation/macos.md") if "brew install hugo" in c.content]
        assert [c.meta["breadcrumb"] for c in brew] == ["macOS > Package managers > Homebrew"]
        lines = (knowledge / "installation/macos.md").read_text(encoding="utf-8").split("\n")
        include_line = next(i for i, line in enumerate(lines, start=1) if "homebrew.md" in line)
        assert brew[0].meta["line_start"] == include_line

    def test_fastapi_pages_show_their_included_code_and_lose_their_anchors_and_block_markers(self, chunks):
        cors = _of(chunks, "fastapi/docs/en/docs/tutorial/cors.md")
        assert {c.meta["title"] for c in cors} == {"CORS (Cross-Origin Resource Sharing)"}
        code = [c for c in cors if "app.add_middleware(" in c.content and "CORSMiddleware," in c.content]
        assert code and code[0].meta["breadcrumb"].endswith("Use CORSMiddleware")
        assert any("Technical Details\n" in c.content for c in cors)  # the block's title stays as its first line
        middleware = _of(chunks, "fastapi/docs/zh/docs/tutorial/middleware.md")
        assert {c.meta["title"] for c in middleware} == {"中间件"}
        assert any("async def add_process_time_header(" in c.content for c in middleware)

    def test_kubernetes_keeps_the_words_of_its_glossary_links_and_never_the_english_it_comments_out(self, chunks):
        cron = _of(chunks, "kubernetes/docs/concepts/workloads/controllers/cron-jobs.md")
        text = "\n".join(c.content for c in cron)
        assert "**CronJob** 创建基于时隔重复调度的 Job。" in text  # the tooltip's word, not a hole
        assert "day of the month" not in text and "月的某天 (1 - 31)" in text  # the original's code block stays hidden
        assert not [c for c in cron if c.meta["breadcrumb"].endswith(">") or "##" in c.content]
        # its `{{< codenew >}}` example, from the site's examples folder, as a code block
        assert "```yaml\napiVersion: batch/v1\nkind: CronJob" in text

    def test_an_mdx_page_shows_its_partial_and_renders_its_mdx_code_blocks(self, chunks):
        react = _of(chunks, "docusaurus/guides/markdown-features/markdown-features-react.mdx")
        text = "\n".join(c.content for c in react)
        assert "This is text some content from" in text  # the imported partial, where `<PartialExample />` was
        shown = "\n".join(prose(c.content) for c in react)  # the page's code shows JSX as examples
        assert "mdx-code-block" not in shown and "export const" not in shown and "<BrowserWindow" not in shown
        assert "{children}" not in shown  # a multi-line export statement goes whole

    def test_kramdown_docsify_docsy_and_nextra_markup_leaves_the_words_their_pages_show(self, chunks):
        in_page = "\n".join(c.content for c in _of(chunks, "just-the-docs/navigation/in-page.md"))
        assert "The `{:toc}` line *must* follow the `1. TOC` line, which begins a list." in in_page  # code spans whole
        assert "{:toc}\n" not in prose(in_page) and "1. TOC\n" not in prose(in_page)  # the generated contents go
        buttons = "\n".join(prose(c.content) for c in _of(chunks, "just-the-docs/ui-components/buttons.md"))
        assert "[Link button](https://just-the-docs.com)" in buttons
        code = _of(chunks, "just-the-docs/ui-components/code/index.md")
        # `{% highlight markdown %}` around a ```js fence: the headings after it are headings
        assert any(c.meta["breadcrumb"] == "Code > Code blocks with rendered examples" for c in code)
        assert any(c.meta["breadcrumb"] == "Code > Mermaid diagram code blocks" for c in code)
        embed = "\n".join(c.content for c in _of(chunks, "docsify/embed-files.md"))
        assert "displayed directly here:\n\n> This is from the `example.md`" in embed  # `':include'` embeds it
        assert "```javascript\nimport fetch from 'fetch';" in embed  # `':include :type=code'`
        assert "```javascript\nconst result = fetch(" in embed  # `:fragment=demo`: between the file's marks
        helpers = "\n".join(c.content for c in _of(chunks, "docsify/helpers.md"))
        assert "\nLegacy **Important** callouts are deprecated." in helpers
        crumbs = {c.meta["breadcrumb"] for c in _of(chunks, "docsify/adding-pages.md")}
        assert "Adding pages > Ignoring Subheaders" in crumbs and not [b for b in crumbs if "docsify-ignore" in b]
        adding = "\n".join(c.content for c in _of(chunks, "docsify/adding-pages.md"))
        assert "And the `{docsify-ignore}` and `{docsify-ignore-all}` can do" in adding
        # Docsy's code tabs are code: a TOML comment in them is no heading
        language = _of(chunks, "docsy/language.md")
        assert not [c for c in language if "Weight used for sorting" in c.meta["breadcrumb"]]
        assert "Multi-language Support > Content and configuration > Right-to-left languages" in {
            c.meta["breadcrumb"] for c in language
        }
        assert "~~~~toml\ncontentDir" in "\n".join(c.content for c in language)
        feedback = "\n".join(c.content for c in _of(chunks, "docsy/content/feedback.md"))
        assert "> Deprecation note and warning" in feedback
        search = "\n".join(c.content for c in _of(chunks, "nextra/guide/search/page.mdx"))
        assert "`search: false` in your `next.config.mjs` file" in search

    def test_hexo_and_vuepress_markup_leaves_the_words_their_pages_show(self, chunks):
        install = "\n".join(c.content for c in _of(chunks, "hexo/docs/index.md"))
        # the site's note tag shows its title (after its class) over its text
        assert "For Mac users\nYou may encounter some problems when compiling." in install
        assert "Mac / Linux\nIf you encounter `EACCES` permission error" in install
        assert "Mac 用户" in "\n".join(c.content for c in _of(chunks, "hexo/zh-cn/docs/index.md"))
        server = _of(chunks, "hexo/docs/server.md")
        crumbs = {c.meta["breadcrumb"] for c in server}  # a shortcut link's text
        assert "Server > hexo-server" in crumbs and all(c.startswith("Server > hexo-server") for c in crumbs)
        assert "you will first have to install hexo-server." in "\n".join(c.content for c in server)
        plugins = _of(chunks, "hexo/docs/tag-plugins.md")
        # a `{% codeblock %}` shown inside a fence is an example: the headings after it stay headings
        assert "Tag Plugins > Code Block > Examples" in {c.meta["breadcrumb"] for c in plugins}
        tags = "\n".join(c.content for c in plugins)
        assert "```objc\n[rectangle setX: 10 y: 10 width: 20 height: 20];\n```" in tags  # `{% codeblock lang:objc %}`
        assert "David Levithan, Wide Awake" in prose(tags)  # a blockquote's source
        bundler = _of(chunks, "vuepress/guide/bundler.md")
        text = "\n".join(prose(c.content) for c in bundler)
        assert "code-tabs" not in text and "@tab" not in text
        assert "\npnpm\n" in text and "\nyarn\n" in text and "\nnpm\n" in text  # the tabs' labels
        assert not [c for c in bundler if "install vite bundler" in c.meta["breadcrumb"]]  # code comments

    def test_a_quarto_site_is_indexed_and_its_callouts_cells_and_divs_read_as_rendered(self, chunks):
        intro = _of(chunks, "great-tables/get-started/index.qmd")  # `.qmd` is indexed, as markdown
        text = "\n".join(c.content for c in intro)
        assert "```bash\npip install great_tables\n```" in text  # ```{.bash}: a code block, not prose
        assert "```python\nfrom great_tables import GT, md, html" in text  # an executable cell
        assert "\nNote\nThe example below requires the Pandas library" in text  # a callout shows its kind
        assert {c.meta["breadcrumb"] for c in intro} >= {"Intro > Let's Install", "Intro > Polars DataFrame support"}
        notes = _of(chunks, "great-tables/get-started/technical-notes.qmd")
        crumbs = {c.meta["breadcrumb"] for c in notes}  # headings inside layout divs stay headings
        assert "Technical notes > Boxhead, Stub, and Summary Rows > Group stub" in crumbs
        assert not [c for c in notes if ":::" in prose(c.content)]

    def test_an_r_markdown_page_is_indexed_with_its_cells_as_code(self, chunks):
        grouping = _of(chunks, "dplyr/grouping.Rmd")  # `.Rmd` is indexed, as markdown
        crumbs = {c.meta["breadcrumb"] for c in grouping}
        assert "Grouped data > Group metadata > Removing grouping variables" in crumbs
        assert not [c for c in crumbs if "opts_chunk" in c or "#>" in c]
        text = "\n".join(c.content for c in grouping)
        assert "```r\nby_species <- starwars |> group_by(species)" in text  # ```{r}: an R code block

    def test_mdbook_pages_show_what_their_directives_include(self, chunks):
        serve = _of(chunks, "mdbook/cli/serve.md")
        watcher = [c for c in serve if c.meta["breadcrumb"].endswith("Server options > --watcher")]
        assert watcher and "`poll` (default)" in watcher[0].content  # `{{#include arg-watcher.md}}`, under its heading
        book = "\n".join(c.content for c in _of(chunks, "mdbook/format/mdbook.md"))
        assert '```rust\nfn main() {\n    println!("Hello World!");' in book  # `{{#playground example.rs}}`
        assert "```hbs\n{{#include file.rs:2}}" in book  # `\{{#include ...}}`: the directive as the site shows it

    def test_myst_pages_keep_their_directives_words_and_show_their_includes(self, chunks):
        admonitions = "\n".join(c.content for c in _of(chunks, "myst/syntax/admonitions.md"))
        assert "\nLet's give readers a helpful hint!" in admonitions
        assert ":class: myclass1" not in prose(admonitions)  # options go, words stay
        # `{{directive}}`: a substitution the site's conf.py defines
        assert "a special case of [directive](#syntax/directives) extensions" in admonitions
        background = "\n".join(c.content for c in _of(chunks, "myst/develop/background.md"))
        assert "{ref}" not in background and "(develop/background)=" not in background
        organising = "\n".join(c.content for c in _of(chunks, "myst/syntax/organising_content.md"))
        assert "```\nHallo\nthere\nyou!\n```" in organising  # `{literalinclude} example.txt`, as a code block

    def test_vitepress_pages_lose_their_components_and_live_data(self, chunks):
        (hook, *_) = _of(chunks, "vitepress/changes/hotupdate-hook.md")
        assert hook.meta["title"] == "HMR hotUpdate Plugin Hook"
        why = "\n".join(c.content for c in _of(chunks, "vitepress/guide/why.md"))
        assert "svg-image" not in why and "bundlerSvg" not in why
        thanks = "\n".join(prose(c.content) for c in _of(chunks, "vitepress/acknowledgements.md"))
        assert "{{" not in thanks and "dep.name" not in thanks and "v-if" not in thanks

    def test_a_components_title_is_words_the_page_shows(self, chunks):
        support = "\n".join(c.content for c in _of(chunks, "mintlify/advanced-support.mdx"))
        assert "What's the difference between a Dedicated CSM and Advanced Slack Support?\n" in support  # an accordion
        assert "Tier 2 · Advanced Slack Support" in support  # a card
        # the accordion's indented list is a list of siblings again, not code or a nested list
        assert "\n- **Tier 2: Advanced Slack Support**" in support and "\n- **Tier 3: Dedicated CSM**" in support
        assert "Stars" in "\n".join(c.content for c in _of(chunks, "starlight/components/card-grids.mdx"))
        assert "星星" in "\n".join(c.content for c in _of(chunks, "starlight/zh-cn/components/card-grids.mdx"))

    def test_a_section_page_of_front_matter_only_is_its_description(self, chunks):
        (page,) = _of(chunks, "installation/_index.md")
        assert page.content.startswith("Install Hugo on macOS, Linux, Windows, BSD")
        assert page.meta["title"] == "Installation" and page.meta["category"] == "installation"

    def test_line_ranges_point_at_the_text_in_the_file(self, indexed, chunks):
        knowledge, _, _ = indexed
        checked = 0
        for chunk in chunks:
            source = chunk.meta["source"]
            if not source.endswith(".md") or chunk.meta.get("included_files") or "line_start" not in chunk.meta:
                continue
            lines = (knowledge / source).read_text(encoding="utf-8").split("\n")
            span = "\n".join(lines[chunk.meta["line_start"] - 1 : chunk.meta["line_end"]])
            first_line = chunk.content.split("\n")[0].strip()
            if chunk.meta.get("description", "").startswith(first_line[:30]):
                continue  # the description lead comes from the front matter
            # the longest of the first words of its last line (a table part's first line is the repeated header): the
            # file has the markup the chunk lost around them
            # (a MyST code directive's `::::` closes as a code block's fence: the last line with words, then)
            last_line = next((ln for ln in reversed(chunk.content.split("\n")) if re.search(r"\w", ln)), "").strip()
            word = max(re.findall(r"\w+", last_line)[:4] or [last_line], key=len)
            # (case aside: an untitled admonition's title is its marker's kind, capitalized: `:::warning` -> Warning)
            assert word.lower() in span.lower(), f"{source} {chunk.meta['line_start']}-{chunk.meta['line_end']}: {word}"
            checked += 1
        assert checked > 50

    def test_pdf_chunks_know_their_pages(self, chunks):
        pdf = _of(chunks, "manuals/fastpca-joss-paper.pdf")
        gpu = [c for c in pdf if "2.44 seconds" in c.content]
        assert gpu and {c.meta["page_start"] for c in gpu} == {3}
        assert max(c.meta["page_end"] for c in pdf) == 6

    def test_a_pdf_is_titled_by_its_title_property_and_its_bookmarks_are_the_breadcrumb(self, chunks):
        pdf = _of(chunks, "manuals/fastpca-joss-paper.pdf")
        title = "FastPCA: An R package for fast singular value decomposition"  # the text's first line wraps it
        assert {c.meta["title"] for c in pdf} == {title}
        where = {c.meta["breadcrumb"]: c.meta["page_start"] for c in pdf if "irlba as the default backend" in c.content}
        assert where == {f"{title} > Functionality": 2}
        assert {c.meta["breadcrumb"].removeprefix(f"{title} > ") for c in pdf} >= {"Summary", "Conclusion"}
        # the running footer of every page is no evidence
        assert not [c for c in pdf if "Journal of Open Source Software, ()" in c.content]

    def test_word_headings_are_the_breadcrumb_and_html_is_its_main_content(self, chunks):
        playbook = _of(chunks, "manuals/OpenChain-PlayBook-Medium-Company.docx")
        reassess = [c for c in playbook if "every 18 months" in c.content]
        assert reassess and reassess[0].meta["breadcrumb"].endswith("Periodic Reassessment")
        for page in ("manuals/autogen-blog-llm-tuning-math.html", "manuals/neat-python-xor_example.html"):
            text = "\n".join(c.content for c in _of(chunks, page))
            assert "<script" not in text and "<div" not in text and "function(" not in text
            assert not text.startswith("---") and "fingerprint:" not in text  # the page's <head> is meta, not text

    def test_an_html_page_is_titled_by_its_title_element_and_its_headings_lose_their_permalinks(self, chunks):
        blog = _of(chunks, "manuals/autogen-blog-llm-tuning-math.html")
        assert {c.meta["title"] for c in blog} == {
            "Does Model and Inference Parameter Matter in LLM Applications? - A Case Study for MATH | AutoGen"
        }
        xor = _of(chunks, "manuals/neat-python-xor_example.html")
        crumbs = {c.meta["breadcrumb"] for c in xor}
        assert "Overview of the basic XOR example (xor2.py) > Fitness function" in crumbs
        assert not [c for c in chunks if "¶" in c.meta["breadcrumb"] or "¶" in c.meta["title"]]

    def test_plain_text_has_no_headings_and_knows_its_lines(self, indexed, chunks):
        knowledge, _, _ = indexed
        text = _of(chunks, "manuals/algorithm.txt")
        lines = (knowledge / "manuals/algorithm.txt").read_text(encoding="utf-8").split("\n")
        assert {c.meta["breadcrumb"] for c in text} == {text[0].meta["title"]}
        for chunk in text:
            span = "\n".join(lines[chunk.meta["line_start"] - 1 : chunk.meta["line_end"]])
            assert chunk.content.split("\n")[0].strip() in span and chunk.content.split("\n")[-1].strip() in span

    def test_a_table_is_never_cut_inside_a_row_and_its_parts_repeat_the_header(self, chunks):
        parts = [c for c in _of(chunks, "apisix/zh/latest/plugins/cors.md") if c.meta["breadcrumb"] == "cors > 属性"]
        tables = [c.content for c in parts if "|" in c.content]
        assert len(tables) > 1  # the attribute table is longer than a chunk
        header = tables[0].split("\n")[0]
        for table in tables:
            rows = [line for line in table.split("\n") if line.startswith("|")]
            assert rows[0] == header
            assert all(row.rstrip().endswith("|") for row in rows)

    def test_an_html_table_in_markdown_is_a_table_of_whole_rows(self, indexed, chunks):
        # the GitLab handbook writes its competency tables in HTML, a cell per line, with cells spanning rows
        knowledge, _, _ = indexed
        page = sorted(_of(chunks, "gitlab/values/_index.md"), key=lambda c: c.meta.get("line_start", 0))
        tables = [c for c in page if c.meta["breadcrumb"].endswith("Collaboration Competency") and "|" in c.content]
        rows = [line for c in tables for line in c.content.split("\n") if line.startswith("| ")]
        header = "| GitLab Job Grade | Demonstrates Collaboration Competency by… | Knowledge Assessment |"
        assert rows[0] == header and all(c.content.count(header) == 1 for c in tables)
        grades = [row.split(" | ")[0].removeprefix("| ") for row in rows if row != header]
        assert grades == ["5", "6", "7", "8", "9", "10", "11", "12", "14"]  # every row once, none cut
        assert all(row.count(" | ") == 2 for row in rows)  # a spanned cell fills the rows it covers
        assert rows[-1].endswith("| Knowledge Assessment for People Leaders |")
        assert not any(re.search(r"</?t[dhr]\b", c.content) for c in page)
        lines = (knowledge / "gitlab/values/_index.md").read_text(encoding="utf-8").split("\n")
        assert all("<t" in "\n".join(lines[c.meta["line_start"] - 1 : c.meta["line_end"]]) for c in tables)

    def test_an_html_code_block_is_code_and_its_comment_lines_are_no_headings(self, indexed, chunks):
        # GitBook writes a code block with highlighted lines as `<pre><code class="lang-bash"># Connect ...`
        knowledge, _, _ = indexed
        source = "ockam/command/guides/aws-marketplace/ockam-node-for-amazon-timestream-influxdb.md"
        page = _of(chunks, source)
        lines = (knowledge / source).read_text(encoding="utf-8").split("\n")
        headings = {re.sub(r"^#+ |&#x20;", "", ln).strip() for ln in lines if re.match(r"#{1,6} ", ln)}
        crumbs = {part for c in page for part in c.meta["breadcrumb"].split(" > ")}
        assert "Connect to the container" not in crumbs and "Setup Ockam InfluxDB Inlet Node" in crumbs
        assert crumbs <= headings | {page[0].meta["title"]}
        (run,) = [c for c in page if "docker exec -it node-app /bin/bash" in c.content]
        block = run.content[run.content.index("```bash") :]
        assert block.startswith("```bash\n# Connect to the container\ndocker exec -it node-app /bin/bash\n")
        assert "# The example run was successful 🥳.\n```" in block and "<strong>" not in run.content
        span = "\n".join(lines[run.meta["line_start"] - 1 : run.meta["line_end"]])
        assert '<pre class="language-bash"><code class="lang-bash"># Connect to the container' in span
        assert span.rstrip().endswith("</code></pre>") or "</code></pre>" in span

    def test_an_untitled_admonition_shows_its_kind_as_the_site_does(self, chunks):
        react = _of(chunks, "docusaurus/guides/markdown-features/markdown-features-react.mdx")
        text = "\n".join(c.content for c in react)
        assert "Warning\n\nThis feature is experimental" in text and "Caution\n\nThis feature is powered by" in text

    def test_jsx_values_page_components_and_icons_leave_only_the_words_they_show(self, chunks):
        privacy = "\n".join(c.content for c in _of(chunks, "mintlify/integrations/privacy/overview.mdx"))
        assert "Osano\n" in privacy and "Transcend\n" in privacy and "Manage cookie consent with" in privacy
        react = _of(chunks, "mintlify/customize/react-components.mdx")
        assert not any("setCount" in prose(c.content) for c in react)
        assert any("Declare components directly in your MDX file" in c.content for c in react)
        code = "\n".join(c.content for c in _of(chunks, "starlight/fr/components/code.mdx"))
        assert "slot=" not in code and "Bienvenue" not in prose(code)
        types = "\n".join(c.content for c in _of(chunks, "starlight/reference/route-data.mdx"))
        assert "**Type:** `Array<SidebarLink | SidebarGroup>`" in types
        mdbook = "\n".join(c.content for c in _of(chunks, "mdbook/format/mdbook.md"))
        assert "there will be an eyeball icon which will toggle" in mdbook

    @pytest.mark.parametrize(
        ("question", "source"),
        [
            ("How do I install Hugo on a Mac with Homebrew?", "installation/macos.md"),
            ("How can I stop the Hugo snap package from auto-updating?", "installation/linux.md"),
            ("cors 插件如何用正则表达式匹配所有子域名的 Origin？", "apisix/zh/latest/plugins/cors.md"),
            ("How do I make an admonition collapsible in Material for MkDocs?", "mkdocs/reference/admonitions.md"),
            ("How often does the OSPO review the OpenChain program?", "manuals/OpenChain-PlayBook-Medium-Company.docx"),
            ("How fast is FastPCA with GPU acceleration?", "manuals/fastpca-joss-paper.pdf"),
            (
                "My React app on localhost:3000 is blocked by the browser when it calls my FastAPI backend",
                "fastapi/docs/en/docs/tutorial/cors.md",
            ),
            (
                "FastAPI 怎么在每个请求前后运行自己的代码，比如统计处理时间？",
                "fastapi/docs/zh/docs/tutorial/middleware.md",
            ),
            ("CronJob 的调度时间按哪个时区计算？", "kubernetes/docs/concepts/workloads/controllers/cron-jobs.md"),
            ("How do I pull only some lines of a source file into my mdBook chapter?", "mdbook/format/mdbook.md"),
            ("How do I give a MyST admonition a title of my own?", "myst/syntax/admonitions.md"),
            ("Which Vite plugin hook replaces handleHotUpdate?", "vitepress/changes/hotupdate-hook.md"),
            ("How is a Dedicated CSM different from Advanced Slack Support?", "mintlify/advanced-support.mdx"),
            ("What collaboration is expected of a grade 8 team member at GitLab?", "gitlab/values/_index.md"),
            (
                "How do I check that the Ockam inlet node for InfluxDB is up?",
                "ockam/command/guides/aws-marketplace/ockam-node-for-amazon-timestream-influxdb.md",
            ),
            (
                "How do I ask HAMi for Enflame GCU memory and cores instead of whole DRS slices?",
                "hami/docs/userguide/enflame-device/enable-enflame-gcu-sharing.md",
            ),
            (
                "How can several Docusaurus pages reuse the same piece of markdown?",
                "docusaurus/guides/markdown-features/markdown-features-react.mdx",
            ),
            ("How do I make a link look like a button in Just the Docs?", "just-the-docs/ui-components/buttons.md"),
            ("How can I embed a markdown file inside a docsify page?", "docsify/embed-files.md"),
            ("How do I keep a heading out of the docsify sidebar's table of contents?", "docsify/adding-pages.md"),
            ("How do I turn off the feedback widget on one page of my Docsy site?", "docsy/content/feedback.md"),
            ("How do I stop Nextra from indexing code blocks for search?", "nextra/guide/search/page.mdx"),
            # written before the first lookup on Hexo's and VuePress' pages
            (
                "What should Mac users do when compiling fails while installing Hexo's requirements?",
                "hexo/docs/index.md",
            ),
            ("How do I change the port of the Hexo server?", "hexo/docs/server.md"),
            ("How do I add a caption and a link to a code block in a Hexo post?", "hexo/docs/tag-plugins.md"),
            ("Mac 用户安装 Hexo 时编译出错怎么办？", "hexo/zh-cn/docs/index.md"),
            ("Which package do I install to use Vite as the VuePress bundler?", "vuepress/guide/bundler.md"),
            ("VuePress 怎么选择使用 Webpack 还是 Vite 打包？", "vuepress/zh/guide/bundler.md"),
            # and on Great Tables' Quarto pages
            ("How do I install the Great Tables package?", "great-tables/get-started/index.qmd"),
            ("Does GT accept a Polars DataFrame as well as Pandas?", "great-tables/get-started/index.qmd"),
            (
                "What happens to the grand summary row when the stub has both row names and groups?",
                "great-tables/get-started/technical-notes.qmd",
            ),
            # and on dplyr's R Markdown vignette
            ("How do I remove the grouping from a grouped data frame in dplyr?", "dplyr/grouping.Rmd"),
        ],
    )
    def test_a_question_finds_its_page_first(self, service, question, source):
        result = service.lookup(question, session_id=None)
        assert result["found"] is True
        assert result["evidenceBlocks"][0]["source"] == source

    @pytest.mark.xfail(
        strict=True,
        reason="known gap (docs/decisions.md D103): 'Jekyll' points at no category here (2 of the 4 documents that "
        "name it are Jekyll's, under D15's purity of 0.7), so Hexo's code block section, whose options table has a "
        "`line_number` row, leads with relevance 'high' and Jekyll's answer is cut by max_gap",
    )
    def test_a_question_that_names_its_tool_gets_that_tools_answer_among_the_first_two(self, service):
        # Jekyll's tags page answers it ("Line numbers"); Just the Docs' code page (a Jekyll theme's) only says that
        # line numbers and highlighting clash; Hexo's code block tag documents its own `line_number` option
        result = service.lookup("How do I show line numbers in a Jekyll code block?", session_id=None)
        sources = [block["source"] for block in result["evidenceBlocks"]]
        assert "jekyll/_docs/liquid/tags.md" in sources[:2], sources

    @pytest.mark.parametrize(
        ("question", "first", "second"),
        [
            ("echo 插件可以在生产环境中使用吗？", f"{ECHO}zh{ECHO_PAGE}", f"{ECHO}en{ECHO_PAGE}"),
            ("Can the echo plugin be used in production?", f"{ECHO}en{ECHO_PAGE}", None),
            ("卸载 HAMi 之后，正在运行的 GPU 任务怎么处理？", UNINSTALL_ZH, UNINSTALL),
            ("What happens to running GPU tasks when I uninstall HAMi?", UNINSTALL, None),
        ],
    )
    def test_a_question_on_a_bilingual_site_finds_the_page_in_its_own_language_first(
        self, service, question, first, second
    ):
        # balancing made the two translations a near tie (rank scores 1.0206 against 1.0205, the English page first,
        # D92); the page in the question's language now ranks just above its translation (D96)
        result = service.lookup(question, session_id=None)
        assert result["found"] is True
        sources = [block["source"] for block in result["evidenceBlocks"]]
        assert sources[0] == first
        if second:
            assert second in sources[1:3]
        # the lead that sets relevance is over the next page that is not the first one's translation (a near tie)
        assert result["relevanceLevel"] != "low"

    @pytest.mark.parametrize("question", ["What is the capital of France?", "如何做红烧肉？"])
    def test_a_question_off_the_sites_topics_is_not_found(self, service, question):
        assert service.lookup(question, session_id=None)["found"] is False

    @pytest.mark.xfail(
        strict=True,
        reason="known gap (docs/decisions.md D80): the noise ceiling is calibrated on off-topic probes, and a question "
        "on a site's own topic that its pages do not answer scores above it (similarity 0.926-0.948 here)",
    )
    @pytest.mark.parametrize(
        "question",
        [
            "How do I add a blog to my Material for MkDocs site?",
            "如何配置 APISIX 的 limit-count 插件实现限流？",
            "How do I paginate blog posts with jekyll-paginate?",
        ],
    )
    def test_a_question_on_the_sites_topics_that_they_do_not_answer_is_not_found(self, service, question):
        assert service.lookup(question, session_id=None)["found"] is False
