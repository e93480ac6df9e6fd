from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from haystack import component, logging

from components.core.access import can_read, reader_groups
from components.core.frozen import FrozenDict
from components.core.text_matching import has_cjk, mentions
from components.store.knowledge_index import CachedKnowledgeIndex, KnowledgeIndex, hint_values

logger = logging.getLogger(__name__)

_KINDS = ("title", "keyword", "entity", "category")
# terms are filed under their first few characters: a query then looks at the terms filed under its own substrings
# of that length, not at every term of the knowledge base (tens of thousands at 10k documents)
_PREFIX_CHARS = 3


@dataclass
class _TermIndex:
    """Hint terms of the knowledge base: term -> kind -> document positions."""

    documents: list[Any] = field(default_factory=list)
    terms: dict[str, dict[str, set[int]]] = field(default_factory=dict)
    originals: dict[tuple[str, str], str] = field(default_factory=dict)  # (kind, folded term) -> spelling
    domain_of: dict[str, str] = field(default_factory=dict)  # category-specific term -> its category
    by_prefix: dict[str, list[str]] = field(default_factory=dict)  # first characters (casefolded) -> terms
    restricted: dict[int, list[str]] = field(default_factory=dict)  # position -> access groups, of restricted documents

    def candidates(self, text: str) -> set[str]:
        """
        The terms that may occur in `text`: every term that is a substring of it, and others with the same start.

        :param text: Casefolded text.
        :returns: The candidate terms.
        """
        found: set[str] = set()
        sizes = {len(prefix) for prefix in self.by_prefix}
        for size in sizes:
            for start in range(len(text) - size + 1):
                filed = self.by_prefix.get(text[start : start + size])
                if filed:
                    found.update(filed)
        return found


def _file_by_prefix(terms: dict[str, Any]) -> dict[str, list[str]]:
    filed: dict[str, list[str]] = defaultdict(list)
    for term in terms:
        filed[term.casefold()[:_PREFIX_CHARS]].append(term)
    return dict(filed)


