"""`lookup-knowledge trace`: recorded calls as a terminal shows them safely, and as JSON."""

from __future__ import annotations

import json
import unicodedata
from datetime import UTC, datetime
from typing import Any

from pipelines.traces import TraceRow

_UNPRINTABLE = ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp")


def terminal_safe(text: Any) -> str:
    r"""
    Return `text` with every character a terminal would act on escaped (`\x1b`, `\u202e`, lone surrogates).

    :param text: Any value; None gives `-`.
    :returns: Printable text.
    """
    if text is None:
        return "-"
    return "".join(
        ch if unicodedata.category(ch) not in _UNPRINTABLE else ch.encode("unicode_escape").decode("ascii")
        for ch in str(text)
    )


def parse_time(value: str) -> datetime:
    """
    Read a `--since` / `--until` time: ISO 8601 (`2026-12-01`, `2026-12-01T10:00`), UTC when no zone is given.

    :param value: The text.
    :returns: An aware datetime.
    :raises ValueError: If the text is not such a time.
    """
    try:
        moment = datetime.fromisoformat(value)
    except ValueError as err:
        msg = f"time {value!r} is not ISO 8601; use e.g. 2026-12-01 or 2026-12-01T10:00"
        raise ValueError(msg) from err
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def row_json(row: TraceRow, details: bool = True) -> dict[str, Any]:
    """
    One row as JSON (the stored strings, escapes included).

    :param row: The row.
    :param details: Whether to include `retrieval_details`.
    :returns: The dict.
    """
    return row.model_dump(mode="json", exclude=None if details else {"retrieval_details"})


def row_line(row: TraceRow) -> str:
    """
    One row as one terminal line.

    :param row: The row.
    :returns: The line.
    """
    return (
        f"{row.id:>5}  {row.created_at:%Y-%m-%d %H:%M:%S}  {row.status:<16} found={row.found!s:<5} "
        f"blocks={row.evidence_block_count:<2} {row.latency_ms:>7.1f} ms  session={terminal_safe(row.session_id)}  "
        f"{terminal_safe(row.query[:60])}"
    )


def _section(title: str, lines: list[str]) -> list[str]:
    return [f"\n{title}", *(f"  {line}" for line in lines or ["-"])]


def row_report(row: TraceRow) -> str:
    """
    One row for reading: the call, then what each step decided (hints, attempts, rerank, evidence, dedup, pack).

    :param row: The row.
    :returns: The text, escaped for the terminal.
    """
    d = row.retrieval_details or {}
    out = [
        f"tool_invocation {row.id}  {row.created_at:%Y-%m-%d %H:%M:%S %Z}  {row.tool_name}",
        f"query: {row.query}" + (f"  ({row.query_chars} characters received)" if row.query_chars else ""),
        f"session: {row.session_id or '-'}",
        f"status: {row.status}  found={row.found}  layer={row.retrieval_layer}  latency={row.latency_ms:.1f} ms",
    ]
    if row.error:
        out.append(f"error: {row.error}")
    hints = d.get("l0_hints") or {}
    out += _section(
        "L0 hints",
        [f"{key}: {value}" for key, value in hints.items() if value],
    )
    trace = d.get("retrieval_trace") or {}
    attempts = [
        f"{a.get('name')}: filter={a.get('filter')} path={a.get('path')} candidates={a.get('candidate_count')} "
        f"top={a.get('top_score')} lexical={a.get('lexical_path')} {a.get('latency_ms')} ms"
        + (f" error={a['error']}" if a.get("error") else "")
        for a in trace.get("attempts") or []
    ]
    if trace.get("fallback_reason"):
        attempts.append(f"retry because {trace['fallback_reason']}; selected {trace.get('selected_attempt')}")
    out += _section("L1 attempts", attempts)
    rerank = d.get("rerank_trace") or {}
    out += _section(
        "rerank",
        [
            f"{i.get('rank')}. {i.get('evidence_key')} {i.get('base_score')} -> {i.get('final_score')} "
            f"{' '.join(i.get('boost_reasons') or [])}"
            for i in rerank.get("items") or []
        ],
    )
    evidence = d.get("evidence") or {}
    if evidence:
        best = evidence.get("best") or {}
        out += _section(
            "evidence",
            [
                f"found={evidence.get('found')} noise ceiling={evidence.get('noise_ceiling')} "
                f"({evidence.get('noise_level')}, calibrated={evidence.get('calibrated')}) relevance="
                f"{evidence.get('relevance')} lead={evidence.get('lead')}",
                f"best: {best.get('evidence_key')} similarity={best.get('similarity')} basis={best.get('basis')}",
                *(f"rejected {r.get('evidence_key')}: {r.get('reason')}" for r in evidence.get("rejected") or []),
            ],
        )
    dedup = d.get("dedup") or {}
    out += _section(
        "dedup",
        [f"{dedup.get('candidate_count', 0)} -> {dedup.get('final_count', 0)} blocks"]
        + [json.dumps(drop, ensure_ascii=False) for drop in dedup.get("dropped") or []],
    )
    session = d.get("session") or {}
    if session.get("suppressed") or session.get("error"):
        out += _section("session", [f"held back: {session.get('suppressed')}", f"error: {session.get('error')}"])
    pack = d.get("context_pack_summary") or {}
    out += _section(
        "context pack",
        [
            f"{pack.get('usedChars', 0)} of {pack.get('charBudget', 0)} characters; included "
            f"{pack.get('includedSources')}, omitted {pack.get('omittedSources')}, truncated "
            f"{pack.get('truncatedSources')}"
        ],
    )
    sidecar = d.get("sidecar") or {}
    out += _section(
        "sidecar",
        [f"status {sidecar.get('status', 'off')}" + (f": {sidecar['error']}" if sidecar.get("error") else "")],
    )
    return "\n".join(
        terminal_safe(line) if not line.startswith("\n") else "\n" + terminal_safe(line[1:]) for line in out
    )
