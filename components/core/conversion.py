"""What the knowledge converters share: one file at a time, a file that cannot be converted reported, never fatal."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from haystack import Document, logging
from haystack.dataclasses import ByteStream

logger = logging.getLogger(__name__)

Source = str | Path | ByteStream


def source_name(source: Source) -> str:
    """
    The name a file is reported under: the source a router's stream carries (as the indexer knows the file), else
    its file name.

    :param source: A path or a `ByteStream`.
    :returns: The name; `<bytes>` for bytes from nowhere.
    """
    if isinstance(source, ByteStream):
        return str(source.meta.get("source") or source.meta.get("file_path") or "<bytes>")
    return Path(source).name


def convert_each(
    sources: list[Source],
    metas: list[dict[str, Any]],
    convert: Callable[[Source, dict[str, Any]], Document],
    errors: tuple[type[Exception], ...] = (OSError, ValueError),
) -> tuple[list[Document], list[dict[str, str]]]:
    """
    Convert files one by one; a file whose conversion raises one of `errors` is reported and the others go on.

    :param sources: The files.
    :param metas: One metadata dict per file (its `source` names it in a failure).
    :param convert: Turns one file and its metadata into a Document.
    :param errors: The exceptions that mean "this file cannot be converted".
    :returns: The Documents, and `{"source", "reason"}` per file that could not be converted.
    """
    documents: list[Document] = []
    failures: list[dict[str, str]] = []
    for source, meta in zip(sources, metas, strict=True):
        try:
            documents.append(convert(source, meta))
        except errors as err:
            name = str(meta.get("source") or source_name(source))
            reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
            logger.warning("Skipping {source}: {reason}", source=name, reason=reason)
            failures.append({"source": name, "reason": reason})
    return documents, failures
