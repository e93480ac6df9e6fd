"""Files written whole or not at all: the knowledge index, the model caches."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO


def write_atomically(path: Path, write: Callable[[IO[bytes]], object]) -> None:
    """
    Write a file through a temporary one beside it, renamed into place once written.

    Readers find the previous file or the new one, never part of one, also while several processes write it at
    once; a write that fails leaves the previous file as it was and no temporary file behind.

    :param path: The file.
    :param write: Writes the content into the open binary file it is given.
    :raises OSError: If the folder cannot be created or written.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as out:
            write(out)
        os.replace(temporary, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
