"""How a hint term is found in a text: one rule shared by L0 matching and the reranker."""

from __future__ import annotations

import re

CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")


def has_cjk(text: str) -> bool:
    """
    Tell whether a text contains CJK ideographs.

    :param text: Any text.
    :returns: True if it does.
    """
    return CJK.search(text) is not None


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
    if not term or term not in text:
        return False
    if has_cjk(term):
        return True
    return re.search(rf"(?<![a-z0-9_]){re.escape(term)}(?![a-z0-9_])", text) is not None
