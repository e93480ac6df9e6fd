import pytest

from components.core.pandoc_divs import pandoc_divs


class TestPandocDivs:
    @pytest.mark.parametrize(
        ("text", "expected"),
        [
            # a callout shows its kind, its title, or the heading that is its first line (then no heading)
            (":::{.callout-note}\nPlain.\n:::", "Note\nPlain.\n"),
            ('::: {.callout-tip title="Tip with Title"}\nBody.\n:::', "Tip with Title\nBody.\n"),
            ("::: callout-warning\n\n## Careful {#c}\n\n## Not a title\n:::", "\n\nCareful\n\n## Not a title\n"),
            # a tabset's headings at its first heading's level are labels; a deeper one stays a heading
            (
                "::: {.panel-tabset}\n## R\n### Inside\n## Python {#py}\n:::\n## After",
                "\nR\n### Inside\nPython\n\n## After",
            ),
            # other divs' fences go, nested ones too; MyST's `:::{note}` and Docusaurus' `:::tip` are not Pandoc's
            (":::{.grid}\n:::{.g-col-4}\n### Stub\n:::\n:::", "\n\n### Stub\n\n"),
            (":::{note}\nx\n:::\n:::tip\ny\n:::", ":::{note}\nx\n:::\n:::tip\ny\n:::"),
        ],
    )
    def test_divs_show_what_quarto_renders_line_for_line(self, text, expected):
        out = pandoc_divs(text.split("\n"))
        assert out == expected.split("\n")

    def test_a_code_block_inside_a_div_is_left_as_it_is(self):
        lines = ["::: {.panel-tabset}", "## R", "```r", "## not a tab", ":::", "```", ":::"]
        assert pandoc_divs(lines) == ["", "R", "```r", "## not a tab", ":::", "```", ""]

    def test_empty(self):
        assert pandoc_divs([]) == []
        assert pandoc_divs([""]) == [""]
