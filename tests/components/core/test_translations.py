from __future__ import annotations

import pytest

from components.core.translations import translation_key


class TestTranslationKey:
    @pytest.mark.parametrize(
        ("source", "key"),
        [
            ("apisix/zh/latest/plugins/echo.md", "apisix/latest/plugins/echo.md"),
            ("apisix/en/latest/plugins/echo.md", "apisix/latest/plugins/echo.md"),
            ("content/zh-CN/docs/job.md", "content/docs/job.md"),  # casefolded
            ("zh/integrations/overview.mdx", "integrations/overview.mdx"),  # Mintlify: translations in a folder,
            ("integrations/overview.mdx", "integrations/overview.mdx"),  # the original at the root
            ("guides/en.md", "guides/en.md"),  # a file named like a language is no folder
            # Docusaurus: translations under i18n/, the originals under docs/, versioned_docs/, blog/, src/pages/
            ("site/i18n/zh-Hans/docusaurus-plugin-content-docs/current/intro.md", "site/docs/intro.md"),
            ("i18n/ja/docusaurus-plugin-content-docs/version-2.0/a/b.md", "versioned_docs/version-2.0/a/b.md"),
            ("i18n/fr/docusaurus-plugin-content-blog/2024-01-01-x.md", "blog/2024-01-01-x.md"),
            ("i18n/fr/docusaurus-plugin-content-pages/about.md", "src/pages/about.md"),
            ("site/docs/intro.md", "site/docs/intro.md"),
            ("", ""),
        ],
    )
    def test_the_first_language_folder_goes(self, source: str, key: str):
        assert translation_key(source) == key
