from __future__ import annotations

import pytest

from components.core.markdown_text import first_heading, plain_heading, without_code


class TestPlainHeading:
    @pytest.mark.parametrize(
        ("heading", "text"),
        [
            ("HMR `hotUpdate` Plugin Hook", "HMR hotUpdate Plugin Hook"),  # vite's docs
            ("**Product Principles**", "Product Principles"),  # the GitLab handbook
            ('<i class="fas fa-users" id="icons"></i> About Us', "About Us"),
            ("[@vitejs/plugin-vue](https://github.com/vitejs/vite-plugin-vue) plugin", "@vitejs/plugin-vue plugin"),
            ("Migration from v7 [](#migration-from-v7)", "Migration from v7"),
            ("Controlling page \\<title\\>", "Controlling page <title>"),  # mdBook's guide
            ("Install {#install}", "Install"),
            ("Typesetting [#typesetting-section]", "Typesetting"),  # Nextra's custom id
            ("themeColor ⚠️ :id=themecolor", "themeColor ⚠️"),  # Docsify's id and hidden headings
            ("Heading 1 {docsify-ignore}", "Heading 1"),
            ("Fixed a crash [#1234]", "Fixed a crash [#1234]"),  # an issue's number, no id
            ("Install the docs theme [^2]", "Install the docs theme"),  # a footnote's marker
            ("*2019: Contribute*", "2019: Contribute"),
            ("Uses [the API][api]", "Uses the API"),
            ('**`"scale"`**', '"scale"'),  # Zola's image processing page: emphasis around a code span
            ("[`run`](#run) and **`x` y**", "run and x y"),
        ],
    )
    def test_markup_goes_and_the_words_stay(self, heading: str, text: str):
        assert plain_heading(heading) == text

    @pytest.mark.parametrize(
        "heading",
        ["`__init__` and snake_case_name", "C# and F#", "2 * 3 * 4", "a_b_c", "Ports < 1024 > 0", "`**kwargs`"],
    )
    def test_what_only_looks_like_markup_stays(self, heading: str):
        assert plain_heading(heading) == heading.replace("`", "")

    def test_empty(self):
        assert plain_heading("") == ""
        assert plain_heading("  `x`  ") == "x"


class TestFirstHeading:
    def test_the_first_heading_outside_code_and_comments_as_text(self):
        text = "<!--\n# Licensed to the ASF\n-->\n```\n# shell comment\n```\n\n# The `serve` command {#serve}\n"
        assert first_heading(text) == "The serve command"
        assert first_heading("no heading here") == ""


class TestWithoutCode:
    def test_fenced_blocks_and_code_spans_go_and_a_longer_fence_holds_shorter_ones(self):
        text = "wrap it with ```` ``` ```` to show it\n\n````hbs\n```\n{{#include x}}\n```\n````\nafter `{{x}}` it"
        assert without_code(text) == "wrap it with  to show it\n\nafter  it"
        assert without_code("") == ""

    def test_a_code_block_inside_a_quote_is_code(self):
        text = "> Shown <b>\n> ```html\n> <p>Hello</p>\n> ```\n> > ```\n> > {{ x }}\n> > ```\nAfter."
        assert without_code(text) == "> Shown <b>\nAfter."
