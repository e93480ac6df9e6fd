from __future__ import annotations

import stat

import pytest

from pipelines.access import ANONYMOUS, LOCAL_OPERATOR, PRINCIPALS_ENV, Principal, Principals, token_hash


class TestPrincipals:
    def test_a_token_is_shown_once_and_kept_as_its_hash(self, tmp_path):
        path = tmp_path / "principals.yaml"
        registry = Principals(path)
        token = registry.add("alice", ["Finance", "finance", "hr"])
        text = path.read_text(encoding="utf-8")
        assert token not in text and token_hash(token) in text
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        again = Principals.load(path)
        assert again.by_token(token) == Principal(name="alice", groups=("finance", "hr"))
        assert again.by_token(token + "x") is None and again.by_token("") is None
        second = again.add("alice", ["ops"], operator=True)  # another token, more groups
        assert Principals.load(path).by_token(token) == Principals.load(path).by_token(second)
        assert Principals.load(path).get("alice") == Principal(
            name="alice", groups=("finance", "hr", "ops"), operator=True
        )
        assert Principals.load(path).describe() == [
            {"name": "alice", "groups": ["finance", "hr", "ops"], "operator": True, "tokens": 2}
        ]

    def test_remove_and_unknown_names(self, tmp_path):
        registry = Principals(tmp_path / "p.yaml")
        token = registry.add("bob", [])
        registry.remove("bob")
        assert Principals.load(registry.path).by_token(token) is None
        with pytest.raises(ValueError, match=r"no principal 'bob' in .*principal add"):
            Principals.load(registry.path).get("bob")
        for name in ("", "a b", "x" * 65, "../etc"):
            with pytest.raises(ValueError, match="principal name"):
                registry.add(name, ["g"])
        with pytest.raises(ValueError, match="name no group"):
            registry.add("carol", [" , "])

    @pytest.mark.parametrize(
        ("text", "match"),
        [
            ("principals: [1, 2]", "is not valid"),
            ("principals:\n  alice: {groups: [a], tokens: [plain-token]}", "not a sha256 hash"),
            ("principals:\n  alice: {groups: [a], password: x}", "is not valid"),
            ("principals: {'a b': {}}", "principal name"),
            ("{{{", "is not valid"),
        ],
    )
    def test_a_damaged_file_is_refused_with_the_reason(self, tmp_path, text, match):
        path = tmp_path / "principals.yaml"
        path.write_text(text, encoding="utf-8")
        with pytest.raises(ValueError, match=match):
            Principals.load(path)
        assert path.read_text(encoding="utf-8") == text  # nothing lost

    def test_missing_file_is_no_principals_and_the_path_follows_the_environment(self, tmp_path, monkeypatch):
        assert not Principals.load(tmp_path / "none.yaml")
        monkeypatch.delenv(PRINCIPALS_ENV, raising=False)
        assert Principals.default_path(tmp_path) == tmp_path / "principals.yaml"
        monkeypatch.setenv(PRINCIPALS_ENV, str(tmp_path / "elsewhere.yaml"))
        assert Principals.default_path(tmp_path) == tmp_path / "elsewhere.yaml"

    def test_anonymous_reads_public_pages_and_the_local_operator_every_page(self):
        assert (ANONYMOUS.name, ANONYMOUS.groups, ANONYMOUS.operator, ANONYMOUS.label) == (None, (), False, "anonymous")
        assert LOCAL_OPERATOR.groups == ("*",) and LOCAL_OPERATOR.operator
