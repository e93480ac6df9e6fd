from __future__ import annotations

from pathlib import Path

import pytest
from haystack.core.serialization import component_from_dict, component_to_dict
from haystack.dataclasses import ByteStream

from components.converters import markdown_knowledge_converter
from components.converters.markdown_knowledge_converter import MarkdownKnowledgeConverter, parse_knowledge_file
from components.preprocessors.markup_cleaner import MarkupCleaner


def _file_line_of(doc, line: str, file_text: str) -> str:
    """The file's line that the document's `line_map` says the document's line `line` came from."""
    number = doc.content.split("\n").index(line)
    segment = max((s for s in doc.meta["line_map"] if s[0] <= number), key=lambda s: s[0])
    return file_text.split("\n")[segment[1] + segment[2] * (number - segment[0]) - 1]


class TestMarkdownKnowledgeConverter:
    def test_init_defaults_and_invalid(self):
        converter = MarkdownKnowledgeConverter()
        assert (converter.max_file_bytes, converter.max_frontmatter_bytes, converter.max_frontmatter_aliases) == (
            524288,
            16384,
            8,
        )
        for kwargs, match in (
            ({"max_file_bytes": 0}, "max_file_bytes=0"),
            ({"max_frontmatter_bytes": -1}, "max_frontmatter_bytes=-1"),
            ({"max_frontmatter_aliases": -1}, "max_frontmatter_aliases=-1"),
        ):
            with pytest.raises(ValueError, match=match):
                MarkdownKnowledgeConverter(**kwargs)

    def test_to_dict_from_dict(self):
        converter = MarkdownKnowledgeConverter(
            max_file_bytes=1000, max_frontmatter_bytes=100, max_frontmatter_aliases=0
        )
        data = component_to_dict(converter, "markdown")
        assert data["init_parameters"] == {
            "max_file_bytes": 1000,
            "max_frontmatter_bytes": 100,
            "max_frontmatter_aliases": 0,
        }
        restored = component_from_dict(MarkdownKnowledgeConverter, data, "markdown")
        assert (restored.max_file_bytes, restored.max_frontmatter_aliases) == (1000, 0)

    def test_run_converts_frontmatter_and_body_with_the_given_source_and_version(self, tiny_kb: Path):
        result = MarkdownKnowledgeConverter().run(
            sources=[str(tiny_kb / "payments/refund.md")], meta=[{"source": "payments/refund.md", "doc_version": "v9"}]
        )
        assert result["failures"] == []
        doc = result["documents"][0]
        assert doc.meta["doc_id"] == "payments-refund"
        assert doc.meta["source"] == "payments/refund.md"
        assert doc.meta["title"] == "退款处理流程"
        assert doc.meta["category"] == "payments"
        assert doc.meta["keywords"] == ["退款", "原路退回"]
        assert doc.meta["entities"] == ["refund-worker"]
        assert doc.meta["doc_version"] == "v9"  # the indexer's, never recomputed
        assert doc.content.lstrip().startswith("# 退款处理流程")
        assert "---" not in doc.content.split("\n")[0]

    def test_bytestreams_as_a_router_hands_them_on(self):
        stream = ByteStream(
            b"---\ntitle: Streamed\n---\n# Streamed\n\nbody", meta={"source": "a/b.md", "doc_version": "v1"}
        )
        [doc] = MarkdownKnowledgeConverter().run(sources=[stream])["documents"]
        assert (doc.meta["source"], doc.meta["doc_version"], doc.meta["title"]) == ("a/b.md", "v1", "Streamed")

    def test_without_meta_the_source_is_the_file_name_and_the_version_its_hash(self, tmp_path: Path):
        (tmp_path / "note.md").write_text("# Note\n\ntext", encoding="utf-8")
        [doc] = MarkdownKnowledgeConverter().run(sources=[tmp_path / "note.md"])["documents"]
        assert doc.meta["source"] == "note.md" and len(doc.meta["doc_version"]) == 16

    def test_a_meta_list_of_another_length_is_refused(self, tmp_path: Path):
        with pytest.raises(ValueError, match="meta has 1 entries for 2 sources"):
            MarkdownKnowledgeConverter().run(sources=[tmp_path / "a.md", tmp_path / "b.md"], meta=[{}])

    def test_defaults_for_missing_fields_and_extra_keys_kept(self):
        doc = parse_knowledge_file(b"---\ndomain: ops\nowner: sre\n---\n# Heading Title\n\nbody", "x/y.md")
        assert doc.meta["doc_id"] == "x/y.md"
        assert doc.meta["title"] == "Heading Title"
        assert doc.meta["category"] == "ops"
        assert doc.meta["owner"] == "sre"
        assert doc.meta["keywords"] == []

    def test_no_frontmatter_uses_file_stem_without_heading(self):
        doc = parse_knowledge_file(b"just text", "notes/readme.md")
        assert doc.meta["title"] == "readme"
        assert doc.meta["category"] == ""

    @pytest.mark.parametrize(
        ("data", "reason"),
        [
            (b"---\ntitle: [unclosed\n---\nbody", "not valid YAML"),
            (b"---\n- a\n- b\n---\nbody", "must be a mapping"),
            (b"---\ntitle: x\nbody without end", "no closing"),
            (b"---\n---\n   \n", "body is empty"),
            (b"\xff\xfe broken", "not valid UTF-8"),
            (b"---\nkeywords: {a: 1}\n---\nbody", "'keywords' must be a list"),
            (b'---\n1: one\n"1": uno\n---\nbody', "has the key '1' twice"),
        ],
    )
    def test_malformed_files_are_reported_and_the_rest_continues(self, tmp_path: Path, data: bytes, reason: str):
        (tmp_path / "bad.md").write_bytes(data)
        (tmp_path / "good.md").write_text("---\ntitle: Good\n---\n# Good\n\ntext", encoding="utf-8")
        names = ["bad.md", "good.md", "missing.md"]
        result = MarkdownKnowledgeConverter().run(
            sources=[tmp_path / name for name in names], meta=[{"source": name} for name in names]
        )
        assert [d.meta["source"] for d in result["documents"]] == ["good.md"]
        failures = {f["source"]: f["reason"] for f in result["failures"]}
        assert reason in failures["bad.md"]
        assert "No such file" in failures["missing.md"]

    def test_keys_that_are_not_strings_become_strings_at_every_depth(self):
        doc = parse_knowledge_file(b"---\n1: one\n2024-01-01: launch\nnested: [{2: two}]\n---\nbody", "k.md")
        assert (doc.meta["1"], doc.meta["2024-01-01"], doc.meta["nested"]) == ("one", "launch", [{"2": "two"}])

    def test_caps_are_applied_per_file(self, tmp_path: Path):
        (tmp_path / "big.md").write_text("# Big\n\n" + "x" * 2000, encoding="utf-8")
        (tmp_path / "alias.md").write_text("---\na: &x 1\nb: *x\n---\n# A\n\nbody", encoding="utf-8")
        converter = MarkdownKnowledgeConverter(max_file_bytes=1000, max_frontmatter_aliases=0)
        result = converter.run(sources=[tmp_path / "big.md", tmp_path / "alias.md"])
        reasons = {f["source"]: f["reason"] for f in result["failures"]}
        assert "over the 1000-byte cap" in reasons["big.md"]
        assert "1 YAML aliases, over the cap of 0" in reasons["alias.md"]
        big = ByteStream(b"x" * 2000, meta={"source": "big.md"})  # a stream is capped too
        assert "over the 1000-byte cap" in converter.run(sources=[big])["failures"][0]["reason"]
        assert MarkdownKnowledgeConverter().run(sources=[tmp_path / "alias.md"])["documents"]

    def test_empty_input_gives_empty_output(self):
        assert MarkdownKnowledgeConverter().run(sources=[]) == {"documents": [], "failures": [], "warnings": []}

    def test_version_changes_with_content(self):
        a = parse_knowledge_file(b"# T\n\none", "a.md").meta["doc_version"]
        b = parse_knowledge_file(b"# T\n\ntwo", "a.md").meta["doc_version"]
        assert a != b

    @pytest.mark.parametrize(
        "data",
        [
            b'+++\ntitle = "Install"\ncategories = ["setup"]\nweight = 10\n+++\n\nbody',
            b'{\n  "title": "Install",\n  "categories": ["setup"],\n  "weight": 10\n}\n\nbody',
            b"---\ntitle: Install\ncategories: [setup]\nweight: 10\n---\n\nbody",
        ],
    )
    def test_toml_json_and_yaml_front_matter_read_alike(self, data):
        doc = parse_knowledge_file(data, "install/a.md")
        assert (doc.meta["title"], doc.meta["categories"], doc.meta["weight"], doc.content) == (
            "Install",
            ["setup"],
            10,
            "\nbody",
        )
        assert doc.meta["line_map"] == [[0, data.split(b"\n\n")[0].count(b"\n") + 2, 1]]

    def test_a_toml_block_after_blank_lines_is_front_matter_and_a_rule_after_them_is_not(self):
        # Zola's theme pages start with a blank line, and close their block with `+++` and spaces
        doc = parse_knowledge_file(b'\n+++\ntitle = "tabi"\ndescription = "A theme."\n+++        \n\nAbout it.', "t.md")
        assert (doc.meta["title"], doc.meta["description"], doc.content) == ("tabi", "A theme.", "\nAbout it.")
        assert doc.meta["line_map"] == [[0, 6, 1]]
        rule = parse_knowledge_file(b"\n---\ntitle: x\n---\n# Page", "r.md")
        assert rule.content == "\n---\ntitle: x\n---\n# Page" and rule.meta["title"] == "Page"
        # after blank lines, `+++` lines around no TOML, or one never closed, are the body's (MyST's block break)
        for data in (b"\n+++\n\n# Title\n\nSome text.\n\n+++\n\nMore.\n", b"\n+++\n# Title\n"):
            page = parse_knowledge_file(data, "m.md")
            assert page.content == data.decode() and page.meta["title"] == "Title"

    def test_a_body_that_starts_with_a_brace_is_no_front_matter(self):
        doc = parse_knowledge_file(b'{"not": "closed"\ntext', "a.md")
        assert doc.content.startswith('{"not"') and doc.meta["line_map"] == [[0, 1, 1]]
        bad_toml = MarkdownKnowledgeConverter().run(
            sources=[ByteStream(b"+++\ntitle = \n+++\nx", meta={"source": "t.md"})]
        )
        assert "not valid TOML" in bad_toml["failures"][0]["reason"]

    def test_the_title_is_never_a_comment_or_code_line(self):
        data = b"<!--\n# Licensed to the ASF\n-->\n```\n# shell comment\n```\n## Real heading\n"
        assert parse_knowledge_file(data, "a.md").meta["title"] == "Real heading"

    def test_a_page_of_front_matter_only_converts_with_an_empty_body(self):
        doc = parse_knowledge_file(b"---\ntitle: Install\ndescription: How to install.\n---\n", "install/_index.md")
        assert doc.content.strip() == "" and doc.meta["description"] == "How to install."

    def test_includes_are_resolved_under_the_root_and_others_reported(self, tmp_path: Path):
        root = tmp_path / "content"
        (root / "_common").mkdir(parents=True)
        (root / "guide").mkdir()
        (root / "_common" / "brew.md").write_text("---\n_comment: keep\n---\n### Homebrew\n\nbrew install x\n")
        (root / "_common" / "loop.md").write_text('{{% include "/_common/loop.md" %}}\n')
        (tmp_path / "secret.md").write_text("outside the root\n")
        page = (
            "---\ntitle: Guide\n---\n## Install\n\n"
            '{{% include "/_common/brew.md" %}}\n\n'
            '{{< readfile file="missing.md" >}}\n\n'
            '{{% include "../secret.md" %}}\n\n'
            '{{% include "/_common/loop.md" %}}\n\n'
            '```\n{{% include "/_common/brew.md" %}}\n```\n\nend\n'
        )
        (root / "guide" / "page.md").write_text(page)
        out = MarkdownKnowledgeConverter().run(sources=[root / "guide" / "page.md"], meta={"source": "guide/page.md"})
        [doc] = out["documents"]
        assert "### Homebrew\n\nbrew install x" in doc.content
        assert "outside the root" not in doc.content
        assert '```\n{{% include "/_common/brew.md" %}}\n```' in doc.content  # code shows it, never runs it
        assert doc.meta["included_files"] == ["_common/brew.md", "_common/loop.md"]
        reasons = [w["reason"] for w in out["warnings"]]
        assert any("missing.md (not found" in r for r in reasons)
        assert any("../secret.md (not found" in r for r in reasons)
        assert any("over 3 levels deep" in r or "included from itself" in r for r in reasons)
        # the included lines point at the include's line; the page's own lines at themselves
        assert _file_line_of(doc, "end", page) == "end"

    def test_an_include_of_a_hidden_file_is_not_read(self, tmp_path: Path):
        root = tmp_path / "content"
        (root / ".git").mkdir(parents=True)
        (root / ".git" / "config").write_text("url = https://token@host\n", encoding="utf-8")
        (root / ".env").write_text("API_KEY=xyz\n", encoding="utf-8")
        page = '# Page\n\n{{% include "/.env" %}}\n\n{{< readfile file="/.git/config" >}}\n\nend\n'
        (root / "page.md").write_text(page, encoding="utf-8")
        out = MarkdownKnowledgeConverter().run(sources=[root / "page.md"], meta={"source": "page.md"})
        [doc] = out["documents"]
        assert "API_KEY" not in doc.content and "token" not in doc.content
        assert "included_files" not in doc.meta
        assert [w["reason"] for w in out["warnings"]] == [
            "include not resolved: /.env (not found under the knowledge root)",
            "include not resolved: /.git/config (not found under the knowledge root)",
        ]

    def test_a_site_below_the_knowledge_root_resolves_against_its_own_root(self, tmp_path: Path):
        site = tmp_path / "kb" / "hugo" / "content"
        (site / "_common").mkdir(parents=True)
        (site / "guide").mkdir()
        (site / "_common" / "brew.md").write_text("brew install hugo\n")
        (site / "guide" / "mac.md").write_text(
            '# Mac\n\n{{% include "/_common/brew.md" %}}\n\n--8<-- "_common/brew.md"\n'
        )
        out = MarkdownKnowledgeConverter().run(
            sources=[site / "guide" / "mac.md"], meta={"source": "hugo/content/guide/mac.md"}
        )
        assert out["warnings"] == [] and out["documents"][0].content.count("brew install hugo") == 2

    def test_a_source_file_include_becomes_a_code_block_and_a_missing_one_is_reported(self, tmp_path: Path):
        # FastAPI's layout: pages under docs/en/docs, their code under docs_src, paths relative to docs/en
        (tmp_path / "docs_src" / "body").mkdir(parents=True)
        (tmp_path / "docs_src" / "body" / "app.py").write_text('app = FastAPI()\nprint("```")\n')
        page = tmp_path / "docs" / "en" / "docs" / "tutorial" / "body.md"
        page.parent.mkdir(parents=True)
        page.write_text(
            "# Request Body { #request-body }\n\n{* ../../docs_src/body/app.py hl[1] *}\n\n"
            "{* ../../docs_src/gone.py *}\n\n```\n{* ../../docs_src/body/app.py *}\n```\n"
        )
        out = MarkdownKnowledgeConverter().run(sources=[page], meta={"source": "docs/en/docs/tutorial/body.md"})
        [doc] = out["documents"]
        assert doc.meta["title"] == "Request Body"  # the heading's anchor is no part of the title
        assert '````python\napp = FastAPI()\nprint("```")\n````' in doc.content
        assert "```\n{* ../../docs_src/body/app.py *}\n```" in doc.content  # code shows it, never runs it
        assert doc.meta["included_files"] == ["docs_src/body/app.py"]
        assert [w["reason"] for w in out["warnings"]] == [
            "include not resolved: ../../docs_src/gone.py (not found under the knowledge root)"
        ]

    def test_docsify_embeds_markdown_as_markdown_and_other_files_as_code_never_a_url_or_a_medium(self, tmp_path: Path):
        (tmp_path / "docs" / "_media").mkdir(parents=True)
        (tmp_path / "docs" / "_media" / "example.md").write_text("---\ntitle: x\n---\n> This is from example.md\n")
        (tmp_path / "docs" / "_media" / "example.js").write_text("const PORT = 8080;\n")
        demo = "import x;\n/// [demo]\nconst shown = 1;\n/// [demo]\nend();\n"
        (tmp_path / "docs" / "_media" / "demo.js").write_text(demo)
        page = tmp_path / "docs" / "embed-files.md"
        page.write_text(
            "# Embed files\n\n[filename](_media/example.md ':include')\n\n"
            "```markdown\n[filename](_media/example.md ':include')\n```\n\n"
            "[filename](_media/example.md \":include :type=code\")\n\n[js](_media/example.js ':include')\n\n"
            "[video](_media/example.mp4 ':include :type=video')\n\n"
            "[demo](_media/demo.js ':include :type=code :fragment=demo')\n\n"
            "[gist](https://gist.githubusercontent.com/u/1/raw/content.md ':include')\n\n"
            "[gone](_media/gone.md ':include')\n"
        )
        out = MarkdownKnowledgeConverter().run(sources=[page], meta={"source": "docs/embed-files.md"})
        [doc] = out["documents"]
        assert "\n> This is from example.md\n" in doc.content  # its body, without its front matter
        assert "```\n---\ntitle: x\n---\n> This is from example.md\n```" in doc.content  # `:type=code`: as written
        assert "```javascript\nconst PORT = 8080;\n```" in doc.content
        assert "```javascript\nconst shown = 1;\n```" in doc.content  # `:fragment=demo`: between its marks
        assert "```markdown\n[filename](_media/example.md ':include')\n```" in doc.content  # code shows it
        assert "(_media/example.mp4 ':include :type=video')" in doc.content  # a medium or a URL is not read
        assert "raw/content.md ':include')" in doc.content
        assert doc.meta["included_files"] == ["docs/_media/demo.js", "docs/_media/example.js", "docs/_media/example.md"]
        assert [w["reason"] for w in out["warnings"]] == [
            "include not resolved: _media/gone.md (not found under the knowledge root)"
        ]

    def test_a_docsify_embed_reads_nothing_outside_the_knowledge_root_nor_hidden(self, tmp_path: Path):
        (tmp_path / "secret.txt").write_text("TOP SECRET\n")
        root = tmp_path / "kb"
        (root / "docs").mkdir(parents=True)
        (root / ".hidden.md").write_text("HIDDEN\n")
        page = root / "docs" / "p.md"
        page.write_text(
            "# P\n\n[a](../../secret.txt ':include :type=code')\n\n[b](/../secret.txt ':include')\n\n"
            "[c](/etc/passwd ':include :type=code')\n\n[d](../.hidden.md ':include')\n"
        )
        out = MarkdownKnowledgeConverter().run(sources=[page], meta={"source": "docs/p.md"})
        [doc] = out["documents"]
        assert "SECRET" not in doc.content and "root:" not in doc.content and "HIDDEN" not in doc.content
        assert len(out["warnings"]) == 4 and not doc.meta.get("included_files")

    def test_an_include_in_a_liquid_raw_block_is_an_example_shown_as_written(self, tmp_path: Path):
        # Just the Docs' customization page shows the include a scheme file needs inside `{% raw %}`
        (tmp_path / "_includes").mkdir()
        (tmp_path / "_includes" / "note.md").write_text("Included text.\n")
        page = tmp_path / "customization.md"
        page.write_text(
            "# Schemes\n\n{% raw %}\n    {% include note.md %}\n{% endraw %}\n\n{% include note.md %}\n"
            "Inline {% raw %}{% include note.md %}{% endraw %} too.\n"
        )
        out = MarkdownKnowledgeConverter().run(sources=[page], meta={"source": "customization.md"})
        [doc] = out["documents"]
        assert "{% raw %}\n    {% include note.md %}\n{% endraw %}" in doc.content
        assert "\nIncluded text.\n" in doc.content  # the include outside the block is read
        assert "Inline {% raw %}{% include note.md %}{% endraw %} too." in doc.content
        assert out["warnings"] == []
        shown = MarkupCleaner().run(documents=[doc])["documents"][0].content
        assert "\n    {% include note.md %}\n" in shown and "Inline {% include note.md %} too." in shown

    def test_a_hugo_code_example_is_shown_from_the_sites_examples_folder(self, tmp_path: Path):
        # Kubernetes' layout: content/<lang>/examples holds what `codenew` and `code_sample` show
        (tmp_path / "examples" / "pods").mkdir(parents=True)
        (tmp_path / "examples" / "pods" / "pod.yaml").write_text("apiVersion: v1\nkind: Pod\n")
        page = tmp_path / "docs" / "concepts" / "pods.md"
        page.parent.mkdir(parents=True)
        page.write_text('# Pods\n\n{{< codenew file="pods/pod.yaml" >}}\n\n{{% code_sample file="pods/gone.yaml" %}}\n')
        out = MarkdownKnowledgeConverter().run(sources=[page], meta={"source": "docs/concepts/pods.md"})
        [doc] = out["documents"]
        assert "```yaml\napiVersion: v1\nkind: Pod\n```" in doc.content
        assert [w["reason"] for w in out["warnings"]] == [
            "include not resolved: pods/gone.yaml (not found under the knowledge root)"
        ]

    def test_an_imported_mdx_partial_is_shown_where_the_page_uses_it(self, tmp_path: Path):
        (tmp_path / "guides").mkdir()
        (tmp_path / "guides" / "_intro.mdx").write_text("---\nid: x\n---\nPartials hold shared text.\n")
        (tmp_path / "guides" / "page.mdx").write_text(
            "# Reuse\n\nimport Intro from './_intro.mdx';\nimport Gone from './_gone.mdx';\n\n"
            '```mdx-code-block\n<BrowserWindow>\n  <Intro name="a" />\n</BrowserWindow>\n```\n\n<Gone />\n\n'
            "```jsx\n<Intro />\n```\n"
        )
        out = MarkdownKnowledgeConverter().run(
            sources=[tmp_path / "guides" / "page.mdx"], meta={"source": "guides/page.mdx"}
        )
        [doc] = out["documents"]
        assert "<BrowserWindow>\nPartials hold shared text.\n</BrowserWindow>" in doc.content
        assert "```jsx\n<Intro />\n```" in doc.content  # code shows it, never runs it
        assert doc.meta["included_files"] == ["guides/_intro.mdx"]
        assert [w["reason"] for w in out["warnings"]] == [
            "include not resolved: ./_gone.mdx (not found under the knowledge root)"
        ]

    def test_an_mdx_partial_imported_from_the_sites_root_is_shown(self, tmp_path: Path):
        # Mintlify: `import X from "/snippets/x.mdx"`, the path from the site's root
        (tmp_path / "snippets").mkdir()
        (tmp_path / "components").mkdir()
        (tmp_path / "snippets" / "icons-optional.mdx").write_text("The icon to show.\n")
        page = '# Badge\n\nimport IconsOptional from "/snippets/icons-optional.mdx";\n\n<IconsOptional />\n'
        (tmp_path / "components" / "badge.mdx").write_text(page)
        out = MarkdownKnowledgeConverter().run(
            sources=[tmp_path / "components" / "badge.mdx"], meta={"source": "components/badge.mdx"}
        )
        [doc] = out["documents"]
        assert "\nThe icon to show." in doc.content and out["warnings"] == []
        assert doc.meta["included_files"] == ["snippets/icons-optional.mdx"]

    def test_mdbook_directives_show_the_part_of_the_file_they_name(self, tmp_path: Path):
        # mdBook's guide: paths relative to the page, expanded in code blocks too, `\{{#...}}` shown as written
        book = tmp_path / "src"
        (book / "format").mkdir(parents=True)
        code = "// ANCHOR: all\nuse x;\n// ANCHOR: component\nstruct C;\n// ANCHOR_END: component\nfn main() {}\n"
        (book / "format" / "file.rs").write_text(code + "// ANCHOR_END: all\n")
        (book / "format" / "arg.md").write_text("#### `--watcher`\n\nPoll or native.\n")
        page = (
            "{{#title The Book}}\n# Format\n\n```rust\n{{#include file.rs:component}}\n```\n\n"
            "```rust\n{{#include file.rs:3:4}}\n```\n\n```rust\n{{#rustdoc_include file.rs:2}}\n```\n\n"
            "{{#playground file.rs}}\n\n{{#include arg.md}}\n\n```hbs\n\\{{#include file.rs}}\n```\n\n"
            "```rust\n{{#include ../../missing.rs}}\n```\nend\n"
        )
        (book / "format" / "page.md").write_text(page)
        out = MarkdownKnowledgeConverter().run(sources=[book / "format" / "page.md"], meta={"source": "format/page.md"})
        [doc] = out["documents"]
        blocks = doc.content.split("```")
        assert blocks[1] == "rust\nstruct C;\n"  # the anchor's lines, the anchor comments gone
        assert blocks[3] == "rust\nstruct C;\n"  # lines 3 to 4 of the file, less the anchor line
        assert blocks[5] == "rust\nuse x;\n"
        assert blocks[7] == "rust\nuse x;\nstruct C;\nfn main() {}\n"  # the playground: the whole file as Rust
        assert "#### `--watcher`\n\nPoll or native." in doc.content
        assert "```hbs\n{{#include file.rs}}\n```" in doc.content  # escaped: the directive itself, unexpanded
        assert "{{#title" not in doc.content and doc.meta["title"] == "Format"
        assert [w["reason"] for w in out["warnings"]] == [
            "include not resolved: ../../missing.rs (not found under the knowledge root)"
        ]
        assert doc.meta["included_files"] == ["format/arg.md", "format/file.rs"]
        assert _file_line_of(doc, "end", page) == "end"

    def test_myst_includes_show_the_part_of_the_file_their_options_name(self, tmp_path: Path):
        docs = tmp_path / "docs"
        (docs / "syntax").mkdir(parents=True)
        (docs / "syntax" / "example.txt").write_text("Hallo\nthere\nyou!\n")
        (docs / "syntax" / "code.py").write_text("import os\n# start\nprint(os.sep)\n# end\n")
        (docs / "README.md").write_text("---\ntitle: R\n---\n## From the readme\n")
        page = (
            "# Organising\n\n```{include} example.txt\n:start-after: Hallo\n:end-before: you!\n```\n\n"
            ":::{literalinclude} code.py\n:start-after: # start\n:end-before: # end\n:::\n\n"
            "```{literalinclude} code.py\n:lines: 1,3\n:language: py\n```\n\n"
            "```{include} ../../outside.md\n```\n\n```{include} /README.md\n```\nend\n"
        )
        (docs / "syntax" / "page.md").write_text(page)
        out = MarkdownKnowledgeConverter().run(sources=[docs / "syntax" / "page.md"], meta={"source": "syntax/page.md"})
        [doc] = out["documents"]
        assert "\nthere\n" in doc.content and "Hallo" not in doc.content
        assert "```python\nprint(os.sep)\n```" in doc.content  # a literal include: a code block
        assert "```py\nimport os\nprint(os.sep)\n```" in doc.content
        assert "## From the readme" in doc.content  # `/`: the docs' root, after an include that did not resolve
        assert "```{include} ../../outside.md\n```" in doc.content  # left for the cleaner to hide, and reported
        assert [w["reason"] for w in out["warnings"]] == [
            "include not resolved: ../../outside.md (not found under the knowledge root)"
        ]
        assert _file_line_of(doc, "end", page) == "end"

    def test_myst_substitutions_of_the_front_matter_fill_the_text_and_not_the_code(self):
        data = (
            b"---\nmyst:\n  substitutions:\n    confpy: sphinx `conf.py` file\n"
            b"    block: |\n      Two\n      lines\n---\n"
            b"Set it in the {{ confpy }}.\n{{block}}\n```\n{{ confpy }}\n```\n{{ unknown }} stays\nend\n"
        )
        out = MarkdownKnowledgeConverter().run(sources=[ByteStream(data, meta={"file_path": "a.md"})])
        [doc] = out["documents"]
        assert doc.content.startswith("Set it in the sphinx `conf.py` file.\nTwo\nlines\n```\n{{ confpy }}\n```\n")
        assert "{{ unknown }} stays" in doc.content
        assert _file_line_of(doc, "end", data.decode()) == "end"

    def test_myst_substitutions_of_the_sites_conf_py_are_read_never_run(self, tmp_path: Path):
        # Sphinx: `myst_substitutions` in the source folder's conf.py; a page's front matter overrides them
        (tmp_path / "docs" / "syntax").mkdir(parents=True)
        ran = tmp_path / "ran"
        (tmp_path / "docs" / "conf.py").write_text(
            f"import pathlib\npathlib.Path({str(ran)!r}).write_text('x')\n"
            'myst_substitutions = {"role": "[role](#roles)", "directive": "a directive", "n": 3}\n'
        )
        page = tmp_path / "docs" / "syntax" / "p.md"
        page.write_text("---\nmyst:\n  substitutions:\n    n: four\n---\nA {{role}}, {{ directive }}, {{n}}.\n")
        meta = {"source": "docs/syntax/p.md"}
        [doc] = MarkdownKnowledgeConverter().run(sources=[page], meta=meta)["documents"]
        assert doc.content == "A [role](#roles), a directive, four.\n"
        assert doc.meta["included_files"] == ["docs/conf.py"]  # its edits re-index the page
        assert doc.meta["watched_files"] == ["docs/syntax/conf.py"]  # and so would a nearer one, once created
        assert not ran.exists()
        (tmp_path / "docs" / "conf.py").write_text("myst_substitutions = dict(role=open('/etc/passwd').read())\n")
        [plain] = MarkdownKnowledgeConverter().run(sources=[page], meta=meta)["documents"]
        assert plain.content == "A {{role}}, {{ directive }}, four.\n"  # not a literal: not read
        (tmp_path / "docs" / "conf.py").write_text("myst_substitutions = {\n")
        [broken] = MarkdownKnowledgeConverter().run(sources=[page], meta=meta)["documents"]
        assert broken.content == plain.content and "included_files" not in broken.meta
        assert broken.meta["watched_files"] == ["docs/conf.py", "docs/syntax/conf.py"]  # mending it re-indexes the page

    def test_a_page_with_substitutions_and_no_conf_py_watches_every_place_one_would_be_read_from(self, tmp_path: Path):
        (tmp_path / "docs" / "syntax").mkdir(parents=True)
        page = tmp_path / "docs" / "syntax" / "p.md"
        page.write_text("A {{role}}.\n")
        hugo = tmp_path / "docs" / "hugo.md"
        hugo.write_text("{{< note >}}Hi{{< /note >}}\n\n```yaml\nimage: {{ .Values.image }}\n```\n`{{ page.title }}`\n")
        metas = [{"source": "docs/syntax/p.md"}, {"source": "docs/hugo.md"}]
        [doc, other] = MarkdownKnowledgeConverter().run(sources=[page, hugo], meta=metas)["documents"]
        assert doc.content == "A {{role}}.\n"
        assert doc.meta["watched_files"] == ["conf.py", "docs/conf.py", "docs/syntax/conf.py"]
        assert "watched_files" not in other.meta  # `{{ }}` in code only: no configuration to watch

    def test_included_files_names_what_each_page_includes_parsing_only_pages_that_name_an_include(
        self, tmp_path: Path, monkeypatch
    ):
        (tmp_path / "cli").mkdir()
        (tmp_path / "cli" / "arg.md").write_text("The watcher polls.\n")
        (tmp_path / "cli" / "serve.md").write_text("# Serve\n\n{{#include arg.md}}\n")
        (tmp_path / "plain.md").write_text("# Plain\n\nNo include here.\n")
        (tmp_path / "big.md").write_text("x" * 100)
        parsed: list[str] = []
        real = markdown_knowledge_converter.parse_knowledge_file
        monkeypatch.setattr(
            markdown_knowledge_converter,
            "parse_knowledge_file",
            lambda data, source, *args: parsed.append(source) or real(data, source, *args),
        )
        names = ["cli/serve.md", "cli/arg.md", "plain.md", "big.md", "gone.md"]
        found = MarkdownKnowledgeConverter(max_file_bytes=50).included_files(
            [tmp_path / n for n in names], [{"source": n} for n in names]
        )
        assert found == {"cli/serve.md": ["cli/arg.md"], "cli/arg.md": [], "plain.md": []}  # too big, gone: not read
        assert parsed == ["cli/serve.md"]

    def test_included_files_leaves_out_a_part_shown_a_narrower_page_and_a_page_that_cannot_be_read(
        self, tmp_path: Path
    ):
        (tmp_path / "setup.md").write_text("# Setup\n\nRun make install.\n\n## Trouble\n\nDelete the cache.\n")
        pages = {
            "part.md": "# Guide\n\n{{#include setup.md:3:3}}\n",  # one line of it: setup.md stays a page
            "myst.md": "```{include} setup.md\n:start-line: 2\n```\n",
            "staff.md": "---\naccess: [staff]\n---\n# Runbook\n\n{{#include setup.md}}\n",  # fewer readers
            "odd.md": "# A\n\n{{#include setup.md:\u00b2}}\n",  # `isdigit()` but no int: raised in the converter
            "whole.md": "# All\n\n{{#include setup.md}}\n",
        }
        for name, text in pages.items():
            (tmp_path / name).write_text(text, encoding="utf-8")
        names = list(pages)
        converter = MarkdownKnowledgeConverter()
        found = converter.included_files([tmp_path / n for n in names], [{"source": n} for n in names])
        assert found == {"part.md": [], "myst.md": [], "staff.md": [], "odd.md": [], "whole.md": ["setup.md"]}

    def test_a_conf_py_linked_from_outside_the_knowledge_root_is_not_read(self, tmp_path: Path):
        outside = tmp_path / "outside"
        outside.mkdir()
        (outside / "conf.py").write_text('myst_substitutions = {"token": "OUTSIDE-SECRET"}\n')
        (tmp_path / "kb" / "docs").mkdir(parents=True)
        (tmp_path / "kb" / "docs" / "conf.py").symlink_to(outside / "conf.py")
        page = tmp_path / "kb" / "docs" / "p.md"
        page.write_text("Value: {{token}}\n")
        [doc] = MarkdownKnowledgeConverter().run(sources=[page], meta={"source": "docs/p.md"})["documents"]
        assert doc.content == "Value: {{token}}\n"

    def test_hostile_myst_substitutions_and_line_ranges_stay_within_the_cap(self, tmp_path: Path):
        # 4 KB of front matter whose values name each other would grow to 90 MB: it stays as written, reported
        values = "    a: '" + "{{b}}" * 300 + "'\n    b: '" + "{{c}}" * 300 + "'\n    c: '" + "x" * 1000 + "'\n"
        data = f"---\nmyst:\n  substitutions:\n{values}---\nBoom {{{{a}}}}\n".encode()
        out = MarkdownKnowledgeConverter().run(sources=[ByteStream(data, meta={"file_path": "a.md"})])
        [doc] = out["documents"]
        assert doc.content == "Boom {{a}}\n"
        assert [w["reason"] for w in out["warnings"]] == [
            "include not resolved: substitutions of `Boom {{a}}` (over the 524288-byte cap)"
        ]
        (tmp_path / "x.py").write_text("one\ntwo\n")
        (tmp_path / "p.md").write_text("```{literalinclude} x.py\n:lines: 2-999999999999\n```\n")
        [page] = MarkdownKnowledgeConverter().run(sources=[tmp_path / "p.md"], meta={"source": "p.md"})["documents"]
        assert page.content.startswith("```python\ntwo\n```")  # to the file's end, never a range that size

    def test_a_stream_without_a_path_reports_its_includes_unresolved(self):
        stream = ByteStream(b'# T\n\n{{% include "/x.md" %}}\n', meta={"source": "a.md"})
        out = MarkdownKnowledgeConverter().run(sources=[stream])
        assert "no knowledge root" in out["warnings"][0]["reason"]
