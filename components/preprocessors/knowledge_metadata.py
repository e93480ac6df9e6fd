from __future__ import annotations

import mimetypes
from dataclasses import replace
from datetime import date, datetime
from pathlib import Path
from typing import Any

from haystack import Document, component, logging

from components.core.access import ALL_GROUPS, access_groups
from components.core.file_version import file_version
from components.core.frontmatter import day_of
from components.core.markdown_text import first_heading, plain_heading

logger = logging.getLogger(__name__)


DEFAULT_CATEGORY_FIELDS = ["category", "domain", "categories", "section"]
DEFAULT_KEYWORD_FIELDS = ["keywords", "tags"]
DEFAULT_DESCRIPTION_FIELDS = ["description", "summary"]
DEFAULT_PLAIN_TEXT_TYPES = ["text/plain", "application/pdf"]
DEFAULT_UPDATED_FIELDS = ["updated", "lastmod", "last_modified", "last_updated", "date"]
DEFAULT_ACCESS_FIELDS = ["access"]


def _first_text(value: Any) -> str:
    """A field's value as one string: a string, a number, or the first of a list of them ('' otherwise)."""
    if isinstance(value, list):
        value = next((v for v in value if isinstance(v, str | int | float) and str(v).strip()), "")
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return ""
    return str(value).strip()


def _texts(value: Any) -> list[str]:
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    if isinstance(value, list):
        return [str(v).strip() for v in value if isinstance(v, str | int | float) and str(v).strip()]
    return []


def _field_values(value: Any) -> list[str]:
    """A filterable field's value as strings: text, numbers and booleans as written (`true`), dates as days."""
    items = value if isinstance(value, list) else [value]
    out: list[str] = []
    for item in items:
        if isinstance(item, bool):
            text = "true" if item else "false"
        elif isinstance(item, datetime | date):
            text = day_of(item)
        elif isinstance(item, str | int | float):
            text = str(item).strip()
        else:
            continue
        if text and text not in out:
            out.append(text)
    return out


def _title_of(heading: str, first_line: str, markup: str) -> str:
    """The first heading of markdown; the first line of text (a PDF's title line) when it is short enough to be one."""
    if heading:
        return heading
    if markup == "text" and 3 <= len(first_line) <= 100:
        return first_line
    return ""


