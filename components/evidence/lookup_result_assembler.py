from __future__ import annotations

from typing import Any, Literal

from haystack import Document, component

from components.core.citation import Citation
from components.core.cursor import Cursor
from components.core.frozen import Documents, FrozenDict, FrozenList, Record
from components.core.location import lines_of, location_of, pages_of
from components.core.lookup_result import Anchor, EvidenceBlock, LookupResult
from components.core.scores import boost_reasons, document_key, similarity_of

NO_EVIDENCE_MESSAGE = (
    "No knowledge evidence was found for this query. Treat this as missing knowledge, not as a fact; "
    "do not answer from L0 hints or from memory as if it were documented."
)


def _has_hints(hints: Record) -> bool:
    return any(hints.get(k) for k in ("matched_titles", "matched_keywords", "domains", "entities", "matched_doc_ids"))


def _layer(doc: Document) -> Literal["L1", "L0+L1"]:
    return "L0+L1" if doc.meta.get("boosts") or doc.meta.get("attempt") == "filtered" else "L1"


def _score_label(doc: Document, ceiling: float | None) -> str:
    meta = doc.meta
    similarity = similarity_of(doc)
    boost = (doc.score or 0.0) - float(meta.get("base_score", doc.score or 0.0))
    raw = meta.get("raw_score")
    raw_text = f"{meta.get('score_semantics', 'raw')} {raw:.4f}" if isinstance(raw, int | float) else "raw n/a"
    noise = "" if ceiling is None else f", {similarity - ceiling:+.4f} against the noise ceiling {ceiling:.4f}"
    bonus = meta.get("crosslingual_bonus")
    crosslingual = f" + cross-lingual bonus {float(bonus):.4f}" if bonus is not None else ""
    return (
        f"similarity {similarity:.4f} ({raw_text} via {meta.get('retrieval_path', '?')} path{noise}), "
        f"lexical coverage {float(meta.get('lexical_coverage', 0.0)):.2f}; rank score {doc.score or 0.0:.4f} = "
        f"similarity + language balance {-float(meta.get('language_offset', 0.0)):+.4f} + lexical bonus "
        f"{float(meta.get('lexical_score', 0.0)):.4f}{crosslingual} + rule boosts {boost:.4f}"
    )


#: why the deduper leaves out a block that more pages may bring (a duplicate key is the same chunk; the per-document
#: cap keeps one document from filling the result, and `read_document` reads the rest of it); another release of a
#: page already shown is more: the agent does not know its source, and the next page brings it
_MORE_REASONS = ("max_blocks", "page_versions_cap")


def _citation(meta: Record) -> str:
    source, index, version = meta.get("source"), meta.get("chunk_index"), meta.get("doc_version")
    if not source or not isinstance(index, int) or isinstance(index, bool) or not version:
        return ""  # a chunk written by another tool: no position or version to cite
    return str(Citation.of(str(source), index, str(version)))


def _anchor(meta: Record) -> Anchor | None:
    if not meta.get("source"):
        return None
    breadcrumb = str(meta.get("breadcrumb") or "")
    return Anchor(
        source=str(meta["source"]),
        heading_path=[part for part in breadcrumb.split(" > ") if part],
        lines=lines_of(meta),
        pages=pages_of(meta),
        doc_version=str(meta.get("doc_version") or ""),
    )


def _block(doc: Document, ceiling: float | None) -> EvidenceBlock:
    meta = doc.meta
    raw = meta.get("raw_score")
    return EvidenceBlock(
        evidence_key=str(meta.get("evidence_key") or doc.id),
        source=str(meta.get("source") or ""),
        doc_id=document_key(meta, doc.id),
        title=str(meta.get("title") or ""),
        breadcrumb=str(meta.get("breadcrumb") or ""),
        location=location_of(meta),
        lines=lines_of(meta),
        pages=pages_of(meta),
        category=str(meta.get("category") or ""),
        retrieval_layer=_layer(doc),
        content=doc.content or "",
        score=round(doc.score or 0.0, 4),
        similarity=round(similarity_of(doc), 4),
        lexical_coverage=round(float(meta.get("lexical_coverage", 0.0)), 4),
        crosslingual_similarity=meta.get("crosslingual_similarity"),
        noise_margin=meta.get("noise_margin"),
        evidence_basis=meta.get("evidence_basis"),
        raw_score=round(float(raw), 4) if isinstance(raw, int | float) else None,
        score_semantics=str(meta.get("score_semantics") or ""),
        retrieval_path=str(meta.get("retrieval_path") or ""),
        score_label=_score_label(doc, ceiling),
        hit_reasons=list(meta.get("hit_reasons", [])),
        citation=_citation(meta),
        anchor=_anchor(meta),
        truncated=bool(meta.get("content_truncated")),
        superseded=bool(meta.get("superseded")),
        replaces=meta.get("replaces"),
        stale=bool(meta.get("stale")),
        reviewed=meta.get("reviewed"),
    )


