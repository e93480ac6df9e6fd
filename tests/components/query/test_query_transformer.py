from __future__ import annotations

import pytest
from haystack.core.serialization import component_from_dict, component_to_dict

from components.query.query_transformer import QueryTransformer


class TestQueryTransformer:
    def test_init_defaults(self):
        transformer = QueryTransformer()
        assert transformer.max_query_chars == 2000
        assert QueryTransformer(max_query_chars=1).max_query_chars == 1

    @pytest.mark.parametrize("value", [0, -5])
    def test_invalid_init(self, value):
        with pytest.raises(ValueError, match=rf"max_query_chars={value}\b"):
            QueryTransformer(max_query_chars=value)

    def test_to_dict_from_dict(self):
        data = component_to_dict(QueryTransformer(max_query_chars=123), "transformer")
        assert data["init_parameters"] == {"max_query_chars": 123}
        restored = component_from_dict(QueryTransformer, data, "transformer")
        assert isinstance(restored, QueryTransformer)
        assert restored.max_query_chars == 123
        assert restored.run(query="x" * 124)["error"] != ""

    def test_trims_and_collapses_whitespace(self):
        out = QueryTransformer().run(query="  disk \t\n  full   alert ")
        assert out["query"] == "disk full alert"
        assert out["error"] == ""
        trace = out["query_transform"]
        assert trace["collapsed_whitespace"] is True
        assert trace["removed_control_chars"] == 0
        assert trace["normalized_query"] == "disk full alert"
        assert trace["normalized_chars"] == len("disk full alert")
        assert trace["original_chars"] == len("  disk \t\n  full   alert ")
        assert trace["error"] is None
        assert trace["max_query_chars"] == 2000

    def test_clean_query_is_unchanged(self):
        out = QueryTransformer().run(query="disk full")
        assert out["query"] == "disk full"
        assert out["query_transform"]["collapsed_whitespace"] is False
        assert out["query_transform"]["removed_control_chars"] == 0

    def test_removes_control_and_format_characters_and_counts_them(self):
        out = QueryTransformer().run(query="  disk\x00 \x1b full\u200b\x7f ")
        assert out["query"] == "disk full"
        assert out["error"] == ""
        assert out["query_transform"]["removed_control_chars"] == 4

    def test_docstring_example(self):
        out = QueryTransformer().run(query="  disk   full\x00 ")
        assert out["query"] == "disk full"
        assert out["query_transform"]["removed_control_chars"] == 1

    @pytest.mark.parametrize("query", ["", "   ", "\t\n \r "])
    def test_empty_or_whitespace_only_is_rejected(self, query):
        out = QueryTransformer().run(query=query)
        assert out["query"] == ""
        assert out["error"] == "query is empty"
        assert out["query_transform"]["error"] == "query is empty"
        assert out["query_transform"]["normalized_query"] == ""

    def test_only_control_characters_is_rejected_with_reason(self):
        out = QueryTransformer().run(query="\x00\x1b\u200b")
        assert out["query"] == ""
        assert out["error"].startswith("query is empty")
        assert "control characters" in out["error"]
        assert out["query_transform"]["removed_control_chars"] == 3

    def test_huge_query_is_rejected_without_raising(self):
        huge = "a" * 1_000_000
        out = QueryTransformer().run(query=huge)
        assert out["query"] == ""
        assert "1000000" in out["error"]
        assert "2000" in out["error"]
        assert out["query_transform"]["normalized_query"] == ""
        assert out["query_transform"]["original_chars"] == 1_000_000

    def test_limit_applies_after_normalization(self):
        transformer = QueryTransformer(max_query_chars=9)
        assert transformer.run(query="  disk    full  ")["query"] == "disk full"
        out = transformer.run(query="disk fulls")
        assert out["query"] == ""
        assert "10" in out["error"] and "9" in out["error"]

    @pytest.mark.parametrize("query", [None, 42, b"disk full", ["disk"]])
    def test_non_string_query_gives_error(self, query):
        out = QueryTransformer().run(query=query)
        assert out["query"] == ""
        assert "must be a string" in out["error"]
        assert type(query).__name__ in out["error"]

    def test_session_id_passed_through_and_trimmed(self):
        transformer = QueryTransformer()
        assert transformer.run(query="disk", session_id="  s-1 ")["session_id"] == "s-1"
        assert transformer.run(query="disk")["session_id"] == ""
        assert transformer.run(query="disk", session_id=None)["session_id"] == ""
        assert transformer.run(query="", session_id="s-2")["session_id"] == "s-2"

    def test_chinese_text_kept_intact(self):
        out = QueryTransformer().run(query="  服务器磁盘满了，怎么办？ ")
        assert out["query"] == "服务器磁盘满了，怎么办？"
        assert out["error"] == ""
        assert out["query_transform"]["removed_control_chars"] == 0
