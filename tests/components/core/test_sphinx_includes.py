from __future__ import annotations

import os
from pathlib import Path

import pytest

from components.core.conversion import MAX_INCLUDE_DEPTH
from components.core.sphinx_includes import (
    MAX_INCLUDES,
    SphinxIncludes,
    directive_options,
    include_part,
    literal_part,
    shows_whole,
    sphinx_source_folder,
)

CODE = '''import os


@decorated
class Greeter:
    """Says hello."""

    def hello(self, name):
        return f"Hello {name}"

    def bye(self):
        return "Bye"


def main():
    # start here
    print(Greeter().hello("you"))
    # end here
'''


class TestDirectiveOptions:
    def test_options_up_to_the_first_other_line(self):
        lines = ["   :start-after: .. begin", "   :literal:", "", "   :end-before: no"]
        assert directive_options(lines) == {"start-after": ".. begin", "literal": ""}

    def test_a_value_continued_on_the_next_line(self):
        lines = ["   :caption: A long", "      caption", "   :lines: 1", "", "   content"]
        assert directive_options(lines) == {"caption": "A long caption", "lines": "1"}

    def test_no_options(self):
        assert directive_options([]) == {} and directive_options(["text"]) == {}

    def test_whole_unless_an_option_names_a_part(self):
        assert shows_whole("include", {"literal": ""}) and shows_whole("literalinclude", {"language": "py"})
        assert not shows_whole("include", {"start-after": "x"}) and not shows_whole("literalinclude", {"lines": "2"})


class TestIncludePart:
    def test_line_slice_then_text_cuts(self):
        text = "zero\none\n.. start\ntwo\n.. end\nthree"
        assert include_part(text, {}) == text
        assert include_part(text, {"start-line": "1", "end-line": "-1"}) == "one\n.. start\ntwo\n.. end\n"
        assert include_part("a\nb\nc\n", {"end-line": "-1"}) == "a\nb\n"  # docutils' slice of the file's lines
        assert include_part(text, {"start-after": ".. start", "end-before": ".. end"}) == "\ntwo\n"

    @pytest.mark.parametrize(
        ("options", "error"),
        [
            ({"start-after": "missing"}, "start-after text 'missing' not found"),
            ({"end-before": "missing"}, "end-before text 'missing' not found"),
            ({"start-line": "one"}, "start-line 'one' is no number"),
        ],
    )
    def test_what_the_file_does_not_hold_is_an_error(self, options, error):
        with pytest.raises(ValueError, match=error):
            include_part("text", options)


class TestLiteralPart:
    def test_lines_ranges_and_open_ends(self):
        text = "a\nb\nc\nd\ne"
        assert literal_part(text, {"lines": "1,3-4"}) == "a\nc\nd"
        assert literal_part(text, {"lines": "4-"}) == "d\ne"
        assert literal_part(text, {"lines": "-2"}) == "a\nb"

    def test_filters_apply_in_sphinxs_order(self):
        text = "head\n# [START a]\nalpha\nbeta\n# [END a]"
        # `lines` counts within what the markers left, as Sphinx's LiteralIncludeReader does
        assert literal_part(text, {"start-after": "[START a]", "end-before": "[END a]", "lines": "1"}) == "alpha"
        # `end-before` does not end the part on its first line
        classes = "class A:\n    pass\nclass B:\n    pass"
        assert literal_part(classes, {"start-at": "class A", "end-before": "class"}) == "class A:\n    pass"

    def test_markers_by_line(self):
        assert literal_part(CODE, {"start-after": "# start here", "end-before": "# end here"}) == (
            '    print(Greeter().hello("you"))'
        )
        assert literal_part(CODE, {"start-at": "def main", "end-at": "# start"}) == "def main():\n    # start here"

    def test_pyobject_with_its_decorators_and_a_method(self):
        assert literal_part(CODE, {"pyobject": "Greeter"}).split("\n")[:2] == ["@decorated", "class Greeter:"]
        assert literal_part(CODE, {"pyobject": "Greeter.bye", "dedent": "4"}) == 'def bye(self):\n    return "Bye"'

    def test_dedent_prepend_append(self):
        part = literal_part("    x = 1\n    y = 2", {"dedent": "", "prepend": "# begin", "append": "# end"})
        assert part == "# begin\nx = 1\ny = 2\n# end"

    @pytest.mark.parametrize(
        ("text", "options", "error"),
        [
            (CODE, {"pyobject": "Nobody"}, "pyobject 'Nobody' not found"),
            ("def (:", {"pyobject": "f"}, "the file is no Python"),
            (CODE, {"lines": "x-2"}, "no list of line numbers"),
            (CODE, {"lines": "900-"}, "holds no line of the file"),
            (CODE, {"end-at": "never"}, "end-at text 'never' not found"),
            (CODE, {"dedent": "some"}, "dedent 'some' is no number"),
            (CODE, {"start-after": "a", "start-at": "b"}, "cannot be used together"),
        ],
    )
    def test_what_the_file_does_not_hold_is_an_error(self, text, options, error):
        with pytest.raises(ValueError, match=error):
            literal_part(text, options)


