"""Who may read a document: its `access` groups (front matter) against the caller's groups.

A document without `access` is public. A document with `access: [finance, hr]` is read by callers in either group,
and by a caller holding `ALL_GROUPS`. A caller without groups (an anonymous call) reads public documents only: every
check here fails closed. Groups are compared casefolded and stripped, as the indexer stores them.
"""

from __future__ import annotations

from collections.abc import Iterable

#: the group that reads every document (an operator's, or the local command line's)
ALL_GROUPS = "*"


def access_groups(value: object) -> list[str]:
    """
    The access groups of a front matter value, normalized: a string or a list of strings, casefolded and stripped.

    A comma-separated string (`finance, hr`) is several groups, as a YAML list would be.

    :param value: The front matter value (None: public).
    :returns: The groups, in order, each once; empty for a public document.
    """
    if value is None:
        return []
    items = value if isinstance(value, list | tuple) else [value]
    groups: list[str] = []
    for item in items:
        if isinstance(item, bool) or not isinstance(item, str | int | float):
            continue
        for part in str(item).split(","):
            group = part.strip().casefold()
            if group and group not in groups:
                groups.append(group)
    return groups


def reader_groups(groups: Iterable[str] | None) -> frozenset[str]:
    """
    A caller's groups, normalized as documents' groups are.

    :param groups: The caller's groups; None: an anonymous caller (public documents only).
    :returns: The groups.
    """
    return frozenset(g.strip().casefold() for g in groups or () if isinstance(g, str) and g.strip())


def can_read(access: Iterable[str], groups: frozenset[str]) -> bool:
    """
    Whether a caller with `groups` (`reader_groups`) may read a document with `access`.

    :param access: The document's access groups (empty: public).
    :param groups: The caller's normalized groups.
    :returns: True for a public document, a shared group, or a caller holding `ALL_GROUPS`.
    """
    wanted = list(access)
    return not wanted or ALL_GROUPS in groups or any(g in groups for g in wanted)
