from __future__ import annotations

from typing import Any

from haystack import Document, component

from components.core.lookup_result import EvidenceBlock, LookupResult
from components.core.scores import boost_reasons, document_key, similarity_of

NO_EVIDENCE_MESSAGE = (
    "No knowledge evidence was found for this query. Treat this as missing knowledge, not as a fact; "
    "do not answer from L0 hints or from memory as if it were documented."
)


def _has_hints(hints: dict[str, Any]) -> bool:
    return any(hints.get(k) for k in ("matched_titles", "matched_keywords", "domains", "entities", "matched_doc_ids"))


def _layer(doc: Document) -> str:
    return "L0+L1" if doc.meta.get("boosts") or doc.meta.get("attempt") == "filtered" else "L1"


def _score_label(doc: Document) -> str:
    meta = doc.meta
    base = float(meta.get("base_score", doc.score or 0.0))
    boost = (doc.score or 0.0) - base
    raw = meta.get("raw_score")
    raw_text = f"{meta.get('score_semantics', 'raw')} {raw:.4f}" if isinstance(raw, int | float) else "raw n/a"
    return (
        f"final {doc.score or 0.0:.4f} = normalized similarity {similarity_of(doc):.4f} ({raw_text} via "
        f"{meta.get('retrieval_path', '?')} path) + lexical {float(meta.get('lexical_score', 0.0)):.4f} "
        f"+ rule boosts {boost:.4f}"
    )


