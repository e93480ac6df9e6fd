from __future__ import annotations

import time

import pytest

from components.core.jsx_expressions import jsx_attribute_values_as_words, without_mdx_exports


class TestWithoutMdxExports:
    def test_a_component_defined_on_the_page_goes_blank_lines_and_all(self):
        # Mintlify: `export const Counter = () => {` with blank lines in its body, then prose
        text = (
            "Intro\n\nexport const Counter = () => {\n  const a = 1\n\n  return (\n    <div>{a}</div>\n  )\n}\n\nAfter."
        )
        out = without_mdx_exports(text)
        assert out == "Intro\n\n" + "\n" * 6 + "\n\nAfter."
        assert out.count("\n") == text.count("\n")

    def test_a_one_line_export_ends_with_its_line_and_an_arrow_goes_on(self):
        assert without_mdx_exports("export const a = 1\nProse") == "\nProse"
        text = "export const X = () =>\n  <b>x</b>\n\nProse"
        assert without_mdx_exports(text) == "\n\n\nProse"

    def test_an_export_whose_brackets_never_close_runs_to_the_next_blank_line(self):
        assert without_mdx_exports("export const x = (\n  1,\n\nProse (kept)") == "\n\n\nProse (kept)"

    @pytest.mark.parametrize(
        ("text", "expected"),
        [
            ('export const steps = [\n  "a) Install",\n  "b) Configure",\n];\n\nText.', "\n\n\n\n\nText."),
            ('export const sad = ":-(";\n\n# Heading\n\nSteps: a) b).', "\n\n# Heading\n\nSteps: a) b)."),
            ("export const X = () => <p>Don't (really)</p>;\nText", "\nText"),
            ("export const x = (\n  1,\n\n## Next\n\nText (kept)", "\n\n\n## Next\n\nText (kept)"),
            ("export const x = 1)\nmore\n\nText", "\n\n\nText"),
        ],
        ids=["brackets-in-strings", "string-then-heading", "jsx-apostrophe", "heading-ends-it", "closes-too-much"],
    )
    def test_strings_comments_and_headings_do_not_move_the_end(self, text: str, expected: str):
        assert without_mdx_exports(text) == expected

    def test_only_an_export_at_the_start_of_a_line(self):
        assert without_mdx_exports("We export const values.") == "We export const values."

    def test_a_hostile_page_of_unclosed_exports_is_bounded(self):
        text = "export const x = (\n" * 60_000
        started = time.perf_counter()
        out = without_mdx_exports(text)
        assert time.perf_counter() - started < 10
        assert out.count("\n") == text.count("\n")

    def test_empty(self):
        assert without_mdx_exports("") == ""


class TestJsxAttributeValuesAsWords:
    @pytest.mark.parametrize(
        ("text", "expected"),
        [
            ('<Card title="Osano" icon={<svg width="2"><path d="M1"/></svg>}>', '<Card title="Osano" icon="">'),
            ("<Step title={<>Add <code>docs.json</code> &amp; go</>}>", '<Step title="Add docs.json & go">'),
            ('<Code code={`## Hi\n\nl\'espace`} lang="md" />', '<Code code="## Hi l\'espace"\n\n lang="md" />'),
            ("<CardGroup cols={2}>", "<CardGroup cols={2}>"),  # one line, no JSX: left as written
            ('<Card title={\n  "Long title"\n} />', '<Card title="Long title"\n\n />'),  # a string literal's text
            ("Set x={<b>y</b>} in prose.", "Set x={<b>y</b>} in prose."),  # not in a component's opening tag
        ],
        ids=["svg-icon", "fragment-title", "template-literal", "plain-expression", "string-literal", "prose"],
    )
    def test_a_jsx_or_multi_line_value_becomes_its_words(self, text: str, expected: str):
        assert jsx_attribute_values_as_words(text) == expected

    def test_several_values_in_one_tag_over_several_lines(self):
        text = "<Card\n  icon={<svg>\n<rect/>\n</svg>}\n  title={<>A <i>b</i></>}\n>"
        out = jsx_attribute_values_as_words(text)
        assert out == '<Card\n  icon=""\n\n\n  title="A b"\n>'

    def test_a_hostile_page_of_unclosed_values_is_bounded(self):
        text = "<Card a={" * 60_000
        started = time.perf_counter()
        assert jsx_attribute_values_as_words(text) == text
        assert time.perf_counter() - started < 10

    def test_empty(self):
        assert jsx_attribute_values_as_words("") == ""
