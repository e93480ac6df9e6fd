"""The `lookup_knowledge` result contract: evidence first, camelCase JSON, no legacy primary/supplement fields."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

EvidenceStatus = Literal["evidence", "no_evidence", "already_returned", "l1_disabled", "invalid_query", "error"]


class _Contract(BaseModel):
    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True)


class EvidenceBlock(_Contract):
    """One piece of evidence: a chunk of a knowledge document, with where it came from and why it was chosen."""

    evidence_key: str
    source: str
    doc_id: str
    title: str = ""
    breadcrumb: str = ""
    category: str = ""
    retrieval_layer: Literal["L1", "L0+L1"]
    content: str
    score: float
    score_label: str
    hit_reasons: list[str] = Field(default_factory=list)


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
    below_threshold_dropped: int = 0
    candidate_count: int = 0
    top_score: float | None = None
    lexical_path: str | None = None  # where BM25 ran for hybrid retrieval: `milvus`, `local`, or None (off)
    latency_ms: float = 0.0
    error: str | None = None
    fallback: dict[str, str] | None = None


class RetrievalTrace(_Contract):
    """How L1 ran: attempts, the selected one and why a retry happened."""

    l1_enabled: bool = True
    mode: str = ""
    reference_threshold: float = 0.0
    evidence_threshold: float = 0.0
    attempts: list[RetrievalAttempt] = Field(default_factory=list)
    selected_attempt: str | None = None
    fallback_reason: str | None = None


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
    relevance_level: Literal["high", "medium", "low", "none"] = "none"
    completeness_hint: Literal["complete", "truncated", "none"] = "none"
    l0_hints: L0Hints = Field(default_factory=L0Hints)
    error: str | None = None
    trace_id: int | None = None

    def to_json_dict(self) -> dict[str, Any]:
        """Return the camelCase JSON form."""
        return self.model_dump(mode="json", by_alias=True)
