"""The markup of documentation sites in markdown, removed line for line (the `MarkupCleaner` node's rules)."""

from __future__ import annotations

import bisect
import datetime
import html
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from components.core.html_pre import PRE_OPEN, closing_lines, fenced_pre_block
from components.core.html_table import (
    INSERTED,
    PADDING,
    TABLE_TAG,
    html_tables_as_markdown,
    take_table_lines,
    untag_table_lines,
)
from components.core.jsx_expressions import jsx_attribute_values_as_words, without_mdx_exports
from components.core.markdown_text import (
    HEADING_ATTRIBUTES,
    MDX_CODE_BLOCK,
    closes_directive,
    closes_fence,
    opening_fence,
    unquoted,
    without_code,
)
from components.core.pandoc_divs import pandoc_divs

#: shortcodes and Liquid blocks whose content is code: they become fenced blocks, so a `#` in them is no heading
_CODE_SHORTCODES = ("highlight", "code", "code-toggle", "codeblock", "snippet")
_CODE_OPEN = re.compile(
    # not a self-closing one (`{{< code-toggle config=x />}}` shows a configuration, it opens no block)
    r"^[ \t]*(?:\{\{[<%]-?\s*(?:" + "|".join(_CODE_SHORTCODES) + r")\b[^\n]*?(?<!/)[>%]\}\}"
    # Hexo's `codeblock` (not its `code` alias: GitBook's `{% code title="a.js" %}` wraps a fence and shows its title)
    r"|\{%-?\s*(?:highlight|codeblock)\b[^\n]*?%\})[ \t]*$",
    re.MULTILINE,
)
_CODE_CLOSE = re.compile(
    r"^[ \t]*(?:\{\{[<%]-?\s*/\s*(?:" + "|".join(_CODE_SHORTCODES) + r")\s*-?[>%]\}\}"
    r"|\{%-?\s*end(?:highlight|codeblock)\s*-?%\})[ \t]*$",
    re.MULTILINE,
)
#: a shortcode Hugo shows as written, in code too: `{{</* card */>}}` shows `{{< card >}}` (its delimiters' `/*`, `*/`)
_HUGO_ESCAPED = re.compile(r"\{\{(?P<kind>[<%])/\*(?P<body>(?:(?!\{\{[<%]|\*/[>%]\}\})[^\n])*)\*/(?P<end>[>%])\}\}")
#: Quarto's page values (`{{< meta title >}}`), not an escaped one (`{{{< meta title >}}}` shows as written)
_QUARTO_META = re.compile(r"(?<!\{)\{\{<[ \t]*meta[ \t]+(?P<key>[\w.-]+)[ \t]*>\}\}(?!\})")
#: Quarto's escaped shortcode, which the page shows with one brace less on each side: `{{{< var x >}}}`
_QUARTO_ESCAPED = re.compile(r"\{\{\{<(?P<body>[^\n{}]*?)>\}\}\}")
#: what a `kbd` shortcode's keys are written between
_KBD_DELIMITERS = re.compile(r"^\{\{[<%]-?\s*kbd\b|-?[>%]\}\}$")
#: the language a code shortcode's opening names
_CODE_LANG = re.compile(r"""\blang(?:uage)?\s*[:=]\s*["']?([\w+#.-]+)""")
_HIGHLIGHT_LANG = re.compile(r"""\bhighlight\s+["']?([A-Za-z][\w+#.-]*)(?=["']?\s)""")
#: a Liquid `raw` block's tags (Liquid reads them before markdown: in a code span too)
RAW_OPEN = re.compile(r"\{%-?\s*raw\s*-?%\}")
RAW_CLOSE = re.compile(r"\{%-?\s*endraw\s*-?%\}")
_RAW_TAG = re.compile(f"{RAW_OPEN.pattern}|{RAW_CLOSE.pattern}")
#: a Liquid `raw` block, whose content Jekyll shows as written (`{% include x %}` in it is an example)
_RAW_BLOCK = re.compile(f"(?P<open>{RAW_OPEN.pattern})(?P<body>.*?)(?P<close>{RAW_CLOSE.pattern}|\\Z)", re.DOTALL)
#: what stands for a template's `{` inside a `raw` block while the markup goes (no rule reads it), then `{` again
_RAW_BRACE = "\x04"
#: Docsy's tabbed panes: a pane's and a tab's opening (their parameters), a tab's end; a tab of a pane is code,
#: highlighted in the tab's `lang`, the pane's, or its header with `langEqualsHeader=true`, unless `text=true`
#: (a pane elsewhere, as Kubernetes' `{{< tabs >}}` with `{{< tab codelang="bash" >}}`, keeps its rule)
_TAB_PANE = re.compile(r"^[ \t]*\{\{[<%]-?\s*(?P<close>/)?\s*tabpane\b(?P<params>[^\n]*?)-?[>%]\}\}[ \t]*$")
_TAB = re.compile(r"^[ \t]*\{\{[<%]-?\s*tab\b(?P<params>[^\n]*?)(?P<self>/)?\s*-?[>%]\}\}[ \t]*$")
_TAB_END = re.compile(r"^[ \t]*\{\{[<%]-?\s*/\s*tab\s*-?[>%]\}\}[ \t]*$")
_SHORTCODE_PARAM = re.compile(r"""(\w+)\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"']+))|"([^"]*)"|'([^']*)'|([^\s"'=]+)""")
#: a tab block's fence: tildes, which no backtick fence in the tab's code closes
_TAB_FENCE = "~~~~"
_INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")

_COMMENT = re.compile(r"<!--.*?(?:-->|\Z)", re.DOTALL)
_MDX_COMMENT_MARKERS = ("{/*", "*/}")
#: an MDX expression alone on its line that renders a component or not (`{process.env.X !== 'production' && <Old />}`):
#: what it shows depends on the build, so nothing of it is kept
_MDX_CONDITIONAL = re.compile(
    # its operator and its element are looked for ahead, each once: a long line of operators costs one pass; a type
    # (`{ value?: Array<string> }`) has neither a `&&`, `||`, `=>` or `? ` nor an element after a space
    r"^[ ]{0,3}\{(?![/*{])(?=[^{}\n]*(?:&&|\|\||=>|\?[ \t]))(?=[^{}\n]*[\s(]<(?:[A-Za-z][\w.]*[\s/>]|>))"
    r"[^{}\n]*\}[ \t]*$",
    re.MULTILINE,
)
_MDX_IMPORT = re.compile(
    # one or several statements on a line (`import Tabs from '@theme/Tabs'; import TabItem from '@theme/TabItem';`)
    r"^(?:import\s(?:[^\n;]|\n(?!\n))*?\sfrom\s+['\"][^'\"\n]+['\"];?[ \t]*|import\s+['\"][^'\"\n]+['\"];?[ \t]*)+$",
    re.MULTILINE,
)

