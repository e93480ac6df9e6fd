"""Pages that are translations of each other, as documentation sites lay them out: one folder per language."""

from __future__ import annotations

#: the folder names sites give their languages (`content/en/`, `docs/zh/`, `zh-cn/`, `i18n/pt-BR/`), casefolded
LANGUAGE_FOLDERS = frozenset(
    (
        *("en", "en-us", "en-gb", "zh", "zh-cn", "zh-tw", "zh-hk", "zh-hans", "zh-hant", "ja", "ko", "fr", "de"),
        *("es", "pt", "pt-br", "it", "ru", "ar", "hi", "id", "vi", "th", "tr", "pl", "nl", "sv", "uk", "fa", "he"),
        *("cs", "bn", "ms", "ro", "hu", "el", "da", "fi", "no", "nb"),
    )
)


def translation_key(source: str) -> str:
    """
    What a page's translations share: its source without its first language folder (`apisix/zh/latest/echo.md` and
    `apisix/en/latest/echo.md`: `apisix/latest/echo.md`; Mintlify's `zh/x.mdx` and `x.mdx`: `x.mdx`).

    :param source: A page's path under the knowledge root, `/`-separated.
    :returns: The key; the source itself when no folder names a language.
    """
    parts = source.split("/")
    for index, part in enumerate(parts[:-1]):
        if part.casefold() in LANGUAGE_FOLDERS:
            return "/".join(parts[:index] + parts[index + 1 :])
    return source
