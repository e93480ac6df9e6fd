"""Who is calling: principals with groups, the bearer tokens that name them, and the file the operator keeps them in.

A deployment's principals live in one YAML file the operator owns (`principals.yaml` in the data folder, or
`--principals` / `LOOKUP_KNOWLEDGE_PRINCIPALS`), never in `pipelines.yaml`. Each principal has groups (a page whose
front matter `access` names one of them is readable to it; `*` reads every page), may be an operator (who sees every
principal's trace rows), and has bearer tokens, stored as SHA-256 hashes: `lookup-knowledge principal add` prints a new
token once and keeps only its hash. A served call that names no principal is `ANONYMOUS`: public pages only.

```yaml
principals:
  alice:
    groups: [finance]
    tokens: [sha256:5e8f...]
  ops:
    groups: ["*"]
    operator: true
    tokens: [sha256:9a1c...]
```
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from components.core.access import ALL_GROUPS, access_groups
from components.core.atomic_file import write_atomically
from components.core.environment import PRINCIPALS

__all__ = [
    "ANONYMOUS",
    "LOCAL_OPERATOR",
    "PRINCIPALS_ENV",
    "PRINCIPALS_FILE",
    "Principal",
    "Principals",
    "token_hash",
]

#: the principals file's name in a data folder
PRINCIPALS_FILE = "principals.yaml"
#: the environment variable naming another principals file
PRINCIPALS_ENV = PRINCIPALS.name
_NAME = re.compile(r"[A-Za-z0-9_.@-]{1,64}")
_HASH_PREFIX = "sha256:"
#: bytes of randomness in a token `add` makes (43 URL-safe characters)
TOKEN_BYTES = 32


class Principal(BaseModel):
    """A caller: its name (None: anonymous), its access groups, and whether it is an operator."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str | None = None
    groups: tuple[str, ...] = ()
    operator: bool = False

    @property
    def label(self) -> str:
        """The name as logs and messages show it (`anonymous` without one)."""
        return self.name or "anonymous"


#: a call without identity: public pages only, its own trace rows only (it has none to see)
ANONYMOUS = Principal()
#: the command line run by whoever holds the data folder: every page, every trace row
LOCAL_OPERATOR = Principal(name="local", groups=(ALL_GROUPS,), operator=True)


def token_hash(token: str) -> str:
    """
    The stored form of a bearer token.

    :param token: The token as a client sends it.
    :returns: `sha256:<hex digest>`. Tokens are random (`secrets`), so a plain digest suffices (no password hashing).
    """
    return _HASH_PREFIX + hashlib.sha256(token.encode("utf-8")).hexdigest()


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    groups: list[str] = Field(default_factory=list)
    operator: bool = False
    tokens: list[str] = Field(default_factory=list)


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid")

    principals: dict[str, _Entry] = Field(default_factory=dict)


def _check_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        msg = f"principal name {name!r} must be 1 to 64 letters, digits, '_', '.', '@' or '-' (e.g. alice)"
        raise ValueError(msg)
    return name