#: Hugo's `comment` shortcode, whose content the page does not show
_HUGO_COMMENT = re.compile(r"\{\{[<%]-?\s*comment\s*-?[>%]\}\}.*?(?:\{\{[<%]-?\s*/comment\s*-?[>%]\}\}|\Z)", re.DOTALL)
#: a shortcode, over several lines too; it holds no other opening, so a page of unclosed openings is read once
_HUGO = re.compile(r"\{\{[<%](?:(?!\{\{[<%]).)*?[>%]\}\}", re.DOTALL)
_HUGO_NAME = re.compile(r"\{\{[<%]-?\s*([\w-]+)")
_HUGO_PARAM = re.compile(r"""(\w+)\s*=\s*(?:"([^"]*)"|'([^']*)')""")
_HUGO_ARGUMENT = re.compile(r"""\{\{[<%]-?\s*[\w-]+\s+(?:"([^"]*)"|'([^']*)')""")
#: the parameters whose value a shortcode shows as words (`{{< glossary_tooltip text="Secret" term_id="secret" >}}`, a
#: Docsy tab's `header`, a card's `header`, `title` and `subtitle`)
_HUGO_SHOWN = ("header", "title", "subtitle", "text", "label", "caption")
#: Liquid tags, and Liquid output that is Jekyll's: a site variable, a quoted string or a filter (`| relative_url`)
_LIQUID = re.compile(
    # a tag runs to its `%}` and holds no other `{%`: a page of unclosed openings is read once, not once per opening
    r"\{%-?(?:(?!\{%).)*?-?%\}|\{\{-?\s*(?:(?:site|page|include|layout|jekyll|paginator)\b|['\"])[^{}]*?-?\}\}"
    r"|\{\{-?[^{}|]*\|[^{}]*?-?\}\}",
    re.DOTALL,
)
#: MkDocs snippet lines left unresolved (`--8<-- "file"`, and the bare `--8<--` around a list of files)
_SNIPPET = re.compile(r"^[ \t]*-+8<-+(?:[ \t]+[\"'][^\"'\n]*[\"'])?[ \t]*$", re.MULTILINE)
#: a link whose target was a shortcode or Liquid tag, now empty: its text
_EMPTY_LINK = re.compile(r"\[([^\[\]\n]+)\]\(\s*\)")
#: a heading's attribute list: `{#id}`, `{ #id .class }`
_HEADING_ID = re.compile(r"^(#{1,6}[ \t].*?)" + HEADING_ATTRIBUTES.pattern, re.MULTILINE)
#: pymdownx blocks (`/// note | Title` ... `///`, `//// tab | Linux`): the marker goes, a title stays as a line
_PYMDOWNX_BLOCK = re.compile(
    r"^[ \t]*/{3,}(?:[ \t]*(?P<kind>[\w-]+)(?:[ \t]*\|[ \t]*(?P<title>[^\n]*?))?)?[ \t]*$", re.MULTILINE
)
#: an mdBook directive the converter left unresolved (`{{#include ../examples/x.rs}}`, `{{#title T}}`)
_MDBOOK = re.compile(r"(?<!\\)\{\{#(?:include|rustdoc_include|playground|title)\b[^}\n]*\}\}")
#: a code include left unresolved (`{* ../../docs_src/app.py hl[3] *}`, as FastAPI's docs write them)
_CODE_INCLUDE = re.compile(r"^[ \t]*\{\*[^\n]*?\*\}[ \t]*$", re.MULTILINE)
#: HTML elements that are layout, never words; JSX components are the capitalized names
_HTML_TAGS = (
    "a|abbr|b|br|center|details|div|em|figcaption|figure|font|hr|i|iframe|img|kbd|li|ol|p|picture|section|small|"
    "source|span|strong|sub|summary|sup|table|tbody|td|tfoot|th|thead|tr|u|ul|video|dl|dt|dd|blockquote|code|pre|"
    "mark|del|ins|s|nav|main|article|aside|header|footer|button|svg|path|script|style|noscript|h[1-6]|link|meta|"
    "caption|col|colgroup|input|form|label|select|option|textarea|dfn|cite|q|var|samp|time|tt|big|strike|wbr|bdi|"
    "bdo|ruby|rt|rp|data|address|template|audio|use|slot|dialog|canvas|track|embed|object|output"
)
_TAG = re.compile(
    # a custom element's name has a hyphen (`<svg-image :svg="x" />`): a Vue or web component, never words;
    # `\<center>` is text (markdown's escape; `\\<b>` is a backslash, then a tag)
    r"(?<!(?<!\\)\\)<(?P<close>/)?(?P<name>[A-Z][\w.]*|[a-z][a-z0-9]*(?:-[a-z0-9]+)+|(?:" + _HTML_TAGS + r")(?![\w-]))"
    # a component's attributes may hold JSX (`values={[{label: 'a'}]}`, over several lines): anything but `<` or `>`
    r"(?P<attrs>\s(?:[^<>\"']|\"[^\"]*\"|'[^']*')*)?(?P<self>/)?>"
)
_CLOSING_COMPONENT = re.compile(r"</([A-Z][\w.]*|[a-z][a-z0-9]*(?:-[a-z0-9]+)+)\s*>")
#: the attribute whose value a component shows as words: a tab's `label`, a VitePress badge's `text`
_LABEL = re.compile(r"""\b(?:label|text)\s*=\s*(?:"([^"]*)"|'([^']*)'|\{\s*["']([^"']*)["']\s*\})""")
#: the attributes whose values a component shows as words: also a card's, step's or accordion's `title`, a link
#: card's `description`, a figure's `caption` (on an HTML element `title` is a tooltip, not text)
_COMPONENT_WORDS = re.compile(
    r"""\b(?:label|text|title|caption|description)\s*=\s*(?:"([^"]*)"|'([^']*)'|\{\s*["']([^"']*)["']\s*\})"""
)
#: a component's list of labels (`<Tabs items={['pnpm', 'npm', 'yarn']}>`: Nextra's tabs)
_ITEMS = re.compile(r"\bitems\s*=\s*\{\s*\[([^\[\]]*)\]\s*\}")
#: what a Liquid tag shows as words: GitBook's `{% tab title="HTTP" %}`, `{% code title="index.js" %}`,
#: `{% update date="2025-12-18" %}`
_LIQUID_TAG = re.compile(r"\{%-?\s*(\w+)(.*?)-?%\}", re.DOTALL)
_LIQUID_WORDS = re.compile(r"""\b(?:title|date)\s*=\s*(?:"([^"]*)"|'([^']*)')""")
#: an HTML code element on one line (Starlight links the types in it: `<code>Array&lt;<a href="#x">X</a>&gt;</code>`)
#: (its text runs to the next `<code`, so a line of openings costs one pass)
_HTML_CODE = re.compile(r"<code(?:\s[^<>\n]*)?>((?:(?!</code>|<code[\s>])[^\n`])+)</code>")
#: a tag: a name after `<` (`sort < in.txt > out.txt` holds none)
_INNER_TAG = re.compile(r"</?[A-Za-z][\w:.-]*(?:\s[^<>\n]*)?/?>")
#: parentheses holding nothing but tags (`an eyeball icon (<i class="fa fa-eye"></i>)`), the space before them too
_TAGS_IN_PARENTHESES = re.compile(r"[ \t]?\([ \t]*((?:</?[A-Za-z][\w:.-]*(?:\s[^<>\n]*)?/?>[ \t]*)+)\)")
#: a character reference (`&#x20;`, `&lt;`, `&nbsp;`), which the page shows as its character
_ENTITY = re.compile(r"&(?:#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});")
#: a JSX component's opening or closing tag on a line of its own, whose body MDX reads as markdown
_COMPONENT_LINE = re.compile(
    r"^[ \t]*<(?P<name>[A-Z][\w.]*)(?:\s(?:[^<>\"']|\"[^\"]*\"|'[^']*')*)?(?P<self>/)?>[ \t]*$", re.MULTILINE
)
_COMPONENT_CLOSE_LINE = re.compile(r"^[ \t]*</([A-Z][\w.]*)\s*>[ \t]*$")
#: a Vue page's interpolation (`{{ dep.name }}`), on a page with a `<script setup>` or a `<template>`: live data
_VUE_INTERPOLATION = re.compile(r"\{\{[^{}\n]*\}\}")
_VUE_PAGE = re.compile(r"<script\s+setup\b|<template\b")
_SCRIPT = re.compile(r"<(script|style|head)\b[^>]*>.*?</\1\s*>", re.DOTALL | re.IGNORECASE)
#: Docusaurus admonitions: `:::tip`, `:::tip Title`, `:::tip[Title]`, with attributes after them (`{.padding--lg}`)
_DOCUSAURUS = re.compile(
    # VuePress' tab containers name the id that keeps their choice in step (`::: code-tabs#shell`)
    r"^[ \t]*:::+[ \t]*(?P<kind>[\w-]+)?(?:#[\w-]+)?(?:[ \t]*\[(?P<bracketed>[^\]\n]*)\]|[ \t]+(?P<title>[^{\n]*?))?"
    r"(?:[ \t]*\{[^}\n]*\})?[ \t]*$",
    re.MULTILINE,
)
#: the kinds of aside whose marker without a title shows the kind as its title (`:::tip` shows "Tip")
#: a tab of VuePress' `tabs`/`code-tabs` container (`@tab pnpm`, `@tab:active npm`, `@tab Title#value`): its label
_VUEPRESS_TAB = re.compile(r"^[ \t]*@tab(?::active)?(?P<rest>[ \t][^\n]*)?$", re.MULTILINE)
_TAB_VALUE = re.compile(r"#[\w-]*[ \t]*$")
#: markdown-it's table of contents marker (VuePress), which the page shows as the list of its headings
_TOC_MARKER = re.compile(r"^[ \t]*\[\[toc\]\][ \t]*$", re.MULTILINE | re.IGNORECASE)
_ASIDE_KINDS = frozenset(
    (
        *("note", "tip", "info", "warning", "danger", "caution", "important", "success", "question", "failure"),
        *("bug", "example", "quote", "abstract", "attention", "hint", "error", "seealso", "todo"),
    )
)
#: MkDocs admonitions (`!!! note "Title"`, `??? tip`, with modifiers such as `inline end`) and Material's content tabs
_MKDOCS = re.compile(
    r"^(?P<indent>[ \t]*)(?:(?:!!!|\?\?\?\+?)[ \t]+(?P<kind>[\w-]+)(?:[ \t]+[\w-]+)*|===\+?)"
    r'(?:[ \t]+"(?P<title>[^"\n]*)")?[ \t]*$'
)
#: reference-style links: `[text][ref]` and `[text][]` keep their text, `[ref]: url` definitions go
_REFERENCE_LINK = re.compile(r"\[([^\[\]\n]+)\]\[[^\[\]\n]*\]")
#: a shortcut reference link (`install [hexo-server].`): a link when the page defines its label, else text
_SHORTCUT_LINK = re.compile(r"(?<![\]!\\])\[([^\[\]\n^][^\[\]\n]*)\](?![\[(:])")
#: the label a link definition defines
_DEFINED_LABEL = re.compile(r"^(?:>[ \t]*)*[ ]{0,3}\[([^\[\]\n]+)\]:")
_LINK_DEFINITION = re.compile(
    # inside a quote too, and with its target on the next line when that line is nothing but a URL or a path
    r"^(?:>[ \t]*)*[ ]{0,3}\[[^\[\]\n]+\]:(?:[ \t]+\S+|[ \t]*\n(?:>[ \t]*)*[ \t]+[^\s]*[/.#:][^\s]*)"
    r"(?:[ \t]+(?:\"[^\"\n]*\"|'[^'\n]*'|\([^)\n]*\)))?[ \t]*$",
    re.MULTILINE,
)
#: an alert's marker at the start of a quote, nested, in a list item or not, with a title or its text after it on the
#: line (Hugo and Docsify read `> [!NOTE] Title`, and kinds of their own: `> [!NB]`)
_GITHUB_ALERT = re.compile(
    r"^(?P<quote>[ \t]*(?:>[ \t]*)+)\[!(?P<kind>[A-Za-z]+)\][ \t]*(?P<rest>[^\n]*)$", re.MULTILINE
)
#: a link definition whose target is a Liquid tag or a Hugo shortcode (`[X]: {% link docs/x.md %}`)
_TEMPLATED_LINK_DEFINITION = re.compile(
    r"^(?:>[ \t]*)*[ ]{0,3}\[[^\[\]\n]+\]:[ \t]+(?:\{%[^\n]*?%\}|\{\{[^\n]*?\}\})\S*[ \t]*$", re.MULTILINE
)
#: kramdown's table of contents: the list item it replaces (`1. TOC`, `* TOC`) and `{:toc}` under it
_KRAMDOWN_TOC = re.compile(r"^[ \t]*(?:[*+-]|\d+\.)[ \t]+[^\n]*\n[ \t]*\{:[ \t]*toc[ \t]*\}[ \t]*$", re.MULTILINE)
#: kramdown's comment extension, whose content the page does not show
_KRAMDOWN_COMMENT = re.compile(r"\{::comment\}.*?(?:\{:/(?:comment)?\}|\Z)", re.DOTALL)
#: kramdown's attribute lists (`{: .note }` on a line of its own, `[Link](url){: .btn }`, `{:toc}`) and its other
#: extensions (`{::options parse_block_html="true" /}`, `{::nomarkdown}`): never shown
_KRAMDOWN_ATTRIBUTES = re.compile(r"\{:[^{}\n]*\}")
#: Pandoc's attributes after an image, a link, a span or a code span (`![](x.png){.border fig-alt="..."}`,
#: `[Tip]{.tag}`): never shown; an image's `fig-alt` is its alternative text
_PANDOC_IMAGE = re.compile(r"!\[\]\((?P<url>[^()\s]*)\)\{[^{}\n]*\bfig-alt=\"(?P<alt>[^\"\n]*)\"[^{}\n]*\}")
_PANDOC_SPAN = re.compile(r"(?<![!\]])\[(?P<text>[^\[\]\n]+)\]\{(?=[ \t]*(?:[.#][\w-]|[\w-]+=))[^{}\n]*\}")
_PANDOC_ATTRIBUTES = re.compile(r"(?<=[)\]`\x00])\{(?=[ \t]*(?:[.#][\w-]|[\w-]+=))[^{}\n]*\}")
#: footnotes (`text[^1]`, `[^1]: The note.`): the marker goes, the note's text stays
_FOOTNOTE = re.compile(r"^[ ]{0,3}\[\^[^\]\s]+\]:[ \t]*|\[\^[^\]\s]+\]", re.MULTILINE)
#: JSX fragments (`<>![Logo](/logo.png)</>`): no words
_FRAGMENT = re.compile(r"<>(?=\S)|</>")
#: Docsify's callouts (`!> Important`, `?> Tip`): the marker goes, the text stays
_DOCSIFY_CALLOUT = re.compile(r"^[!?]>[ \t]+", re.MULTILINE)
#: Docsify's link options (`[file](a.md ':include')`, `![x](a.png ':size=50x100')`): a title that starts with `:`
_DOCSIFY_LINK_OPTIONS = re.compile(r"(\]\([^()\s]+)[ \t]+(['\"]):[^'\"\n]*\2[ \t]*\)")


