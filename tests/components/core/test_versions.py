from __future__ import annotations

import pytest

from components.core.versions import page_key, version_key


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
