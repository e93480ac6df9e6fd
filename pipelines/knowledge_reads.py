"""What the service answers besides lookups: the knowledge base's facets, and reads behind a citation or a source.

`facets` describes the knowledge base from its index (what a caller may filter on, with document counts and sample
values, its size, languages and version). `read_evidence` returns a cited chunk with its neighbours, `read_document`
a document or one of its sections, both from the store's current version of the document: a citation read in an older
version says so (`changed`) and gives the current text at the same place. Chunk ids come from the knowledge index
(`components.core.citation`), so a read never scans the collection.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, Literal

from haystack import Document
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from components.core.citation import Citation, chunk_ids
from components.core.location import lines_of, location_of, pages_of
from components.core.lookup_result import Anchor, FacetValue
from components.query.document_filter_resolver import DocumentFilterResolver, available_values
from components.store.knowledge_index import IndexedDocument, KnowledgeIndex

__all__ = [
    "DEFAULT_READ_CHARS",
    "DocumentRead",
    "EvidenceRead",
    "Facets",
    "ReadBlock",
    "facets_of",
    "read_document",
    "read_evidence",
]

#: the budget of a read without `max_chars`
DEFAULT_READ_CHARS = 6000
#: the largest budget a read may ask for
MAX_READ_CHARS = 50_000
#: the fewest characters a read returns (a heading and some text)
MIN_READ_CHARS = 200
#: the most neighbours `read_evidence` returns on each side
MAX_NEIGHBOURS = 10
#: sample values listed per filterable field (every category is listed)
SAMPLE_VALUES = 20
_ELLIPSIS = " …"

Fetch = Callable[[list[str]], list[Document]]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True)


class FieldFacet(_Model):
    """A filterable field: how many documents set it, and its most common values."""

    documents: int
    values: list[FacetValue] = Field(default_factory=list)


class Facets(_Model):
    """What a caller may filter on, and what the knowledge base holds (`list_facets`)."""

    knowledge: str = Field(description="The knowledge base (the collection lookups read).")
    documents: int
    chunks: int
    filter_keys: list[str] = Field(description="The keys `filters` accepts.")
    categories: list[FacetValue] = Field(default_factory=list)
    tags: list[FacetValue] = Field(default_factory=list, description="The most common tags/keywords.")
    fields: dict[str, FieldFacet] = Field(default_factory=dict, description="The declared filterable fields.")
    folders: list[FacetValue] = Field(default_factory=list, description="Top folders, for `source_prefix`.")
    updated: dict[str, Any] = Field(
        default_factory=dict, description="`documents` with an update day, `earliest` and `latest` (`updated_after`)."
    )
    languages: dict[str, int] = Field(default_factory=dict, description="Chunks per language.")
    index_version: int = Field(description="The knowledge index's signature (changes with every index run).")
    indexed_at: str | None = Field(description="When the knowledge index was last written (UTC, ISO 8601).")


class ReadBlock(_Model):
    """One chunk of a read."""

    citation: str
    anchor: Anchor
    breadcrumb: str = ""
    location: str = ""
    content: str
    #: the chunk the citation names (`read_evidence`)
    cited: bool = False
    truncated: bool = False


class _Read(_Model):
    found: bool
    status: Literal["evidence", "not_found", "invalid_request", "error"]
    message: str
    source: str = ""
    title: str = ""
    doc_version: str = ""
    blocks: list[ReadBlock] = Field(default_factory=list)
    truncated: bool = False
    trace_id: int | None = None
    trace_error: str | None = None


class EvidenceRead(_Read):
    """`read_evidence`: a cited chunk and its neighbours."""

    citation: str = ""
    #: the document changed since the citation was returned: the blocks are its current text at the same place
    changed: bool = False


class DocumentRead(_Read):
    """`read_document`: a document, or one of its sections."""

    section: str | None = None
    #: the citation to continue from (`read_evidence(..., after=N)`) when the budget cut the read short
    continue_with: str | None = None
    sections: list[str] = Field(default_factory=list, description="The document's sections, to read one of them.")


def _top(counts: Counter[str], limit: int | None) -> list[FacetValue]:
    return [FacetValue(value=v, documents=n) for v, n in counts.most_common(limit) if v]


def facets_of(
    index: KnowledgeIndex, knowledge: str, version: int, written: float | None, complete: bool = True
) -> Facets:
    """
    The knowledge base's facets, from its index (or from the part of it one caller may read).

    :param index: The knowledge index, or a caller's view of it (`KnowledgeIndex.readable_by`).
    :param knowledge: The knowledge base's name.
    :param version: The index file's signature.
    :param written: The index file's modification time (epoch seconds), or None.
    :param complete: Whether `index` holds every document: the chunks per language are counted over the whole
        collection, so a caller's view leaves them out rather than count pages it may not read.
    :returns: The facets.
    """
    docs = index.documents
    fields: dict[str, FieldFacet] = {}
    for name in sorted({name for doc in docs for name in doc.fields}):
        counts = Counter(v for doc in docs for v in doc.fields.get(name, []))
        having = sum(1 for doc in docs if doc.fields.get(name))
        fields[name] = FieldFacet(documents=having, values=_top(counts, SAMPLE_VALUES))
    days = sorted(d.updated for d in docs if d.updated)
    statistics = index.statistics
    return Facets(
        knowledge=knowledge,
        documents=len(docs),
        chunks=sum(d.chunks for d in docs),
        filter_keys=DocumentFilterResolver.filterable_keys(index),
        categories=_top(Counter(d.category for d in docs), None),
        tags=_top(Counter(k for d in docs for k in dict.fromkeys(d.keywords)), 50),
        fields=fields,
        folders=[FacetValue.model_validate(v) for v in available_values(index, "source_prefix")],
        updated={"documents": len(days), "earliest": days[0] if days else None, "latest": days[-1] if days else None},
        languages=dict(statistics.language_chunks) if statistics is not None and complete else {},
        index_version=version,
        indexed_at=datetime.fromtimestamp(written, UTC).isoformat(timespec="seconds") if written else None,
    )


def _budget(max_chars: Any) -> int:
    if max_chars is None:
        return DEFAULT_READ_CHARS
    if isinstance(max_chars, bool) or not isinstance(max_chars, int):
        msg = f"max_chars must be a whole number of characters, not {max_chars!r}"
        raise ValueError(msg)
    return min(max(max_chars, MIN_READ_CHARS), MAX_READ_CHARS)


def _block(doc: Document, indexed: IndexedDocument, cited: bool = False) -> ReadBlock:
    meta = doc.meta
    breadcrumb = str(meta.get("breadcrumb") or "")
    index = meta.get("chunk_index")
    position = index if isinstance(index, int) and not isinstance(index, bool) else 0
    return ReadBlock(
        citation=str(Citation.of(indexed.source, position, indexed.doc_version)),
        anchor=Anchor(
            source=indexed.source,
            heading_path=[p for p in breadcrumb.split(" > ") if p],
            lines=lines_of(meta),
            pages=pages_of(meta),
            doc_version=indexed.doc_version,
        ),
        breadcrumb=breadcrumb,
        location=location_of(meta),
        content=(doc.content or "").strip(),
        cited=cited,
    )


def _fit(blocks: list[ReadBlock], budget: int, keep: int) -> tuple[list[ReadBlock], bool]:
    """Blocks within the budget: the farthest from `keep` dropped first, then `keep`'s content cut."""
    chosen = list(range(len(blocks)))
    while len(chosen) > 1 and sum(len(blocks[i].content) for i in chosen) > budget:
        chosen.remove(max(chosen, key=lambda i: (abs(i - keep), i)))
    fitted = [blocks[i] for i in chosen]
    cut = len(fitted) < len(blocks)
    if sum(len(b.content) for b in fitted) > budget:
        only = fitted[0]
        room = max(budget - len(_ELLIPSIS), 1)
        fitted = [only.model_copy(update={"content": only.content[:room].rstrip() + _ELLIPSIS, "truncated": True})]
        cut = True
    return fitted, cut


