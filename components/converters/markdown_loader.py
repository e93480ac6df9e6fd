from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import Any

import yaml
from haystack import Document, component, logging

logger = logging.getLogger(__name__)

_FIRST_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)
_KNOWN_KEYS = ("id", "title", "category", "domain", "keywords", "entities")


#: defaults of the loader's caps (pipelines/indexing.yaml sets them)
MAX_FILE_BYTES = 512 * 1024
MAX_FRONTMATTER_BYTES = 16 * 1024
MAX_FRONTMATTER_ALIASES = 8


class KnowledgeFileError(ValueError):
    """A knowledge file that cannot be loaded; the message names the reason."""


def discover_knowledge_files(
    root: Path, max_file_bytes: int = MAX_FILE_BYTES
) -> tuple[dict[Path, str], list[dict[str, str]]]:
    """
    Find the `*.md` files under a knowledge root, and report every entry that cannot be one.

    A directory named `*.md`, a dangling or looping symlink, a symlink that leaves the root, anything that is not a
    regular file, and a file over `max_file_bytes` is reported, never raised, so one bad entry cannot stop a run.

    :param root: The knowledge root (resolved).
    :param max_file_bytes: Largest file accepted.
    :returns: `{path: source}` of the usable files (source: the path relative to the root), and the failures as
        `{"source", "reason"}`.
    """
    files: dict[Path, str] = {}
    failures: list[dict[str, str]] = []
    candidates, unreadable = _walk(root, ".md")
    for folder, error in unreadable:
        logger.warning("Cannot read knowledge folder {folder}: {error}", folder=folder, error=error)
        failures.append({"source": folder, "reason": f"{error}: folder not read, its documents keep their version"})
    for path in candidates:
        source = path.relative_to(root).as_posix()
        reason = _unusable(path, root, max_file_bytes)
        if reason:
            logger.warning("Skipping knowledge entry {source}: {reason}", source=source, reason=reason)
            failures.append({"source": source, "reason": reason})
        else:
            files[path] = source
    return files, failures


def _walk(root: Path, suffix: str) -> tuple[list[Path], list[tuple[str, str]]]:
    """
    Every entry under `root` whose name ends with `suffix` (links to folders are not followed), sorted, and the
    folders that could not be listed, as `(path relative to the root + "/", reason)`: `Path.rglob` skips those
    silently, and a folder skipped that way would look deleted.
    """
    unreadable: list[tuple[str, str]] = []

    def note(err: OSError) -> None:
        where = Path(err.filename or root)
        relative = where.relative_to(root).as_posix() if where.is_relative_to(root) else str(where)
        unreadable.append(("" if relative == "." else relative.rstrip("/") + "/", err.strerror or str(err)))

    found = [
        Path(folder) / name
        for folder, folders, names in os.walk(root, onerror=note)
        for name in (*folders, *names)
        if name.endswith(suffix)
    ]
    return sorted(found), unreadable


def _unusable(path: Path, root: Path, max_file_bytes: int) -> str | None:
    try:
        target = path.resolve(strict=True)
    except FileNotFoundError:
        return "dangling symlink" if path.is_symlink() else "No such file or directory"
    except (OSError, RuntimeError) as err:  # a symlink loop: ELOOP, or RuntimeError before Python 3.13
        return f"unresolvable path ({getattr(err, 'strerror', None) or err})"
    if not target.is_relative_to(root):
        return "symlink leaves the knowledge root"
    if target.is_dir():
        return "is a directory"
    if not target.is_file():
        return "not a regular file"
    size = target.stat().st_size
    if size > max_file_bytes:
        return f"{size} bytes, over the {max_file_bytes}-byte cap (max_file_bytes)"
    return None


def file_version(data: bytes) -> str:
    """
    Return the version of a knowledge file: a short hash of its bytes.

    :param data: The raw file content.
    :returns: 16 hex characters.
    """
    return hashlib.sha256(data).hexdigest()[:16]


