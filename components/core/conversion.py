"""What the knowledge converters share: one file at a time, a file that cannot be converted reported, never fatal."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from haystack import Document, logging
from haystack.components.converters.utils import get_bytestream_from_source
from haystack.dataclasses import ByteStream

logger = logging.getLogger(__name__)

Source = str | Path | ByteStream

#: how deep included files may include others
MAX_INCLUDE_DEPTH = 3
#: the language of an included source file's code block, by its suffix (others: none)
CODE_LANGUAGES = {
    ".py": "python",
    ".js": "javascript",
    ".ts": "typescript",
    ".sh": "bash",
    ".json": "json",
    ".yaml": "yaml",
    ".yml": "yaml",
    ".go": "go",
    ".toml": "toml",
    ".rs": "rust",
    ".c": "c",
    ".cpp": "cpp",
    ".ini": "ini",
    ".cfg": "ini",
    ".html": "html",
    ".css": "css",
    ".sql": "sql",
}


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


def check_max_file_bytes(max_file_bytes: int) -> None:
    """
    Refuse a file cap that lets no file through.

    :param max_file_bytes: A converter's `max_file_bytes`.
    :raises ValueError: If it is not positive.
    """
    if max_file_bytes < 1:
        msg = f"max_file_bytes={max_file_bytes!r} must be a positive number of bytes"
        raise ValueError(msg)


def read_capped(source: Source, max_file_bytes: int) -> ByteStream:
    """
    A file's bytes, as long as it is no larger than the cap.

    :param source: A path or a `ByteStream`.
    :param max_file_bytes: The largest file read.
    :returns: The file as a `ByteStream` (its meta kept).
    :raises ValueError: If the file is over the cap.
    :raises OSError: If the file cannot be read.
    """
    stream = get_bytestream_from_source(source)
    if len(stream.data) > max_file_bytes:
        msg = f"{len(stream.data)} bytes, over the {max_file_bytes}-byte cap (max_file_bytes)"
        raise ValueError(msg)
    return stream


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


def small_text(path: Path, max_file_bytes: int) -> str | None:
    """
    A file's text when it is within the cap, undecodable bytes replaced (for a quick look at what a page names).

    :param path: The file.
    :param max_file_bytes: The largest file read.
    :returns: The text; None for a file over the cap or one that cannot be read.
    """
    try:
        if path.stat().st_size > max_file_bytes:
            return None
        return path.read_bytes().decode("utf-8-sig", errors="replace")
    except OSError:
        return None


def scan_includes(
    sources: list[Path],
    meta: list[dict[str, Any]],
    max_file_bytes: int,
    names_an_include: Callable[[str], bool],
    shown_whole: Callable[[Path, dict[str, Any]], list[str]],
) -> dict[str, list[str]]:
    """
    What each page of a converter shows whole of other files, parsing only the pages whose text names an include.

    :param sources: File paths.
    :param meta: One dict per source, with its `source` (the path relative to the knowledge root).
    :param max_file_bytes: The converter's cap: a larger file is no page (the run reports it).
    :param names_an_include: Whether a page's text names an include the converter resolves.
    :param shown_whole: The sources a page shows whole (it may raise: the run converts the page again and reports why).
    :returns: For each file that could be read, its source and the sources it shows whole, sorted.
    """
    found: dict[str, list[str]] = {}
    for path, info in zip(sources, meta, strict=True):
        name = str(info["source"])
        text = small_text(path, max_file_bytes)
        if text is None:
            continue
        found[name] = []
        if not names_an_include(text):
            continue
        try:
            found[name] = sorted(set(shown_whole(path, info)))
        except Exception as err:  # the run converts it again and reports why it cannot
            logger.debug("Include scan of {source} failed: {error}", source=name, error=str(err))
    return found


def include_warnings(documents: list[Document], what: str) -> list[dict[str, str]]:
    """
    The includes converted documents name but do not hold (their `unresolved_includes`), each logged as a warning.

    :param documents: Converted documents.
    :param what: What happened to such an include, e.g. `include not resolved`.
    :returns: `{"source", "reason"}` per include, the reason `<what>: <target>`.
    """
    warnings = [
        {"source": str(doc.meta.get("source", "")), "reason": f"{what}: {target}"}
        for doc in documents
        for target in doc.meta.get("unresolved_includes", [])
    ]
    for warning in warnings:
        logger.warning("{source}: {reason}", source=warning["source"], reason=warning["reason"])
    return warnings


def is_hidden(relative: Path) -> bool:
    """
    Whether a path under the knowledge root passes a hidden name (`.git`, `.env`), which the folder walk leaves out:
    no include may read such a file either.

    :param relative: The path relative to the root.
    :returns: True when one of its parts starts with `.`.
    """
    return any(part.startswith(".") for part in relative.parts)


def knowledge_root_of(source: Source, name: str) -> Path | None:
    """
    The knowledge root a file lies under: its path (a router's `ByteStream` carries it as `file_path`) without its
    source.

    :param source: A path or a `ByteStream`.
    :param name: The file's source, its path relative to the knowledge root.
    :returns: The root; None for bytes from nowhere or a path that does not end with the source.
    """
    where = source.meta.get("file_path") if isinstance(source, ByteStream) else source
    if not where:
        return None
    path = Path(str(where)).resolve()
    parts = Path(name).parts
    if not parts or path.parts[-len(parts) :] != parts:
        return None
    return Path(*path.parts[: -len(parts)])
