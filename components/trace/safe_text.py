"""Strings every database can store: lone surrogates and NUL escaped, never raised."""

from __future__ import annotations

from typing import Any


def safe_text(value: str) -> str:
    r"""
    Return `value` as text any database stores: unencodable characters as backslash escapes.

    A lone surrogate (what Python makes of undecodable bytes in `argv`, e.g. `\udcff`) cannot be encoded as UTF-8,
    and PostgreSQL refuses NUL in text; both become their escape sequence. Other text is returned unchanged.

    :param value: Any string.
    :returns: The storable string.
    """
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        value = value.encode("utf-8", errors="backslashreplace").decode("utf-8")
    return value.replace("\x00", "\\x00") if "\x00" in value else value


def safe_json(value: Any) -> Any:
    """
    Return a JSON-like value with every string (keys too) made safe by `safe_text`.

    :param value: Dicts, lists, strings, numbers.
    :returns: A copy where needed; the input is not mutated.
    """
    if isinstance(value, str):
        return safe_text(value)
    if isinstance(value, dict):
        return {safe_text(str(k)): safe_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [safe_json(v) for v in value]
    return value
