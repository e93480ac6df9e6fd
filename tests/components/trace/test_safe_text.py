from __future__ import annotations

import pytest

from components.trace.safe_text import safe_json, safe_text


class TestSafeText:
    @pytest.mark.parametrize(
        ("value", "stored"),
        [
            ("disk full", "disk full"),
            ("磁盘满了 🚀", "磁盘满了 🚀"),
            ("\udcff\udcfe", "\\udcff\\udcfe"),
            ("a\x00b", "a\\x00b"),
            ("", ""),
        ],
    )
    def test_safe_text(self, value, stored):
        assert safe_text(value) == stored
        safe_text(value).encode("utf-8")  # always encodable

    def test_safe_json_walks_keys_lists_and_leaves_numbers(self):
        value = {"k\udcff": ["x\x00", 1, 2.5, None, True, {"n": "\udcfe"}], "t": ("a",)}
        assert safe_json(value) == {"k\\udcff": ["x\\x00", 1, 2.5, None, True, {"n": "\\udcfe"}], "t": ["a"]}
        assert value["k\udcff"][0] == "x\x00"  # not mutated