@component
class L0HintProvider:
    """
    Understands a query through the knowledge base's titles, keywords, categories and entities (layer L0).

    L0 never produces evidence: its output is hint data for the L1 filter, the reranker and the trace. English
    terms match on word boundaries (case-insensitive), Chinese terms as substrings. Terms too short to mean
    anything, and keywords shared by more than `max_keyword_doc_fraction` of the documents, carry no signal and are
    ignored. A matched term points at a category only when it is specific to it: at least `min_domain_purity` of
    the documents that mention it belong to that category (statistics written by the indexer). When the matched
    terms point at exactly one nonblank category, it becomes `category_filter` for L1; zero or several give no
    filter.

    Hints are worked out for one caller: a term matches only through documents the caller may read (`groups`: a page's
    front matter `access` against the caller's groups; none: public pages only), so no hint names or points at a page
    the caller may not see; the category statistics L0 reads count public documents only.

    ### Usage example

    ```python
    from components.query.l0_hint_provider import L0HintProvider

    l0 = L0HintProvider(index_path="data/knowledge_index.json")
    out = l0.run(query="磁盘满了怎么办")
    print(out["hints"]["domains"], out["category_filter"])
    ```
    """

    def __init__(
        self,
        index_path: str = "data/knowledge_index.json",
        min_term_chars: int = 3,
        min_cjk_term_chars: int = 2,
        max_keyword_doc_fraction: float = 0.3,
        min_domain_purity: float = 0.7,
        enabled: bool = True,
    ) -> None:
        """
        Create the provider; the knowledge index is read in `warm_up` and re-read when the file changes.

        :param index_path: The knowledge index file written by `lookup-knowledge index`.
        :param min_term_chars: Shortest English term that may match.
        :param min_cjk_term_chars: Shortest term with Chinese characters that may match.
        :param max_keyword_doc_fraction: Keywords found in more than this fraction of documents are ignored.
        :param min_domain_purity: A matched term points at a category only when at least this share of the
            documents mentioning it (in their text or hint fields) belong to that category; terms spread over
            categories (e.g. a category named "about", a keyword "Meetings") stay hints without a domain.
        :param enabled: With False, no hints and no filter are produced.
        :raises ValueError: If a bound is out of range.
        """
        if min_term_chars < 1 or min_cjk_term_chars < 1:
            msg = f"min_term_chars={min_term_chars!r} and min_cjk_term_chars={min_cjk_term_chars!r} must be >= 1"
            raise ValueError(msg)
        if not 0 < min_domain_purity <= 1:
            msg = f"min_domain_purity={min_domain_purity!r} must be in (0, 1]; use e.g. 0.7"
            raise ValueError(msg)
        if not 0 < max_keyword_doc_fraction <= 1:
            msg = f"max_keyword_doc_fraction={max_keyword_doc_fraction!r} must be in (0, 1]; use e.g. 0.3"
            raise ValueError(msg)
        self.index_path = index_path
        self.min_term_chars = min_term_chars
        self.min_cjk_term_chars = min_cjk_term_chars
        self.max_keyword_doc_fraction = max_keyword_doc_fraction
        self.min_domain_purity = min_domain_purity
        self.enabled = enabled
        self._cache = CachedKnowledgeIndex(index_path)
        self._index = _TermIndex()

    def _long_enough(self, term: str) -> bool:
        limit = self.min_cjk_term_chars if has_cjk(term) else self.min_term_chars
        return len(term) >= limit

    def _build(self, index: KnowledgeIndex) -> _TermIndex:
        terms: dict[str, dict[str, set[int]]] = defaultdict(lambda: defaultdict(set))
        originals: dict[tuple[str, str], str] = {}
        for pos, doc in enumerate(index.documents):
            for kind, value in hint_values(doc):
                term = value.casefold()
                if self._long_enough(term):
                    terms[term][kind].add(pos)
                    originals.setdefault((kind, term), value)
        # the epsilon keeps 0.29 * 100 from flooring to 28
        limit = max(1, math.floor(self.max_keyword_doc_fraction * len(index.documents) + 1e-9))
        for term in list(terms):
            if len(terms[term].get("keyword", ())) > limit:
                terms[term].pop("keyword")
            if not terms[term]:
                del terms[term]
        return _TermIndex(
            documents=list(index.documents),
            terms={t: dict(k) for t, k in terms.items()},
            originals=originals,
            domain_of={t: d for t in terms if (d := self._domain(t, terms[t], index))},
            by_prefix=_file_by_prefix(terms),
            restricted={pos: doc.access for pos, doc in enumerate(index.documents) if doc.access},
        )

    def _domain(self, term: str, kinds: dict[str, set[int]], index: KnowledgeIndex) -> str:
        """The category a term points at, or "" when it is not specific to one."""
        # documents without a category neither point anywhere nor dilute a category
        counts = {c.strip(): n for c, n in index.term_categories.get(term, {}).items() if c.strip()}
        if term not in index.term_categories:  # an index written before term statistics: its own documents
            own = {index.documents[p].category.strip() for ps in kinds.values() for p in ps} - {""}
            return next(iter(own)) if len(own) == 1 else ""
        if not counts:
            return ""
        category, best = max(counts.items(), key=lambda item: (item[1], item[0]))
        return category.strip() if best / sum(counts.values()) >= self.min_domain_purity else ""

    def warm_up(self) -> None:
        """Read the knowledge index (again, if the file changed since the last read)."""
        index, changed = self._cache.get()
        if changed:
            self._index = self._build(index)

    @staticmethod
    def empty_hints() -> dict[str, list[str]]:
        """Return hint data with nothing matched."""
        return {"matched_titles": [], "matched_keywords": [], "domains": [], "entities": [], "matched_doc_ids": []}

    def _unreadable(self, groups: list[str] | None) -> set[int]:
        """The positions of the documents a caller with `groups` may not read."""
        if not self._index.restricted:
            return set()
        readers = reader_groups(groups)
        return {pos for pos, access in self._index.restricted.items() if not can_read(access, readers)}

    @component.output_types(hints=FrozenDict, category_filter=str)
    def run(self, query: str, groups: list[str] | None = None) -> dict[str, Any]:
        """
        Match the query against the knowledge base's hint terms, for one caller.

        :param query: The normalized query; empty gives empty hints.
        :param groups: The caller's access groups (None or empty: an anonymous caller, public pages only).
        :returns: `hints` (a read-only `FrozenDict`, which the pipeline hands on without copying: `matched_titles`,
            `matched_keywords`, `domains`, `entities`, `matched_doc_ids`) and `category_filter` (the single
            unambiguous category, or an empty string).
        """
        hints = self.empty_hints()
        if not self.enabled or not query.strip():
            return {"hints": FrozenDict(hints), "category_filter": ""}
        self.warm_up()
        folded = query.casefold()
        matched: dict[str, set[str]] = {kind: set() for kind in _KINDS}
        docs: set[int] = set()
        terms = self._index.terms
        unreadable = self._unreadable(groups)
        for term in self._index.candidates(folded.casefold()):
            if not mentions(folded, term):
                continue
            for kind, filed in terms[term].items():
                positions = filed - unreadable if unreadable else filed
                if not positions:  # a term only pages the caller may not read have
                    continue
                matched[kind].add(term)
                if kind != "category":
                    docs |= positions
        documents, spelled = self._index.documents, self._index.originals
        domain_of = self._index.domain_of
        domains = {domain_of.get(t, "") for kind in ("title", "keyword", "entity", "category") for t in matched[kind]}
        hints["matched_titles"] = sorted(spelled["title", t] for t in matched["title"])
        hints["matched_keywords"] = sorted(spelled["keyword", t] for t in matched["keyword"])
        hints["entities"] = sorted(spelled["entity", t] for t in matched["entity"])
        hints["domains"] = sorted(d for d in domains if d)
        hints["matched_doc_ids"] = sorted(documents[p].doc_id for p in docs)
        category_filter = hints["domains"][0] if len(hints["domains"]) == 1 else ""
        return {"hints": FrozenDict(hints), "category_filter": category_filter}
