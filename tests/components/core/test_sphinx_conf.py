from __future__ import annotations

import os
from pathlib import Path

import pytest

from components.core.sphinx_conf import (
    MAX_CONF_BYTES,
    definitions_in,
    literal_setting,
    nearest_configuration,
    source_suffixes,
    substitution_definitions,
)

DJANGO_LIKE = '''import sys
from os.path import abspath
sys.path.append(abspath("_ext"))
source_suffix = '.txt'
version = '2.2'
release = compute_release()
rst_epilog = """
.. |django-users| replace:: :ref:`django-users <django-users-mailing-list>`
.. |logo| image:: logo.png
   :alt: Django
Some text that is no definition.
"""
'''


def _conf(folder: Path, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    conf = folder / "conf.py"
    conf.write_text(text, encoding="utf-8")
    return conf


class TestNearestConfiguration:
    def test_the_nearest_conf_above_the_page_and_what_to_watch(self, tmp_path: Path):
        conf = _conf(tmp_path / "site" / "docs", "project = 'p'\n")
        found = nearest_configuration(tmp_path / "site" / "docs" / "topics" / "page.txt", tmp_path)
        assert (found.source, found.path) == ("site/docs/conf.py", conf)
        assert found.watched == ["site/docs/topics/conf.py", "site/docs/conf.py"]

    def test_none_under_the_root(self, tmp_path: Path):
        _conf(tmp_path, "project = 'outside'\n")
        root = tmp_path / "kb"
        (root / "docs").mkdir(parents=True)
        found = nearest_configuration(root / "docs" / "page.rst", root)
        assert (found.source, found.path) == (None, None)
        assert found.watched == ["docs/conf.py", "conf.py"]

    def test_a_link_leaving_the_root_is_not_read(self, tmp_path: Path):
        outside = _conf(tmp_path / "outside", "source_suffix = '.txt'\n")
        root = tmp_path / "kb"
        (root / "docs").mkdir(parents=True)
        os.symlink(outside, root / "docs" / "conf.py")
        assert nearest_configuration(root / "docs" / "page.txt", root).path is None


class TestLiteralSetting:
    def test_only_a_literal_at_the_top_level_counts(self, tmp_path: Path):
        conf = _conf(tmp_path, DJANGO_LIKE)
        assert literal_setting(conf, "source_suffix") == ".txt"
        assert literal_setting(conf, "release") is None  # a call: never run
        assert literal_setting(conf, "missing") is None

    @pytest.mark.parametrize("text", ["source_suffix = (\n", "\x00", "x = 1\n" * (MAX_CONF_BYTES // 6 + 1)])
    def test_a_broken_or_huge_file_gives_nothing(self, tmp_path: Path, text: str):
        assert literal_setting(_conf(tmp_path, text + "\nsource_suffix = '.txt'\n"), "source_suffix") is None


class TestSourceSuffixes:
    @pytest.mark.parametrize(
        ("setting", "suffixes"),
        [
            ("source_suffix = '.TXT'", {".txt"}),
            ("source_suffix = ['.rst', '.txt', '.md']", {".rst", ".txt", ".md"}),
            (
                "source_suffix = {'.rst': 'restructuredtext', '.md': 'markdown', '.txt': 'restructuredtext'}",
                {".rst", ".txt"},
            ),
            ("source_suffix = get_suffixes()", {".rst"}),
            ("project = 'none set'", {".rst"}),
        ],
    )
    def test_as_sphinx_reads_them(self, tmp_path: Path, setting: str, suffixes: set[str]):
        assert source_suffixes(_conf(tmp_path, setting + "\n")) == suffixes


class TestSubstitutionDefinitions:
    def test_literal_version_and_the_epilogs_definitions(self, tmp_path: Path):
        definitions = substitution_definitions(_conf(tmp_path, DJANGO_LIKE))
        assert definitions == (
            ".. |version| replace:: 2.2\n\n"
            ".. |django-users| replace:: :ref:`django-users <django-users-mailing-list>`\n\n"
            ".. |logo| image:: logo.png\n   :alt: Django"
        )

    def test_none(self, tmp_path: Path):
        assert substitution_definitions(_conf(tmp_path, "rst_epilog = make_epilog()\n")) == ""
        assert definitions_in("Text.\n\n.. note:: Not one.\n") == []
