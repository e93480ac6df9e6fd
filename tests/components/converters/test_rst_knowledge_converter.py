from __future__ import annotations

import sys
from pathlib import Path

import pytest
from haystack.core.serialization import component_from_dict, component_to_dict
from haystack.dataclasses import ByteStream

from components.converters.rst_knowledge_converter import RstKnowledgeConverter, rst_to_markdown
from components.core.location import file_line
from components.core.markdown_text import without_code

REAL = Path(__file__).resolve().parents[2] / "fixtures" / "real_docs"
QUICKSTART = REAL / "requests" / "docs" / "user" / "quickstart.rst"
GRADIENT_CLIP = REAL / "paddle" / "docs" / "guides" / "advanced" / "gradient_clip_cn.rst"

SPHINX_PAGE = """\
.. _install:

=============
Install Guide
=============

.. toctree::
   :maxdepth: 2

   linux
   macos

Get started with :ref:`the quickstart <quickstart>` and :class:`~requests.Session`.
|logo| The :py:func:`requests.get` call is one line; the :data:`.request` proxy too.

Linux
=====

.. code-block:: bash
   :linenos:

   pip install requests

.. versionchanged:: 2.0
   Wheels are the default.

.. tab:: Windows

   Run ``py -m pip install requests``.

.. automodule:: requests
   :members:

.. py:function:: get(url, params=None, **kwargs)

   Sends a GET request.

.. note:: Use a virtual environment.

Options
-------

+----------+---------+
| Option   | Default |
+==========+=========+
| timeout  | None    |
+----------+---------+
| verify   | True    |
+----------+---------+
"""


def _markdown(text: str) -> str:
    return rst_to_markdown(text)[0]


