from __future__ import annotations

from datetime import UTC, datetime

import pytest

from components.trace.trace_store import ToolInvocation
from pipelines.entrypoints.trace_browser import parse_time, row_line, row_report, terminal_safe


def _row(**fields) -> ToolInvocation:
    base = {
        "id": 7,
        "tool_name": "lookup_knowledge",
        "query": "disk full",
        "found": True,
        "status": "evidence",
        "retrieval_layer": "L1",
    }
    return ToolInvocation(**{**base, **fields})


class TestTraceBrowser:
    @pytest.mark.parametrize(
        ("text", "shown"),
        [
            ("\x1b[31mred\x1b[0m", "\\x1b[31mred\\x1b[0m"),
            ("abc\u202edef", "abc\\u202edef"),
            ("s\udcff", "s\\udcff"),
            ("磁盘满了 ok", "磁盘满了 ok"),
            (None, "-"),
        ],
    )
    def test_terminal_safe_escapes_what_a_terminal_would_act_on(self, text, shown):
        assert terminal_safe(text) == shown

    def test_parse_time(self):
        assert parse_time("2026-12-01") == datetime(2026, 12, 1, tzinfo=UTC)
        assert parse_time("2026-12-01T10:00+01:00").utcoffset().total_seconds() == 3600
        with pytest.raises(ValueError, match="ISO 8601"):
            parse_time("yesterday")

    def test_list_line_and_report_escape_session_and_query(self):
        row = _row(session_id="\x1b]0;pwned\x07", query="q\x1b[2J", error="bad\x1b")
        assert "\x1b" not in row_line(row) and "\\x1b]0;pwned\\x07" in row_line(row)
        report = row_report(row)
        assert "\x1b" not in report and "\x07" not in report
        assert "session: \\x1b]0;pwned\\x07" in report and "error: bad\\x1b" in report

    def test_report_of_a_row_without_details(self):
        report = row_report(_row(retrieval_details={}))
        assert report.startswith("tool_invocation 7")
        assert "\nL1 attempts\n  -" in report
