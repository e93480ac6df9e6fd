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
            ("", ""),
        ],
    )
    def test_the_first_language_folder_goes(self, source: str, key: str):
        assert translation_key(source) == key