#: a MyST directive's opening fence: ```{note} Title, ::::{tab-item} Linux, ~~~{code-block} python
_MYST_OPEN = re.compile(
    r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,}|:{3,})\{(?P<name>[\w:.-]+)\}[ \t]*(?P<arg>[^\n]*?)[ \t]*$"
)
#: the option lines that open a directive's body (`:class: tip`, `:start-after: x`)
_MYST_OPTION = re.compile(r"^[ \t]*:[\w-]+:(?:[ \t][^\n]*)?$")
#: directives whose body is code, with the language their code block gets (`None`: their argument's first word)
_MYST_CODE: dict[str, str | None] = {
    "code": None,
    "code-block": None,
    "sourcecode": None,
    "code-cell": None,
    "mermaid": "mermaid",
    "math": "math",
    "eval-rst": "rst",
    "graphviz": "dot",
    "plantuml": "plantuml",
    "jupyter-execute": "python",
    "ipython": "ipython",
    "doctest": "python",
    "testcode": "python",
    "testoutput": "",
    "csv-table": "csv",
    "myst-example": "md",  # MyST's own docs: the markdown and what it renders, an example, not the page's headings
    "myst-to-html": "md",
}
#: an executable cell of Quarto, R Markdown or knitr (```` ```{python} ````, ```` ```{r} ````): code in its language
_CELL_LANGUAGES = frozenset(
    (
        *("python", "python3", "r", "julia", "bash", "sh", "sql", "ojs", "js", "javascript", "ruby", "rust", "go"),
        *("c", "cpp", "java", "scala", "matlab", "octave", "stata", "sas", "perl", "powershell"),
    )
)
#: directives the page does not show as text: navigation, images, raw output, includes left unresolved
_MYST_HIDDEN = frozenset(
    ("toctree", "contents", "tableofcontents", "image", "include", "literalinclude", "raw", "index", "bibliography")
)
#: directives whose argument is no title (a figure's is its image's path)
_MYST_UNTITLED = frozenset(("figure", "figure-md", "only"))
_MYST_VERSION = {
    "versionadded": "New in version",
    "versionchanged": "Changed in version",
    "deprecated": "Deprecated since version",
    "versionremoved": "Removed in version",
}
#: what shows a page is MyST: a directive fence, a target line `(label)=` or a role `{ref}`x``
_MYST_PAGE = re.compile(r"^[ \t]*(?:`{3,}|:{3,})\{[\w:.-]+\}|^\([\w./:-]+\)=[ \t]*$|\{[\w:.-]+\}`", re.MULTILINE)
#: MyST lines that show nothing: a target `(label)=`, a comment `% ...`, a block break `+++`, `:orphan:`, a
#: paragraph's attributes `{#id}`
_MYST_SILENT = re.compile(r"^(?:\([\w./:-]+\)=|%.*|\+\+\+.*|:orphan:|\{[#.][\w.-]+(?:[ \t][^}]*)?\})[ \t]*$")
#: MyST's links whose text Sphinx fills in (`[](other.md)`, `<project:#section>`, `<inv:python#os>`): their target
#: (an image without alt text, `![](x.png)`, is no such link)
_MYST_LINK = re.compile(
    r"(?<!!)\[\]\((?:project:|path:|inv:)?#?(?P<a>[^)\s]+)\)|<(?:project|path|inv):#?(?P<b>[^<>\s]+)>"
)
#: a role: {ref}`Text <target>`, {term}`word`, {octicon}`book`; its name starts with a letter, and no backtick stands
#: before it (`` `{:toc}` `` and `` `{docsify-ignore}` `` are code spans, whose closing backtick opens no role)
_MYST_ROLE = re.compile(r"(?<!`)\{(?P<name>[A-Za-z][\w:.-]*)\}(?P<ticks>`+)(?P<body>.+?)(?P=ticks)")
#: roles that draw an icon, no words
_ICON_ROLES = frozenset(("octicon", "fa", "fas", "far", "fab", "icon", "material-regular", "material-outlined"))