def _document(index: KnowledgeIndex, source: str) -> IndexedDocument | None:
    by_source = index.by_source()
    if source in by_source:
        return by_source[source]
    return next((d for d in index.documents if d.doc_id == source), None)


def _not_found(cls: type[_Read], message: str, **fields: Any) -> Any:
    return cls(found=False, status="not_found", message=message, **fields)


def read_evidence(
    index: KnowledgeIndex,
    fetch: Fetch,
    citation: str,
    before: Any = 1,
    after: Any = 1,
    max_chars: Any = None,
) -> EvidenceRead:
    """
    A cited chunk with its neighbours, from the document's current version.

    :param index: The knowledge index.
    :param fetch: Reads chunks by id from the store (in the order given; missing ids left out).
    :param citation: A block's `citation`.
    :param before: Chunks before it (0 to `MAX_NEIGHBOURS`).
    :param after: Chunks after it (0 to `MAX_NEIGHBOURS`).
    :param max_chars: The read's budget (default `DEFAULT_READ_CHARS`, at most `MAX_READ_CHARS`).
    :returns: The read; `not_found` for a document that is not indexed (any more).
    :raises ValueError: For a citation that is none, or counts or a budget of the wrong kind.
    """
    cited = Citation.parse(citation)
    for name, value in (("before", before), ("after", after)):
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_NEIGHBOURS:
            msg = f"{name} must be a whole number from 0 to {MAX_NEIGHBOURS}, not {value!r}"
            raise ValueError(msg)
    budget = _budget(max_chars)
    doc = _document(index, cited.source)
    if doc is None or not doc.chunks:
        message = f"No indexed document {cited.source!r}: it was removed or never indexed. Look it up again."
        return _not_found(EvidenceRead, message, citation=str(cited), source=cited.source)
    changed = not cited.matches(doc.doc_version)
    position = min(cited.chunk_index, doc.chunks - 1)
    first, last = max(0, position - before), min(doc.chunks - 1, position + after)
    ids = chunk_ids(doc.source, doc.doc_version, doc.chunks)[first : last + 1]
    chunks = fetch(ids)
    if not chunks:
        message = f"The chunks of {doc.source!r} are not in the store (a re-index is running?); try again."
        return _not_found(EvidenceRead, message, citation=str(cited), source=doc.source)
    blocks = [_block(c, doc, cited=c.meta.get("chunk_index") == position) for c in chunks]
    keep = next((i for i, b in enumerate(blocks) if b.cited), 0)
    fitted, cut = _fit(blocks, budget, keep)
    note = (
        f" The document changed since this citation was returned (version {cited.version} → "
        f"{doc.doc_version[: len(cited.version)]}): these blocks are its current text at the same place."
        if changed
        else ""
    )
    return EvidenceRead(
        found=True,
        status="evidence",
        message=f"{len(fitted)} block(s) of {doc.source}, the cited one marked `cited`.{note}"
        + (" Cut to fit max_chars." if cut else ""),
        citation=str(cited),
        changed=changed,
        source=doc.source,
        title=doc.title,
        doc_version=doc.doc_version,
        blocks=fitted,
        truncated=cut,
    )