def _split_frontmatter(
    text: str, max_bytes: int = MAX_FRONTMATTER_BYTES, max_aliases: int = MAX_FRONTMATTER_ALIASES
) -> tuple[dict[str, Any], str]:
    if not text.startswith("---"):
        return {}, text
    lines = text.split("\n")
    if lines[0].strip() != "---":
        return {}, text
    end = next((i for i, line in enumerate(lines[1:], start=1) if line.strip() in ("---", "...")), None)
    if end is None:
        raise KnowledgeFileError("frontmatter starts with '---' but has no closing '---' line")
    raw = "\n".join(lines[1:end])
    if len(raw.encode("utf-8")) > max_bytes:
        raise KnowledgeFileError(f"frontmatter is over the {max_bytes}-byte cap (max_frontmatter_bytes)")
    try:
        # counted on the event stream, before anything is built: a few aliases can expand to gigabytes
        aliases = sum(isinstance(event, yaml.AliasEvent) for event in yaml.parse(raw, Loader=yaml.SafeLoader))
        if aliases > max_aliases:
            msg = f"frontmatter uses {aliases} YAML aliases, over the cap of {max_aliases} (max_frontmatter_aliases)"
            raise KnowledgeFileError(msg)
        front = yaml.safe_load(raw)
    except yaml.YAMLError as err:
        reason = str(err).replace("\n", " ")
        raise KnowledgeFileError(f"frontmatter is not valid YAML: {reason}") from err
    if front is None:
        front = {}
    if not isinstance(front, dict):
        raise KnowledgeFileError(f"frontmatter must be a YAML mapping, got {type(front).__name__}")
    return _string_keys(front), "\n".join(lines[end + 1 :])


def _string_keys(value: Any) -> Any:
    """
    The frontmatter with every mapping key a string: YAML allows `1:` or `2024-01-01:` as keys, metadata does not.

    :raises KnowledgeFileError: If two keys of one mapping become the same string (`1:` and `"1":`).
    """
    if isinstance(value, list):
        return [_string_keys(item) for item in value]
    if not isinstance(value, dict):
        return value
    keys: dict[str, Any] = {}
    for key, item in value.items():
        name = str(key)
        if name in keys:
            raise KnowledgeFileError(f"frontmatter has the key {name!r} twice (as {key!r} and another spelling)")
        keys[name] = _string_keys(item)
    return keys


