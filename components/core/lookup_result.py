"""The `lookup_knowledge` result contract: evidence first, camelCase JSON, no legacy primary/supplement fields."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

EvidenceStatus = Literal["evidence", "no_evidence", "already_returned", "l1_disabled", "invalid_query", "error"]


class _Contract(BaseModel):
    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True)


class Anchor(_Contract):
    """Where a block is, precisely enough to find it again: the file, its section, its lines or pages, its version."""

    source: str
    heading_path: list[str] = Field(default_factory=list)
    lines: list[int] | None = None
    pages: list[int] | None = None
    #: the document version the block was read in (a citation of an edited document says so when read)
    doc_version: str = ""


class EvidenceBlock(_Contract):
    """One piece of evidence: a chunk of a knowledge document, with where it came from and why it was chosen."""

    evidence_key: str
    source: str
    doc_id: str
    title: str = ""
    breadcrumb: str = ""
    #: where in the file the chunk is, for a citation: `lines 12-30` (a text format), `page 3` or `pages 3-4` (a PDF);
    #: '' when the converter gives no position (HTML, Word: the breadcrumb says where)
    location: str = ""
    #: the same as numbers: first and last line in the file, or first and last page
    lines: list[int] | None = None
    pages: list[int] | None = None
    category: str = ""
    retrieval_layer: Literal["L1", "L0+L1"]
    content: str
    #: the rank score the blocks are ordered by (similarity, plus the language balance's adjustment, the lexical
    #: bonus, the cross-lingual bonus and rule boosts): compare it within one result only; threshold `similarity`
    #: instead
    score: float
    #: normalized dense similarity to the query, 0-1, the same meaning on every path and metric
    similarity: float
    #: share of the query's lexical weight the block matches (BM25 over the largest score the query's terms reach)
    lexical_coverage: float = 0.0
    #: similarity under the cross-lingual model (use-multilingual-v3), on a collection of more than one language
    crosslingual_similarity: float | None = None
    #: how far the similarity is above (+) or below (-) the collection's noise ceiling for the query's language
    noise_margin: float | None = None
    #: why it counts as evidence: `dense` (similarity clears the noise ceiling), `dense+lexical`, or `rank` (ranks with
    #: the best block without meeting either rule on its own, as an answer in the other language may)
    evidence_basis: str | None = None
    raw_score: float | None = None
    score_semantics: str = ""
    retrieval_path: str = ""
    score_label: str
    hit_reasons: list[str] = Field(default_factory=list)
    #: a stable id for this block (`source#chunk_index@version`): `read_evidence` takes it back
    citation: str = ""
    anchor: Anchor | None = None
    #: the content was cut to fit the call's character budget (`read_evidence` returns it whole)
    truncated: bool = False
    #: its page says it is superseded, deprecated or expired, and no successor is indexed: it may be out of date
    superseded: bool = False
    #: the superseded page this block's page replaces (it was the best match; this is its successor)
    replaces: str | None = None
    #: its page was last reviewed longer ago than the configured review age (`reviewed` says when)
    stale: bool = False
    reviewed: str | None = None


class ContextPack(_Contract):
    """The evidence packed into one text for the agent, within a character budget."""

    packed_text: str = ""
    strategy: str = ""
    char_budget: int = 0
    used_chars: int = 0
    included_sources: list[str] = Field(default_factory=list)
    omitted_sources: list[str] = Field(default_factory=list)
    truncated_sources: list[str] = Field(default_factory=list)


class RetrievalAttempt(_Contract):
    """One L1 attempt (filtered or unfiltered)."""

    name: str
    filter: dict[str, str] | None = None
    mode: str
    path: str | None = None
    raw_hits: int = 0
    stale_dropped: int = 0
    below_threshold_dropped: int = 0  # candidates below the evidence threshold (the joiner leaves them out)
    candidate_count: int = 0  # the usable candidates it found (similarity at least the evidence threshold)
    top_score: float | None = None  # the best similarity among them
    lexical_path: str | None = None  # where BM25 ran: `milvus`, `local`, or None (off, or not run)
    latency_ms: float = 0.0
    #: where the attempt's time went, in ms: `dense` (search), `lexical` (the BM25 search, run beside the dense one),
    #: `lexical_wait` (how long the attempt waited for it after the dense search), `lexical_fetch` (chunks only BM25
    #: found); absent: not run
    stage_ms: dict[str, float] = Field(default_factory=dict)
    error: str | None = None
    fallback: dict[str, str] | None = None


class Calibration(_Contract):
    """What `index` counted about the collection: noise ceilings per query script, and chunks per language."""

    noise_similarity: dict[str, dict[str, float]] = Field(default_factory=dict)
    noise_probes: int = 0
    language_chunks: dict[str, int] = Field(default_factory=dict)


class RetrievalTrace(_Contract):
    """How L1 ran: attempts, the selected one and why a retry happened."""

    l1_enabled: bool = True
    mode: str = ""
    reference_threshold: float = 0.0
    evidence_threshold: float = 0.0
    attempts: list[RetrievalAttempt] = Field(default_factory=list)
    selected_attempt: str | None = None
    fallback_reason: str | None = None
    calibration: Calibration | None = None
    query_terms: dict[str, int] | None = None


class EvidenceRule(_Contract):
    """The evidence rule's parameters, as applied."""

    dense_margin: float = 0.0
    standout: float | None = None
    min_standout: float = 0.0
    lexical_coverage: float = 0.0
    lexical_margin: float = 0.0
    lexical_basis_allowed: bool = False
    decision_depth: int = 0
    max_gap: float = 0.0