class TestRstKnowledgeConverter:
    def test_init_defaults_and_invalid(self):
        assert RstKnowledgeConverter().max_file_bytes == 4 * 1024 * 1024
        with pytest.raises(ValueError, match="max_file_bytes=0 must be a positive number of bytes"):
            RstKnowledgeConverter(max_file_bytes=0)

    def test_to_dict_from_dict(self):
        data = component_to_dict(RstKnowledgeConverter(max_file_bytes=1000), "rst")
        assert data["init_parameters"] == {"max_file_bytes": 1000}
        assert component_from_dict(RstKnowledgeConverter, data, "rst").max_file_bytes == 1000

    def test_sections_become_headings_of_their_level(self):
        text, title, _, _ = rst_to_markdown(SPHINX_PAGE)
        assert title == "Install Guide"
        headings = [line for line in text.split("\n") if line.startswith("#")]
        assert headings == ["# Install Guide", "## Linux", "### Options"]

    def test_roles_show_their_text_and_substitutions_from_elsewhere_go(self):
        text = _markdown(SPHINX_PAGE)
        assert "Get started with the quickstart and `Session`." in text  # an API object in code type, as Sphinx shows
        assert "\nThe `requests.get` call is one line; the `request` proxy too." in text
        assert "|logo|" not in text and ":ref:" not in text and ":class:" not in text

    def test_sphinx_directives_keep_their_text_and_navigation_goes(self):
        text = _markdown(SPHINX_PAGE)
        assert "```bash\npip install requests\n```" in text  # a Sphinx option docutils refuses: still code
        assert "Changed in version 2.0.\n\nWheels are the default." in text
        assert "Windows\n\nRun `py -m pip install requests`." in text  # a tab's label, then its text
        assert "`get(url, params=None, **kwargs)`\n\nSends a GET request." in text
        assert "Use a virtual environment." in text  # an admonition's text, its marker gone
        for gone in ("toctree", "maxdepth", "linux\nmacos", "automodule", ":members:", "linenos", ".. "):
            assert gone not in text

    def test_a_heading_is_read_as_text(self):
        text, title, _, _ = rst_to_markdown(
            "The ``timeout`` of :class:`~requests.Session`\n" + "=" * 50 + "\n\nText.\n"
        )
        assert title == "The timeout of Session" and text.startswith("# The timeout of Session\n")

    def test_an_admonitions_or_a_topics_title_is_text_not_a_heading(self):
        text = _markdown(
            "Timeouts\n========\n\n.. admonition:: Note\n\n   Not a time limit.\n\n.. topic:: Summary\n\n   Set one.\n"
        )
        assert text == "# Timeouts\n\nNote\n\nNot a time limit.\n\nSummary\n\nSet one."

    def test_a_grid_table_becomes_a_markdown_table(self):
        text = _markdown(SPHINX_PAGE)
        assert "| Option | Default |\n|---|---|\n| timeout | None |\n| verify | True |" in text

    def test_a_list_table_and_nested_lists_keep_their_rows_and_items(self):
        text = _markdown(
            "Title\n=====\n\n.. list-table:: Limits\n   :header-rows: 1\n\n   * - Plan\n     - Seats\n"
            "   * - Pro | Team\n     - 10\n\n* one\n\n  * inner\n\n* two\n"
        )
        assert "| Plan | Seats |\n|---|---|\n| Pro \\| Team | 10 |" in text
        assert "- one\n\n  - inner\n- two" in text

    def test_each_markdown_line_points_at_its_line_in_the_file(self):
        source = SPHINX_PAGE.split("\n")
        text, _, line_map, _ = rst_to_markdown(SPHINX_PAGE)
        lines = text.split("\n")
        for wanted in ("pip install requests", "Sends a GET request.", "| timeout | None |"):
            at = lines.index(wanted)
            assert wanted.strip("| ").split()[0] in source[file_line(line_map, at) - 1], wanted
        assert source[file_line(line_map, lines.index("## Linux")) - 1] == "Linux"

    def test_a_code_directives_block_points_at_its_first_line_not_after_its_end(self):
        # docutils gives a `.. code::` block the line after its end
        source = GRADIENT_CLIP.read_text(encoding="utf-8").split("\n")
        text, _, line_map, _ = rst_to_markdown(GRADIENT_CLIP.read_text(encoding="utf-8"))
        lines = text.split("\n")
        at = lines.index("import paddle.nn.functional as F")
        assert source[file_line(line_map, at) - 1].strip() == "import paddle.nn.functional as F"

    def test_no_file_the_text_names_is_read_without_a_knowledge_root(self, tmp_path: Path):
        secret = tmp_path / "secret.txt"
        secret.write_text("TOP SECRET", encoding="utf-8")
        text, _, _, includes = rst_to_markdown(
            f"T\n=\n\n.. include:: {secret}\n\n.. raw:: html\n   :file: {secret}\n\n"
            f".. csv-table:: Data\n   :file: {secret}\n\n.. literalinclude:: {secret}\n\nDone.\n"
        )
        assert "TOP SECRET" not in text and "Done." in text
        assert includes == [f"{secret} (no knowledge root to resolve it against)"] * 2

    def test_directives_nested_deeper_than_the_limit_keep_their_text(self):
        text = "Title\n=====\n\n"
        for depth in range(12):
            text += "   " * depth + f".. tab:: Level {depth}\n\n"
        text += "   " * 12 + "Deepest text.\n"
        markdown = _markdown(text)
        assert "Deepest text." in markdown and "Level 0" in markdown and "Level 11" in markdown
        assert ".. tab::" not in markdown

    def test_hostile_nesting_is_a_reported_failure_not_a_crash(self):
        deep = "T\n=\n\n.. tab:: X\n\n" + "".join("   " + "  " * i + "* item\n\n" for i in range(200))
        out = RstKnowledgeConverter().run(sources=[ByteStream(deep.encode())], meta={"source": "deep.rst"})
        assert out["documents"] == []
        assert out["failures"][0]["source"] == "deep.rst"
        assert "not readable reStructuredText (RecursionError" in out["failures"][0]["reason"]

    def test_a_code_block_that_ends_the_file_ends_on_its_last_line(self):
        for ending in ("", "\n"):
            text, _, line_map, _ = rst_to_markdown("T\n=\n\nSome text here.\n\n::\n\n    code" + ending)
            assert text.endswith("```\ncode\n```")
            assert file_line(line_map, len(text.split("\n")) - 1) == 8  # the file has 8 lines either way

    def test_field_lists_are_text_and_sphinx_page_settings_go(self):
        text = _markdown(":orphan:\n\n:param x: The x value.\n\nT\n=\n\nx : int\n    The x.\n")
        assert text == "param x:\nThe x value.\n\n# T\n\nx : int\nThe x."

    def test_an_api_objects_signatures_on_several_lines_are_all_code(self):
        text = _markdown(
            "T\n=\n\n.. py:function:: get(url)\n                 post(url)\n   :noindex:\n\n   Sends.\n\n"
            ".. py:function:: f(a, \\\n                 b)\n\n   Doc.\n"
        )
        assert "`get(url)`\n`post(url)`\n\nSends." in text and "`f(a, b)`\n\nDoc." in text
        assert "noindex" not in text

    def test_extension_code_directives_are_code_and_a_hash_line_of_prose_is_no_heading(self):
        text = _markdown(
            "T\n=\n\n.. code-tab:: bash\n\n   # install it\n   pip install x\n\n"
            ".. testsetup::\n\n   import hidden\n\nThe number\n# of retries is 3.\n"
        )
        assert "```bash\n# install it\npip install x\n```" in text
        assert "The number\n\\# of retries is 3." in text and "hidden" not in text
        assert [line for line in without_code(text).split("\n") if line.startswith("#")] == ["# T"]

    def test_a_merged_cell_repeats_its_text_in_every_cell_it_spans(self):
        text = _markdown(
            "T\n=\n\n+---+---+---+\n| a | b | c |\n+===+===+===+\n| x     | y |\n+---+---+---+\n"
            "| d | e | f |\n+   +---+---+\n|   | g | h |\n+---+---+---+\n"
        )
        assert "| a | b | c |\n|---|---|---|\n| x | x | y |\n| d | e | f |\n| d | g | h |" in text

    def test_lists_conditions_and_footnotes_read_as_a_reader_sees_them(self):
        text = _markdown(
            "T\n=\n\n3. three\n4. four\n\n.. only:: html\n\n   Shown in HTML.\n\n"
            "See [#f1]_ and [CIT2002]_.\n\n.. [#f1] The footnote.\n.. [CIT2002] A citation.\n"
        )
        assert "3. three\n4. four" in text
        assert "Shown in HTML." in text and "html\n" not in text
        assert "See [1] and [CIT2002].\n\n[1] The footnote.\n\n[CIT2002] A citation." in text

    def test_windows_line_endings_and_a_byte_order_mark_keep_titles_and_lines(self):
        text, title, line_map, _ = rst_to_markdown("\ufeffT\r\n=\r\n\r\nLine one.\r\n\r\n::\r\n\r\n    code\r\n")
        assert title == "T" and "\r" not in text
        assert file_line(line_map, text.split("\n").index("code")) == 8

    def test_a_real_sphinx_page_keeps_no_markup_outside_code(self):
        text, title, _, includes = rst_to_markdown(QUICKSTART.read_text(encoding="utf-8"))
        assert title == "Quickstart" and includes == []
        prose = without_code(text)
        for residue in (":ref:`", ":class:`", ":meth:`", ".. ", "::\n", "`_", "====", "----"):
            assert residue not in prose, residue
        assert "Now, we have a `Response` object called `r`." in text  # `:class:`Response <requests.Response>``
        assert "```\n>>> import requests\n```" in text

    def test_chinese_titles_with_overlines_become_headings(self):
        page = REAL / "paddle" / "docs" / "install" / "instalL_NGC_PaddlePaddle_ch.rst"
        text, title, _, _ = rst_to_markdown(page.read_text(encoding="utf-8"))
        assert title == "NGC 飞桨容器安装指南"
        assert [line for line in text.split("\n") if line.startswith("#")][:3] == [
            "# NGC 飞桨容器安装指南",
            "## 整体介绍",
            "## 环境准备",
        ]

    def test_run_converts_files_and_reports_what_it_cannot(self, tmp_path: Path):
        (tmp_path / "latin1.rst").write_bytes("Caf\xe9\n====\n".encode("latin-1"))
        (tmp_path / "big.rst").write_text("x" * 2000, encoding="utf-8")
        (tmp_path / "good.rst").write_text("Good\n====\n\nText.\n", encoding="utf-8")
        metas = [{"source": name} for name in ("latin1.rst", "big.rst", "good.rst")]
        out = RstKnowledgeConverter(max_file_bytes=1000).run(
            sources=[tmp_path / "latin1.rst", tmp_path / "big.rst", tmp_path / "good.rst"], meta=metas
        )
        assert [doc.meta["source"] for doc in out["documents"]] == ["good.rst"]
        reasons = {failure["source"]: failure["reason"] for failure in out["failures"]}
        assert "not UTF-8 text" in reasons["latin1.rst"]
        assert "over the 1000-byte cap" in reasons["big.rst"]

    def test_run_gives_title_markup_line_map_and_include_warnings(self):
        stream = ByteStream(b"Guide\n=====\n\n.. include:: ../README.rst\n\nBody.\n", meta={"file_path": "g.rst"})
        out = RstKnowledgeConverter().run(sources=[stream], meta=[{"source": "docs/g.rst", "doc_version": "v1"}])
        [doc] = out["documents"]
        assert doc.content == "# Guide\n\nBody."
        assert (doc.meta["title"], doc.meta["markup"], doc.meta["doc_version"]) == ("Guide", "rst", "v1")
        assert file_line(doc.meta["line_map"], 2) == 6
        assert out["warnings"] == [
            {
                "source": "docs/g.rst",
                "reason": "include not resolved: ../README.rst (no knowledge root to resolve it against)",
            }
        ]
        assert out["failures"] == [] and out["skipped"] == []

    def test_a_page_of_headings_alone_is_skipped_with_its_reason(self):
        # Flask's changes.rst: a title and the include of ../CHANGES.rst; its license.rst: a literalinclude
        pages = [
            b"Changes\n=======\n\n.. include:: ../CHANGES.rst\n",
            b"License\n=======\n\n.. literalinclude:: L.txt\n",
        ]
        out = RstKnowledgeConverter().run(
            sources=[ByteStream(page) for page in pages], meta=[{"source": "changes.rst"}, {"source": "license.rst"}]
        )
        assert out["documents"] == [] and out["failures"] == []
        assert out["skipped"] == [
            {
                "source": "changes.rst",
                "reason": "no text besides its headings (an include not shown: "
                "../CHANGES.rst (no knowledge root to resolve it against))",
            },
            {
                "source": "license.rst",
                "reason": "no text besides its headings (an include not shown: "
                "L.txt (no knowledge root to resolve it against))",
            },
        ]
        assert out["warnings"] == []  # the skip names the include
        empty = RstKnowledgeConverter().run(sources=[ByteStream(b".. a comment\n")], meta={"source": "c.rst"})
        assert empty["skipped"] == [{"source": "c.rst", "reason": "no text"}]

    @pytest.fixture
    def site(self, tmp_path: Path) -> Path:
        """A project whose Sphinx pages include its README, its changelog, a snippet and code."""
        root = tmp_path / "kb"
        docs = root / "proj" / "docs"
        docs.mkdir(parents=True)
        (docs / "conf.py").write_text("project = 'proj'\n", encoding="utf-8")
        (root / "proj" / "CHANGES.rst").write_text(
            "Version 2.0\n-----------\n\nThe ``run`` command is async.\n\n.. include:: note.rst\n",  # the page's
            encoding="utf-8",
        )
        (docs / "note.rst").write_text(".. note::\n\n   Upgrade the plugins first.\n", encoding="utf-8")
        (root / "proj" / "README.md").write_text(
            "<!-- badges -->\n# Proj\n\nProj runs jobs.\n\n```sh\n# not a heading\n```\n\n"
            "Install\n-------\n\nUse pip.\n",
            encoding="utf-8",
        )
        (root / "proj" / "app.py").write_text("import os\n\n\ndef main():\n    return os.getcwd()\n")
        return root

    def _page(self, site: Path, text: str, name: str = "proj/docs/page.rst") -> dict:
        path = site / name
        path.write_text(text, encoding="utf-8")
        return RstKnowledgeConverter().run(sources=[path], meta=[{"source": name}])

    def test_an_include_shows_the_file_where_it_stands_its_lines_at_the_directive(self, site: Path):
        out = self._page(site, "Changes\n=======\n\nSee below.\n\n.. include:: ../CHANGES.rst\n\nThe end.\n")
        [doc] = out["documents"]
        assert doc.content == (
            "# Changes\n\nSee below.\n\n## Version 2.0\n\nThe `run` command is async.\n\n"
            "Upgrade the plugins first.\n\nThe end."
        )
        lines = doc.content.split("\n")
        assert [file_line(doc.meta["line_map"], lines.index(t)) for t in ("See below.", "## Version 2.0")] == [4, 6]
        assert file_line(doc.meta["line_map"], lines.index("Upgrade the plugins first.")) == 6
        assert file_line(doc.meta["line_map"], lines.index("The end.")) == 8
        assert doc.meta["included_files"] == ["proj/CHANGES.rst", "proj/docs/note.rst"]
        assert out["warnings"] == [] and "unresolved_includes" not in doc.meta

    def test_options_show_a_part_as_text_or_as_code(self, site: Path):
        out = self._page(
            site,
            "Page\n====\n\n.. include:: ../CHANGES.rst\n   :start-after: -----------\n   :end-before: .. include\n\n"
            ".. include:: ../app.py\n   :code: python\n   :start-line: 3\n\n"
            ".. literalinclude:: /../app.py\n   :pyobject: main\n   :caption: The entry point\n",
        )
        [doc] = out["documents"]
        assert doc.content == (
            "# Page\n\nThe `run` command is async.\n\n```python\ndef main():\n    return os.getcwd()\n```\n\n"
            "The entry point\n\n```python\ndef main():\n    return os.getcwd()\n```"
        )
        assert "Upgrade the plugins" not in doc.content
        converter = RstKnowledgeConverter()
        assert converter.included_files([site / "proj/docs/page.rst"], [{"source": "proj/docs/page.rst"}]) == {
            "proj/docs/page.rst": []  # only parts: each file stays a page of its own
        }

    def test_a_markdown_readme_is_shown_as_markdown_under_the_section(self, site: Path):
        out = self._page(site, "Welcome\n=======\n\n.. include:: ../README.md\n   :parser: myst_parser.sphinx_\n")
        [doc] = out["documents"]
        assert doc.content == (
            "# Welcome\n\n## Proj\n\nProj runs jobs.\n\n```sh\n# not a heading\n```\n\n### Install\n\nUse pip."
        )
        assert doc.meta["included_files"] == ["proj/README.md"]

    def test_a_markdown_file_included_without_a_parser_is_read_as_restructuredtext(self, site: Path):
        # as Sphinx reads it: Requests' docs include ../../HISTORY.md, written to read as both
        (site / "proj" / "HISTORY.md").write_text(
            "Release History\n===============\n\n2.1 (2024-05-29)\n----------------\n\n-   Fixed `x`.\n"
        )
        out = self._page(site, "Updates\n=======\n\nNews.\n\n.. include:: ../HISTORY.md\n")
        [doc] = out["documents"]
        assert doc.content == ("# Updates\n\nNews.\n\n## Release History\n\n### 2.1 (2024-05-29)\n\n- Fixed x.")

    def test_an_include_in_a_code_block_is_code_and_one_in_a_tab_is_read(self, site: Path):
        out = self._page(
            site,
            "Page\n====\n\n.. code-block:: rst\n\n   .. include:: ../CHANGES.rst\n\n"
            ".. tab:: Unix\n\n   .. include:: note.rst\n",
        )
        [doc] = out["documents"]
        assert "```rst\n.. include:: ../CHANGES.rst\n```" in doc.content
        assert "Version 2.0" not in doc.content
        assert doc.content.endswith("Unix\n\nUpgrade the plugins first.")

    def test_an_include_that_cannot_be_shown_is_a_warning_and_the_rest_stays(self, site: Path, tmp_path: Path):
        (tmp_path / "secret.txt").write_text("TOP SECRET", encoding="utf-8")
        (site / "proj" / "docs" / "loop.rst").write_text("Loop.\n\n.. include:: loop.rst\n", encoding="utf-8")
        out = self._page(
            site,
            "Page\n====\n\nKept.\n\n.. include:: ../../../secret.txt\n\n.. include:: loop.rst\n\n"
            ".. literalinclude:: ../app.py\n   :pyobject: nowhere\n",
        )
        [doc] = out["documents"]
        assert doc.content == "# Page\n\nKept.\n\nLoop."
        assert [w["reason"] for w in out["warnings"]] == [
            "include not resolved: ../../../secret.txt (not found under the knowledge root)",
            "include not resolved: loop.rst (included from itself or over 3 levels deep)",
            "include not resolved: ../app.py (pyobject 'nowhere' not found)",
        ]
        assert doc.meta["included_files"] == ["proj/docs/loop.rst"]
        assert doc.meta["watched_files"] == ["proj/app.py"]  # its edit may give it the object the page names

    def test_an_included_file_docutils_cannot_read_is_a_warning_and_the_page_stays(self, site: Path):
        deep = "".join("  " * depth + "* item\n\n" for depth in range(400))
        (site / "proj" / "docs" / "deep.rst").write_text(deep, encoding="utf-8")
        (site / "proj" / "README.md").write_text("---\nbase: &b x\nother: *b\n---\n# Proj\n\nRuns jobs.\n")
        out = self._page(
            site,
            "Page\n====\n\nKept.\n\n.. include:: deep.rst\n\n.. INCLUDE:: ../README.md\n   :parser: myst\n",
        )
        [doc] = out["documents"]
        assert doc.content == "# Page\n\nKept.\n\n## Proj\n\nRuns jobs."  # a YAML alias, as markdown pages may
        assert [w["reason"] for w in out["warnings"]] == [
            "include not resolved: deep.rst (not readable reStructuredText: RecursionError)"
        ]
        assert doc.meta["included_files"] == ["proj/README.md"] and doc.meta["watched_files"] == ["proj/docs/deep.rst"]
        scan = RstKnowledgeConverter().included_files([site / "proj/docs/page.rst"], [{"source": "proj/docs/page.rst"}])
        assert scan == {"proj/docs/page.rst": ["proj/README.md"]}  # the deep file stays a page of its own

    def test_a_parser_option_imports_no_module(self, site: Path, capsys: pytest.CaptureFixture[str]):
        sys.modules.pop("this", None)
        out = self._page(site, "Page\n====\n\nKept.\n\n.. include:: ../README.md\n   :parser: this\n")
        assert "this" not in sys.modules and "Beautiful is better" not in capsys.readouterr().out
        assert "Proj runs jobs." in out["documents"][0].content  # read as reStructuredText: no markdown parser named

    def test_the_sites_version_and_epilog_hold_and_a_badge_shows_nothing(self, site: Path):
        (site / "proj" / "docs" / "conf.py").write_text(
            'version = "2.2"\nrst_epilog = """\n.. |users| replace:: :ref:`django-users <users-list>`\n"""\n'
        )
        out = self._page(
            site,
            "Page\n====\n\n|Docs|_\n\nProj |version|: ask |users|.\n\n.. tab:: Unix\n\n   Also |users|.\n\n"
            ".. image:: arch.png\n   :alt: Architecture diagram\n\n"
            ".. |Docs| image:: https://readthedocs.org/badge.svg\n.. _Docs: https://proj.readthedocs.io\n",
        )
        [doc] = out["documents"]
        assert doc.content == (
            "# Page\n\nProj 2.2: ask django-users.\n\nUnix\n\nAlso django-users."  # an image block is no text
        )
        assert doc.meta["included_files"] == ["proj/docs/conf.py"]

    def test_included_files_lists_what_each_page_shows_whole(self, site: Path):
        (site / "proj" / "docs" / "changes.rst").write_text("Changes\n=======\n\n.. include:: ../CHANGES.rst\n")
        (site / "proj" / "docs" / "plain.rst").write_text("Plain\n=====\n\nNo include.\n", encoding="utf-8")
        (site / "proj" / "docs" / "upper.rst").write_text("Upper\n=====\n\n.. INCLUDE:: note.rst\n")  # any case
        (site / "proj" / "docs" / "broken.rst").write_bytes(b".. include:: ../CHANGES.rst\n\xff")  # not UTF-8
        names = ["proj/docs/changes.rst", "proj/docs/plain.rst", "proj/docs/broken.rst", "proj/docs/upper.rst"]
        found = RstKnowledgeConverter().included_files([site / n for n in names], [{"source": n} for n in names])
        assert found == {
            "proj/docs/changes.rst": ["proj/CHANGES.rst", "proj/docs/note.rst"],
            "proj/docs/plain.rst": [],
            "proj/docs/broken.rst": [],  # it fails in the run: what it includes stays a page
            "proj/docs/upper.rst": ["proj/docs/note.rst"],
        }

    def test_empty_input_gives_empty_output(self):
        assert RstKnowledgeConverter().run(sources=[]) == {
            "documents": [],
            "failures": [],
            "warnings": [],
            "skipped": [],
        }
        assert rst_to_markdown("") == ("", "", [], [])
