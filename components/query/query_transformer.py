from __future__ import annotations

import re
import time
import unicodedata
from typing import Any

from haystack import component

from components.trace.session_key import normalize_session_id

_WHITESPACE = re.compile(r"\s+")


def _is_control(char: str) -> bool:
    return unicodedata.category(char) in ("Cc", "Cf", "Cs", "Co", "Cn") and char not in "\t\n\r "


@component
class QueryTransformer:
    """
    Normalizes the raw query of a lookup and records how, before anything else runs.

    Control and format characters are removed, whitespace is trimmed and collapsed, and the length is bounded.
    A query that is empty after normalization, or longer than `max_query_chars`, is rejected: the component does
    not raise, it outputs an empty `query` and an `error`, so the rest of the pipeline produces an empty result
    that is still assembled and recorded like any other lookup.

    ### Usage example

    ```python
    from components.query.query_transformer import QueryTransformer

    out = QueryTransformer().run(query="  disk   full\\x00 ")
    print(out["query"], out["query_transform"]["removed_control_chars"])  # "disk full" 1
    ```
    """

    def __init__(self, max_query_chars: int = 2000) -> None:
        """
        Create the transformer.

        :param max_query_chars: Longest accepted query after normalization.
        :raises ValueError: If `max_query_chars` is not positive.
        """
        if max_query_chars < 1:
            msg = f"max_query_chars={max_query_chars!r} must be positive; use e.g. 2000"
            raise ValueError(msg)
        self.max_query_chars = max_query_chars

    @component.output_types(query=str, session_id=str, query_transform=dict[str, Any], error=str)
    def run(self, query: str, session_id: str | None = None) -> dict[str, Any]:
        """
        Normalize a query.

        :param query: The raw query text.
        :param session_id: The caller's session, passed on normalized (surrounding whitespace removed; empty string
            when absent).
        :returns: `query` (normalized, or empty when rejected), `session_id`, `query_transform` (the trace), and
            `error` (empty string, or the reason the query was rejected).
        """
        started = time.time()
        raw = query if isinstance(query, str) else ""
        kept = "".join(ch for ch in raw if not _is_control(ch))
        normalized = _WHITESPACE.sub(" ", kept).strip()
        error = ""
        if not isinstance(query, str):
            error = f"query must be a string, got {type(query).__name__}"
        elif not normalized:
            error = "query is empty" + (" after removing control characters" if raw.strip() else "")
        elif len(normalized) > self.max_query_chars:
            error = f"query is {len(normalized)} characters long; the limit is {self.max_query_chars}"
        trace = {
            "original_chars": len(raw),
            "normalized_query": normalized[:200] if not error else "",
            "normalized_chars": len(normalized),
            "removed_control_chars": len(raw) - len(kept),
            "collapsed_whitespace": kept != normalized,
            "max_query_chars": self.max_query_chars,
            "error": error or None,
            "started_at": started,
        }
        return {
            "query": "" if error else normalized,
            # trimmed, never cut: sessions that differ after any length are different sessions (the trace keeps a
            # digest of the whole id, `components.trace.session_key`)
            "session_id": normalize_session_id(session_id),
            "query_transform": trace,
            "error": error,
        }
