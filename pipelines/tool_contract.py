"""The `lookup_knowledge` tool's contract: its name, its description and its arguments' schema.

One place for every entry point (the Haystack tool, MCP, REST's OpenAPI): the description teaches the evidence-first
contract and names the knowledge base it looks up, so that two served knowledge bases are two tools an agent tells
apart; the schema lists the filter keys that knowledge base accepts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = [
    "BUILT_IN_FILTER_KEYS",
    "TOOL_DESCRIPTION",
    "TOOL_NAME",
    "TOOL_PARAMETERS",
    "filters_schema",
    "tool_description",
    "tool_parameters",
]

TOOL_NAME = "lookup_knowledge"

#: the knowledge base named in the default description when nothing is known of it
_GENERIC_SCOPE = "the knowledge base"

_DESCRIPTION_BODY = """\
and get back evidence, not an answer. The result is JSON.

How to use it:
- found=true (evidenceStatus "evidence"): answer only from evidenceBlocks[].content, and cite the `source` of every \
fact you use with its section (`breadcrumb`), e.g. "(alerts/disk.md, Disk Full Runbook > Diagnosis)". Every block \
cleared the knowledge base's noise ceiling: it is evidence, not a guess. relevanceLevel (high/medium/low) says how \
strong the best evidence is; a block's `similarity` (0-1) is comparable across lookups. A block marked `truncated` \
was cut to fit: read_evidence(citation) returns it whole with its neighbours, read_document(source) the document.
- moreAvailable=true: more evidence passed than fits max_chars; call again with the same query and `cursor` for the \
next blocks (none repeated).
- found=false with evidenceStatus "no_evidence" (or "l1_disabled"): the knowledge base has nothing usable on this. \
That means "no knowledge", never a fact: do not conclude that something is absent, false or impossible; say that \
the knowledge base has no answer, or try again with other words. With filters, the message says what they matched \
and, when nothing, which values exist.
- evidenceStatus "already_returned": everything relevant was already returned earlier in this session (or on the \
cursor's earlier pages). Reuse the evidence you received before; do not treat this as "no knowledge".
- Bad input (empty or too long query, unknown filter key, damaged cursor) and failures (knowledge store unavailable) \
come back as a tool error with the reason. Fix the call, or tell the user the lookup failed; an error is never evidence.

Arguments: `query` is the question or its key terms, in the user's language. `session_id` is a stable id for the \
conversation: pass the same value on every call so that evidence is not repeated. `filters` (optional) restricts \
the search strictly to documents whose fields match: {filter_keys}; list_facets lists their values. `max_chars` \
(optional) bounds the evidence characters. Every call is recorded; `traceId` identifies the record."""

#: the filter keys every knowledge base has
BUILT_IN_FILTER_KEYS = (
    "category",
    "tags",
    "keywords",
    "source",
    "source_prefix",
    "updated_after",
    "status",
    "access",
)


def tool_description(
    scope: str = _GENERIC_SCOPE, filter_keys: Sequence[str] = BUILT_IN_FILTER_KEYS, languages: Sequence[str] = ()
) -> str:
    """
    The tool's description: the evidence-first contract, saying which knowledge base it looks up.

    :param scope: What the knowledge base holds, e.g. `the payments knowledge base (categories: refunds, alerts)`.
    :param filter_keys: The keys `filters` accepts.
    :param languages: The knowledge base's languages (`en`, `zh`, ...).
    :returns: The description.
    """
    names = {"en": "English", "zh": "Chinese"}
    spoken = ", ".join(names.get(code, code) for code in languages if code)
    head = f"Look up {scope}" + (f" (written in {spoken})" if spoken else "")
    return f"{head} {_DESCRIPTION_BODY.format(filter_keys=', '.join(filter_keys))}"


TOOL_DESCRIPTION = tool_description()

_FILTER_VALUE: dict[str, Any] = {
    "anyOf": [
        {"type": "string"},
        {"type": "array", "items": {"type": "string"}, "minItems": 1},
    ]
}


def filters_schema(filter_keys: Sequence[str] = BUILT_IN_FILTER_KEYS) -> dict[str, Any]:
    """
    The JSON schema of `filters`: one property per key the knowledge base accepts, nothing else.

    :param filter_keys: The keys (`DocumentFilterResolver.filterable_keys`).
    :returns: The schema.
    """
    special = {
        "source_prefix": {"type": "string", "description": "Documents whose source starts with this, e.g. 'alerts/'."},
        "updated_after": {
            "type": "string",
            "description": "Documents updated on or after this day (ISO 8601, e.g. '2026-01-31').",
        },
    }
    described = {
        "source": "The document's path, as a block's `source` gives it (any of a list).",
        "category": "The document's category (any of a list).",
        "tags": "A tag or keyword the document has (any of a list).",
        "keywords": "The same as tags.",
        "status": "The page's status (current, draft, deprecated, superseded, archived): drafts and archived pages "
        "are searched only when asked for.",
        "access": "A group the document is restricted to (front matter `access`): only documents the caller may read "
        "are ever searched; public documents have none.",
    }
    properties = {
        key: special.get(key) or {**_FILTER_VALUE, "description": described.get(key, f"The document's {key}.")}
        for key in filter_keys
    }
    return {
        "type": "object",
        "description": "Search only documents matching all of these (strict: never widened). list_facets lists values.",
        "properties": properties,
        "additionalProperties": False,
    }


def tool_parameters(filter_keys: Sequence[str] = BUILT_IN_FILTER_KEYS) -> dict[str, Any]:
    """
    The tool's arguments as a JSON schema.

    :param filter_keys: The keys `filters` accepts.
    :returns: The schema: `query` required; `session_id`, `filters`, `max_chars`, `cursor` optional.
    """
    return {
        "type": "object",
        "properties": {
            "query": {
                "type": "string",
                "description": "The question or its key terms, in the user's language (1 to 2,000 characters).",
            },
            "session_id": {
                "type": "string",
                "description": (
                    "A stable id for this conversation, the same on every call. Evidence already returned in the "
                    "session is not returned again (evidenceStatus already_returned)."
                ),
            },
            "filters": filters_schema(filter_keys),
            "max_chars": {
                "type": "integer",
                "minimum": 200,
                "description": "The most characters of evidence to return (default 4,000; capped by the server).",
            },
            "cursor": {
                "type": "string",
                "description": "A previous result's `cursor`, with the same query: the next blocks of that lookup.",
            },
        },
        "required": ["query"],
        "additionalProperties": False,
    }


TOOL_PARAMETERS: dict[str, Any] = tool_parameters()