def _lifecycle_note(lifecycle: Record, blocks: Documents) -> str:
    """What the message adds about superseded, replaced and stale evidence among the returned blocks."""
    returned = {str(d.meta.get("source")) for d in blocks}
    notes = []
    for pair in lifecycle.get("replaced") or []:
        if pair["by"] in returned:
            notes.append(f"{pair['old']} is superseded: its successor {pair['by']} is returned instead.")
    old = [s for s in dict.fromkeys(lifecycle.get("superseded") or []) if s in returned]
    if old:
        notes.append(
            f"{', '.join(old)} {'is' if len(old) == 1 else 'are'} marked superseded with no successor indexed: "
            "it may be out of date; say so when you use it."
        )
    stale = [s for s in dict.fromkeys(x["source"] for x in lifecycle.get("stale") or []) if s in returned]
    if stale:
        notes.append(f"{', '.join(stale)}: not reviewed lately (stale); check before relying on it.")
    return (" " + " ".join(notes)) if notes else ""


def _filter_message(report: Record) -> str:
    """Why filters that match no document found nothing, naming the values that exist."""
    shown = []
    for key, values in (report.get("available") or {}).items():
        listed = ", ".join(f"{v['value']} ({v['documents']})" for v in values) or "none"
        shown.append(f"{key}: {listed}")
    return (
        f"The filters {dict(report.get('requested') or {})} match no indexed document, so nothing was searched. "
        f"Values that exist (documents): {'; '.join(shown)}. Call again with existing values (list_facets lists "
        "them all), or without filters."
    )


def _no_evidence_message(evidence: Record) -> str:
    rejected = evidence.get("rejected") or []
    if not rejected or evidence.get("noise_ceiling") is None:
        return NO_EVIDENCE_MESSAGE
    best = max(rejected, key=lambda r: r["similarity"])
    return (
        f"{NO_EVIDENCE_MESSAGE} (The closest chunk, {best['source']}, has similarity {best['similarity']:.3f}: not "
        f"enough above the knowledge base's noise ceiling {evidence['noise_ceiling']:.3f} for this language.)"
    )