def _blank(match: re.Match[str]) -> str:
    """What replaces markup: as many line breaks as it spanned, so line numbers still point into the file."""
    return "\n" * match.group(0).count("\n")


def _tag_rewrite(closed: set[str]) -> Callable[[re.Match[str]], str]:
    """
    Drop a tag, keeping a `label`'s or `text`'s value. A bare capitalized `<Word>` or hyphenated `<word-name>` is
    only a component when the text closes it (`</Word>`): otherwise it is prose, such as a key name or a placeholder.
    """

    def rewrite(match: re.Match[str]) -> str:
        name = match.group("name")
        bare = not (match.group("close") or match.group("attrs") or match.group("self"))
        if bare and (name[0].isupper() or "-" in name) and name not in closed:
            return match.group(0)
        if name.lower() == "br":
            return " " + _blank(match)  # a line break: the words around it stay apart
        component = name[0].isupper() or "-" in name
        shown = (_COMPONENT_WORDS if component else _LABEL).finditer(match.group(0))
        words = [word for found in shown if (word := next((g for g in found.groups() if g), ""))]
        if component and (items := _ITEMS.search(match.group(0))):
            words += [a or b for a, b in re.findall(r"\"([^\"\n]*)\"|'([^'\n]*)'", items.group(1))]
        return " — ".join(words) + _blank(match)

    return rewrite


