"""
Front matter as documentation sites write it: YAML (`---`), TOML (`+++`, Hugo's default) and JSON (`{ ... }`).

`split_frontmatter` returns the metadata, the body and the number of lines the front block took, so that a chunk's
line range can point into the file as written.
"""

from __future__ import annotations

import json
import tomllib
from datetime import date, datetime
from typing import Any

import yaml

#: the largest front block read by default: front matter is a page's metadata, never a payload
MAX_FRONTMATTER_BYTES = 16 * 1024
#: the most YAML aliases a front block may use by default (a few can expand to gigabytes)
MAX_FRONTMATTER_ALIASES = 8


class FrontmatterError(ValueError):
    """A front block that cannot be read; the message names the reason."""


def _closing_line(lines: list[str], markers: tuple[str, ...]) -> int | None:
    return next((i for i, line in enumerate(lines[1:], start=1) if line.strip() in markers), None)


def _yaml(raw: str, max_aliases: int) -> Any:
    try:
        # counted on the event stream, before anything is built: a few aliases can expand to gigabytes
        aliases = sum(isinstance(event, yaml.AliasEvent) for event in yaml.parse(raw, Loader=yaml.SafeLoader))
        if aliases > max_aliases:
            msg = f"frontmatter uses {aliases} YAML aliases, over the cap of {max_aliases} (max_frontmatter_aliases)"
            raise FrontmatterError(msg)
        return yaml.safe_load(raw)
    except yaml.YAMLError as err:
        reason = str(err).replace("\n", " ")
        raise FrontmatterError(f"frontmatter is not valid YAML: {reason}") from err


def _toml(raw: str) -> Any:
    try:
        return tomllib.loads(raw)
    except tomllib.TOMLDecodeError as err:
        raise FrontmatterError(f"frontmatter is not valid TOML: {err}") from err


def _json_block(lines: list[str]) -> tuple[Any, int] | None:
    """A JSON object at the top of the file and the number of lines it spans, or None when it is not one."""
    text = "\n".join(lines)
    try:
        value, end = json.JSONDecoder().raw_decode(text)
    except ValueError:
        return None
    rest_of_line = text[end:].split("\n", 1)[0]
    if not isinstance(value, dict) or rest_of_line.strip():
        return None
    return value, text[:end].count("\n") + 1


def _string_keys(value: Any) -> Any:
    """
    The front matter with every mapping key a string: YAML allows `1:` or `2024-01-01:` as keys, metadata does not.

    :raises FrontmatterError: If two keys of one mapping become the same string (`1:` and `"1":`).
    """
    if isinstance(value, list):
        return [_string_keys(item) for item in value]
    if not isinstance(value, dict):
        return value
    keys: dict[str, Any] = {}
    for key, item in value.items():
        name = str(key)
        if name in keys:
            raise FrontmatterError(f"frontmatter has the key {name!r} twice (as {key!r} and another spelling)")
        keys[name] = _string_keys(item)
    return keys


def split_frontmatter(text: str, max_bytes: int, max_aliases: int) -> tuple[dict[str, Any], str, int]:
    """
    Split a document into its front matter and its body.

    :param text: The document, `\\n` line endings.
    :param max_bytes: Largest front block accepted.
    :param max_aliases: Most YAML aliases accepted.
    :returns: The metadata (keys as strings; `{}` without a front block), the body, and the number of lines before the
        body (0 without a front block).
    :raises FrontmatterError: If the block is not closed, over a cap, not valid or not a mapping.
    """
    lines = text.split("\n")
    # Zola reads a TOML block after blank lines (its theme pages start so); a `---` after them is a thematic break
    blank = next((i for i, line in enumerate(lines) if line.strip()), 0)
    start = blank if lines[blank].strip() == "+++" else 0
    first = lines[start].strip()
    if first in ("---", "+++"):
        end = _closing_line(lines[start:], ("---", "...") if first == "---" else ("+++",))
        if end is None and start:  # after blank lines, a `+++` that opens no block is the body's (MyST's break)
            return {}, text, 0
        if end is None:
            raise FrontmatterError(f"frontmatter starts with '{first}' but has no closing '{first}' line")
        raw = "\n".join(lines[start + 1 : start + end])
        if len(raw.encode("utf-8")) > max_bytes:
            raise FrontmatterError(f"frontmatter is over the {max_bytes}-byte cap (max_frontmatter_bytes)")
        try:
            front = _yaml(raw, max_aliases) if first == "---" else _toml(raw)
        except FrontmatterError:
            if start:  # after blank lines, text between two `+++` that is no TOML is the body's
                return {}, text, 0
            raise
        consumed = start + end + 1
    elif first == "{":
        block = _json_block(lines)
        if block is None:  # a body that starts with a brace, not a front block
            return {}, text, 0
        front, consumed = block
        if len("\n".join(lines[:consumed]).encode("utf-8")) > max_bytes:
            raise FrontmatterError(f"frontmatter is over the {max_bytes}-byte cap (max_frontmatter_bytes)")
    else:
        return {}, text, 0
    if front is None:
        front = {}
    if not isinstance(front, dict):
        raise FrontmatterError(f"frontmatter must be a mapping, got {type(front).__name__}")
    return _string_keys(front), "\n".join(lines[consumed:]), consumed


def day_of(value: Any) -> str:
    """
    A front matter date as `YYYY-MM-DD`: a YAML/TOML date or datetime, or an ISO 8601 string ('' for anything else).

    :param value: The field's value.
    :returns: The day, or ''.
    """
    if isinstance(value, datetime | date):
        return value.isoformat()[:10]
    if not isinstance(value, str):
        return ""
    text = value.strip().replace("Z", "+00:00")
    for parse in (datetime.fromisoformat, date.fromisoformat):
        try:
            return parse(text).isoformat()[:10]
        except ValueError:
            continue
    return ""
