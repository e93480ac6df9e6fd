"""The session key: one normalized session id, and the digest every trace reader and writer matches it by.

A session id is normalized once (`normalize_session_id`: surrounding whitespace removed, nothing cut) and the trace
stores a digest of the whole normalized id (`session_key`) beside a readable `session_id` cut to
`STORED_SESSION_CHARS`. Session memory and `trace list --session` match the digest, so two sessions that differ
only after the stored characters never share memory, and an id of any length fits an indexed column on every
database (a PostgreSQL b-tree entry must stay under 2,704 bytes).
"""

from __future__ import annotations

import hashlib
from typing import Any

#: how much of a session id the readable `session_id` column keeps (the key covers the whole id)
STORED_SESSION_CHARS = 200


def normalize_session_id(session_id: Any) -> str:
    """
    Return the session id every component uses: surrounding whitespace removed, nothing else changed.

    :param session_id: The caller's session (None, a string, or anything with a string form).
    :returns: The normalized id; empty means no session.
    """
    if session_id is None:
        return ""
    text = session_id if isinstance(session_id, str) else str(session_id)
    return text.strip()


def session_key(session_id: Any) -> str | None:
    """
    Return the digest a session is matched by.

    Lone surrogates (undecodable bytes in `argv`) are hashed as they are, so a session named by them is never the
    session named by their escaped spelling.

    :param session_id: The caller's session, raw or normalized.
    :returns: The SHA-256 hex digest of the normalized id, or None when there is no session.
    """
    normalized = normalize_session_id(session_id)
    if not normalized:
        return None
    return hashlib.sha256(normalized.encode("utf-8", "surrogatepass")).hexdigest()


def stored_session_id(session_id: Any) -> str | None:
    """
    Return the readable form of a session id kept in the `session_id` column.

    :param session_id: The caller's session.
    :returns: The normalized id cut to `STORED_SESSION_CHARS`, or None when there is no session.
    """
    return normalize_session_id(session_id)[:STORED_SESSION_CHARS] or None