def _sections(chunks: Sequence[Document]) -> list[str]:
    return list(dict.fromkeys(str(c.meta.get("breadcrumb") or "") for c in chunks if c.meta.get("breadcrumb")))


def _in_section(chunk: Document, section: str) -> bool:
    breadcrumb = str(chunk.meta.get("breadcrumb") or "").casefold()
    wanted = section.strip().casefold()
    return breadcrumb == wanted or breadcrumb.startswith(wanted + " > ") or wanted in breadcrumb.split(" > ")


def read_document(
    index: KnowledgeIndex, fetch: Fetch, source: str, section: Any = None, max_chars: Any = None
) -> DocumentRead:
    """
    A document, or one of its sections, in order, from its current version.

    :param index: The knowledge index.
    :param fetch: Reads chunks by id from the store.
    :param source: The document's source (or its `doc_id`).
    :param section: A heading path (`A > B`, or its start) or one heading's name; None for the whole document.
    :param max_chars: The read's budget (default `DEFAULT_READ_CHARS`, at most `MAX_READ_CHARS`).
    :returns: The read, with the document's sections; `not_found` for a source or section that does not exist.
    :raises ValueError: For a source or section that is not text, or a budget of the wrong kind.
    """
    if not isinstance(source, str) or not source.strip():
        msg = f"source must be a document's source as a block's `source` gives it, not {source!r}"
        raise ValueError(msg)
    if section is not None and (not isinstance(section, str) or not section.strip()):
        msg = f"section must be a heading path or a heading, not {section!r}"
        raise ValueError(msg)
    budget = _budget(max_chars)
    doc = _document(index, source.strip())
    if doc is None or not doc.chunks:
        return _not_found(
            DocumentRead, f"No indexed document {source!r} (list_facets lists the folders).", source=source
        )
    chunks = sorted(
        fetch(chunk_ids(doc.source, doc.doc_version, doc.chunks)), key=lambda c: c.meta.get("chunk_index", 0)
    )
    sections = _sections(chunks)
    chosen = [c for c in chunks if _in_section(c, section)] if section else chunks
    if not chosen:
        message = f"{doc.source} has no section {section!r}; its sections are listed in `sections`."
        return _not_found(DocumentRead, message, source=doc.source, title=doc.title, sections=sections, section=section)
    blocks: list[ReadBlock] = []
    used = 0
    continue_with = None
    for position, chunk in enumerate(chosen):
        block = _block(chunk, doc)
        if len(block.content) <= budget - used:
            blocks.append(block)
            used += len(block.content)
            continue
        if blocks:
            continue_with = block.citation
        else:  # the first block alone is over the budget: its start, then on from the next one
            cut = block.content[: max(budget - len(_ELLIPSIS), 1)].rstrip() + _ELLIPSIS
            blocks.append(block.model_copy(update={"content": cut, "truncated": True}))
            rest = chosen[position + 1 :]
            continue_with = _block(rest[0], doc).citation if rest else None
        break
    truncated = len(blocks) < len(chosen) or any(b.truncated for b in blocks)
    more = f" Cut to fit max_chars: continue with read_evidence({continue_with!r}, after=...)." if continue_with else ""
    what = f"section {section!r} of {doc.source}" if section else doc.source
    return DocumentRead(
        found=True,
        status="evidence",
        message=f"{len(blocks)} of {len(chosen)} block(s) of {what}.{more}",
        source=doc.source,
        title=doc.title,
        doc_version=doc.doc_version,
        section=section,
        blocks=blocks,
        truncated=truncated,
        continue_with=continue_with,
        sections=sections,
    )
