from __future__ import annotations

import pytest

from components.core.versions import (
    named_releases,
    page_key,
    release_groups,
    release_of,
    release_order,
    text_key,
    version_key,
)


class TestVersionKey:
    @pytest.mark.parametrize(
        ("source", "key"),
        [
            # WasmEdge: a file per release of the C API reference
            ("embed/c/reference/0.9.x.md", "embed/c/reference/{release}.md"),
            ("embed/c/reference/latest.md", "embed/c/reference/{release}.md"),
            ("embed/c/reference/upgrade_to_0.10.0.md", "embed/c/reference/upgrade_to_0.10.0.md"),
            ("embed/go/reference/latest.md", "embed/go/reference/{release}.md"),  # another page: another folder
            # a folder per release
            ("docs/v1.2/install.md", "docs/install.md"),
            ("docs/V2/install.md", "docs/install.md"),
            ("content/en/docs/2.x/setup.md", "content/en/docs/setup.md"),
            ("docs/stable/install.md", "docs/install.md"),
            ("docs/latest/install.md", "docs/install.md"),
            # Docusaurus: earlier releases under versioned_docs/version-<name>/, the current one under docs/
            ("versioned_docs/version-v2.9.0/installation/uninstall.md", "docs/installation/uninstall.md"),
            ("site/versioned_docs/version-2.0/a/b.md", "site/docs/a/b.md"),
            # ... and a translated release its current translation's
            (
                "i18n/zh/docusaurus-plugin-content-docs/version-v2.9.0/a.md",
                "i18n/zh/docusaurus-plugin-content-docs/current/a.md",
            ),
            ("embed/c/reference/2.x", "embed/c/reference/{release}"),  # a whole name without a suffix
            # no release: numbered chapters and sections, release notes, dates, years, Next.js, plain names
            ("book/1.md", "book/1.md"),
            ("book/1.2.md", "book/1.2.md"),
            ("whatsnew/3.12.md", "whatsnew/3.12.md"),
            ("releases/v1.2.0.md", "releases/v1.2.0.md"),
            ("channels/stable.md", "channels/stable.md"),
            ("frameworks/next/install.md", "frameworks/next/install.md"),
            ("blog/2024.01.md", "blog/2024.01.md"),
            ("changelog/2023/notes.md", "changelog/2023/notes.md"),
            ("docs/v1.2", "docs/v1.2"),
            ("reference.md", "reference.md"),
            ("README", "README"),
            ("", ""),
        ],
    )
    def test_the_folders_and_stem_naming_a_release_go(self, source: str, key: str):
        assert version_key(source) == key

    def test_a_page_key_joins_translations_and_versions(self):
        zh_old = "i18n/zh/docusaurus-plugin-content-docs/version-v2.9.0/installation/uninstall.md"
        keys = {
            page_key(s)
            for s in (
                zh_old,
                "docs/installation/uninstall.md",
                "versioned_docs/version-v1.3.0/installation/uninstall.md",
            )
        }
        assert keys == {"docs/installation/uninstall.md"}
        assert page_key("apisix/zh/latest/plugins/echo.md") == page_key("apisix/en/latest/plugins/echo.md")
        assert page_key("docs/installation/upgrade.md") != page_key("docs/installation/uninstall.md")


