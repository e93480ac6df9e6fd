from __future__ import annotations

from dataclasses import replace
from datetime import date
from typing import Any

from haystack import Document, component, default_from_dict, default_to_dict, logging

from components.core.citation import chunk_ids
from components.core.frozen import Documents, FrozenDict, FrozenList, Strings
from components.core.query_vector import QueryVector, as_list
from components.core.scores import evidence_key
from components.core.versions import text_key
from components.store.knowledge_collection import KnowledgeCollection
from components.store.knowledge_index import CachedKnowledgeIndex, IndexedDocument, KnowledgeIndex
from components.store.knowledge_store import KnowledgeStore, deserialize_store_inplace

logger = logging.getLogger(__name__)

#: statuses of a page that another replaces
RETIRED_STATUSES = ("superseded", "deprecated")
#: statuses a successor may not have (it would not be evidence itself)
UNUSABLE_STATUSES = ("draft", "archived")
#: links of `superseded_by` followed to the current page
MAX_HOPS = 5


def _retirement(doc: IndexedDocument, today: str) -> str:
    """Why a page is no longer current: `superseded`, `deprecated`, `expired`, or '' (current)."""
    if doc.status in RETIRED_STATUSES:
        return doc.status
    if doc.valid_until and doc.valid_until < today:
        return "expired"
    return ""


