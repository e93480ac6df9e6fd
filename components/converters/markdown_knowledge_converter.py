from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from haystack import Document, component, logging
from haystack.dataclasses import ByteStream

from components.core.file_version import file_version

logger = logging.getLogger(__name__)

_FIRST_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)
_KNOWN_KEYS = ("id", "title", "category", "domain", "keywords", "entities")


#: defaults of the converter's caps (pipelines/indexing.yaml sets them)
MAX_FILE_BYTES = 512 * 1024
MAX_FRONTMATTER_BYTES = 16 * 1024
MAX_FRONTMATTER_ALIASES = 8


class KnowledgeFileError(ValueError):
    """A knowledge file that cannot be loaded; the message names the reason."""


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
class MarkdownKnowledgeConverter:
    """
    Converts markdown knowledge files with frontmatter into Haystack Documents, one per file.

    The content is the markdown body; the YAML frontmatter becomes the metadata: `id` (default: the file's source),
    `title` (default: the first heading), `category` (alias `domain`), `keywords`, `entities`, and any other key as is.
    Each file's `source` (its path relative to the knowledge root) and `doc_version` come with its `meta` (the indexer
    gives both; without them the source is the file name and the version the hash of the bytes). A file that cannot
    be read or parsed does not stop the run: it is reported in `failures` with its source and the reason.

    ### Usage example

    ```python
    from components.converters.markdown_knowledge_converter import MarkdownKnowledgeConverter

    converter = MarkdownKnowledgeConverter()
    result = converter.run(sources=["knowledge/alerts/disk-full.md"], meta=[{"source": "alerts/disk-full.md"}])
    print(result["documents"][0].meta["title"], result["failures"])
    ```
    """

    def __init__(
        self,
        max_file_bytes: int = MAX_FILE_BYTES,
        max_frontmatter_bytes: int = MAX_FRONTMATTER_BYTES,
        max_frontmatter_aliases: int = MAX_FRONTMATTER_ALIASES,
    ) -> None:
        """
        Create the converter.

        :param max_file_bytes: Largest file converted (a larger one is reported as failed: embedding it would hold the
            store for long).
        :param max_frontmatter_bytes: Largest frontmatter accepted.
        :param max_frontmatter_aliases: Most YAML aliases accepted in a frontmatter (a few can expand to gigabytes).
        :raises ValueError: If a cap is not positive.
        """
        for name, value in (("max_file_bytes", max_file_bytes), ("max_frontmatter_bytes", max_frontmatter_bytes)):
            if value < 1:
                msg = f"{name}={value!r} must be a positive number of bytes"
                raise ValueError(msg)
        if max_frontmatter_aliases < 0:
            msg = f"max_frontmatter_aliases={max_frontmatter_aliases!r} must be 0 or more"
            raise ValueError(msg)
        self.max_file_bytes = max_file_bytes
        self.max_frontmatter_bytes = max_frontmatter_bytes
        self.max_frontmatter_aliases = max_frontmatter_aliases

    def _convert(self, source: str | Path | ByteStream, meta: dict[str, Any]) -> Document:
        """One file's Document; raises `KnowledgeFileError` or `OSError` for a file that cannot be one."""
        if isinstance(source, ByteStream):
            data = source.data
            meta = {**source.meta, **meta}
        else:
            path = Path(source)
            size = path.stat().st_size
            if size > self.max_file_bytes:
                raise KnowledgeFileError(f"{size} bytes, over the {self.max_file_bytes}-byte cap (max_file_bytes)")
            data = path.read_bytes()
            meta = {"source": path.name, **meta}
        if len(data) > self.max_file_bytes:
            raise KnowledgeFileError(f"{len(data)} bytes, over the {self.max_file_bytes}-byte cap (max_file_bytes)")
        name = str(meta.get("source") or Path(str(meta.get("file_path") or "")).name)
        document = parse_knowledge_file(data, name, self.max_frontmatter_bytes, self.max_frontmatter_aliases)
        if meta.get("doc_version"):
            document.meta["doc_version"] = str(meta["doc_version"])
        return document

    @component.output_types(documents=list[Document], failures=list[dict[str, str]])
    def run(
        self, sources: list[str | Path | ByteStream], meta: dict[str, Any] | list[dict[str, Any]] | None = None
    ) -> dict[str, Any]:
        """
        Convert the given files.

        :param sources: File paths, or `ByteStream`s (as a `FileTypeRouter` hands them on, their meta with them).
        :param meta: Metadata for every source (one dict), or one dict per source: `source` (the path relative to the
            knowledge root) and `doc_version` are used as such.
        :returns: `documents`: one Document per converted file; `failures`: `{"source", "reason"}` per file that
            could not be converted.
        :raises ValueError: If `meta` is a list of another length than `sources`.
        """
        metas = meta if isinstance(meta, list) else [dict(meta or {})] * len(sources)
        if len(metas) != len(sources):
            msg = f"meta has {len(metas)} entries for {len(sources)} sources; give one per source, or one for all"
            raise ValueError(msg)
        documents: list[Document] = []
        failures: list[dict[str, str]] = []
        for source, source_meta in zip(sources, metas, strict=True):
            try:
                documents.append(self._convert(source, source_meta))
            except (OSError, KnowledgeFileError) as err:
                name = str(source_meta.get("source") or _name_of(source))
                reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
                logger.warning("Skipping knowledge file {source}: {reason}", source=name, reason=reason)
                failures.append({"source": name, "reason": reason})
        return {"documents": documents, "failures": failures}


def _name_of(source: str | Path | ByteStream) -> str:
    if isinstance(source, ByteStream):
        return str(source.meta.get("source") or source.meta.get("file_path") or "<bytes>")
    return Path(source).name