class TestReleases:
    @pytest.mark.parametrize(
        ("source", "release"),
        [
            ("versioned_docs/version-v1.3.0/installation/uninstall.md", "v1.3.0"),
            ("site/versioned_docs/version-2.0/a/b.md", "2.0"),
            ("i18n/zh/docusaurus-plugin-content-docs/version-v2.9.0/a.md", "v2.9.0"),
            ("i18n/zh/docusaurus-plugin-content-docs/current/a.md", None),
            ("docs/installation/uninstall.md", None),
            ("embed/c/reference/0.9.x.md", "0.9.x"),
            ("embed/c/reference/latest.md", "latest"),
            ("embed/c/reference/2.x", "2.x"),
            ("docs/v1.2/install.md", "v1.2"),
            ("docs/stable/install.md", "stable"),
            # what `version_key` keeps as a page of its own names no release either
            ("whatsnew/3.12.md", None),
            ("releases/v1.2.0.md", None),
            ("channels/stable.md", None),
            ("blog/2024.01.md", None),
            ("", None),
        ],
    )
    def test_the_release_a_source_names(self, source: str, release: str | None):
        assert release_of(source) == release
        # a source names a release exactly when its version key drops something
        assert (release is None) == (version_key(source) == source)

    def test_the_named_release_then_the_current_page_then_latest_then_the_newest_number(self):
        releases = ["v1.3.0", None, "0.9.x", "legacy", "v2.10.0", "latest", "v2.9.0", "1.2"]
        assert sorted(releases, key=release_order) == [
            None,
            "latest",
            "v2.10.0",
            "v2.9.0",
            "v1.3.0",
            "1.2",
            "0.9.x",
            "legacy",
        ]
        named = named_releases("How do I uninstall HAMi v1.3?")
        assert sorted(releases, key=lambda r: release_order(r, named))[:2] == ["v1.3.0", None]
        series = named_releases("What changed in v2?")  # a series: its releases, the newest first
        assert sorted(releases, key=lambda r: release_order(r, series))[:3] == ["v2.10.0", "v2.9.0", None]

    @pytest.mark.parametrize(
        ("question", "named"),
        [
            ("How do I uninstall HAMi v1.3.0?", {"1.3.0"}),
            ("HAMi 2.9 卸载", {"2.9"}),
            ("the 0.9.x C API", {"0.9.x"}),
            ("what changed in V3", {"3"}),
            ("v1.3.0版本怎么卸载", {"1.3.0"}),  # next to Chinese text
            ("HAMi 2.9卸载", {"2.9"}),
            ("如何卸载v1.3.0", {"1.3.0"}),
            ("the v2.x API", {"2.x"}),
            # numbers that name no release: a count, a year, a date, a version inside a word or a file name
            ("set replicas to 3", set()),
            ("the 2024.01 release notes", set()),
            ("python3.11 and e5-small", set()),
            ("config.v1.yaml", set()),
            ("the plan costs $1.5 a month", set()),
        ],
    )
    def test_the_releases_a_question_names(self, question: str, named: set[str]):
        assert named_releases(question) == named

    def test_the_pages_found_in_two_releases_or_more_and_where_they_stand(self):
        sources = [
            "versioned_docs/version-v1.3.0/uninstall.md",
            "docs/install.md",
            None,
            "docs/uninstall.md",
            "ref/latest.md",  # one release only among the sources: no group
            "versioned_docs/version-v1.3.0/uninstall.md",
            "",
        ]
        assert release_groups(sources) == [{0: "v1.3.0", 3: None, 5: "v1.3.0"}]
        assert release_groups([]) == []


class TestTextKey:
    def test_a_pages_releases_share_the_key_of_one_text(self):
        text = "Uninstalling HAMi does not stop running GPU tasks."
        keys = {
            text_key(source, text)
            for source in (
                "docs/installation/uninstall.md",
                "versioned_docs/version-v2.9.0/installation/uninstall.md",
                "versioned_docs/version-v1.3.0/installation/uninstall.md",
            )
        }
        assert len(keys) == 1

    def test_surrounding_whitespace_does_not_count_but_any_other_difference_does(self):
        assert text_key("a.md", "  Run helm uninstall.\n") == text_key("a.md", "Run helm uninstall.")
        assert text_key("a.md", "Run helm uninstall.") != text_key("a.md", "Run helm  uninstall.")
        assert text_key("a.md", "Run helm uninstall.") != text_key("b.md", "Run helm uninstall.")
        # translations are other texts of another page
        zh = "i18n/zh/docusaurus-plugin-content-docs/current/a.md"
        assert text_key(zh, "Run helm uninstall.") != text_key("docs/a.md", "Run helm uninstall.")

    def test_it_never_equals_an_evidence_key(self):
        key = text_key("a.md", "Run helm uninstall.")
        assert key is not None and key.startswith("text:a.md|") and "#" not in key

    @pytest.mark.parametrize(
        ("source", "content"), [(None, "text"), ("", "text"), ("a.md", ""), ("a.md", "  \n"), ("a.md", None)]
    )
    def test_no_source_or_no_text_has_none(self, source, content):
        assert text_key(source, content) is None