def _hugo_words(match: re.Match[str]) -> str:
    """
    What a shortcode shows as words, its line breaks kept: the values of `header`, `title`, `subtitle`, `text`, `label`
    and `caption`, joined (a Docsy card shows the first three); a tab's `name`; a glossary tooltip's term; a
    `heading`'s argument (`{{% heading "whatsnext" %}}`); else nothing.
    """
    code = match.group(0)
    name = _HUGO_NAME.match(code)
    params = {key: a if a is not None else b for key, a, b in _HUGO_PARAM.findall(code)}
    # a `text` is what a link or tooltip shows (its `title` is a tooltip); else a card's header, title and subtitle
    shown = ("text",) if params.get("text") else _HUGO_SHOWN
    words = " — ".join(dict.fromkeys(params[key] for key in shown if params.get(key)))
    kind = name.group(1) if name else ""
    if not words and kind == "tab":
        words = params.get("name", "")
    elif not words and kind == "glossary_tooltip":
        words = params.get("term_id", "")
    elif not words and kind == "heading" and (argument := _HUGO_ARGUMENT.match(code)):
        words = argument.group(1) or argument.group(2) or ""
    elif not words and kind == "kbd":  # Quarto's keys: `{{< kbd Shift-Ctrl-P >}}`, or per system, the first shown
        inner = _KBD_DELIMITERS.sub("", code)
        words = next((v for found in _SHORTCODE_PARAM.findall(inner) for v in found[1:] if v), "")
    return words + _blank(match)


def _tag_arguments(code: str) -> tuple[str, list[str]]:
    """A Liquid or Nunjucks tag's name and its arguments, quotes taken off (`{% note warn "For Mac users" %}`)."""
    found = _LIQUID_TAG.match(code)
    if not found:
        return "", []
    arguments = [a or b or c for a, b, c in re.findall(r"\"([^\"]*)\"|'([^']*)'|(\S+)", found.group(2))]
    return found.group(1), arguments


def _shown_arguments(name: str, arguments: list[str]) -> str:
    """
    What a Hexo tag shows of its arguments: a `note`'s title (after its class; NexT's `no-icon` is a switch), a
    `blockquote`'s or `pullquote`'s author and source (its links are not words); else nothing.
    """
    if name == "note":
        return " ".join(a for a in arguments[1:] if a != "no-icon")
    if name in ("blockquote", "pullquote"):
        return " ".join(a for a in arguments if "://" not in a and not a.startswith("class:"))
    return ""


def _liquid_words(match: re.Match[str]) -> str:
    """A Liquid tag's shown words (its `title` or `date`, a Hexo note's title), its line breaks kept; else nothing."""
    code = match.group(0)
    if not code.startswith("{%"):
        return _blank(match)
    shown = _LIQUID_WORDS.search(code)
    words = next((g for g in shown.groups() if g), "") if shown else _shown_arguments(*_tag_arguments(code))
    return words + _blank(match)


def _aside_title(kind: str | None, title: str | None) -> str:
    """
    The title an aside shows: its own (an empty `""` shows none), else its kind's for an untitled admonition (`:::tip`
    shows "Tip"); a closing marker, a tab or another block shows nothing.
    """
    if title is not None:
        return title.strip()
    return kind.capitalize() if kind and kind.lower() in _ASIDE_KINDS else ""


def _title(match: re.Match[str]) -> str:
    """A Docusaurus admonition's title (`:::tip[Title]`, `:::tip Title`, else "Tip"; `:::tip[]` shows none)."""
    title = match.group("bracketed") if match.group("bracketed") is not None else match.group("title") or None
    return _aside_title(match.group("kind"), title)


def _block_title(match: re.Match[str]) -> str:
    """A pymdownx block's title; an `html` block's argument is a tag (`/// html | div.note`), no title."""
    kind = match.group("kind")
    return "" if (kind or "").lower() == "html" else _aside_title(kind, match.group("title"))


def _in_comment_after(line: str, comment: bool, markers: tuple[str, str] = ("<!--", "-->")) -> bool:
    """
    Whether a comment is still open after this line (inline code shows `<!--` as text, never opens one); `markers`:
    its opening and closing (`{/*` and `*/}` for an MDX comment).
    """
    rest = _INLINE_CODE.sub("", line)
    while True:
        marker = markers[1] if comment else markers[0]
        found = rest.find(marker)
        if found < 0:
            return comment
        comment, rest = not comment, rest[found + len(marker) :]


def _role_words(match: re.Match[str]) -> str:
    """A role's words: `Text` of `Text <target>`, else its content (`~a.b` shows `b`); an icon none."""
    if match.group("name") in _ICON_ROLES:
        return ""
    body = match.group("body").strip()
    labelled = re.fullmatch(r"(?s)(.*?)\s*<([^<>]+)>", body)
    if labelled:
        body = labelled.group(1) or labelled.group(2)
    if body.startswith("~"):
        body = body[1:].rsplit(".", 1)[-1]
    return body.lstrip("!")


@dataclass
class _Directive:
    """An open MyST directive: its fence, what its body is (`prose`, `code`, `hidden`) and whether options may come."""

    fence: str
    kind: str
    close: str  # what its closing fence becomes
    options: bool = True
    yaml: bool = False  # inside a `---` block of options


def _code_marker(fence: str, body: list[str]) -> str:
    """The fence of a code block for a directive's body: longer than any backtick fence the body holds."""
    end = next((n for n, line in enumerate(body) if closes_directive(line, fence)), len(body))
    longest = max((len(m.group(1)) for line in body[:end] if (m := re.match(r"[ \t]*(`{3,})", line))), default=0)
    return "`" * max(3, longest + 1, len(fence) if fence[0] == "`" else 0)


def _open_directive(match: re.Match[str], body: list[str]) -> tuple[_Directive, str]:
    """
    The directive a fence opens (`body`: the lines after it), and the line it leaves: a code block's fence, a title,
    or nothing.
    """
    name, arg, indent = match.group("name"), match.group("arg"), match.group("indent")
    fence = match.group("fence")
    if name in _MYST_CODE or name.lower() in _CELL_LANGUAGES or (name.startswith(".") and fence[0] != ":"):
        marker = fence if fence[0] == "~" else _code_marker(fence, body)
        # Pandoc's fence with a class (```` ```{.bash} ````) is a code block in that language
        language = name[1:] if name.startswith(".") else _MYST_CODE.get(name, name.lower())
        language = (arg.split() or [""])[0] if language is None else language
        return _Directive(fence, "code", indent + marker), indent + marker + language
    if name in _MYST_HIDDEN:
        return _Directive(fence, "hidden", ""), ""
    if name in _MYST_VERSION:
        return _Directive(fence, "prose", ""), f"{indent}{_MYST_VERSION[name]} {arg}".rstrip()
    return _Directive(fence, "prose", ""), "" if name in _MYST_UNTITLED else indent + arg


def _directive_line(top: _Directive, line: str) -> str | None:
    """What an open code or hidden directive, or the options at the top of any, make of a line (None: not theirs)."""
    if top.options and top.yaml:
        top.yaml = line.strip() != "---"
        return ""
    if top.options and (_MYST_OPTION.match(line) or line.strip() == "---"):
        top.yaml = line.strip() == "---"
        return ""
    top.options = False
    if top.kind == "code":
        return line
    return "" if top.kind == "hidden" else None