@component
class LookupResultAssembler:
    """
    Assembles the evidence-first `LookupResult` and the compact `retrieval_details` for the trace.

    Status rules: a rejected query gives `invalid_query`; L1 switched off gives `l1_disabled`; every L1 attempt
    failing gives `error`; no usable candidate gives `no_evidence`; blocks that were all returned earlier in the
    session give `already_returned` (empty evidence and context, full traces); otherwise `evidence`.
    `relevanceLevel` is `high` when the best block's similarity reaches `high_relevance_threshold`, `medium` when it
    reaches the retriever's reference threshold, else `low` (`none` without evidence). `completenessHint` is
    `truncated` when the context pack had to cut or leave out a block for its budget, `complete`
    otherwise (`none` without evidence). L0 hints appear only as `l0Hints` and hit reasons, never as evidence.

    ### Usage example

    ```python
    from components.lookup_result_assembler import LookupResultAssembler

    out = LookupResultAssembler().run(query="disk full", documents=blocks, context_pack=pack, ...)
    print(out["result"]["evidenceStatus"])
    ```
    """

    def __init__(self, high_relevance_threshold: float = 0.955, preview_chars: int = 160) -> None:
        """
        Create the assembler.

        :param high_relevance_threshold: Normalized similarity from which relevance is `high`.
        :param preview_chars: Length of the content preview kept in trace summaries.
        :raises ValueError: If a parameter is out of range.
        """
        if not 0 <= high_relevance_threshold <= 1:
            msg = f"high_relevance_threshold={high_relevance_threshold!r} must be in [0, 1]"
            raise ValueError(msg)
        if preview_chars < 0:
            msg = f"preview_chars={preview_chars!r} must be >= 0"
            raise ValueError(msg)
        self.high_relevance_threshold = high_relevance_threshold
        self.preview_chars = preview_chars

    def _status(self, error: str, trace: dict[str, Any], candidates: int, blocks: int) -> tuple[str, str]:
        attempts = trace.get("attempts", [])
        if error:
            return "invalid_query", f"Rejected query: {error}."
        if not trace.get("l1_enabled", True):
            return "l1_disabled", "L1 semantic retrieval is disabled by configuration; no evidence was retrieved."
        if attempts and all(a.get("error") for a in attempts):
            return "error", "Knowledge retrieval failed: " + "; ".join(str(a["error"]) for a in attempts)
        if candidates == 0:
            return "no_evidence", NO_EVIDENCE_MESSAGE
        if blocks == 0:
            return "already_returned", (
                "All evidence for this query was already returned earlier in this session; nothing new to add. "
                "Use the evidence you already received."
            )
        return "evidence", f"Found {blocks} evidence block(s). Answer from contextPack/evidenceBlocks and cite sources."

    def _relevance(self, blocks: list[Document], reference: float) -> str:
        if not blocks:
            return "none"
        best = max(similarity_of(d) for d in blocks)
        if best >= self.high_relevance_threshold:
            return "high"
        return "medium" if best >= reference else "low"

    @staticmethod
    def _rerank_trace(rerank_trace: dict[str, Any], blocks: list[Document]) -> dict[str, Any]:
        """The reranker's weights, and the blocks actually returned, in their returned order."""
        items = [
            {
                "rank": rank,
                "source": d.meta.get("source"),
                "evidence_key": d.meta.get("evidence_key"),
                "base_score": round(float(d.meta.get("base_score", d.score or 0.0)), 4),
                "final_score": round(d.score or 0.0, 4),
                "boost_reasons": boost_reasons(d.meta),
            }
            for rank, d in enumerate(blocks, start=1)
        ]
        return {
            "weights": rerank_trace.get("weights", {}),
            "max_boost": rerank_trace.get("max_boost", 0.0),
            "items": items,
        }

    def _summary(self, doc: Document) -> dict[str, Any]:
        content = doc.content or ""
        preview = content[: self.preview_chars] + ("…" if len(content) > self.preview_chars else "")
        return {
            "evidence_key": doc.meta.get("evidence_key"),
            "source": doc.meta.get("source"),
            "title": doc.meta.get("title"),
            "retrieval_layer": _layer(doc),
            "score": round(doc.score or 0.0, 4),
            "hit_reasons": doc.meta.get("hit_reasons", []),
            "preview": preview,
        }

    @component.output_types(result=dict[str, Any], details=dict[str, Any])
    def run(
        self,
        query: str,
        documents: list[Document],
        context_pack: dict[str, Any],
        retrieval_trace: dict[str, Any],
        rerank_trace: dict[str, Any],
        dedup_summary: dict[str, Any],
        query_transform: dict[str, Any] | None = None,
        hints: dict[str, Any] | None = None,
        category_filter: str | None = None,
        session_summary: dict[str, Any] | None = None,
        error: str | None = None,
        session_id: str | None = None,
        sidecar: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """
        Assemble the result.

        :param query: The normalized query.
        :param documents: The consumable evidence blocks (after dedup and session filtering).
        :param context_pack: The packed context of those blocks.
        :param retrieval_trace: From the retriever.
        :param rerank_trace: From the reranker.
        :param dedup_summary: From the deduper (its `candidate_count` is the number of L1 candidates).
        :param query_transform: From the query transformer.
        :param hints: L0 hints.
        :param category_filter: The L0 category filter used, if any.
        :param session_summary: From the session filter.
        :param error: Why the query was rejected, if it was.
        :param session_id: The caller's session.
        :param sidecar: The comparison retrieval's report; it goes to `details` only, never into `result`.
        :returns: `result` (the camelCase `LookupResult` JSON) and `details` (snake_case `retrieval_details`).
        """
        hints = hints or {}
        session_summary = session_summary or {}
        candidates = int(dedup_summary.get("candidate_count", 0))
        status, message = self._status(error or "", retrieval_trace, candidates, len(documents))
        found = status == "evidence"
        blocks = documents if found else []
        truncated = bool(context_pack.get("truncatedSources") or context_pack.get("omittedSources"))
        returned_rerank = self._rerank_trace(rerank_trace, blocks)
        result = LookupResult.model_validate(
            dict(
                found=found,
                evidence_status=status,
                message=message,
                query=query,
                session_id=session_id or None,
                evidence_blocks=[
                    EvidenceBlock.model_validate(
                        dict(
                            evidence_key=str(d.meta.get("evidence_key") or d.id),
                            source=str(d.meta.get("source") or ""),
                            doc_id=document_key(d.meta, d.id),
                            title=str(d.meta.get("title") or ""),
                            breadcrumb=str(d.meta.get("breadcrumb") or ""),
                            category=str(d.meta.get("category") or ""),
                            retrieval_layer=_layer(d),
                            content=d.content or "",
                            score=round(d.score or 0.0, 4),
                            score_label=_score_label(d),
                            hit_reasons=list(d.meta.get("hit_reasons", [])),
                        )
                    )
                    for d in blocks
                ],
                context_pack=context_pack if found else {"strategy": context_pack.get("strategy", "")},
                retrieval_trace=retrieval_trace,
                rerank_trace=returned_rerank,
                relevance_level=self._relevance(blocks, float(retrieval_trace.get("reference_threshold", 0.0))),
                completeness_hint=("truncated" if truncated else "complete") if found else "none",
                l0_hints={**hints, "category_filter": category_filter or None},
                error=error or (message if status == "error" else None),
            )
        )
        pack_summary = {k: v for k, v in context_pack.items() if k != "packedText"}
        l1_ran = any(a.get("candidate_count") for a in retrieval_trace.get("attempts", []))
        details = {
            "status": status,
            "retrieval_layer": ("L0+L1" if _has_hints(hints) else "L1") if l1_ran else "none",
            "l0_hints": {**hints, "category_filter": category_filter or None},
            "query_transform": query_transform or {},
            "retrieval_trace": retrieval_trace,
            "rerank_trace": {**returned_rerank, "candidates": rerank_trace.get("candidates", [])},
            "context_pack_summary": pack_summary if found else {},
            "evidence_blocks": [self._summary(d) for d in blocks],
            "fallback_reason": retrieval_trace.get("fallback_reason"),
            "candidate_count": candidates,
            "evidence_block_count": len(blocks),
            "dedup": dedup_summary,
            "session": session_summary,
            "sidecar": sidecar or {"enabled": False, "status": "off"},
        }
        return {"result": result.to_json_dict(), "details": details}
