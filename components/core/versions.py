"""Pages that are versions of each other, as documentation sites keep them: a folder or a file per release."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

from components.core.translations import translation_key

#: Docusaurus keeps an earlier release's page under `versioned_docs/version-<name>/`, the current one under `docs/`,
#: and their translations under `i18n/<language>/docusaurus-plugin-content-docs/version-<name>/` and `current/`
_DOCUSAURUS_VERSION = re.compile(r"^(?P<site>(?:[^/]+/)*?)versioned_docs/version-[^/]+/(?P<rest>.+)$")
_DOCUSAURUS_TRANSLATED_VERSION = re.compile(
    r"^(?P<plugin>(?:[^/]+/)*?i18n/[^/]+/docusaurus-plugin-content-docs/)version-[^/]+/(?P<rest>.+)$"
)
#: the release of a Docusaurus page kept under `version-<name>/`, in English or translated
_DOCUSAURUS_RELEASE = re.compile(
    r"(?:^|/)(?:versioned_docs|i18n/[^/]+/docusaurus-plugin-content-docs)/version-(?P<release>[^/]+)/"
)
#: a folder naming a release: `0.10.x`, `v2.9.0`, `1.2`, `v3`, `2.x`, `latest`, `stable`; at most three digits a part,
#: so that years and dates (`2024`, `2024.01`) are none (`next` is none either: a Next.js folder is named so)
_RELEASE_FOLDER = re.compile(r"^(?:v?\d{1,3}(?:\.\d{1,3})+(?:\.x)?|v\d{1,3}|\d{1,3}\.x|latest|stable)$", re.IGNORECASE)
#: a file stem naming a release of the page beside it: `0.9.x`, `2.x`, `latest` (a bare number is not: one file per
#: release is how release notes (`whatsnew/3.12.md`) and numbered sections (`book/1.2.md`) are kept, each its own page)
_RELEASE_STEM = re.compile(r"^(?:v?\d{1,3}(?:\.\d{1,3})*\.x|latest)$", re.IGNORECASE)
#: a release named in a question: `v1.3.0`, `2.9`, `0.9.x`, `v3` (a bare `3` is any number, not a release, and
#: `$1.5` a price); it may stand right next to Chinese text (`v1.3.0版本`), not inside a word (`python3.11`)
_NAMED_RELEASE = re.compile(
    r"(?<![A-Za-z0-9_.$€£¥])(?:v?\d{1,3}(?:\.\d{1,3})+(?:\.x)?|v\d{1,3}|v?\d{1,3}\.x)(?![A-Za-z0-9_]|\.[A-Za-z0-9_])",
    re.IGNORECASE,
)
#: what a release's file stem becomes in the key: `reference/0.9.x.md` and `reference/latest.md` are one page,
#: `reference.md` another
_ANY_RELEASE = "{release}"


def version_key(source: str) -> str:
    """
    What a page's versions share: its source without the folders and file stem that name a release.

    `embed/c/reference/0.9.x.md` and `embed/c/reference/latest.md` are one page (`embed/c/reference/{release}.md`),
    and so are `docs/v1.2/install.md` and `docs/v1.3/install.md` (`docs/install.md`); a Docusaurus page under
    `versioned_docs/version-2.0/` has its current version's source under `docs/` as key, and a translated release
    its current translation's.

    :param source: A page's path under the knowledge root, `/`-separated.
    :returns: The key; the source itself when nothing in it names a release.
    """
    if "versioned_docs/" in source and (found := _DOCUSAURUS_VERSION.match(source)):
        return found.group("site") + "docs/" + found.group("rest")
    if "i18n/" in source and (found := _DOCUSAURUS_TRANSLATED_VERSION.match(source)):
        return found.group("plugin") + "current/" + found.group("rest")
    *folders, name = source.split("/")
    stem, dot, suffix = name.rpartition(".") if "." in name.lstrip(".") else (name, "", "")
    if _RELEASE_STEM.match(name):  # no suffix: `2.x` is the whole name
        name = _ANY_RELEASE
    elif dot and _RELEASE_STEM.match(stem):
        name = _ANY_RELEASE + dot + suffix
    return "/".join([*(folder for folder in folders if not _RELEASE_FOLDER.match(folder)), name])


#: what a text key starts with, and no evidence key of a page does
TEXT_KEY_PREFIX = "text:"


def text_key(source: object, content: str | None) -> str | None:
    """
    The identity of a chunk's text on its page, whichever release of the page holds it, and wherever in the page.

    Two releases of a page often keep a section word for word (`docs/uninstall.md` and
    `versioned_docs/version-v2.9.0/uninstall.md`), and a re-index that adds a section moves the chunks after it to
    other chunk numbers: their evidence keys differ, their text key does not.

    :param source: The chunk's page, its path under the knowledge root.
    :param content: The chunk's text (compared without leading and trailing whitespace).
    :returns: `text:<version_key>|<digest>`, never equal to an evidence key (`source#chunk`); None without a
        source or a text.
    """
    text = (content or "").strip()
    if not source or not text:
        return None
    digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()
    return f"{TEXT_KEY_PREFIX}{version_key(str(source))}|{digest}"


def page_key(source: str) -> str:
    """
    What a page's copies share: its translations (`translation_key`) and its versions (`version_key`).

    :param source: A page's path under the knowledge root, `/`-separated.
    :returns: The key.
    """
    return version_key(translation_key(source))


def release_of(source: str) -> str | None:
    """
    The release a page's source names: a Docusaurus `version-<name>` folder, a release folder or a release file stem.

    :param source: A page's path under the knowledge root, `/`-separated.
    :returns: The release (`v1.3.0`, `0.9.x`, `latest`), or None for a page no release names (the current one).
    """
    if found := _DOCUSAURUS_RELEASE.search(source):
        return found.group("release")
    *folders, name = source.split("/")
    for folder in folders:
        if _RELEASE_FOLDER.match(folder):
            return folder
    stem = name.rpartition(".")[0] if "." in name.lstrip(".") else name
    for candidate in (name, stem):
        if _RELEASE_STEM.match(candidate):
            return candidate
    return None


def release_groups(sources: Sequence[object]) -> list[dict[int, str | None]]:
    """
    Where each page's releases stand in a list of sources, for the pages found there in two releases or more.

    :param sources: Sources in rank order (a missing one, None or "", belongs to no page).
    :returns: Per such page, `{position: release_of(source)}` in rank order.
    """
    pages: dict[str, dict[int, str | None]] = {}
    for position, source in enumerate(sources):
        if source:
            pages.setdefault(version_key(str(source)), {})[position] = release_of(str(source))
    return [releases for releases in pages.values() if len(set(releases.values())) > 1]


def release_order(release: str | None, named: frozenset[str] = frozenset()) -> tuple[int, tuple[float, ...]]:
    """
    Where a release of a page stands among the page's releases, as a sort key.

    First the releases the question names (the newest first when it names a series: `v2`), then the current page,
    then `latest` and `stable`, then numbered releases from the newest, then releases named otherwise (`legacy`).

    :param release: What `release_of` gives for the page.
    :param named: The releases the question names (`named_releases`).
    :returns: The key (smaller first).
    """
    if release is None:
        return (1, ())
    newest_first = tuple(-part for part in _numbers(release))
    if any(_names(question, release) for question in named):
        return (0, newest_first)
    if release.casefold() in ("latest", "stable"):
        return (2, ())
    return (3, newest_first) if newest_first else (4, ())


def named_releases(text: str) -> frozenset[str]:
    """
    The releases a question names (`v1.3.0`, `2.9`, `0.9.x`), without a leading `v`.

    :param text: The question.
    :returns: The releases, normalised as `release_order` compares them.
    """
    return frozenset(_release_number(found) for found in _NAMED_RELEASE.findall(text))


def _names(named: str, release: str) -> bool:
    """Whether a release named in a question (`2.9`) is this one (`v2.9.0`, `2.9.x`): its parts begin the release's."""
    wanted = [part for part in named.split(".") if part != "x"]
    return _release_number(release).split(".")[: len(wanted)] == wanted


def _release_number(release: str) -> str:
    return release.casefold().removeprefix("v")


def _numbers(release: str) -> tuple[float, ...]:
    """`v2.9.0` as (2, 9, 0), `0.9.x` as (0, 9, inf): a `.x` release stands for the newest of its series."""
    parts = _release_number(release).split(".")
    return tuple(float("inf") if part == "x" else float(part) for part in parts if part.isdigit() or part == "x")