@component
class SupersessionResolver:
    """
    Puts the current page in place of a superseded, deprecated or expired one, and flags evidence not reviewed lately.

    After the evidence gate: each block of a page whose front matter says it is no longer current (`status:
    superseded` or `deprecated`, or `valid_until` past) is dropped when its successor (`superseded_by`, an id or a
    source, followed to the current page) is among the evidence; else replaced, at its rank, by the successor's chunk
    most similar to the query (read from the store, its similarity computed, hit reason `replaces <source>`); with
    no successor indexed it stays, marked `superseded` (the result's message says so). A block whose page was last
    reviewed (`reviewed_at`, else `updated`) more than `review_age_days` ago is marked `stale`. The page facts come
    from the knowledge index, as every other node reads them.

    ### Usage example

    ```python
    from components.evidence.supersession_resolver import SupersessionResolver
    from components.store.knowledge_collection import KnowledgeCollection

    resolver = SupersessionResolver(KnowledgeCollection(uri="data/milvus.db"), index_path="data/knowledge_index.json")
    resolver.warm_up()
    out = resolver.run(documents=evidence, query_embedding=vector)
    print(out["lifecycle"]["replaced"])
    ```
    """

    def __init__(
        self,
        collection: KnowledgeStore | None = None,
        index_path: str = "data/knowledge_index.json",
        review_age_days: int | None = 365,
    ) -> None:
        """
        Create the resolver.

        :param collection: The knowledge collection the successors' chunks are read from (default:
            `KnowledgeCollection()`, the data folder's).
        :param index_path: The knowledge index file the indexing run writes.
        :param review_age_days: Days after its last review from which evidence is `stale` (None: never).
        :raises ValueError: If a parameter is out of range.
        """
        if not index_path:
            msg = "index_path='' must be the knowledge index file, e.g. 'data/knowledge_index.json'"
            raise ValueError(msg)
        if review_age_days is not None and review_age_days < 1:
            msg = f"review_age_days={review_age_days!r} must be at least 1, or null to never flag evidence stale"
            raise ValueError(msg)
        self.collection = collection if collection is not None else KnowledgeCollection()
        self.index_path = index_path
        self.review_age_days = review_age_days
        self._cache = CachedKnowledgeIndex(index_path)
        self._pages_of: tuple[KnowledgeIndex | None, dict[str, IndexedDocument], dict[str, IndexedDocument]] = (
            None,
            {},
            {},
        )

    def to_dict(self) -> dict[str, Any]:
        """
        :returns: The serialized component (its collection nested).
        """
        return default_to_dict(
            self, collection=self.collection, index_path=self.index_path, review_age_days=self.review_age_days
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SupersessionResolver:
        """
        :param data: As `to_dict` gives it.
        :returns: The component.
        """
        params = dict(data.get("init_parameters", {}))
        deserialize_store_inplace(params)
        return default_from_dict(cls, {**data, "init_parameters": params})

    def warm_up(self) -> None:
        """Connect to the store now rather than in the first lookup (idempotent; never raises: a store that is down
        shows in the retriever's attempts, and a successor is then read when it is needed)."""
        try:
            self.collection.warm_up()
        except Exception as err:  # whatever the client raises
            logger.warning("Supersession resolver could not warm up: {error}", error=err)

    def close(self) -> None:
        """Release the store connection."""
        self.collection.close()

    def _pages(self, index: KnowledgeIndex) -> tuple[dict[str, IndexedDocument], dict[str, IndexedDocument]]:
        """The index's pages by source and by id, made once per index version (kept with the index they index)."""
        if self._pages_of[0] is not index:
            self._pages_of = (index, index.by_source(), {d.doc_id: d for d in index.documents})
        return self._pages_of[1], self._pages_of[2]

    def _successor(
        self, doc: IndexedDocument, index: KnowledgeIndex, today: str, hidden: Strings
    ) -> IndexedDocument | None:
        """
        The current page replacing `doc`, following `superseded_by` links; None when none is indexed, or when it is
        hidden from this lookup (its first chunk in `hidden`: a draft, or a page the caller may not read).
        """
        by_source, by_id = self._pages(index)
        current, seen = doc, {doc.source}
        for _ in range(MAX_HOPS):
            link = current.superseded_by
            nxt = by_id.get(link) or by_source.get(link) or by_source.get(link.removeprefix("./"))
            if nxt is None or nxt.source in seen or nxt.status in UNUSABLE_STATUSES or not nxt.chunks:
                return None
            if hidden and chunk_ids(nxt.source, nxt.doc_version, 1)[0] in hidden:
                return None
            if not _retirement(nxt, today):
                return nxt
            current = nxt
            seen.add(nxt.source)
        return None

    def _best_chunk(self, successor: IndexedDocument, vector: list[float], old: Document) -> Document | None:
        ids = chunk_ids(successor.source, successor.doc_version, successor.chunks)
        scored = self.collection.fetch_scored(ids, vector)
        if not scored:
            return None
        best = max(scored, key=lambda d: d.score or 0.0)
        reason = f"replaces {old.meta.get('source')} ({old.meta.get('lifecycle_reason')})"
        meta = {
            **best.meta,
            "similarity": best.score,
            "evidence_key": evidence_key(best.meta, best.id),
            "text_key": text_key(best.meta.get("source"), best.content),
            "attempt": "successor",
            "retrieval_path": "successor",
            "evidence_basis": "successor",
            "hit_reasons": [reason],
            "replaces": old.meta.get("source"),
        }
        # it takes the rank of the page it replaces
        return Document(id=best.id, content=best.content, score=old.score, meta=meta)

    def _stale(self, doc: IndexedDocument, today: date) -> str:
        reviewed = doc.reviewed_at or doc.updated
        if self.review_age_days is None or not reviewed:
            return ""
        try:
            age = (today - date.fromisoformat(reviewed)).days
        except ValueError:
            return ""
        return reviewed if age > self.review_age_days else ""

    @component.output_types(documents=FrozenList[Document], lifecycle=FrozenDict)
    def run(
        self,
        documents: Documents,
        query_embedding: list[float] | QueryVector | None = None,
        hidden: Strings | None = None,
    ) -> dict[str, Any]:
        """
        Resolve the evidence's pages to the current ones.

        :param documents: The evidence blocks (the gate's), in rank order.
        :param query_embedding: The query vector, to choose a successor's chunk (without one, retired blocks are kept
            and marked).
        :param hidden: The chunks this lookup may not return (`DocumentFilterResolver`'s: drafts, pages the caller may
            not read): a successor among them is no successor, and is never named.
        :returns: `documents` (copies, in rank order) and `lifecycle`: `replaced` (`{"old", "by"}` sources), `dropped`
            (retired blocks whose successor was evidence already), `superseded` (retired pages kept: no successor
            indexed), `stale` (`{"source", "reviewed"}`).
        """
        summary: dict[str, list[Any]] = {"replaced": [], "dropped": [], "superseded": [], "stale": []}
        if not documents:
            return {"documents": FrozenList(), "lifecycle": FrozenDict(summary)}
        index, _ = self._cache.get()
        by_source, _ = self._pages(index)
        today = date.today()
        vector = as_list(query_embedding) if query_embedding is not None and len(query_embedding) else None
        present = {str(d.meta.get("source")) for d in documents}
        withheld = hidden or []  # read only for a retired page's successor: no set is made on every lookup
        out: list[Document] = []
        placed: set[str] = set()
        for doc in documents:
            page = by_source.get(str(doc.meta.get("source")))
            reason = _retirement(page, today.isoformat()) if page is not None else ""
            if page is None or not reason:
                out.append(self._reviewed(doc, page, today, summary))
                continue
            successor = self._successor(page, index, today.isoformat(), withheld)
            if successor is not None and successor.source in present:
                summary["dropped"].append({"old": page.source, "by": successor.source})
                continue
            marked = replace(doc, meta={**doc.meta, "lifecycle_reason": reason})
            chunk = None
            if successor is not None and successor.source not in placed and vector is not None:
                chunk = self._best_chunk(successor, vector, marked)
            if chunk is not None and successor is not None:
                placed.add(successor.source)
                summary["replaced"].append({"old": page.source, "by": successor.source})
                out.append(self._reviewed(chunk, successor, today, summary))
            elif successor is not None and successor.source in placed:
                summary["dropped"].append({"old": page.source, "by": successor.source})
            else:
                summary["superseded"].append(page.source)
                reasons = [*doc.meta.get("hit_reasons", []), f"{reason}: no successor indexed"]
                meta = {**marked.meta, "superseded": True, "hit_reasons": reasons}
                out.append(self._reviewed(replace(doc, meta=meta), page, today, summary))
        return {"documents": FrozenList(out), "lifecycle": FrozenDict(summary)}

    def _reviewed(
        self, doc: Document, page: IndexedDocument | None, today: date, summary: dict[str, list[Any]]
    ) -> Document:
        reviewed = self._stale(page, today) if page is not None else ""
        if not reviewed:
            return doc
        summary["stale"].append({"source": page.source if page else "", "reviewed": reviewed})
        return replace(doc, meta={**doc.meta, "stale": True, "reviewed": reviewed})
