from __future__ import annotations

import base64
import zlib

import pytest

from components.core.cursor import CURSOR_PREFIX, MAX_CURSOR_CHARS, Cursor


class TestCursor:
    def test_a_cursor_reads_back_as_written(self):
        page = Cursor("磁盘满了怎么办 \ud800", {"category": ["alerts"]}, ("alerts/disk.md#1", "alerts/disk.md#4"))
        text = page.encode()
        assert text.startswith(CURSOR_PREFIX) and text.isascii() and "=" not in text
        assert Cursor.decode(text) == page

    def test_it_stays_short_for_a_few_pages(self):
        keys = tuple(f"runbooks/section-{i}.md#{i}" for i in range(30))
        assert len(Cursor("how do I rotate the logs", {}, keys).encode()) < 400

    @pytest.mark.parametrize(
        "text",
        [
            None,
            12,
            "",
            "c2.abc",
            "c1.!!!",
            "c1." + base64.urlsafe_b64encode(b"not zlib").decode(),
            "c1." + base64.urlsafe_b64encode(zlib.compress(b"[1, 2]")).decode(),
            "c1." + base64.urlsafe_b64encode(zlib.compress(b'{"q": 1, "f": {}, "x": []}')).decode(),
            "c1." + "A" * MAX_CURSOR_CHARS,
        ],
    )
    def test_anything_else_is_refused(self, text):
        with pytest.raises(ValueError, match="cursor"):
            Cursor.decode(text)

    def test_a_compression_bomb_is_refused(self):
        bomb = CURSOR_PREFIX + base64.urlsafe_b64encode(zlib.compress(b" " * 50_000_000)).decode()
        assert len(bomb) < MAX_CURSOR_CHARS
        with pytest.raises(ValueError, match="cursor is damaged"):
            Cursor.decode(bomb)
