"""The `cursor` of a lookup whose evidence did not all fit: what the next page asks, and what it must not repeat.

A cursor is opaque to the agent and stateless here: the query, the caller's filters, and the evidence keys already
delivered, compressed into URL-safe text. Calling `lookup_knowledge` with it runs the same lookup and holds those keys
back, so each page brings the next blocks and never one of an earlier page.
"""

from __future__ import annotations

import base64
import binascii
import json
import zlib
from dataclasses import dataclass, field
from typing import Any

__all__ = ["CURSOR_PREFIX", "MAX_CURSOR_CHARS", "Cursor"]

CURSOR_PREFIX = "c1."
#: the longest cursor read back (a 2,000-character query and some hundred keys fit many times over)
MAX_CURSOR_CHARS = 100_000


@dataclass(frozen=True)
class Cursor:
    """The next page of one lookup."""

    query: str
    filters: dict[str, Any] = field(default_factory=dict)
    delivered: tuple[str, ...] = ()

    def encode(self) -> str:
        """
        :returns: The cursor text (`c1.` and URL-safe base64 of the compressed JSON).
        """
        body = json.dumps({"q": self.query, "f": self.filters, "x": list(self.delivered)}, ensure_ascii=False)
        packed = zlib.compress(body.encode("utf-8", "surrogatepass"), 9)
        return CURSOR_PREFIX + base64.urlsafe_b64encode(packed).decode("ascii").rstrip("=")

    @classmethod
    def decode(cls, text: Any) -> Cursor:
        """
        Read a cursor back.

        :param text: A result's `cursor`.
        :returns: The cursor.
        :raises ValueError: If the text is not a cursor this service wrote.
        """
        fix = "pass a result's `cursor` unchanged, or call lookup_knowledge without one"
        if not isinstance(text, str) or not text.startswith(CURSOR_PREFIX) or len(text) > MAX_CURSOR_CHARS:
            msg = f"cursor is not one this service returned: {fix}"
            raise ValueError(msg)
        payload = text[len(CURSOR_PREFIX) :]
        try:
            packed = base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))
            data = json.loads(
                zlib.decompressobj().decompress(packed, MAX_CURSOR_CHARS * 4).decode("utf-8", "surrogatepass")
            )
        except (binascii.Error, zlib.error, UnicodeDecodeError, ValueError) as err:
            msg = f"cursor is damaged ({type(err).__name__}): {fix}"
            raise ValueError(msg) from None
        query, filters, delivered = (data.get(k) for k in ("q", "f", "x")) if isinstance(data, dict) else (None,) * 3
        if not isinstance(query, str) or not isinstance(filters, dict) or not isinstance(delivered, list):
            msg = f"cursor is damaged (not a lookup's page): {fix}"
            raise ValueError(msg)
        return cls(query, filters, tuple(str(key) for key in delivered))