def _myst(lines: list[str]) -> list[str]:
    """
    MyST's markup, line for line: directive fences go (a code directive's become a code block's, a hidden one's body
    goes with them), their options go, an argument stays as the title line; targets, comments and block breaks go.
    """
    out: list[str] = []
    stack: list[_Directive] = []
    fence = ""  # an ordinary code block: shown as written
    for number, line in enumerate(lines):
        if fence:
            fence = "" if closes_fence(line, fence) else fence
            out.append(line)
        elif stack and closes_directive(line, stack[-1].fence):
            out.append(stack.pop().close)
        elif stack and (kept := _directive_line(stack[-1], line)) is not None:
            out.append(kept)
        elif opened := _MYST_OPEN.match(line):
            directive, shown = _open_directive(opened, lines[number + 1 :])
            stack.append(directive)
            out.append(shown)
        else:
            fence = opening_fence(line)
            silent = not fence and _MYST_SILENT.match(line)
            out.append("" if silent else _MYST_LINK.sub(lambda m: m.group("a") or m.group("b"), line))
    return out


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


def _dedent_components(lines: list[str], closed: set[str]) -> list[str]:
    """
    The body of a JSX component written on lines of its own (`<Accordion title="Q">` ... `</Accordion>`) moves out by
    its indent, as MDX reads it (MDX has no indented code): its headings are headings again and its lists keep their
    levels. Nested components each take their own indent off; code blocks inside move with them.
    """
    out: list[str] = []
    stack: list[list[Any]] = []  # per open component: its name, and its body's indent once its first line shows it
    fence = ""
    for line in lines:
        depth_indent = sum(entry[1] or 0 for entry in stack)
        if stack and line.strip() and stack[-1][1] is None and not fence:
            stack[-1][1] = max(0, _indent(line) - sum(entry[1] or 0 for entry in stack[:-1]))
            depth_indent = sum(entry[1] or 0 for entry in stack)
        shown = line[min(depth_indent, _indent(line)) :] if stack else line
        out.append(shown)
        if fence:
            fence = "" if closes_fence(shown, fence) else fence
            continue
        fence = opening_fence(shown)
        opened, closing = _COMPONENT_LINE.match(line), _COMPONENT_CLOSE_LINE.match(line)
        if opened and not opened.group("self") and opened.group("name") in closed:
            stack.append([opened.group("name"), None])
        elif closing and stack and stack[-1][0] == closing.group(1):
            stack.pop()
    return out


def _code_language(opening: str) -> str:
    """
    The language a code shortcode names: `lang:objc` or `lang="yaml"` (Hexo's `codeblock`, Hugo's `code`), else a
    `highlight`'s first argument (`{% highlight ruby linenos %}`, `{{< highlight go "linenos=table" >}}`); else none.
    """
    named = _CODE_LANG.search(opening) or _HIGHLIGHT_LANG.search(opening)
    return named.group(1) if named else ""


def _fenced_spans(text: str) -> list[tuple[int, int]]:
    """Where the page's own fenced code blocks are (start and end offsets), an unclosed one running to the end."""
    spans: list[tuple[int, int]] = []
    fence, start, offset = "", 0, 0
    for line in text.split("\n"):
        if fence:
            if closes_fence(unquoted(line), fence):
                spans.append((start, offset + len(line)))
                fence = ""
        elif opened := opening_fence(unquoted(line)):
            fence, start = opened, offset
        offset += len(line) + 1
    if fence:
        spans.append((start, len(text)))
    return spans


def _fenced_code_blocks(text: str) -> str:
    """
    Each code shortcode's block, from its opening to the next closing, as a code block whose fence no fence in its
    code closes (`{% highlight markdown %}` around a ```` ```js ```` example); an opening or a closing left without
    its other half becomes a bare fence. A tag inside a fenced code block is an example, left as written (Hexo's
    page shows `{% codeblock %}` in a fence). Openings and closings are each found once, so a page of unclosed
    openings costs one pass.
    """
    spans = _fenced_spans(text) if "```" in text or "~~~" in text else []
    starts = [start for start, _ in spans]

    def shown(match: re.Match[str]) -> bool:
        at = bisect.bisect_right(starts, match.start()) - 1
        return at < 0 or match.start() > spans[at][1]

    openings = [m for m in _CODE_OPEN.finditer(text) if shown(m)]
    closings = [m for m in _CODE_CLOSE.finditer(text) if shown(m)]
    parts: list[str] = []
    done = 0
    following = 0  # the first closing not yet paired or passed
    for opening in openings:
        if opening.start() < done:
            continue  # inside the block just paired
        while following < len(closings) and closings[following].start() < opening.end():
            if closings[following].start() >= done:  # a closing without its opening
                parts += [text[done : closings[following].start()], "```"]
                done = closings[following].end()
            following += 1
        if following == len(closings):  # an opening without its closing
            parts += [text[done : opening.start()], "```"]
            done = opening.end()
            continue
        closing = closings[following]
        body = text[opening.end() : closing.start()]
        longest = max((len(m.group(1)) for m in re.finditer(r"^[ \t]*(`{3,})", body, re.MULTILINE)), default=0)
        fence = "`" * max(3, longest + 1)
        parts += [text[done : opening.start()], fence + _code_language(opening.group(0)), body, fence]
        done, following = closing.end(), following + 1
    for closing in closings[following:]:
        if closing.start() >= done:
            parts += [text[done : closing.start()], "```"]
            done = closing.end()
    return "".join(parts) + text[done:]


def _literal_raw_blocks(text: str) -> str:
    """A `raw` block's templates out of every rule's reach (`{%` and `{{` written with `_RAW_BRACE`)."""

    def literal(match: re.Match[str]) -> str:
        body = re.sub(r"\{(?=[{%])", _RAW_BRACE, match.group("body"))
        return match.group("open") + body + match.group("close")

    return _RAW_BLOCK.sub(literal, text)


def _without_mdx_comments(text: str) -> str:
    """
    Prose without its closed MDX comments (`{/* ... */}`), each as many line breaks as it spanned; an unclosed one
    stays. One pass: a page of unclosed openings is not read again from each.
    """
    parts: list[str] = []
    done = 0
    while (start := text.find(_MDX_COMMENT_MARKERS[0], done)) >= 0:
        end = text.find(_MDX_COMMENT_MARKERS[1], start + len(_MDX_COMMENT_MARKERS[0]))
        if end < 0:
            break
        end += len(_MDX_COMMENT_MARKERS[1])
        parts += [text[done:start], "\n" * text.count("\n", start, end)]
        done = end
    return "".join(parts) + text[done:]


def _fence_code_shortcodes(text: str) -> str:
    if "raw" in text:
        text = _literal_raw_blocks(text)
    text = _RAW_TAG.sub("", _fenced_code_blocks(text))
    return _fence_code_tabs(text) if "tab" in text else text


