"""Pages that are translations of each other, as documentation sites lay them out: one folder per language."""

from __future__ import annotations

import re

#: the folder names sites give their languages (`content/en/`, `docs/zh/`, `zh-cn/`, `i18n/pt-BR/`), casefolded
LANGUAGE_FOLDERS = frozenset(
    (
        *("en", "en-us", "en-gb", "zh", "zh-cn", "zh-tw", "zh-hk", "zh-hans", "zh-hant", "ja", "ko", "fr", "de"),
        *("es", "pt", "pt-br", "it", "ru", "ar", "hi", "id", "vi", "th", "tr", "pl", "nl", "sv", "uk", "fa", "he"),
        *("cs", "bn", "ms", "ro", "hu", "el", "da", "fi", "no", "nb"),
    )
)


#: Docusaurus keeps a page's translation under `i18n/<language>/docusaurus-plugin-content-<plugin>/`, the original
#: under `docs/` (`current/`), `versioned_docs/` (`version-2.0/`), `blog/` or `src/pages/`
_DOCUSAURUS_I18N = re.compile(
    r"^(?P<site>(?:[^/]+/)*?)i18n/[^/]+/docusaurus-plugin-content-(?P<plugin>docs|blog|pages)/(?P<rest>.+)$"
)
_DOCUSAURUS_ORIGINALS = {"blog": "blog/", "pages": "src/pages/"}


def _docusaurus_original(found: re.Match[str]) -> str:
    site, plugin, rest = found.group("site"), found.group("plugin"), found.group("rest")
    if plugin != "docs":
        return site + _DOCUSAURUS_ORIGINALS[plugin] + rest
    if rest.startswith("current/"):
        return site + "docs/" + rest.removeprefix("current/")
    return site + "versioned_docs/" + rest


def translation_key(source: str) -> str:
    """
    What a page's translations share: its source without its first language folder (`apisix/zh/latest/echo.md` and
    `apisix/en/latest/echo.md`: `apisix/latest/echo.md`; Mintlify's `zh/x.mdx` and `x.mdx`: `x.mdx`).

    A Docusaurus translation (`i18n/zh-Hans/docusaurus-plugin-content-docs/current/intro.md`) has its original's
    source as key (`docs/intro.md`).

    :param source: A page's path under the knowledge root, `/`-separated.
    :returns: The key; the source itself when no folder names a language.
    """
    if "i18n/" in source and (found := _DOCUSAURUS_I18N.match(source)):
        return _docusaurus_original(found)
    parts = source.split("/")
    for index, part in enumerate(parts[:-1]):
        if part.casefold() in LANGUAGE_FOLDERS:
            return "/".join(parts[:index] + parts[index + 1 :])
    return source
