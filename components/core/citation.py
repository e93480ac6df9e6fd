"""Chunk ids and citations: how a chunk is named in the store, and how an agent names it back.

A chunk's primary key is derived from its document's source, its position and the document's version, so the
indexing run, the filters (a document's chunks, without asking the store) and `read_evidence` compute the same ids.
A citation is the readable form an agent keeps: `source#chunk_index@version`, the version cut to `VERSION_CHARS`.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

__all__ = ["VERSION_CHARS", "Citation", "chunk_id", "chunk_ids"]

#: characters of the document version a citation carries: enough to tell two versions of one file apart
VERSION_CHARS = 12

_CITATION = re.compile(r"^(?P<source>.+)#(?P<index>\d{1,9})@(?P<version>[0-9A-Za-z]{1,64})$", re.DOTALL)


def chunk_id(source: str, chunk_index: int, doc_version: str) -> str:
    """
    Return the primary key of a chunk: derived from its source, its index and the version of its file.

    Including the version lets a re-index write the new chunks beside the old ones and switch over atomically.

    :param source: The document's path relative to the knowledge root.
    :param chunk_index: The chunk's position in the document.
    :param doc_version: The version (content hash) of the document's file.
    :returns: 32 hex characters.
    """
    return hashlib.sha256(f"{source}\x00{chunk_index}\x00{doc_version}".encode()).hexdigest()[:32]


def chunk_ids(source: str, doc_version: str, chunks: int) -> list[str]:
    """
    :param source: The document's source.
    :param doc_version: Its indexed version.
    :param chunks: How many chunks that version has.
    :returns: The primary keys of all its chunks, in order.
    """
    return [chunk_id(source, index, doc_version) for index in range(chunks)]


@dataclass(frozen=True)
class Citation:
    """A chunk as an agent cites it: its document's source, its position, and the document version it was read in."""

    source: str
    chunk_index: int
    version: str

    @classmethod
    def of(cls, source: str, chunk_index: int, doc_version: str) -> Citation:
        """
        :param source: The document's source.
        :param chunk_index: The chunk's position.
        :param doc_version: The document's full version.
        :returns: The citation (the version cut to `VERSION_CHARS`).
        """
        return cls(source, int(chunk_index), str(doc_version)[:VERSION_CHARS])

    @classmethod
    def parse(cls, text: str) -> Citation:
        """
        Read a citation back.

        :param text: `source#chunk_index@version`, as a result's `citation`.
        :returns: The citation.
        :raises ValueError: If the text is not one, naming the expected form.
        """
        found = _CITATION.match(text.strip()) if isinstance(text, str) else None
        if found is None:
            shown = text[:120] if isinstance(text, str) else type(text).__name__
            msg = (
                f"citation {shown!r} is not one: pass a block's `citation` as returned, "
                "`<source>#<chunk index>@<version>` (e.g. `alerts/disk.md#2@3f5a9c1e0b7d`)"
            )
            raise ValueError(msg)
        return cls(found["source"], int(found["index"]), found["version"])

    def matches(self, doc_version: str) -> bool:
        """
        :param doc_version: A document's full version.
        :returns: Whether this citation was read in that version.
        """
        return str(doc_version).startswith(self.version)

    def __str__(self) -> str:
        return f"{self.source}#{self.chunk_index}@{self.version}"