class Principals:
    """
    The principals of a deployment, read from the operator's file, and the tokens that name them.

    ### Usage example

    ```python
    from pipelines.access import Principals

    principals = Principals.load("data/principals.yaml")
    caller = principals.by_token("the token a request sent")  # None: no principal has it
    ```
    """

    def __init__(self, path: Path, entries: Mapping[str, _Entry] | None = None) -> None:
        """
        :param path: The file (it need not exist: `add` writes it).
        :param entries: The principals by name.
        """
        self.path = path
        self._entries: dict[str, _Entry] = dict(entries or {})
        self._by_hash = {h: name for name, e in self._entries.items() for h in e.tokens}

    @staticmethod
    def default_path(data_dir: str | Path) -> Path:
        """
        :param data_dir: The data folder.
        :returns: `LOOKUP_KNOWLEDGE_PRINCIPALS` when set, else `principals.yaml` in the data folder.
        """
        configured = PRINCIPALS.read()
        return Path(configured) if configured else Path(data_dir) / PRINCIPALS_FILE

    @classmethod
    def load(cls, path: str | Path) -> Principals:
        """
        Read the principals file (a missing file: no principals).

        :param path: The file.
        :returns: The principals.
        :raises ValueError: If the file is not a principals file (the reason names the entry), or a token is stored
            in the clear.
        """
        path = Path(path)
        if not path.exists():
            return cls(path)
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
            parsed = _File.model_validate(data)
        except (yaml.YAMLError, ValidationError) as err:
            msg = f"principals file {path} is not valid ({' '.join(str(err).split())[:300]}); see docs/operations.md"
            raise ValueError(msg) from None
        for name, entry in parsed.principals.items():
            _check_name(name)
            if any(not t.startswith(_HASH_PREFIX) or len(t) != len(_HASH_PREFIX) + 64 for t in entry.tokens):
                msg = (
                    f"principals file {path}: {name} has a token that is not a sha256 hash; tokens are stored hashed "
                    "(`lookup-knowledge principal add` writes them)"
                )
                raise ValueError(msg)
        return cls(path, parsed.principals)

    def __bool__(self) -> bool:
        return bool(self._entries)

    def names(self) -> list[str]:
        """
        :returns: The principals' names, sorted.
        """
        return sorted(self._entries)

    def get(self, name: str) -> Principal:
        """
        The principal of a name (`--as NAME`).

        :param name: Its name.
        :returns: The principal.
        :raises ValueError: If there is no principal of that name (the message names the file and those there are).
        """
        entry = self._entries.get(name)
        if entry is None:
            there = ", ".join(self.names()) or "none"
            msg = f"no principal {name!r} in {self.path} (there: {there}); `lookup-knowledge principal add` adds one"
            raise ValueError(msg)
        return Principal(name=name, groups=tuple(access_groups(entry.groups)), operator=entry.operator)

    def by_token(self, token: str) -> Principal | None:
        """
        The principal a bearer token names.

        :param token: The token a request sent.
        :returns: The principal, or None when no principal has the token.
        """
        digest = token_hash(token)
        for stored, name in self._by_hash.items():
            if hmac.compare_digest(stored, digest):
                return self.get(name)
        return None

    def add(self, name: str, groups: list[str], operator: bool = False) -> str:
        """
        Add a principal (or a token, and new groups, to one), write the file, and return the new token.

        :param name: Its name.
        :param groups: Its access groups (`*`: every page).
        :param operator: Whether it sees every principal's trace rows.
        :returns: The new token: shown once, stored only as its hash.
        :raises ValueError: For a name or groups that are none.
        """
        _check_name(name)
        wanted = access_groups(groups)
        if groups and not wanted:
            msg = f"groups {groups!r} name no group; give e.g. --group finance"
            raise ValueError(msg)
        token = secrets.token_urlsafe(TOKEN_BYTES)
        entry = self._entries.get(name) or _Entry()
        entry.groups = list(dict.fromkeys([*entry.groups, *wanted]))
        entry.operator = entry.operator or operator
        entry.tokens = [*entry.tokens, token_hash(token)]
        self._entries[name] = entry
        self._by_hash[token_hash(token)] = name
        self._save()
        return token

    def remove(self, name: str) -> None:
        """
        Remove a principal and its tokens, and write the file.

        :param name: Its name.
        :raises ValueError: If there is no principal of that name.
        """
        self.get(name)
        del self._entries[name]
        self._by_hash = {h: n for h, n in self._by_hash.items() if n != name}
        self._save()

    def describe(self) -> list[dict[str, Any]]:
        """
        :returns: Each principal's name, groups, operator flag and number of tokens (never a token or its hash).
        """
        return [
            {"name": n, "groups": e.groups, "operator": e.operator, "tokens": len(e.tokens)}
            for n, e in sorted(self._entries.items())
        ]

    def _save(self) -> None:
        body = {"principals": {n: e.model_dump() for n, e in sorted(self._entries.items())}}
        text = "# principals of this deployment (lookup-knowledge principal add); tokens are SHA-256 hashes\n"
        text += yaml.safe_dump(body, sort_keys=False, allow_unicode=True)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(self.path, lambda out: out.write(text.encode("utf-8")))
        self.path.chmod(0o600)  # the operator's file: hashes only, but nobody else needs to read them
