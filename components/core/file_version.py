"""The version of a knowledge file: a short hash of its bytes (what a chunk id carries, and what `index` compares)."""

from __future__ import annotations

import hashlib
from pathlib import Path

#: read this much of a file at a time when hashing it
_BLOCK = 1 << 20


def file_version(data: bytes) -> str:
    """
    Return the version of a knowledge file's content.

    :param data: The raw file content.
    :returns: 16 hex characters (the start of its SHA-256).
    """
    return hashlib.sha256(data).hexdigest()[:16]


def file_version_of(path: str | Path) -> str:
    """
    Return the version of a file, read a block at a time (a large PDF is hashed, never held in memory).

    :param path: The file.
    :returns: The same as `file_version(path.read_bytes())`.
    :raises OSError: If the file cannot be read.
    """
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        while block := handle.read(_BLOCK):
            digest.update(block)
    return digest.hexdigest()[:16]
