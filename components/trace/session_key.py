"""The session key: one normalized session id, and the digest every trace reader and writer matches it by.

A session id is normalized once (`normalize_session_id`: surrounding whitespace removed, nothing cut) and the trace
stores a digest of the whole normalized id (`session_key`) beside a readable `session_id` cut to
`STORED_SESSION_CHARS`. Session memory and `trace list --session` match the digest, so two sessions that differ
only after the stored characters never share memory, and an id of any length fits an indexed column on every
database (a PostgreSQL b-tree entry must stay under 2,704 bytes).

A session belongs to its caller's principal (`normalize_principal`): alice's session "s1" and bob's session "s1" are
two sessions, with two keys, and never share memory. An anonymous caller (no principal) keeps the key sessions had
before principals existed, so rows recorded earlier keep matching.
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


def normalize_principal(principal: Any) -> str | None:
    """
    Return the principal a trace row and a session belong to.

    A principal is an identity, compared exactly as given (nothing stripped or case-folded: that is the business of
    whoever authenticated the caller); None and the empty string both mean an anonymous caller.

    :param principal: The caller's principal name (None, a string, or anything with a string form).
    :returns: The principal, or None for an anonymous caller.
    """
    if principal is None:
        return None
    text = principal if isinstance(principal, str) else str(principal)
    return text or None


#: separates the parts of a principal's session key; a byte that never occurs in UTF-8 (nor in the
#: `surrogatepass` encoding of a lone surrogate), so the encoding below cannot be forged by any name
_SEPARATOR = b"\xff"


def session_key(session_id: Any, principal: str | None = None) -> str | None:
    """
    Return the digest a session is matched by.

    An anonymous session's digest is that of its normalized id alone, as before principals existed. A principal's
    session is the digest of `0xFF principal 0xFF session`: 0xFF never occurs in UTF-8, so the first byte tells
    every principal's session from every anonymous one (whose bytes never hold it), and the second 0xFF is the only
    one after it, which splits the pair in exactly one way. No choice of names makes two (principal, session) pairs,
    or a pair and an anonymous session, hash the same bytes.

    Lone surrogates (undecodable bytes in `argv`) are hashed as they are, so a session named by them is never the
    session named by their escaped spelling.

    :param session_id: The caller's session, raw or normalized.
    :param principal: The caller's principal (`normalize_principal`); None or empty for an anonymous caller.
    :returns: The SHA-256 hex digest, or None when there is no session.
    """
    normalized = normalize_session_id(session_id)
    if not normalized:
        return None
    session = normalized.encode("utf-8", "surrogatepass")
    owner = normalize_principal(principal)
    if owner is None:
        return hashlib.sha256(session).hexdigest()
    scoped = _SEPARATOR + owner.encode("utf-8", "surrogatepass") + _SEPARATOR + session
    return hashlib.sha256(scoped).hexdigest()


def stored_session_id(session_id: Any) -> str | None:
    """
    Return the readable form of a session id kept in the `session_id` column.

    :param session_id: The caller's session.
    :returns: The normalized id cut to `STORED_SESSION_CHARS`, or None when there is no session.
    """
    return normalize_session_id(session_id)[:STORED_SESSION_CHARS] or None
