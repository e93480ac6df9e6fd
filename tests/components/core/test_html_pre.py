from __future__ import annotations

import time

import pytest

from components.core.html_pre import closing_lines, fenced_pre_block
from components.core.html_table import INSERTED, take_table_lines
from components.core.site_markup import clean_markup


def _block(text: str, start: int = 0) -> tuple[list[str], int] | None:
    lines = text.split("\n")
    return fenced_pre_block(lines, start, closing_lines(lines))


class TestFencedPreBlock:
    def test_a_gitbook_block_becomes_a_fenced_block_of_its_code(self):
        # GitBook: the code starts on the `<pre>` line, a highlighted line is wrapped in `<strong>`
        text = (
            '<pre class="language-bash"><code class="lang-bash"># Connect to the container\n'
            "<strong>docker exec -it app &#x3C;name>\n</strong>\n# Done\n</code></pre>\nAfter"
        )
        block, after = _block(text)
        assert after == 5
        assert block == [
            "```bash",
            INSERTED + "# Connect to the container",
            "docker exec -it app <name>",
            "",
            "# Done",
            "```",
        ]

    def test_every_source_line_has_one_line_and_an_inserted_line_stands_for_the_one_before(self):
        text = "<pre><code>a = 1\nb = 2</code></pre>"
        block, after = _block(text)
        assert after == 2 and block == ["```", INSERTED + "a = 1", "b = 2", INSERTED + "```"]
        assert sum(not line.startswith(INSERTED) for line in block) == 2
        kept, origins = take_table_lines("\n".join(block))
        assert kept == "```\na = 1\nb = 2\n```" and origins == [0, 0, 1, 1]

    def test_a_block_on_one_line_and_a_fence_longer_than_the_backticks_inside(self):
        block, after = _block('  <pre class="language-md">use ```x``` here</pre>')
        assert after == 1 and block == ["  ````md", INSERTED + "use ```x``` here", INSERTED + "  ````"]

    def test_text_between_angle_brackets_that_is_no_tag_is_code(self):
        block, _ = _block("<pre>sort < in.txt > out.txt\nx <- read(f) |> clean()\n</pre>")
        assert block[1:3] == [INSERTED + "sort < in.txt > out.txt", "x <- read(f) |> clean()"]

    def test_an_unclosed_block_or_one_whose_closing_shares_its_line_with_text_is_left_to_the_tag_pass(self):
        assert _block("<pre><code>x\ny") is None
        assert _block("<pre><code>x\n</code></pre> and more") is None
        assert _block("text <pre>x</pre>") is None  # not at the start of its line: an inline mention

    @pytest.mark.parametrize(
        "text",
        [
            "<pre><code>x\n" * 50_000 + "</code></pre>",
            "<pre><code>x\n" * 50_000 + "</code></pre> and text",
            "<pre>x\n" * 4_000 + "</pre> and " + "a" * 100_000,  # one long closing line, rejected once
        ],
        ids=["one-closing", "no-closing-ends-its-line", "long-rejected-closing"],
    )
    def test_a_page_of_openings_is_bounded(self, text: str):
        started = time.perf_counter()
        out = clean_markup(text)
        assert time.perf_counter() - started < 15
        assert out.count("x\n") == text.count("x\n")  # every line of code kept

    def test_empty_input(self):
        assert closing_lines([]).lines == []
        assert _block("") is None
