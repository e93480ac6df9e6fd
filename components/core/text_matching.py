"""How a hint term is found in a text: one rule shared by L0 matching and the reranker."""

from __future__ import annotations

import re

CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
# byte classes for counting in C: ASCII letters, and the lead bytes of U+3000..U+9FFF in UTF-8 (CJK ideographs,
# kana and CJK punctuation), each counted once per character
_NOT_LATIN = bytes(b for b in range(256) if not (65 <= b <= 90 or 97 <= b <= 122))
_NOT_CJK_LEAD = bytes(b for b in range(256) if not 0xE3 <= b <= 0xE9)
_WORD = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_")  # characters that continue an English word
# a Chinese character carries about as much as a short Latin word: a text is Chinese once a quarter of its letters
# are ideographs (code and field names in Chinese runbooks are Latin)
_CJK_SHARE = 0.25


def has_cjk(text: str) -> bool:
    """
    Tell whether a text contains CJK ideographs.

    :param text: Any text.
    :returns: True if it does.
    """
    return CJK.search(text) is not None


def script_language(text: str) -> str:
    """
    Tell which of the knowledge base's two languages a text is written in, from its script.

    :param text: Any text.
    :returns: `zh` when at least a quarter of its letters are CJK ideographs, `en` when it has Latin letters
        otherwise, `""` when it has neither (digits, symbols, empty).
    """
    data = text.encode("utf-8", errors="replace")
    cjk = len(data.translate(None, _NOT_CJK_LEAD))
    latin = len(data.translate(None, _NOT_LATIN))
    if not cjk and not latin:
        return ""
    return "zh" if cjk >= _CJK_SHARE * (cjk + latin) else "en"


def mentions(text: str, term: str) -> bool:
    """
    Tell whether `text` mentions `term`, case-insensitively.

    Terms with Chinese characters match as substrings (Chinese has no spaces); other terms match on ASCII word
    boundaries, so `cpu` does not match `cpus`, while `nginx` still matches in `nginx报错`.

    :param text: The text searched.
    :param term: The term.
    :returns: True if the text mentions the term.
    """
    return mentions_folded(text.casefold(), term.casefold())


def mentions_folded(text: str, term: str) -> bool:
    """
    `mentions` for a text and term that are already casefolded (for hot loops).

    :param text: Casefolded text.
    :param term: Casefolded term.
    :returns: True if the text mentions the term.
    """
    start = text.find(term) if term else -1
    if start < 0:
        return False
    if has_cjk(term):
        return True
    # each occurrence checked for ASCII word characters on either side (what `(?<![a-z0-9_])term(?![a-z0-9_])`
    # matches, without a regex engine trying every position of a long text)
    size = len(term)
    while start >= 0:
        if (start == 0 or text[start - 1] not in _WORD) and text[start + size : start + size + 1] not in _WORD:
            return True
        start = text.find(term, start + 1)
    return False