@component
class LookupResultAssembler:
    """
    Assembles the evidence-first `LookupResult` and the compact `retrieval_details` for the trace.

    Status rules: a rejected query gives `invalid_query`; L1 switched off gives `l1_disabled`; every L1 attempt
    failing gives `error`; no candidate, or no candidate that the evidence gate accepts, gives `no_evidence`;
    evidence that was all returned earlier in the session gives `already_returned` (empty evidence and context, full
    traces, and the relevance of what was found); otherwise `evidence`, whose message says how many blocks were held
    back because the session already has them. `relevanceLevel` is the evidence gate's (`none` without evidence).
    `completenessHint` is `truncated` when the context pack had to cut or leave out a block for its budget,
    `complete` otherwise (`none` without evidence). L0 hints appear only as `l0Hints` and hit reasons, never as
    evidence.

    ### Usage example

    ```python
    from components.evidence.lookup_result_assembler import LookupResultAssembler

    out = LookupResultAssembler().run(query="disk full", documents=blocks, context_pack=pack, ...)
    print(out["result"]["evidenceStatus"])
    ```
    """

    def __init__(self, preview_chars: int = 160) -> None:
        """
        Create the assembler.

        :param preview_chars: Length of the content preview kept in trace summaries.
        :raises ValueError: If a parameter is out of range.
        """
        if preview_chars < 0:
            msg = f"preview_chars={preview_chars!r} must be >= 0"
            raise ValueError(msg)
        self.preview_chars = preview_chars

    @staticmethod
    def _status(
        error: str, trace: Record, evidence: Record, blocks: int, held_back: int, report: Record, paged: bool
    ) -> tuple[str, str]:
        attempts = trace.get("attempts", [])
        if error:
            return "invalid_query", f"Rejected query: {error}."
        if not trace.get("l1_enabled", True):
            return "l1_disabled", "L1 semantic retrieval is disabled by configuration; no evidence was retrieved."
        if report and not report.get("documents"):
            return "no_evidence", _filter_message(report)
        if attempts and all(a.get("error") for a in attempts):
            return "error", "Knowledge retrieval failed: " + "; ".join(str(a["error"]) for a in attempts)
        if not evidence.get("found"):
            within = (
                f" (Searched only within the filters {dict(report['requested'])}: {report['documents']} documents.)"
                if report
                else ""
            )
            return "no_evidence", _no_evidence_message(evidence) + within
        if blocks == 0 and paged and not held_back:
            return "already_returned", (
                "Every evidence block for this query was returned on earlier pages (this cursor's); there is no more."
            )
        if blocks == 0:
            return "already_returned", (
                "All evidence for this query was already returned earlier in this session; nothing new to add. "
                "Use the evidence you already received."
            )
        held = f" {held_back} more, returned earlier in this session, were held back." if held_back else ""
        return "evidence", (
            f"Found {blocks} evidence block(s). Answer from the evidence blocks and cite their sources.{held}"
        )

    @staticmethod
    def _rerank_trace(rerank_trace: Record, blocks: Documents) -> dict[str, Any]:
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

    @staticmethod
    def _more(context_pack: Record, dedup_summary: Record) -> bool:
        """Whether evidence passed the gate that this result does not hold: left out by the pack or the block cap."""
        capped = any(d.get("reason") in _MORE_REASONS for d in dedup_summary.get("dropped") or [])
        return capped or bool(context_pack.get("omittedSources"))

    @staticmethod
    def _cursor(query: str, report: Record, session_summary: Record, blocks: Documents) -> str:
        delivered = [*session_summary.get("excluded", [])]
        for block in blocks:
            delivered.append(str(block.meta.get("evidence_key") or block.id))
            if block.meta.get("text_key"):
                delivered.append(str(block.meta["text_key"]))
        return Cursor(query, dict(report.get("requested") or {}), tuple(dict.fromkeys(delivered))).encode()

    def _summary(self, doc: Document) -> dict[str, Any]:
        content = doc.content or ""
        preview = content[: self.preview_chars] + ("…" if len(content) > self.preview_chars else "")
        return {
            "evidence_key": doc.meta.get("evidence_key"),
            "text_key": doc.meta.get("text_key"),
            "source": doc.meta.get("source"),
            "title": doc.meta.get("title"),
            "retrieval_layer": _layer(doc),
            "score": round(doc.score or 0.0, 4),
            "similarity": round(similarity_of(doc), 4),
            "hit_reasons": doc.meta.get("hit_reasons", []),
            "preview": preview,
        }

    @component.output_types(result=FrozenDict, details=FrozenDict)
    def run(
        self,
        query: str,
        documents: Documents,
        context_pack: Record,
        retrieval_trace: Record,
        dedup_summary: Record,
        rerank_trace: Record | None = None,
        query_transform: dict[str, Any] | None = None,
        hints: Record | None = None,
        category_filter: str | None = None,
        session_summary: dict[str, Any] | None = None,
        error: str | None = None,
        session_id: str | None = None,
        sidecar: dict[str, Any] | None = None,
        evidence_trace: Record | None = None,
        ranking: list[str] | FrozenList[str] | None = None,
        filter_report: dict[str, Any] | None = None,
        filter_error: str | None = None,
        lifecycle: Record | None = None,
    ) -> dict[str, Any]:
        """
        Assemble the result.

        :param query: The normalized query.
        :param documents: The consumable evidence blocks (after the evidence gate, session filtering and dedup).
        :param context_pack: The packed context of those blocks.
        :param retrieval_trace: From the retriever.
        :param dedup_summary: From the deduper.
        :param rerank_trace: From the rule reranker (its weights and top candidates); without one (a pipeline that
            ranks with other rankers) the trace lists the returned blocks with no weights.
        :param query_transform: From the query transformer.
        :param hints: L0 hints.
        :param category_filter: The L0 category filter used, if any.
        :param session_summary: From the session filter.
        :param error: Why the query was rejected, if it was.
        :param session_id: The caller's session.
        :param sidecar: The comparison retrieval's report; it goes to `details` only, never into `result`.
        :param evidence_trace: From the evidence gate (whether there is evidence, and why); without one, any block
            counts as evidence of `low` relevance.
        :param ranking: The evidence keys of every candidate the gate judged, in rank order; it goes to `details`
            only (`ranking`), for whoever reads the trace or measures the ranking (`eval`).
        :param filter_report: The caller's filters and what they matched (`DocumentFilterResolver`), as `filters`.
        :param filter_error: Why the caller's filters were refused: the call is `invalid_query`, as a bad query is.
        :param lifecycle: The supersession resolver's summary (pages replaced, superseded without a successor, stale):
            the message says what concerns the returned blocks; `details` keeps it whole.
        :returns: `result` (the camelCase `LookupResult` JSON) and `details` (snake_case `retrieval_details`), each
            a read-only `FrozenDict` of plain JSON values, which the pipeline hands on without copying.
        """
        hints = hints or {}
        session_summary = session_summary or {}
        evidence: Record = evidence_trace or {
            "found": bool(documents or session_summary.get("suppressed")),
            "candidates": int(dedup_summary.get("candidate_count", 0)),
            "relevance": "low",
        }
        held_back = len(session_summary.get("suppressed") or [])
        report = filter_report or {}
        rejected = error or (f"filters: {filter_error}" if filter_error else "")
        paged = bool(session_summary.get("paged"))
        status, message = self._status(rejected, retrieval_trace, evidence, len(documents), held_back, report, paged)
        found = status == "evidence"
        blocks = list(documents) if found else []
        ceiling = evidence.get("noise_ceiling")
        truncated = bool(context_pack.get("truncatedSources") or context_pack.get("omittedSources"))
        more = found and self._more(context_pack, dedup_summary)
        cursor = self._cursor(query, report, session_summary, blocks) if more else None
        if more:
            message += " More evidence passed than this result holds: call again with `cursor` for the next blocks."
        if found:
            message += _lifecycle_note(lifecycle or {}, blocks)
        rerank_trace = rerank_trace or {}
        returned_rerank = self._rerank_trace(rerank_trace, blocks)
        kept_relevance = status in ("evidence", "already_returned")
        result = LookupResult.model_validate(
            dict(
                found=found,
                evidence_status=status,
                message=message,
                query=query,
                session_id=session_id or None,
                evidence_blocks=[_block(d, ceiling) for d in blocks],
                context_pack=context_pack if found else {"strategy": context_pack.get("strategy", "")},
                retrieval_trace=retrieval_trace,
                rerank_trace=returned_rerank,
                evidence_decision=evidence_trace or {},
                relevance_level=evidence.get("relevance", "low") if kept_relevance else "none",
                completeness_hint=("truncated" if truncated else "complete") if found else "none",
                l0_hints={**hints, "category_filter": category_filter or None},
                truncated=truncated and found,
                more_available=more,
                cursor=cursor,
                filters=filter_report or None,
                error=rejected or (message if status == "error" else None),
            )
        )
        candidates = int(evidence.get("candidates", 0))
        pack_summary = {k: v for k, v in context_pack.items() if k != "packedText"}
        l1_ran = any(a.get("candidate_count") for a in retrieval_trace.get("attempts", []))
        details = {
            "status": status,
            "retrieval_layer": ("L0+L1" if _has_hints(hints) else "L1") if l1_ran else "none",
            "l0_hints": {**hints, "category_filter": category_filter or None},
            "query_transform": query_transform or {},
            "retrieval_trace": dict(retrieval_trace),
            "rerank_trace": {**returned_rerank, "candidates": rerank_trace.get("candidates", [])},
            "context_pack_summary": pack_summary if found else {},
            "evidence": dict(evidence_trace or {}),
            "evidence_blocks": [self._summary(d) for d in blocks],
            "fallback_reason": retrieval_trace.get("fallback_reason"),
            "candidate_count": candidates,
            "evidence_block_count": len(blocks),
            "dedup": dict(dedup_summary),
            "session": session_summary,
            "sidecar": sidecar or {"enabled": False, "status": "off"},
            "ranking": list(ranking or []),
            "filters": dict(report) if report else None,
            "more_available": more,
            "lifecycle": dict(lifecycle or {}),
        }
        return {"result": FrozenDict(result.to_json_dict()), "details": FrozenDict(details)}