class BestEvidence(_Contract):
    """The strongest evidence block and why it counts."""

    evidence_key: str | None = None
    similarity: float
    noise_margin: float
    basis: str


class RejectedCandidate(_Contract):
    """A candidate that is not evidence, and why."""

    evidence_key: str | None = None
    source: str | None = None
    similarity: float
    lexical_coverage: float = 0.0
    reason: Literal["below_noise", "far_below_best", "no_evidence_on_top"]


class EvidenceDecision(_Contract):
    """Why the lookup found evidence or not: the noise ceiling, the rule, the best evidence and the first's lead."""

    found: bool = False
    candidates: int = 0
    noise_ceiling: float | None = None
    noise_level: str = ""
    calibrated: bool = False
    rule: EvidenceRule = Field(default_factory=EvidenceRule)
    best: BestEvidence | None = None
    #: rank score of the first block over the best candidate of another document (`runner_up`; not a translation or
    #: a release of the first block's page): sets `relevance`
    lead: float | None = None
    runner_up: str | None = None
    relevance: Literal["high", "medium", "low", "none"] = "none"
    evidence_count: int = 0
    rejected: list[RejectedCandidate] = Field(default_factory=list)


class RerankItem(_Contract):
    """One returned block: its rank in the result, its scores before and after the rule boosts, and why."""

    rank: int
    source: str | None = None
    evidence_key: str | None = None
    base_score: float
    final_score: float
    boost_reasons: list[str] = Field(default_factory=list)


class RerankTrace(_Contract):
    """The rule weights, and the returned evidence blocks in their returned order with what moved them."""

    weights: dict[str, float] = Field(default_factory=dict)
    max_boost: float = 0.0
    items: list[RerankItem] = Field(default_factory=list)


class L0Hints(_Contract):
    """What L0 understood from the query. Hint data only: never evidence."""

    matched_titles: list[str] = Field(default_factory=list)
    matched_keywords: list[str] = Field(default_factory=list)
    domains: list[str] = Field(default_factory=list)
    entities: list[str] = Field(default_factory=list)
    matched_doc_ids: list[str] = Field(default_factory=list)
    category_filter: str | None = None


class FacetValue(_Contract):
    """One value of a filter key, and how many documents have it."""

    value: str
    documents: int


class FilterReport(_Contract):
    """The caller's filters: as given, what they matched, and when nothing, which values exist."""

    requested: dict[str, Any] = Field(default_factory=dict)
    documents: int = 0
    chunks: int = 0
    available: dict[str, list[FacetValue]] | None = None


class LookupResult(_Contract):
    """The result of one `lookup_knowledge` call."""

    found: bool
    evidence_status: EvidenceStatus
    message: str
    query: str = ""
    session_id: str | None = None
    evidence_blocks: list[EvidenceBlock] = Field(default_factory=list)
    context_pack: ContextPack = Field(default_factory=ContextPack)
    retrieval_trace: RetrievalTrace = Field(default_factory=RetrievalTrace)
    rerank_trace: RerankTrace = Field(default_factory=RerankTrace)
    evidence_decision: EvidenceDecision = Field(default_factory=EvidenceDecision)
    relevance_level: Literal["high", "medium", "low", "none"] = "none"
    completeness_hint: Literal["complete", "truncated", "none"] = "none"
    l0_hints: L0Hints = Field(default_factory=L0Hints)
    #: a block was cut, or left out, to fit the character budget
    truncated: bool = False
    #: more evidence passed the gate than this result holds: call again with `cursor` for the next blocks
    more_available: bool = False
    cursor: str | None = None
    #: the caller's explicit filters and what they matched (None without filters)
    filters: FilterReport | None = None
    error: str | None = None
    #: the `tool_invocation` row's id; None while the row waits in the spool (or in memory: see `trace_error`)
    trace_id: int | None = None
    #: None when the call was recorded or spooled; else why neither the trace database nor the spool took its row
    #: (one line; the row waits in memory and is written as soon as either can be)
    trace_error: str | None = None

    def to_json_dict(self) -> dict[str, Any]:
        """Return the camelCase JSON form."""
        return self.model_dump(mode="json", by_alias=True)
