from __future__ import annotations

import time

import pytest

from components.core.html_table import html_tables_as_markdown, take_table_lines, untag_table_lines


def _rewritten(text: str) -> str:
    return untag_table_lines(html_tables_as_markdown(text))


class TestHtmlTablesAsMarkdown:
    def test_rows_become_markdown_rows_under_the_header_and_the_lines_stay(self):
        text = "<table>\n<tr><th>Plan</th><th>Price</th></tr>\n<tr><td>Pro</td><td>$19</td></tr>\n\n\n</table>"
        out = _rewritten(text)
        assert out == "| Plan | Price |\n|---|---|\n| Pro | $19 |\n\n\n"
        assert out.count("\n") == text.count("\n")

    def test_a_table_without_header_cells_gets_an_empty_header_so_no_row_repeats_as_one(self):
        text = "<table>\n<tr><td>a</td><td>b</td></tr>\n<tr><td>c</td><td>d</td></tr>\n\n\n</table>"
        assert _rewritten(text).split("\n")[:4] == ["|  |  |", "|---|---|", "| a | b |", "| c | d |"]

    def test_spans_fill_the_cells_they_cover_and_pipes_in_cells_are_escaped(self):
        text = (
            "<table>\n<tr><th>k</th><th>v</th><th>w</th></tr>\n"
            '<tr><td rowspan="2">x|y</td><td colspan="2">wide</td></tr>\n<tr><td>1</td><td>2</td></tr>\n\n</table>'
        )
        assert _rewritten(text).split("\n")[2:4] == ["| x\\|y | wide |  |", "| x\\|y | 1 | 2 |"]

    def test_every_line_left_knows_the_line_it_stands_for(self):
        # a cell per line, as the GitLab handbook writes them: a row stands for the line its `</tr>` is on
        text = (
            "Intro\n\n<table>\n  <tr>\n    <th>Grade</th>\n    <th>Does</th>\n  </tr>\n  <tr>\n    <td>5</td>\n"
            "    <td>Learns</td>\n  </tr>\n  <tr>\n    <td>6</td>\n    <td>Teaches</td>\n  </tr>\n</table>\n\nAfter"
        )
        lines, origins = take_table_lines(html_tables_as_markdown(text))
        assert lines.split("\n") == [
            "Intro",
            "",
            "| Grade | Does |",
            "|---|---|",
            "| 5 | Learns |",
            "| 6 | Teaches |",
            "",
            "After",
        ]
        source = text.split("\n")
        assert origins == [0, 1, 2, 6, 10, 14, 16, 17]
        assert source[origins[4] - 1].strip() == "<td>Learns</td>" and source[origins[-1]] == "After"

    def test_a_table_that_shares_its_line_with_text_stays_on_its_lines(self):
        text = "before <table><tr><td>a</td><td>b</td></tr><tr><td>c</td><td>d</td></tr></table> after"
        assert html_tables_as_markdown(text) == "before a | b; c | d after"
        assert take_table_lines(html_tables_as_markdown(text)) == ("before a | b; c | d after", None)

    @pytest.mark.parametrize("span", ["999999999", "-3", "x"])
    def test_a_hostile_or_broken_span_is_bounded(self, span: str):
        text = f'<table><tr><td rowspan="{span}" colspan="{span}">a</td></tr><tr><td>b</td></tr></table>'
        assert len(html_tables_as_markdown(text)) < 1000

    @pytest.mark.parametrize(
        "text",
        [
            "<table>\n" * 65_000,  # never closed: one pass (each opening searched to the end took 9 s at 128 KB)
            "<table><tr>" + "<td colspan=50 rowspan=50>x</td>" * 16_000 + "</tr>" + "<tr></tr>" * 49 + "</table>",
            "<table><tr>" + "<td>x</td>" * 20_000 + "</tr>" + "<tr><td>y</td></tr>" * 20_000 + "</table>",
        ],
        ids=["unclosed", "spans", "wide-and-long"],
    )
    def test_a_hostile_page_of_half_a_megabyte_is_bounded_and_keeps_its_words(self, text: str):
        started = time.perf_counter()
        out = html_tables_as_markdown(text)
        assert time.perf_counter() - started < 15
        assert out == text  # over 100,000 cells the table is left to the tag pass, which keeps its words

    def test_text_without_tables_and_empty_tables(self):
        assert html_tables_as_markdown("") == ""
        assert html_tables_as_markdown("no table <b>here</b>") == "no table <b>here</b>"
        assert html_tables_as_markdown("<table>\n<tr><td> </td></tr>\n</table>") == "\n\n"
        assert take_table_lines("no table") == ("no table", None)