@component
class KnowledgeMetadata:
    """
    Gives every converted document the fields the lookup relies on, whatever converter made it.

    `source` (default: the file name), `doc_id` (default: the source), `title` (default: the first markdown heading, or
    the first line of plain text when it is short enough to be a title, then the file name), `category` (the first of
    `category_fields` that has a value, a list giving its first item; else the top folder of the source when
    `folder_category` is on), `keywords` (from `keyword_fields`, merged), `entities`, `description` (the first of
    `description_fields`), `updated` (the first of `updated_fields` that holds a date, as `YYYY-MM-DD`), `fields` (the
    values of the `filterable_fields` a page sets, each a list of strings: what lookups may filter on), its life
    (`status` casefolded, `superseded_by`, and `valid_from`, `valid_until`, `reviewed_at` as days), `access` (the
    groups that may read it, from the first of `access_fields` the page sets, casefolded; none: public; a field naming
    no group, such as `access: []`, fails closed to `*`, which only a caller holding every group reads), `markup`
    (`text` for the MIME types in `plain_text_types`, where a `#` line is no heading; else `markdown`) and
    `doc_version`. A document left without text (a section page of front matter only) is indexed from its description;
    without one it is reported in `skipped` with the reason, never as a failure.

    ### Usage example

    ```python
    from haystack import Document
    from components.preprocessors.knowledge_metadata import KnowledgeMetadata

    doc = Document(content="", meta={"source": "install/_index.md", "title": "Install", "description": "How to."})
    print(KnowledgeMetadata().run(documents=[doc])["documents"][0].meta["category"])  # install
    ```
    """

    def __init__(
        self,
        category_fields: list[str] | None = None,
        folder_category: bool = True,
        keyword_fields: list[str] | None = None,
        description_fields: list[str] | None = None,
        plain_text_types: list[str] | None = None,
        updated_fields: list[str] | None = None,
        filterable_fields: list[str] | None = None,
        access_fields: list[str] | None = None,
    ) -> None:
        """
        Create the component.

        :param category_fields: Front matter fields a category is taken from, first match wins (default `category`,
            `domain`, `categories`, `section`).
        :param folder_category: Without any of them, the source's top folder is the category (a file at the root has
            none).
        :param keyword_fields: Fields merged into `keywords` (default `keywords`, `tags`).
        :param description_fields: Fields a page's description is taken from (default `description`, `summary`).
        :param plain_text_types: MIME types whose text has no markdown headings (default `text/plain`,
            `application/pdf`), for converters that do not set `markup`.
        :param updated_fields: Fields the date a page was last updated is taken from, first date wins (default
            `updated`, `lastmod`, `last_modified`, `last_updated`, `date`): what `updated_after` filters on.
        :param filterable_fields: Further front matter fields lookups may filter on (default none; `category`,
            `tags`/`keywords`, the source and `updated` always are).
        :param access_fields: Front matter fields naming the groups that may read a page (default `access`); a page
            setting none of them is public.
        :raises ValueError: If a field list holds something else than field names.
        """
        for name, value in (
            ("category_fields", category_fields),
            ("keyword_fields", keyword_fields),
            ("description_fields", description_fields),
            ("updated_fields", updated_fields),
            ("filterable_fields", filterable_fields),
            ("access_fields", access_fields),
        ):
            if value is not None and not all(isinstance(v, str) and v for v in value):
                msg = f"{name}={value!r} must be a list of field names; leave it unset for the defaults"
                raise ValueError(msg)
        self.category_fields = list(category_fields if category_fields is not None else DEFAULT_CATEGORY_FIELDS)
        self.folder_category = folder_category
        self.keyword_fields = list(keyword_fields if keyword_fields is not None else DEFAULT_KEYWORD_FIELDS)
        self.description_fields = list(
            description_fields if description_fields is not None else DEFAULT_DESCRIPTION_FIELDS
        )
        self.plain_text_types = list(plain_text_types if plain_text_types is not None else DEFAULT_PLAIN_TEXT_TYPES)
        self.updated_fields = list(updated_fields if updated_fields is not None else DEFAULT_UPDATED_FIELDS)
        self.filterable_fields = list(filterable_fields or [])
        self.access_fields = list(access_fields if access_fields is not None else DEFAULT_ACCESS_FIELDS)

    def _category(self, meta: dict[str, Any], source: str) -> str:
        for name in self.category_fields:
            if category := _first_text(meta.get(name)):
                return category
        if self.folder_category and "/" in source:
            return source.split("/", 1)[0]
        return ""

    def _keywords(self, meta: dict[str, Any]) -> list[str]:
        merged: list[str] = []
        for name in self.keyword_fields:
            merged.extend(k for k in _texts(meta.get(name)) if k not in merged)
        return merged

    def _updated(self, meta: dict[str, Any]) -> str:
        return next((day for name in self.updated_fields if (day := day_of(meta.get(name)))), "")

    def _fields(self, meta: dict[str, Any]) -> dict[str, list[str]]:
        values = {name: _field_values(meta.get(name)) for name in self.filterable_fields}
        return {name: found for name, found in values.items() if found}

    @staticmethod
    def _lifecycle(meta: dict[str, Any]) -> dict[str, str]:
        """The page's place in its life: status, successor, validity and review days (front matter, normalized)."""
        return {
            "status": _first_text(meta.get("status")).casefold(),
            "superseded_by": _first_text(meta.get("superseded_by")),
            "valid_from": day_of(meta.get("valid_from")),
            "valid_until": day_of(meta.get("valid_until")),
            "reviewed_at": day_of(meta.get("reviewed_at")) or day_of(meta.get("last_reviewed")),
        }

    def _access(self, meta: dict[str, Any], source: str) -> list[str]:
        """The groups that may read the page; a field set to something naming no group reads as `*` (fail closed)."""
        for name in self.access_fields:
            if meta.get(name) is None:
                continue
            groups = access_groups(meta[name])
            if not groups:
                logger.warning(
                    "{source}: front matter {field}={value!r} names no group; only callers holding every group read it",
                    source=source,
                    field=name,
                    value=meta[name],
                )
                return [ALL_GROUPS]
            return groups
        return []

    def _markup(self, meta: dict[str, Any], source: str) -> str:
        if meta.get("markup"):
            return str(meta["markup"])
        mime, _ = mimetypes.guess_type(source)
        return "text" if mime in self.plain_text_types else "markdown"

    @staticmethod
    def _title(meta: dict[str, Any], heading: str, first_line: str, markup: str, source: str) -> str:
        title = str(meta.get("title") or _title_of(heading, first_line, markup) or Path(source).stem).strip()
        return plain_heading(title) if markup == "markdown" else title  # front matter writes `code` in titles too

    def _profiled(self, doc: Document) -> Document:
        meta = dict(doc.meta)
        source = str(meta.get("source") or Path(str(meta.get("file_path") or doc.id)).name)
        markup = self._markup(meta, source)
        content = doc.content or ""
        heading = first_heading(content) if markup == "markdown" else ""
        first_line = next((line.strip() for line in content.split("\n") if line.strip()), "")
        description = next(
            (text for name in self.description_fields if (text := _first_text(meta.get(name)))),
            "",
        )
        meta.update(
            source=source,
            doc_id=str(meta.get("doc_id") or source),
            title=self._title(meta, heading, first_line, markup, source),
            category=self._category(meta, source),
            keywords=self._keywords(meta),
            entities=_texts(meta.get("entities")),
            markup=markup,
            updated=self._updated(meta),
            fields=self._fields(meta),
            **self._lifecycle(meta),
            access=self._access(meta, source),
            doc_version=str(meta.get("doc_version") or file_version(content.encode("utf-8"))),
        )
        if description:
            meta["description"] = description
        if not content.strip() and description:
            return Document(id=doc.id, content=description, meta={**meta, "line_map": None})
        return replace(doc, meta=meta)

    @component.output_types(documents=list[Document], skipped=list[dict[str, str]])
    def run(self, documents: list[Document]) -> dict[str, Any]:
        """
        Fill in the fields.

        :param documents: Converted documents; they are not modified.
        :returns: `documents`: copies with the fields set; `skipped`: `{"source", "reason"}` per document with no
            text and no description.
        """
        profiled: list[Document] = []
        skipped: list[dict[str, str]] = []
        for doc in documents:
            out = self._profiled(doc)
            if not (out.content or "").strip():
                reason = "no text: front matter only, with no description or summary"
                logger.info("Skipping {source}: {reason}", source=out.meta["source"], reason=reason)
                skipped.append({"source": str(out.meta["source"]), "reason": reason})
                continue
            profiled.append(out)
        return {"documents": profiled, "skipped": skipped}
