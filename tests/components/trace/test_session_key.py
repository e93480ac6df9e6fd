from __future__ import annotations

import hashlib
import itertools

import pytest

from components.trace.session_key import normalize_principal, session_key


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class TestNormalizePrincipal:
    @pytest.mark.parametrize("principal", [None, ""])
    def test_no_principal_is_anonymous(self, principal):
        assert normalize_principal(principal) is None

    def test_a_principal_is_kept_exactly(self):
        assert normalize_principal("alice") == "alice"
        assert normalize_principal(" Alice ") == " Alice "  # an identity: nothing stripped or case-folded


class TestSessionKey:
    @pytest.mark.parametrize("principal", [None, ""])
    def test_an_anonymous_session_keeps_the_key_it_had_before_principals(self, principal):
        assert session_key("s1", principal) == _sha(b"s1")
        assert session_key("  s1\t", principal) == _sha(b"s1")
        assert session_key("s1") == session_key("s1", principal)

    def test_a_principals_session_is_its_own(self):
        alice, bob, anonymous = session_key("s1", "alice"), session_key("s1", "bob"), session_key("s1")
        assert len({alice, bob, anonymous}) == 3
        assert session_key(" s1 ", "alice") == alice  # the session id is normalized, as for anonymous callers

    def test_the_encoding_is_pinned(self):
        """Rows already recorded for a principal are matched by this digest: changing it loses their memory."""
        assert session_key("s1", "alice") == _sha(b"\xffalice\xffs1")

    @pytest.mark.parametrize("principal", [None, "", "alice"])
    def test_no_session_has_no_key(self, principal):
        assert session_key(None, principal) is None
        assert session_key("  ", principal) is None

    def test_no_choice_of_names_collides(self):
        names = ["", "a", "b", "ab", "a b", "a\x00", "a\xff", "\xff", "\xffa", "ÿ", "a:b", "1:a", "\udcff", "a\udcff"]
        keys: dict[str, tuple[str | None, str]] = {}
        for principal, session in itertools.product([None, *names], names):
            key = session_key(session, principal)
            if key is None:  # no session
                continue
            owner = normalize_principal(principal)
            pair = (owner, session.strip())
            assert keys.setdefault(key, pair) == pair, f"{pair} collides with {keys[key]}"
        # an anonymous id spelled like a principal's encoding is still another session
        assert session_key("\xffalice\xffs1") != session_key("s1", "alice")
        assert session_key("alice\xffs1") != session_key("s1", "alice")