def _shortcode_params(params: str) -> tuple[dict[str, str], list[str]]:
    """A shortcode's named parameters (`lang="toml"`, `text=true`) and its positional ones (`toml`)."""
    named: dict[str, str] = {}
    positional: list[str] = []
    for key, *values in _SHORTCODE_PARAM.findall(params):
        value = next((v for v in values if v), "")
        if key:
            named[key] = value
        else:
            positional.append(value)
    return named, positional


def _code_tab_language(params: str, pane: dict[str, str] | None) -> str | None:
    """The language of a tab whose content is code, '' for code in none; None for a tab of text."""
    named, positional = _shortcode_params(params)
    if pane is None:  # outside a Docsy pane only a tab that names its language is code
        return named.get("lang")
    if named.get("text", pane.get("text", "false")).lower() == "true":
        return None
    header = positional[0] if positional else named.get("header", "")
    by_header = header if pane.get("langEqualsHeader", "false").lower() == "true" else ""
    return named.get("lang") or pane.get("lang") or by_header


def _fence_code_tabs(text: str) -> str:
    """Docsy's tabs of code as code blocks in their language: a `#` comment in a tab's TOML is no heading."""
    lines = text.split("\n")
    pane: dict[str, str] | None = None
    inside = False
    for number, line in enumerate(lines):
        if inside:
            if _TAB_END.match(line):
                lines[number], inside = _TAB_FENCE, False
        elif opened_pane := _TAB_PANE.match(line):
            pane = None if opened_pane.group("close") else _shortcode_params(opened_pane.group("params"))[0]
        elif (tab := _TAB.match(line)) and not tab.group("self"):
            language = _code_tab_language(tab.group("params"), pane)
            if language is not None:
                lines[number], inside = _TAB_FENCE + language.lower(), True
    return "\n".join(lines)


def _dedent_mkdocs(lines: list[str]) -> list[str]:
    """
    MkDocs admonitions and tabs: the marker line keeps only its title; the indented body of one at the margin moves to
    the margin (a nested one keeps its indent: it is text either way).
    """
    out: list[str] = []
    inside = False
    for line in lines:
        marker = _MKDOCS.match(line)
        if marker:
            out.append(marker.group("indent") + _aside_title(marker.group("kind"), marker.group("title")))
            inside = inside or not marker.group("indent")
            continue
        if inside and (line.startswith("    ") or line.startswith("\t") or not line.strip()):
            out.append(line[4:] if line.startswith("    ") else line[1:] if line.startswith("\t") else line)
            continue
        inside = False
        out.append(line)
    return out


def _protect_inline_code(text: str) -> tuple[str, list[str]]:
    spans: list[str] = []

    def keep(match: re.Match[str]) -> str:
        spans.append(match.group(0))
        return f"\x00{len(spans) - 1}\x00"

    return _INLINE_CODE.sub(keep, text), spans


#: the language a code span names for its highlighting after its code (`` `display: 'hidden'{:ts}` ``: Nextra's and
#: other rehype-pretty-code sites' syntax), which the page does not show
_SPAN_LANGUAGE = re.compile(r"(?<=[^`])\{:[\w.+#-]+\}(?=`+$)")


def _restore_inline_code(text: str, spans: list[str]) -> str:
    return re.sub(r"\x00(\d+)\x00", lambda m: _SPAN_LANGUAGE.sub("", spans[int(m.group(1))]), text)


_Rewrites = list[tuple[re.Pattern[str], Callable[[re.Match[str]], str]]]
#: the first rewrites of prose, after the comments (they may hold any of the others): scripts and imports; then MDX
#: exports and JSX-valued attributes are read by their brackets (`jsx_expressions`), then `_PROSE`; tags after these
_PROSE_FIRST: _Rewrites = [
    (_SCRIPT, _blank),
    (_MDX_IMPORT, _blank),
    (_MDX_CONDITIONAL, _blank),
]
_PROSE: _Rewrites = [
    (_TEMPLATED_LINK_DEFINITION, _blank),
    (_KRAMDOWN_TOC, _blank),
    (_KRAMDOWN_COMMENT, _blank),
    (_HUGO_COMMENT, _blank),
    (_HUGO, _hugo_words),
    (_LIQUID, _liquid_words),
    (_KRAMDOWN_ATTRIBUTES, _blank),
    (_DOCSIFY_CALLOUT, _blank),
    (_FOOTNOTE, _blank),
    (_FRAGMENT, _blank),
    (_DOCSIFY_LINK_OPTIONS, lambda m: m.group(1) + ")"),
    (_SNIPPET, _blank),
    (_CODE_INCLUDE, _blank),
    (_MDBOOK, _blank),
    (_DOCUSAURUS, _title),  # before Pandoc's attributes: `:::note[Title]{.padding--lg}` is one marker
    (_PANDOC_IMAGE, lambda m: f"![{m.group('alt')}]({m.group('url')})"),
    (_PANDOC_SPAN, lambda m: m.group("text")),
    (_PANDOC_ATTRIBUTES, _blank),
    (_VUEPRESS_TAB, lambda m: _TAB_VALUE.sub("", m.group("rest") or "").strip()),
    (_TOC_MARKER, _blank),
    (_PYMDOWNX_BLOCK, _block_title),
    (_GITHUB_ALERT, lambda m: m.group("quote") + (m.group("rest") or m.group("kind").capitalize())),
    (_EMPTY_LINK, lambda m: m.group(1)),
    (_HEADING_ID, lambda m: m.group(1)),
    (_LINK_DEFINITION, _blank),
    (_REFERENCE_LINK, lambda m: m.group(1)),
]


def _code_span(match: re.Match[str], vue: bool) -> str:
    """
    An HTML `<code>` element as the code span it shows (`<code>{&#37; raw &#37;}</code>` -> `{% raw %}`); on a Vue
    page its `{{ }}` is live data.
    """
    code = html.unescape(_INNER_TAG.sub("", match.group(1)))
    code = _VUE_INTERPOLATION.sub("", code).strip() if vue else code
    if not code:
        return ""
    ticks = "`" * (1 + max((len(run) for run in re.findall(r"`+", code)), default=0))
    return f"{ticks}{code}{ticks}"


def _label(text: str) -> str:
    """A link label as CommonMark matches it: case and runs of white space do not count."""
    return " ".join(text.split()).casefold()


def _defined_labels(text: str) -> frozenset[str]:
    """The labels the page's link definitions define (not a footnote's `[^1]:`)."""
    return frozenset(
        _label(label.group(1))
        for found in _LINK_DEFINITION.finditer(text)
        if (label := _DEFINED_LABEL.match(found.group(0))) and not label.group(1).startswith("^")
    )


