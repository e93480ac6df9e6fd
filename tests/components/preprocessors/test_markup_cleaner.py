from __future__ import annotations

import datetime
import time

import pytest
from haystack import Document
from haystack.core.serialization import component_from_dict, component_to_dict

from components.core.location import file_line
from components.preprocessors.markup_cleaner import MarkupCleaner, clean_markup

LICENCE_PAGE = """<!--
#
# Licensed to the Apache Software Foundation (ASF) under one
# or more contributor license agreements.
#
-->

import Tabs from '@theme/Tabs';
import TabItem from '@theme/TabItem';

# cors

:::tip 提示

Use `<div>` and `{{< ref >}}` in code.

:::

<Tabs
  groupId="api"
  values={[
    {label: 'Admin API', value: 'admin-api'},
  ]}>
<TabItem value="admin-api" label="Admin API">

Press <Enter> to go.

```shell
# not a heading
curl http://127.0.0.1:9180
```

</TabItem>
</Tabs>
"""


def _md(text: str) -> Document:
    return Document(content=text, meta={"source": "a.md", "markup": "markdown"})


class TestMarkupCleaner:
    def test_init_defaults_and_invalid(self):
        assert MarkupCleaner().markups == ["markdown"]
        with pytest.raises(ValueError, match="markups=\\[\\] cleans nothing"):
            MarkupCleaner(markups=[])

    def test_to_dict_from_dict(self):
        data = component_to_dict(MarkupCleaner(markups=["markdown", "mdx"]), "markup")
        assert data["init_parameters"] == {"markups": ["markdown", "mdx"]}
        assert component_from_dict(MarkupCleaner, data, "markup").markups == ["markdown", "mdx"]

    def test_a_docusaurus_page_keeps_its_words_code_and_line_count(self):
        out = clean_markup(LICENCE_PAGE)
        assert out.count("\n") == LICENCE_PAGE.count("\n")
        for gone in ("<!--", "Licensed", "import Tabs", "<Tabs", "<TabItem", "</TabItem>", ":::", "groupId"):
            assert gone not in out
        lines = out.split("\n")
        assert lines.index("# cors") == LICENCE_PAGE.split("\n").index("# cors")  # every line where it was
        assert "提示" in lines and "Admin API" in lines  # the admonition's title and the tab's label stay as lines
        assert "Use `<div>` and `{{< ref >}}` in code." in out  # inline code is never changed
        assert "Press <Enter> to go." in out  # a bare capitalized word that nothing closes is prose
        assert "```shell\n# not a heading\ncurl http://127.0.0.1:9180\n```" in out

    @pytest.mark.parametrize(
        ("text", "expected"),
        [
            ('{{< note >}}Enable it {{% param "minVersion" %}}.{{< /note >}}', "Enable it ."),
            ('请使用 {{< glossary_tooltip text="Secret" term_id="secret" >}}，', "请使用 Secret，"),
            ('A {{< glossary_tooltip term_id="pod" >}} runs.', "A pod runs."),
            ('## {{% heading "whatsnext" %}}\n{{% alert title="Note" %}}x{{% /alert %}}', "## whatsnext\nNotex"),
            ('{{< tab name="ARM64" codelang="bash" >}}\ncurl{{< /tab >}}', "ARM64\ncurl"),
            ("{{< new-in v0.159.2 />}} New.", " New."),
            ("See [Troubleshooting]({{ '/docs/troubleshooting/' | relative_url }}).", "See Troubleshooting."),
            ("Version {{ site.data.ruby.current_version }} {% raw %}x{% endraw %}", "Version  x"),
            ("Read [the docs][docs] now.\n\n[docs]: https://example.org/docs", "Read the docs now.\n\n"),
            ("## Linking to pages {#link}", "## Linking to pages"),
            ("## Context <small>optional</small> { #context }", "## Context optional"),
            ("> [!NOTE]\n> Hello", "> Note\n> Hello"),
            ("{/* a comment */}Text<br/>", "Text "),
            ('Before.\n--8<-- "missing.md"\nAfter.', "Before.\n\nAfter."),
            ("<details><summary>More</summary>Body</details>", "MoreBody"),
            ("/// tip | Authorize button!\nClick it.\n///", "Authorize button!\nClick it.\n"),
            ("//// tab | Linux, macOS\nrun\n////\n/// note\nx\n///", "Linux, macOS\nrun\n\nNote\nx\n"),
            ("/// html | div.grid\nA\n///\n/// a doc comment, prose", "\nA\n\n/// a doc comment, prose"),
            ("Before.\n{* ../../docs_src/app.py hl[3] *}\nAfter.", "Before.\n\nAfter."),
            ('100% <dfn title="tested">test coverage</dfn> <cite>x</cite>', "100% test coverage x"),
            (":::note[With classes]{.padding--lg}\nx\n:::\n:::tip{#an-id}\ny\n:::", "With classes\nx\n\nTip\ny\n"),
        ],
    )
    def test_shortcodes_liquid_links_and_tags_leave_their_text(self, text, expected):
        assert clean_markup(text) == expected

    @pytest.mark.parametrize(
        ("text", "expected"),
        [
            # kramdown (Jekyll): attribute lists on a line of their own or after a span, the table of contents
            ("# Title\n{: .no_toc }\nLead.\n{: .fs-6 .fw-300 }", "# Title\n\nLead.\n"),
            ("[Get started](#start){: .btn .btn-primary }", "[Get started](#start)"),
            (
                "<span>New (v0.4.0)</span>{: .label .label-green } and **Contents**{:.text-delta}",
                "New (v0.4.0) and **Contents**",
            ),
            ("## Contents\n\n1. TOC\n{:toc}\n\nText.", "## Contents\n\n\n\n\nText."),
            ('{::comment}\nhidden\n{:/comment}\nShown.{::options parse_block_html="true" /}', "\n\n\nShown."),
            # a code span that names kramdown's or Docsify's markup stays whole (no role opens at its closing tick)
            ("The `{:toc}` line must follow the `1. TOC` line.", "The `{:toc}` line must follow the `1. TOC` line."),
            (
                "And the `{docsify-ignore}` and `{docsify-ignore-all}` can do.",
                "And the `{docsify-ignore}` and `{docsify-ignore-all}` can do.",
            ),
            # a code span's highlighting language after its code (Nextra)
            (
                "Set `search: false{:js}` in your `next.config.mjs` file; `{:ts}` alone.",
                "Set `search: false` in your `next.config.mjs` file; `{:ts}` alone.",
            ),
            # alerts with their text or title on the marker's line, nested, of a site's own kind
            (
                "> [!IMPORTANT] Save files in the root.\n> > [!NOTE]\n> > nested\n> [!NB] **Skip**\n"
                "1. A\n   > [!TIP] Tip",
                "> Save files in the root.\n> > Note\n> > nested\n> **Skip**\n1. A\n   > Tip",
            ),
            # Docsify: legacy callouts, link options, heading suffixes
            ("!> Legacy **Important**\n?> Legacy **Tip**\nA ?> B", "Legacy **Important**\nLegacy **Tip**\nA ?> B"),
            (
                "[link](/demo ':target=_blank') ![logo](_media/icon.svg ':size=50x100')",
                "[link](/demo) ![logo](_media/icon.svg)",
            ),
            (
                "## themeColor :id=theme-color\n# Heading 1 {docsify-ignore}\n## Header <!-- {docsify-ignore} -->",
                "## themeColor\n# Heading 1\n## Header ",
            ),
            ("## Typesetting [#typesetting-section]\n## Fix [#1234]", "## Typesetting\n## Fix [#1234]"),
            # link definitions whose target is a template, or on the next line, or inside a quote
            ('[X]: {% link docs/x.md %}\n[Y]: {{< ref "y.md" >}}\nText.', "\n\nText."),
            ("See [A][].\n\n[A]:\n  https://example.org/a\n> [B]: /blog/b/#alerts", "See A.\n\n\n\n"),
            # Hugo's comment shortcode shows nothing; `<output>` is layout
            ("{{< comment >}}\nA note to editors.\n{{< /comment >}}\nShown.", "\n\n\nShown."),
            ('<output data-lang="output">\n42\n</output>', "\n42\n"),
            # a Docsy card shows its header, title and subtitle; a value repeated shows once
            (
                '{{% card\n  header="**Imagine**"\n  title="John Lennon"\n  subtitle="Yoko Ono"\n%}}\n'
                "Lyrics.\n{{% /card %}}",
                "**Imagine** — John Lennon — Yoko Ono\n\n\n\n\nLyrics.\n",
            ),
            ('{{< figure src="a.png" title="Plot" caption="Plot" >}}', "Plot"),
            # a code block inside a quote is code (Docsify's UI kit)
            (
                "> Text <b>x</b>\n> ```html\n> <p>Hello</p>\n> ```\n> <b>y</b>",
                "> Text x\n> ```html\n> <p>Hello</p>\n> ```\n> y",
            ),
            # a shortcut reference link is its text when the page defines its label (after a code block too)
            (
                "## [hexo-server]\nInstall [Hexo-Server], not [x] or `[hexo-server]`.\n```\n[a]\n```\n"
                "[hexo-server]: https://github.com/hexojs/hexo-server",
                "## hexo-server\nInstall Hexo-Server, not [x] or `[hexo-server]`.\n```\n[a]\n```\n",
            ),
            (
                "Add to the [server] section.\n```md\n[server]: http://x\n```",
                "Add to the [server] section.\n```md\n[server]: http://x\n```",
            ),
            ("{ value?: Array<string> }", "{ value?: Array<string> }"),  # a type, not an MDX expression
            # VuePress: a tab container and its tabs show their labels, the TOC marker goes, an escaped tag is text
            (
                "::: code-tabs#shell\n@tab pnpm\n```bash\npnpm i\n```\n@tab:active npm#npm\n:::\n[[toc]]",
                "\npnpm\n```bash\npnpm i\n```\nnpm\n\n",
            ),
            ("See [\\<center>](https://x) and <kbd>\\\\</kbd>", "See [\\<center>](https://x) and \\\\"),
            # footnotes keep their text, JSX fragments and line breaks keep words apart, tabs show their labels
            ("Text[^1] more.\n\n[^1]: The note.", "Text more.\n\nThe note."),
            ("<>![Logo](/logo.png)</> and a <> b", "![Logo](/logo.png) and a <> b"),
            ("top-level folders):**<br />**Nextra", "top-level folders):** **Nextra"),
            # an MDX expression that renders a component in some builds only shows nothing certain
            ("Intro.\n\n{process.env.NODE_ENV !== 'production' && <Old />}\n\n## Edit", "Intro.\n\n\n\n## Edit"),
            ("{a && b}\n{cond ? <A /> : <B />}", "{a && b}\n"),  # no component: it may be text
            ("<Tabs items={['pnpm', \"npm\"]}>\n<Tabs.Tab>x</Tabs.Tab>\n</Tabs>", "pnpm — npm\nx\n"),
        ],
    )
    def test_the_markup_of_jekyll_docsify_docsy_and_nextra_sites_leaves_their_text(self, text, expected):
        out = clean_markup(text)
        assert out == expected
        assert out.count("\n") == text.count("\n")

    def test_a_tab_of_code_is_a_code_block_so_its_comments_are_no_headings(self):
        text = (
            '{{< tabpane >}}\n{{< tab header="Configuration file:" disabled=true />}}\n'
            '{{< tab header="hugo.toml" lang="toml" >}}\n[languages.en]\n# Weight used for sorting.\nweight = 1\n'
            '{{< /tab >}}\n{{< tab header="hugo.yaml" lang="yaml" >}}\nweight: 1\n{{< /tab >}}\n{{< /tabpane >}}\n'
            '{{% tab header="Prose" %}}\n# A heading\n{{% /tab %}}'
        )
        assert clean_markup(text) == (
            # the pane's first tab is a label: its header shows
            "\nConfiguration file:\n~~~~toml\n[languages.en]\n# Weight used for sorting.\nweight = 1\n~~~~\n~~~~yaml\n"
            "weight: 1\n~~~~\n\n"
            "Prose\n# A heading\n"
        )

    @pytest.mark.parametrize(
        ("pane", "tab", "shown"),
        [
            ("{{< tabpane langEqualsHeader=true >}}", "{{< tab toml >}}", "~~~~toml"),  # the header is the language
            ('{{< tabpane lang="bash" >}}', '{{< tab header="Linux" >}}', "~~~~bash"),  # the pane's language
            ("{{< tabpane >}}", '{{< tab header="Output" >}}', "~~~~"),  # code in no language
            ("{{< tabpane text=true >}}", '{{% tab header="English" %}}', "English"),  # text: markdown
            ("{{< tabpane >}}", '{{% tab header="English" text=true %}}', "English"),
        ],
    )
    def test_a_docsy_pane_shows_its_tabs_as_code_unless_they_are_text(self, pane, tab, shown):
        text = f"{pane}\n{tab}\n# not a heading unless text\n{{{{< /tab >}}}}\n{{{{< /tabpane >}}}}"
        out = clean_markup(text).split("\n")
        assert out[1] == shown
        assert out[3] == ("" if shown == "English" else "~~~~")

    def test_a_highlight_block_around_a_fence_shows_the_fence_as_code(self):
        # Just the Docs shows how to write a fence inside `{% highlight markdown %}`: the prose after it is prose
        text = "{% highlight markdown %}\n```js\nvar x;\n```\n{% endhighlight %}\n\n## Next\nSee [it]({% link a.md %})."
        assert clean_markup(text) == "````markdown\n```js\nvar x;\n```\n````\n\n## Next\nSee it."

    def test_an_mdx_comment_hides_the_headings_and_code_blocks_it_wraps(self):
        # Nextra's blog theme page comments out a section, its heading and code block too
        text = "Intro\n{/*\n## Hidden heading\n```js\ncode\n```\n*/}\n## Shown\n`{/*` in code"
        assert clean_markup(text) == "Intro\n\n\n\n\n\n\n## Shown\n`{/*` in code"

    @pytest.mark.parametrize(
        "text",
        [
            *("{% highlight x %}\ntext\n" * 20_000, "{/*\n" * 40_000, "a {/* b\n" * 40_000),
            # unclosed shortcodes, Liquid tags and Quarto escapes, a line of MDX operators (each was quadratic)
            *("{{< x " * 20_000, "{% x " * 20_000, "{{{< x " * 20_000, "{" + "a && b ? " * 20_000),
            *("@tab a" + " " * 40_000 + "b", "::: {" + "a=" * 25_000, "{{< " + " " * 20_000 + "x"),
        ],
    )
    def test_unclosed_code_shortcodes_and_mdx_comments_cost_one_pass(self, text):
        # a hostile page of openings never closed: each opening searched to the end of the page was quadratic
        started = time.perf_counter()
        out = clean_markup(text)
        assert time.perf_counter() - started < 5
        assert out.count("\n") == text.count("\n")

    def test_an_async_export_goes_whole(self):
        text = (
            "Intro.\n\nexport async function Demo() {\n  const x = await load()\n  return <X data={x} />\n}\n\nAfter."
        )
        assert clean_markup(text) == "Intro.\n\n\n\n\n\n\nAfter."

    def test_an_export_line_inside_a_components_template_literal_is_the_value_not_a_statement(self):
        # Nextra's meta-file page: `export default $` inside `code={`...`}` was taken for an MDX export, which ran to
        # the blank line and left `<APIDocs` and `code={`...` in the prose
        text = (
            "Inherited.\n\n<APIDocs\n  code={`type $ = ${generate(schema)}\nexport default $`}\n/>\n\n"
            "## Layouts\n\nexport const x = 1\n\nText."
        )
        out = clean_markup(text)
        assert out.count("\n") == text.count("\n")
        assert "APIDocs" not in out and "code=" not in out and "export const" not in out
        assert "## Layouts" in out and out.endswith("\n\nText.")

    def test_an_mdx_code_block_is_rendered_mdx_so_its_markup_goes_and_its_code_stays(self):
        text = (
            "import Tabs from '@theme/Tabs'; import TabItem from '@theme/TabItem';\n\n"
            '````mdx-code-block\n<Tabs>\n<TabItem value="npm" label="npm">\n\n```bash\nnpm install\n```\n\n'
            "</TabItem>\n</Tabs>\n````\n\n```jsx\n<Tabs>\n```"
        )
        out = clean_markup(text)
        assert out.count("\n") == text.count("\n")
        # the tabs close after a code block inside them: the opening tag goes all the same
        assert out == "\n\n\n\nnpm\n\n```bash\nnpm install\n```\n\n\n\n\n\n```jsx\n<Tabs>\n```"

    def test_a_comment_hides_the_code_block_it_wraps(self):
        # Kubernetes' Chinese pages keep the English original, code blocks too, in comments
        text = "说明。\n<!--\nOriginal:\n```yaml\n# a comment\n```\n-->\n```yaml\n# 注释\n```\nUse `<!--`.\n```\nx\n```"
        out = clean_markup(text)
        assert out == "说明。\n\n\n\n\n\n\n```yaml\n# 注释\n```\nUse `<!--`.\n```\nx\n```"

    def test_mkdocs_admonitions_and_tabs_keep_title_and_body_at_the_margin(self):
        text = '!!! warning "Careful"\n    Indented body.\n\n=== "Tab one"\n\n    Inside the tab.\n\nAfter.'
        assert clean_markup(text) == "Careful\nIndented body.\n\nTab one\n\nInside the tab.\n\nAfter."

    def test_code_shortcodes_become_fences_so_their_hash_lines_are_no_headings(self):
        text = (
            "{{< code-toggle file=hugo >}}\n[params]\n# comment\n{{< /code-toggle >}}\n"
            "{% highlight ruby %}\n# x\n{% endhighlight %}\n"
            # Hexo's code blocks, in the language they name or none (a title and a link are no language)
            "{% codeblock lang:objc %}\n# y\n{% endcodeblock %}\n"
            "{% codeblock _.compact http://underscorejs.org/#compact Underscore.js %}\n# z\n{% endcodeblock %}"
        )
        assert clean_markup(text) == (
            "```\n[params]\n# comment\n```\n```ruby\n# x\n```\n```objc\n# y\n```\n```\n# z\n```"
        )

    @pytest.mark.parametrize(
        ("text", "expected"),
        [
            # GitBook's code tag wraps a fence and shows its title; Hexo's codeblock in a fence is an example
            ('{% code title="a.js" %}\n```js\nx\n```\n{% endcode %}', "a.js\n```js\nx\n```\n"),
            (
                "```\n{% codeblock %}\nx\n{% endcodeblock %}\n```\n### Examples\n```\ny\n```",
                "```\n{% codeblock %}\nx\n{% endcodeblock %}\n```\n### Examples\n```\ny\n```",
            ),
            # an escaped shortcode shows as Hugo shows it in prose too; half an escape is no escape
            ("Use {{</* card */>}} here.\n```\nfoo */%}}\n```", "Use {{< card >}} here.\n```\nfoo */%}}\n```"),
            # a link's or tooltip's `text` shows alone (its `title` is a tooltip)
            ('{{< ref-link text="Guide" title="Open the guide" >}}', "Guide"),
        ],
    )
    def test_code_tags_escapes_and_shown_words_as_the_page_shows_them(self, text, expected):
        assert clean_markup(text) == expected

    def test_an_escaped_hugo_shortcode_shows_as_hugo_shows_it_and_a_go_comment_stays(self):
        # Docsy's shortcode page documents `{{</* card */>}}`: the page shows `{{< card >}}`, the form to copy
        text = (
            '```go-html-template\n{{</* card header="x" */>}}\n{{%/* /card */%}}\n{{/* a comment */}}\n```\n'
            "`{{</* y */>}}`"
        )
        assert clean_markup(text) == (
            '```go-html-template\n{{< card header="x" >}}\n{{% /card %}}\n{{/* a comment */}}\n```\n`{{< y >}}`'
        )

    def test_a_hexo_note_shows_its_title_and_a_quote_its_source(self):
        text = (
            "{% note warn For Mac users %}\nInstall Xcode.\n{% endnote %}\n{% note info %}\nx\n{% endnote %}\n"
            '{% note warn no-icon "Warning!" %}\ny\n{% endnote %}\n'
            "{% blockquote Seth Godin http://sethgodin.typepad.com/x Welcome to Island Marketing %}\nq\n"
            "{% endblockquote %}"
        )
        assert clean_markup(text) == (
            "For Mac users\nInstall Xcode.\n\n\nx\n\nWarning!\ny\n\nSeth Godin Welcome to Island Marketing\nq\n"
        )

    def test_a_self_closing_code_shortcode_opens_no_block(self):
        text = "{{< code-toggle config=privacy.youTube />}}\n\n[source code]: <https://example.org>\nAfter."
        assert clean_markup(text) == "\n\n\nAfter."

    def test_a_four_backtick_block_shows_three_backtick_fences_as_code(self):
        text = "````md\n```sh\n{{< x >}}\n```\n````\n{{< x >}}Prose."
        assert clean_markup(text) == "````md\n```sh\n{{< x >}}\n```\n````\nProse."

    def test_an_unresolved_mdbook_directive_leaves_prose_and_stays_in_code(self):
        text = (
            "Intro\n{{#include ../x.md}}\n`{{#title T}}` shows it\n```rust\n{{#include ../x.rs}}\n```\n{{#title B}}\n"
        )
        assert clean_markup(text) == "Intro\n\n`{{#title T}}` shows it\n```rust\n{{#include ../x.rs}}\n```\n\n"

    def test_myst_directives_keep_their_words_and_lose_their_fences_and_options(self):
        text = (
            "(install)=\n# Install\n\n"
            "````{admonition} Mind the version\n:class: tip\n:name: v\n\nUse 3.11.\n\n"
            "```{code-block} python\n:linenos:\n# a comment\nimport x\n```\n````\n"
            ":::{versionadded} 0.19\nThe `--fast` flag.\n:::\n"
            "```{toctree}\n:maxdepth: 2\nintro\n```\n"
            "```{note}\n---\nclass: x\n---\n"
            "A {term}`glossary` word, see {ref}`the setup <setup>` and [](other.md).\n```\n"
            "% a comment\n+++\nend {octicon}`book` {py:class}`~pkg.mod.Reader`"
        )
        cleaned = clean_markup(text)
        assert cleaned.count("\n") == text.count("\n")  # every line where it was
        lines = [line for line in cleaned.split("\n") if line]
        assert lines == [
            "# Install",
            "Mind the version",
            "Use 3.11.",
            "```python",
            "# a comment",  # code: no heading, as written
            "import x",
            "```",
            "New in version 0.19",
            "The `--fast` flag.",
            "A glossary word, see the setup and other.md.",
            "end  Reader",
        ]

    def test_a_myst_code_directive_becomes_a_block_longer_than_the_blocks_it_holds(self):
        text = "::::{myst-example}\n```py\nx = 1\n```\n:::{tip}\nHint\n:::\n::::\nafter"
        assert clean_markup(text) == "````md\n```py\nx = 1\n```\n:::{tip}\nHint\n:::\n````\nafter"

    def test_an_executable_cell_is_code_in_its_language_so_its_comments_are_no_headings(self):
        # Quarto and R Markdown pages: ```{python} and ```{r} cells, their options as `#|` comments
        text = "## Analysis\n```{python}\n#| label: fig-polar\n# a comment\nimport numpy\n```\n```{r}\nx <- 1\n```"
        assert clean_markup(text) == (
            "## Analysis\n```python\n#| label: fig-polar\n# a comment\nimport numpy\n```\n```r\nx <- 1\n```"
        )

    def test_myst_markup_is_read_only_on_a_myst_page_and_never_in_code(self):
        plain = "% of users\n+++\nA [](x.md) and (y)= stay."  # no directive, target line or role: not MyST
        assert clean_markup(plain) == plain
        example = "````md\n```{note}\n:class: x\nBody\n```\n(label)=\n````\n{ref}`a`"
        assert clean_markup(example) == "````md\n```{note}\n:class: x\nBody\n```\n(label)=\n````\na"

    def test_vitepress_badges_keep_their_text_and_vue_pages_lose_their_live_data(self):
        page = (
            '<script setup>\nimport { data } from "./x.data"\n</script>\n'
            '## Target Change <Badge text="NRV" type="warning" />\n<svg-image :svg="bundlerSvg" />\n'
            '<template v-for="dep in data"><code>{{ dep.name }}</code> by {{ dep.author }}</template>\n`{{ x }}` stays'
        )
        assert clean_markup(page) == "\n\n\n## Target Change NRV\n\n by \n`{{ x }}` stays"
        # a placeholder is no component: it has no attributes and nothing closes it
        assert clean_markup('Name it "a_<customer-name>-internal".') == 'Name it "a_<customer-name>-internal".'
        # without a script or template, `{{ }}` is the page's text (a Jinja or Helm example, say)
        assert clean_markup("Write {{ .Values.name }} in the chart.") == "Write {{ .Values.name }} in the chart."

    def test_a_components_title_and_a_liquid_tags_title_or_date_are_words_the_page_shows(self):
        # Mintlify's steps and accordions, Starlight's cards; GitBook's tabs, code titles and changelog dates
        text = (
            '<Steps>\n<Step title="Install the CLI">\nRun it.\n</Step>\n</Steps>\n<Card title="Stars" icon="star">\n'
            'Sirius\n</Card>\n<a href="x" title="a tooltip">link</a>\n'
            '{% tabs %}\n{% tab title="HTTP" %}\ncurl\n{% endtab %}\n{% endtabs %}\n'
            '{% update date="2025-12-18" %}\nShipped.\n{% endupdate %}\n{% hint style="info" %}\nHint.\n{% endhint %}\n'
            '<LinkCard title="Authoring" description="Write pages." href="/a/" />'
        )
        lines = [line for line in clean_markup(text).split("\n") if line]
        assert lines == [
            "Install the CLI",
            "Run it.",
            "Stars",
            "Sirius",
            "link",
            "HTTP",
            "curl",
            "2025-12-18",
            "Shipped.",
            "Hint.",
            "Authoring — Write pages.",  # Starlight's link card: its title and its description
        ]

    def test_a_components_indented_body_moves_out_as_mdx_reads_it(self):
        text = (
            '<AccordionGroup>\n  <Accordion title="What is X?">\n    ## Inside\n\n'
            "    - one\n      - nested\n    - two\n\n    ```bash\n    npm i\n    ```\n  </Accordion>\n"
            "</AccordionGroup>\n    indented prose stays\n<Enter>\n  kept"
        )
        cleaned = clean_markup(text)
        assert cleaned.count("\n") == text.count("\n")
        assert [line for line in cleaned.split("\n") if line] == [
            "What is X?",
            "## Inside",  # a heading again
            "- one",
            "  - nested",  # its level kept
            "- two",
            "```bash",
            "npm i",
            "```",
            "    indented prose stays",  # outside any component
            "<Enter>",  # a key name: nothing closes it
            "  kept",
        ]

    def test_character_references_read_as_their_characters_outside_code(self):
        text = "Array&lt;SidebarLink&gt;&#x20;and&nbsp;R&amp;D &mdash; `&lt;kept&gt;`\n```\n&amp;\n```\nAT&T stays"
        assert clean_markup(text) == "Array<SidebarLink> and\xa0R&D — `&lt;kept&gt;`\n```\n&amp;\n```\nAT&T stays"
        # an HTML code element is code: Jekyll's docs show their own tags so
        assert clean_markup("place <code>{&#37; raw &#37;}</code> tags") == "place `{% raw %}` tags"
        # a reference to a tag is the tag's text, not a tag (the GitLab handbook's `[Search &lt;your domain&gt;]`)
        assert clean_markup("wrap it in &lt;div&gt; or &lt;Tabs&gt;") == "wrap it in <div> or <Tabs>"

    def test_an_html_table_becomes_a_markdown_table_in_its_own_lines(self):
        # as the GitLab handbook writes them: a cell per line, a rowspan, a link in a header cell
        text = (
            'Grades:\n\n<table class="tg">\n  <tr>\n    <th><a href="/grades">Job Grade</a></th>\n'
            "    <th>Demonstrates</th>\n    <th>Assessment<br></th>\n  </tr>\n  <tr>\n    <td>5</td>\n"
            '    <td>Tries &amp; fails</td>\n    <td rowspan="2">IC form</td>\n  </tr>\n  <tr>\n    <td>6</td>\n'
            "    <td>Iterates</td>\n  </tr>\n</table>\nAfter."
        )
        out = clean_markup(text)
        assert out.count("\n") == text.count("\n")
        assert out.split("\n")[:6] == [
            "Grades:",
            "",
            "| Job Grade | Demonstrates | Assessment |",
            "|---|---|---|",
            "| 5 | Tries & fails | IC form |",
            "| 6 | Iterates | IC form |",
        ]
        assert out.split("\n")[6:-1] == [""] * (text.count("\n") - 6) and out.endswith("\nAfter.")

    def test_a_table_that_takes_fewer_lines_moves_the_documents_line_map_with_it(self):
        body = "# T\n<table>\n<tr>\n<th>A</th>\n</tr>\n<tr>\n<td>1</td>\n</tr>\n</table>\n\nEnd"
        page = Document(content=body, meta={"source": "t.md", "markup": "markdown", "line_map": [[0, 4, 1]]})
        out = MarkupCleaner().run(documents=[page])["documents"][0]
        assert out.content == "# T\n\n| A |\n|---|\n| 1 |\n\nEnd"
        # the body starts at the file's line 4; the header stands for `<table>` (line 5), a row for its `</tr>`
        assert out.meta["line_map"] == [[0, 4, 1], [2, 5, 1], [3, 8, 1], [4, 11, 1], [5, 13, 1]]
        assert page.meta["line_map"] == [[0, 4, 1]] and page.content == body
        without_map = MarkupCleaner().run(documents=[Document(content=body, meta={"markup": "markdown"})])
        assert without_map["documents"][0].content == clean_markup(body)
        assert clean_markup(body).count("\n") == body.count("\n")

    def test_a_table_on_one_line_keeps_its_cells_apart(self):
        # as GitBook writes them: the whole table on one line; its hidden columns (a card's link target) go
        text = (
            '<table><thead><tr><th width="269">Action</th><th>Mac</th><th data-hidden></th></tr></thead><tbody>'
            "<tr><td>Paragraph</td><td><kbd>⌘</kbd> + <kbd>0</kbd></td><td>x.md</td></tr></tbody></table>"
        )
        assert clean_markup(text) == "Action | Mac; Paragraph | ⌘ + 0"
        assert clean_markup("see <table><tr><td>a</td><td>b</td></tr>\n<tr><td>c</td></tr></table> here") == (
            "see a | b\nc here"
        )

    def test_an_html_code_block_is_a_fenced_block_and_the_line_map_follows_its_fences(self):
        # GitBook: `<pre><code class="lang-yaml"># comment` -- the `#` line is code, never a heading
        body = (
            '# T\n<pre class="language-yaml"><code class="lang-yaml"># comment\n'
            "<strong>name: x\n</strong></code></pre>\nEnd"
        )
        page = Document(content=body, meta={"source": "t.md", "markup": "markdown", "line_map": [[0, 4, 1]]})
        out = MarkupCleaner().run(documents=[page])["documents"][0]
        assert out.content == "# T\n```yaml\n# comment\nname: x\n```\nEnd"
        # the fence and the first code line both stand for the `<pre>` line (the file's line 5)
        assert [file_line(out.meta["line_map"], n) for n in range(6)] == [4, 5, 5, 6, 7, 8]
        assert page.content == body and page.meta["line_map"] == [[0, 4, 1]]
        in_code = "```html\n<pre><code>kept</code></pre>\n```"
        assert clean_markup(in_code) == in_code  # an example of the markup inside a code block stays

    def test_a_code_block_in_a_table_cell_is_the_cells_and_angle_brackets_in_code_stay(self):
        text = (
            "<table>\n<tr><th>Cmd</th><th>Example</th></tr>\n<tr><td>run</td><td>\n<pre><code>x\ny</code></pre>\n"
            "</td></tr>\n</table>"
        )
        assert clean_markup(text).split("\n")[:3] == ["| Cmd | Example |", "|---|---|", "| run | x y |"]
        assert clean_markup("Run <code>sort < in.txt > out.txt</code>.") == "Run `sort < in.txt > out.txt`."
        started = time.perf_counter()
        assert clean_markup("<code>" * 40_000) == ""  # a line of openings: one pass
        assert time.perf_counter() - started < 5

    def test_a_code_element_holding_links_and_parentheses_holding_only_an_icon(self):
        # Starlight links the types in its code elements; mdBook writes `an eyeball icon (<i class="fa fa-eye"></i>)`
        text = '**Type:** <code dir="auto">Array&lt;<a href="#l">SidebarLink</a>&gt;</code>'
        assert clean_markup(text) == "**Type:** `Array<SidebarLink>`"
        assert clean_markup('an icon (<i class="fa fa-eye"></i>) which') == "an icon which"
        assert clean_markup('see (<a href="x">the guide</a>) or foo()') == "see (the guide) or foo()"
        text = 'Click the icon (\n<i class="fa fa-eye"></i>\n) to show it.'
        assert clean_markup(text).count("\n") == 2  # parentheses over lines keep their lines
        assert clean_markup(":::tip \nx\n:::") == "Tip\nx\n"  # a trailing space is no title

    def test_an_unclosed_comment_hides_the_rest_but_keeps_the_lines(self):
        assert clean_markup("text\n<!-- open\n# not a heading\n") == "text\n\n\n"

    def test_only_documents_of_the_cleaned_markups_are_touched_and_inputs_are_not_mutated(self):
        plain = Document(content="<!-- a pdf's text -->", meta={"source": "a.pdf", "markup": "text"})
        unset = Document(content="<!-- html as markdown -->", meta={"source": "a.html"})
        page = _md("<!-- x -->\n# T")
        out = MarkupCleaner().run(documents=[plain, unset, page])["documents"]
        assert out[0] is plain and out[1] is unset
        assert out[2].content == "\n# T" and page.content == "<!-- x -->\n# T"
        assert out[2].meta == page.meta

    def test_empty_input_gives_empty_output(self):
        assert MarkupCleaner().run(documents=[]) == {"documents": []}
        assert MarkupCleaner().run(documents=[_md("")])["documents"][0].content == ""

    @pytest.mark.parametrize(
        ("text", "expected"),
        [
            # Pandoc's attributes after an image, a link, a span and a code span go; an image's `fig-alt` is its alt
            ('![](images/a.png){.border fig-alt="A screen shot."}', "![A screen shot.](images/a.png)"),
            (
                "![Cap](b.png){width=50%} and [Important]{.mark} and [l](u){target=_blank}",
                "![Cap](b.png) and Important and [l](u)",
            ),
            (
                "## Using `nanoplot_options()`{.qd-no-link}\n[Not a span] {x}",
                "## Using `nanoplot_options()`\n[Not a span] {x}",
            ),
            # a Pandoc fence with a class is a code block in its language; Quarto's keys and escaped shortcodes
            ("```{python}\nx\n```\n```{.bash}\n# c\n```", "```python\nx\n```\n```bash\n# c\n```"),
            (
                "Press {{< kbd Shift-Ctrl-P >}} or {{< kbd mac=Command-K win=Control-K >}}.",
                "Press Shift-Ctrl-P or Command-K.",
            ),
            ("{{< kbd Ctrl-C>}} copies.", "Ctrl-C copies."),
            (
                "Write `{{{< var version >}}}`; {{{< meta title >}}} shows it.",
                "Write `{{< var version >}}`; {{< meta title >}} shows it.",
            ),
            # a callout's kind or title shows where its fence was; a tab's heading is its label
            ("::: {.callout-note}\nText.\n:::\n::: {.panel-tabset}\n## R\nx\n:::", "Note\nText.\n\n\nR\nx\n"),
        ],
    )
    def test_quarto_markup_leaves_what_its_pages_show(self, text, expected):
        out = clean_markup(text)
        assert out == expected
        assert out.count("\n") == text.count("\n")

    def test_a_quarto_page_value_is_read_from_its_front_matter(self):
        # quarto-web's `_ssg-intro.qmd`, included by each site generator's page, names the including page's values
        page = Document(
            content="{{< meta ssg-description >}}. Pages in {{< meta ssg-name >}} sites, by {{< meta authors.1 >}}, "
            "{{< meta date >}}.\n"
            "`{{< meta format-name >}}-md`; {{< meta unset >}}{{< meta authors >}}.",
            meta={
                "source": "hugo.qmd",
                "markup": "markdown",
                "ssg-description": "[Hugo](https://gohugo.io/) is a\npopular system\n",
                "ssg-name": "Hugo",
                "date": datetime.date(2024, 5, 1),
                "format-name": "hugo",
                "authors": ["A", "B"],
            },
        )
        out = MarkupCleaner().run(documents=[page])["documents"][0]
        assert out.content == (
            "[Hugo](https://gohugo.io/) is a popular system. Pages in Hugo sites, by B, 2024-05-01.\n`hugo-md`; ."
        )
        assert page.content.startswith("{{< meta")