def _string_list(value: Any, field: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    if isinstance(value, list) and all(isinstance(v, str | int | float) for v in value):
        return [str(v).strip() for v in value if str(v).strip()]
    raise KnowledgeFileError(f"frontmatter field '{field}' must be a list of strings")


def parse_knowledge_file(
    data: bytes,
    source: str,
    max_frontmatter_bytes: int = MAX_FRONTMATTER_BYTES,
    max_frontmatter_aliases: int = MAX_FRONTMATTER_ALIASES,
) -> Document:
    """
    Parse one knowledge file into a Document whose content is the markdown body.

    :param data: The raw bytes of the file.
    :param source: The path relative to the knowledge root, used as `source` and as the default `doc_id`.
    :param max_frontmatter_bytes: Largest frontmatter accepted.
    :param max_frontmatter_aliases: Most YAML aliases accepted in the frontmatter.
    :returns: A Document with `doc_id`, `source`, `title`, `category`, `keywords`, `entities`, `doc_version`
        and any other frontmatter keys in its meta.
    :raises KnowledgeFileError: If the file is empty, binary, not UTF-8, its frontmatter is malformed or over a
        cap, or its body is empty.
    """
    if not data.strip():
        raise KnowledgeFileError("the file is empty")
    if b"\x00" in data:
        raise KnowledgeFileError("binary file (NUL bytes), not markdown")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise KnowledgeFileError(f"not valid UTF-8 (byte {err.start})") from err
    text = text.replace("\r\n", "\n")
    front, body = _split_frontmatter(text, max_frontmatter_bytes, max_frontmatter_aliases)
    if not body.strip():
        raise KnowledgeFileError("the markdown body is empty")
    heading = _FIRST_HEADING.search(body)
    title = str(front.get("title") or (heading.group(1) if heading else Path(source).stem)).strip()
    category = front.get("category", front.get("domain"))
    if category is not None and not isinstance(category, str | int):
        raise KnowledgeFileError("frontmatter field 'category' must be a string")
    meta: dict[str, Any] = {k: v for k, v in front.items() if k not in _KNOWN_KEYS}
    meta.update(
        doc_id=str(front.get("id") or source),
        source=source,
        title=title,
        category=str(category or "").strip(),
        keywords=_string_list(front.get("keywords"), "keywords"),
        entities=_string_list(front.get("entities"), "entities"),
        doc_version=file_version(data),
    )
    return Document(content=body, meta=meta)


@component
class MarkdownKnowledgeLoader:
    """
    Loads markdown knowledge files with YAML frontmatter into Haystack Documents, one per file.

    Frontmatter fields: `id` (default: the path relative to the knowledge root), `title` (default: the first
    heading), `category` (alias `domain`), `keywords`, `entities`; other keys are kept as metadata. A file that
    cannot be read or parsed does not stop the run: it is reported in `failures` with its name and the reason.

    ### Usage example

    ```python
    from components.converters.markdown_loader import MarkdownKnowledgeLoader

    loader = MarkdownKnowledgeLoader(root="knowledge")
    result = loader.run(sources=["knowledge/alerts/disk-full.md"])
    print(result["documents"][0].meta["title"], result["failures"])
    ```
    """

    def __init__(
        self,
        root: str = "knowledge",
        max_file_bytes: int = MAX_FILE_BYTES,
        max_frontmatter_bytes: int = MAX_FRONTMATTER_BYTES,
        max_frontmatter_aliases: int = MAX_FRONTMATTER_ALIASES,
    ) -> None:
        """
        Create the loader.

        :param root: The knowledge root; `source` is each file's path relative to it.
        :param max_file_bytes: Largest file loaded (a larger one is reported as failed: embedding it would hold the
            store for long).
        :param max_frontmatter_bytes: Largest frontmatter accepted.
        :param max_frontmatter_aliases: Most YAML aliases accepted in a frontmatter (a few can expand to gigabytes).
        :raises ValueError: If `root` is empty or a cap is not positive.
        """
        if not root:
            msg = f"root={root!r} must name the knowledge folder, e.g. 'knowledge'"
            raise ValueError(msg)
        for name, value in (("max_file_bytes", max_file_bytes), ("max_frontmatter_bytes", max_frontmatter_bytes)):
            if value < 1:
                msg = f"{name}={value!r} must be a positive number of bytes"
                raise ValueError(msg)
        if max_frontmatter_aliases < 0:
            msg = f"max_frontmatter_aliases={max_frontmatter_aliases!r} must be 0 or more"
            raise ValueError(msg)
        self.root = root
        self.max_file_bytes = max_file_bytes
        self.max_frontmatter_bytes = max_frontmatter_bytes
        self.max_frontmatter_aliases = max_frontmatter_aliases

    @component.output_types(documents=list[Document], failures=list[dict[str, str]])
    def run(self, sources: list[str], root: str | None = None) -> dict[str, Any]:
        """
        Load the given files.

        :param sources: Paths of markdown files (absolute or relative to the working directory).
        :param root: Overrides the init `root` for this run.
        :returns: `documents`: one Document per loaded file; `failures`: `{"source", "reason"}` per file that failed.
        """
        base = Path(root or self.root).resolve()
        documents: list[Document] = []
        failures: list[dict[str, str]] = []
        for path_str in sources:
            path = Path(path_str).absolute()
            source = path.relative_to(base).as_posix() if path.is_relative_to(base) else path.name
            try:
                reason = _unusable(path, base, self.max_file_bytes)
                if reason:
                    raise KnowledgeFileError(reason)
                data = path.read_bytes()
                document = parse_knowledge_file(data, source, self.max_frontmatter_bytes, self.max_frontmatter_aliases)
                documents.append(document)
            except (OSError, KnowledgeFileError) as err:
                reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
                logger.warning("Skipping knowledge file {source}: {reason}", source=source, reason=reason)
                failures.append({"source": source, "reason": reason})
        return {"documents": documents, "failures": failures}