def _clean_prose(text: str, closed: set[str], vue: bool = False, defined: frozenset[str] = frozenset()) -> str:
    text = _HTML_CODE.sub(lambda m: _code_span(m, vue), _MYST_ROLE.sub(_role_words, text))  # roles: code spans
    text, spans = _protect_inline_code(text)
    text = _without_mdx_comments(_COMMENT.sub(_blank, text))
    for pattern, rewrite in _PROSE_FIRST:
        text = pattern.sub(rewrite, text)
    text = without_mdx_exports(jsx_attribute_values_as_words(text))
    for pattern, rewrite in _PROSE:
        text = pattern.sub(rewrite, text)
    if vue:
        text = _VUE_INTERPOLATION.sub("", text)
    if defined:
        text = _SHORTCUT_LINK.sub(lambda m: m.group(1) if _label(m.group(1)) in defined else m.group(0), text)
    text = html_tables_as_markdown(text)  # before the tags go: a row's cells are told apart by their tags
    rewrite_tag = _tag_rewrite(closed)
    text = _TAGS_IN_PARENTHESES.sub(lambda m: m.group(0) if _TAG.sub(rewrite_tag, m.group(1)).strip() else "", text)
    text = _TAG.sub(rewrite_tag, text)
    text = _ENTITY.sub(lambda m: html.unescape(m.group(0)), text)  # after the tags: `&lt;div&gt;` is text
    return _restore_inline_code(text, spans)


def clean_markup(text: str) -> str:
    """
    Remove the markup of documentation sites from markdown, keeping its text and its line count.

    :param text: A markdown body.
    :returns: The body without comments, MDX, JSX and HTML tags, shortcodes, Liquid tags and admonition markers; HTML
        tables as markdown tables (the lines they no longer need left blank); code blocks unchanged; every line where
        it was.
    """
    return untag_table_lines(_clean(_without_marks(text)))


def with_page_values(text: str, meta: Mapping[str, Any]) -> str:
    """
    Quarto's `{{< meta key >}}` as the page shows it: the value its front matter gives the key (`author.1` reads into
    a mapping and a list), on one line; a key the page does not set is left for the cleaning, an escaped
    `{{{< meta key >}}}` too.

    :param text: A markdown body, its includes expanded (an included file reads the including page's values).
    :param meta: The page's front matter.
    :returns: The text, its line count unchanged.
    """

    def value(match: re.Match[str]) -> str:
        found: Any = meta
        for part in match.group("key").split("."):
            if isinstance(found, Mapping) and part in found:
                found = found[part]
            elif isinstance(found, list) and part.isdigit() and int(part) < len(found):
                found = found[int(part)]
            else:
                return match.group(0)
        if isinstance(found, datetime.date):  # YAML reads `date: 2024-05-01` as a date
            return found.isoformat()
        if isinstance(found, str | int | float) and not isinstance(found, bool):
            return " ".join(str(found).split())
        return match.group(0)

    return _QUARTO_META.sub(value, text) if "{{<" in text else text


def clean_markup_lines(text: str) -> tuple[str, list[int] | None]:
    """
    Remove the markup of documentation sites from markdown, telling where each line left was.

    :param text: A markdown body.
    :returns: The body as `clean_markup` cleans it, without the lines HTML tables no longer need, and for each of its
        lines the line of `text` (0-based) it stands for; None when every line is where it was.
    """
    return take_table_lines(_clean(_without_marks(text)))


_MARKS = re.compile(f"[{PADDING}{TABLE_TAG}{INSERTED}{_RAW_BRACE}]")


def _without_marks(text: str) -> str:
    """The text without the control characters the table rewrite marks lines with (the knowledge cleaner drops them)."""
    return _MARKS.sub("", text) if any(mark in text for mark in (PADDING, TABLE_TAG, INSERTED, _RAW_BRACE)) else text


def _lines_in_tables(lines: list[str]) -> set[int]:
    """The lines inside an HTML table, whose code blocks are its cells' (the table rewrite reads them)."""
    inside: set[int] = set()
    depth = 0
    for number, line in enumerate(lines):
        if depth > 0:
            inside.add(number)
        lowered = line.lower()
        depth = max(0, depth + lowered.count("<table") - lowered.count("</table"))
    return inside


def _clean(text: str) -> str:
    if "{{{<" in text:  # its braces out of every rule's reach until the end
        text = _QUARTO_ESCAPED.sub(lambda m: f"{_RAW_BRACE * 2}<{m.group('body')}>}}}}", text)
    if "*/" in text:  # so are an escaped Hugo shortcode's, in prose and code alike
        text = _HUGO_ESCAPED.sub(lambda m: f"{_RAW_BRACE * 2}{m['kind']}{m['body']}{m['end']}}}}}", text)
    lines = _dedent_mkdocs(_fence_code_shortcodes(text).split("\n"))
    if ":::" in text:
        lines = pandoc_divs(lines)
    if ("{" in text or ")=" in text) and _MYST_PAGE.search(text):
        lines = _myst(lines)
    # the components the page closes anywhere: a tab's `</Tabs>` may come after a code block inside it
    closed = set(_CLOSING_COMPONENT.findall(text))
    if "</" in text and _COMPONENT_LINE.search(text):
        lines = _dedent_components(lines, closed)
    out: list[str] = []
    prose: list[str] = []
    fence = ""
    mdx = ""  # the fence of an open mdx-code-block, whose lines are prose
    vue = _VUE_PAGE.search(text) is not None
    defined = _defined_labels(without_code(text)) if "]:" in text else frozenset()
    comment = False  # inside an HTML comment, which may hide a whole code block (a translation's original)
    mdx_comment = False  # inside an MDX comment, which may hide code blocks and headings too
    closings = closing_lines(lines) if "<pre" in text.lower() else None
    in_table = _lines_in_tables(lines) if closings and "<table" in text.lower() else set()
    skip_to = 0  # the line after an HTML code block already written
    for number, line in enumerate(lines):
        if number < skip_to:
            continue
        if fence:
            out.append(line)
            if closes_fence(unquoted(line), fence):
                fence = ""
            continue
        if mdx_comment or "{/*" in line:
            mdx_comment = _in_comment_after(line, mdx_comment, _MDX_COMMENT_MARKERS)
            prose.append(line)
            continue
        if comment or "<!--" in line:
            comment = _in_comment_after(line, comment)
            prose.append(line)
            continue
        rendered = MDX_CODE_BLOCK.match(line)
        if (mdx and closes_fence(line, mdx)) or (rendered and not mdx):
            prose.append("")
            mdx = "" if mdx else rendered.group(1) if rendered else ""
            continue
        opened = opening_fence(unquoted(line))
        pre = closings is not None and number not in in_table and PRE_OPEN.match(line)
        block = fenced_pre_block(lines, number, closings) if pre and closings is not None else None
        if opened or block:
            out.extend(_clean_prose("\n".join(prose), closed, vue, defined).split("\n") if prose else [])
            prose = []
        if block:
            out.extend(block[0])
            skip_to = block[1]
        elif opened:
            out.append(line)
            fence = opened
        else:
            prose.append(line)
    if prose:
        out.extend(_clean_prose("\n".join(prose), closed, vue, defined).split("\n"))
    return "\n".join(out).replace(_RAW_BRACE, "{")