class TestSphinxIncludes:
    @pytest.fixture
    def site(self, tmp_path: Path) -> Path:
        root = tmp_path / "kb"
        (root / "proj" / "docs" / "guide").mkdir(parents=True)
        (root / "proj" / "docs" / "conf.py").write_text("project = 'p'\n", encoding="utf-8")
        (root / "proj" / "README.rst").write_text("Readme\n======\n", encoding="utf-8")
        (root / "proj" / "docs" / "snippet.rst").write_text("Snippet.\n", encoding="utf-8")
        return root

    def test_relative_paths_and_the_sites_source_folder(self, site: Path):
        includes = SphinxIncludes(site, "proj/docs/guide/page.rst", 1000)
        assert includes.read("../../README.rst")[1:] == ("proj/README.rst", "Readme\n======\n")
        assert includes.read("/snippet.rst")[1] == "proj/docs/snippet.rst"  # `/`: from the folder of conf.py
        assert includes.included == ["proj/README.rst", "proj/docs/snippet.rst"] and includes.unresolved == []
        assert sphinx_source_folder(site, site / "other" / "page.rst") == site

    def test_an_included_files_own_includes_are_relative_to_the_page_as_sphinx_reads_them(self, site: Path):
        includes = SphinxIncludes(site, "proj/docs/guide/page.rst", 1000)
        with includes.reading("proj/README.rst"):
            assert includes.read("../snippet.rst")[1] == "proj/docs/snippet.rst"
            assert includes.read("docs/snippet.rst") is None  # relative to the README's folder: not Sphinx's way
        assert includes.chain == ["proj/docs/guide/page.rst"]
        assert includes.read("missing/../../snippet.rst")[1] == "proj/docs/snippet.rst"  # read as text first

    def test_what_cannot_be_read_is_noted_with_why(self, site: Path, tmp_path: Path):
        (tmp_path / "secret.txt").write_text("TOP SECRET", encoding="utf-8")
        os.symlink(tmp_path / "secret.txt", site / "proj" / "docs" / "link.rst")
        (site / "proj" / "docs" / "latin1.rst").write_bytes("caf\xe9".encode("latin-1"))
        (site / "proj" / "docs" / "big.rst").write_text("x" * 200, encoding="utf-8")
        (site / "proj" / "docs" / "page.rst").write_text(".. include:: page.rst\n", encoding="utf-8")
        includes = SphinxIncludes(site, "proj/docs/page.rst", 100)
        for target in ("../../../secret.txt", "link.rst", "missing.rst", "page.rst", "latin1.rst", "big.rst"):
            assert includes.read(target) is None
        assert includes.read("<isonum.txt>") is None
        assert includes.unresolved == [
            "../../../secret.txt (not found under the knowledge root)",
            "link.rst (not found under the knowledge root)",
            "missing.rst (not found under the knowledge root)",
            f"page.rst (included from itself or over {MAX_INCLUDE_DEPTH} levels deep)",
            "latin1.rst (not UTF-8 text: unexpected end of data at byte 3)",
            "big.rst (over the 100-byte cap of a page and what it includes)",
            "<isonum.txt> (a docutils standard file)",
        ]
        assert includes.included == []
        # what lies under the root but cannot be read yet is watched: its creation or mending indexes the page again
        assert includes.watched == ["proj/docs/link.rst", "proj/docs/missing.rst", "proj/docs/latin1.rst"]
        assert SphinxIncludes(None, "p.rst", 100).read("x.rst") is None

    def test_hidden_files_are_not_read(self, site: Path):
        (site / ".env").write_text("API_KEY=xyz\n", encoding="utf-8")
        (site / "proj" / ".git").mkdir()
        (site / "proj" / ".git" / "config").write_text("url=https://token@host\n", encoding="utf-8")
        includes = SphinxIncludes(site, "proj/docs/page.rst", 1000)
        assert includes.read("../../.env") is None and includes.read("../.git/config") is None
        assert includes.included == [] and includes.watched == []

    def test_a_page_names_at_most_so_many_includes(self, site: Path):
        (site / "proj" / "docs" / "empty.rst").write_text("", encoding="utf-8")
        includes = SphinxIncludes(site, "proj/docs/page.rst", 1000)
        read = [includes.read("empty.rst") is not None for _ in range(MAX_INCLUDES + 1)]
        assert read == [True] * MAX_INCLUDES + [False]
        assert includes.unresolved == [f"empty.rst (over the {MAX_INCLUDES} includes a page may name)"]

    def test_all_includes_of_a_page_share_one_cap(self, site: Path):
        (site / "proj" / "docs" / "sixty.rst").write_text("y" * 60, encoding="utf-8")
        includes = SphinxIncludes(site, "proj/docs/page.rst", 100)
        assert includes.read("sixty.rst") is not None
        assert includes.read("sixty.rst") is None  # 120 bytes in all: over the page's cap
        assert includes.unresolved == ["sixty.rst (over the 100-byte cap of a page and what it includes)"]

    def test_includes_deeper_than_the_limit_are_noted(self, site: Path):
        includes = SphinxIncludes(site, "proj/docs/page.rst", 1000)
        for depth in range(MAX_INCLUDE_DEPTH):
            includes.chain.append(f"proj/docs/level{depth}.rst")
        assert includes.read("snippet.rst") is None
        assert includes.unresolved == [f"snippet.rst (included from itself or over {MAX_INCLUDE_DEPTH} levels deep)"]
