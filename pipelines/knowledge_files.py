"""The files of a knowledge folder as an index run finds them: every file, whatever its format, and what cannot be read.

Which files are knowledge is the indexing pipeline's to say (its router hands each format to its converter); this
module only walks the folder, so that the version bookkeeping knows nothing of markdown.
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

from haystack import logging

logger = logging.getLogger(__name__)


@dataclass
class KnowledgeFiles:
    """What a walk of a knowledge folder found."""

    #: the usable files, by path, with their source (their path relative to the root, `/`-separated)
    files: dict[Path, str] = field(default_factory=dict)
    #: entries that cannot be read as files, and folders that cannot be listed (`source` ends with `/`), with why
    unusable: list[dict[str, str]] = field(default_factory=list)


def _unusable(path: Path, root: Path) -> str | None:
    """Why an entry cannot be a knowledge file, or None."""
    try:
        target = path.resolve(strict=True)
    except FileNotFoundError:
        return "dangling symlink" if path.is_symlink() else "No such file or directory"
    except (OSError, RuntimeError) as err:  # a symlink loop: ELOOP, or RuntimeError before Python 3.13
        return f"unresolvable path ({getattr(err, 'strerror', None) or err})"
    if not target.is_relative_to(root):
        return "symlink leaves the knowledge root"
    if target.is_dir():
        return "is a directory"
    if not target.is_file():
        return "not a regular file"
    return None


#: folders of partials: text that pages include, not pages (hugoDocs' `_common`, Jekyll's `_includes`)
DEFAULT_PARTIAL_FOLDERS = ["_common", "_includes", "_partials", "partials"]


#: Hugo's headless bundle: an `index.md` or `_index.md` whose front matter says `headless: true` publishes no page
_HEADLESS = re.compile(
    r"\A(?:---|\+\+\+)[ \t]*\n(?:(?!(?:---|\+\+\+)[ \t]*\n).*\n)*?headless\s*[:=]\s*true\b", re.MULTILINE
)
_BUNDLE_INDEX = ("index.md", "_index.md")
_MINTLIFY_SETTINGS = ("docs.json", "mint.json")


def headless_folders(files: dict[Path, str]) -> list[str]:
    """
    The folders whose files a site never publishes as pages, only through the pages that include them: Hugo headless
    bundles (Kubernetes keeps its include files in them) and a Mintlify site's `snippets/` (beside its `docs.json` or
    `mint.json`).

    :param files: Files by path, with their source (all the folder's files: a site's settings file tells).
    :returns: The folders' sources, each ending with `/` ('' for the knowledge root itself).
    """
    folders = []
    for path, source in files.items():
        if path.name in _MINTLIFY_SETTINGS:
            site = source.rpartition("/")[0]
            folders.append(f"{site}/snippets/" if site else "snippets/")
            continue
        if path.name not in _BUNDLE_INDEX:
            continue
        try:
            with path.open("rb") as handle:
                head = handle.read(4096).decode("utf-8", errors="replace").replace("\r\n", "\n")
        except OSError:
            continue
        if _HEADLESS.match(head):
            folder = source.rpartition("/")[0]
            folders.append(f"{folder}/" if folder else "")
    return folders


def is_partial(source: str, partial_folders: list[str], headless: list[str] | None = None) -> bool:
    """
    Whether a file is a partial: under one of the partial folders or in a headless bundle (`headless_folders`), or
    named `_name.ext` as Docusaurus names its partials (Hugo's `_index.md` section pages are pages).

    :param source: The file's path relative to the knowledge root, `/`-separated.
    :param partial_folders: Folder names whose files are partials.
    :param headless: Folders (ending with `/`) whose files are partials.
    :returns: True for a partial.
    """
    parts = source.split("/")
    name = parts[-1]
    return (
        any(folder in partial_folders for folder in parts[:-1])
        or any(source.startswith(folder) for folder in headless or [])
        or (name.startswith("_") and not name.startswith("_index."))
    )


def included_pages(includes: dict[str, list[str]], files: Collection[str] | None = None) -> dict[str, str]:
    """
    The pages that other pages include, each with a page that includes it: a site shows their text only there (an
    mdBook chapter's `{{#include ../cli/arg-watcher.md}}`, a MyST page's `{include}` of a snippet, a Sphinx `.txt`).

    Only a page that no other page includes counts as including: files that only include each other stay pages, so
    no text is lost to a cycle.

    :param includes: For each page (its source), the sources of the files it includes, its includes' includes too.
    :param files: The knowledge files that would be indexed on their own (a literal include's `.txt` too); default:
        the pages of `includes`.
    :returns: For each included file, the first (by source) of the pages that include it.
    """
    candidates = set(includes) if files is None else set(files)
    included = {name for page, names in includes.items() for name in names if name != page}
    by: dict[str, str] = {}
    for page in sorted(includes):
        if page in included:
            continue
        for name in includes[page]:
            if name != page and name in candidates:
                by.setdefault(name, page)
    return by


def find_knowledge_files(root: Path) -> KnowledgeFiles:
    """
    Walk a knowledge folder: every file under it, and every entry that cannot be one.

    Hidden files and folders (a name starting with `.`, such as `.git`) are left out. Links to folders are not
    followed but reported (`is a directory`), as are dangling or looping links, links leaving the root and anything
    that is not a regular file: never raised, so one bad entry cannot stop a run. A folder that cannot be listed is
    reported too (`Path.rglob` would skip it silently, and its documents would look deleted).

    :param root: The knowledge root (resolved).
    :returns: The files and the unusable entries, each sorted by path.
    """
    found = KnowledgeFiles()
    unreadable: list[dict[str, str]] = []

    def note(err: OSError) -> None:
        where = Path(err.filename or root)
        relative = where.relative_to(root).as_posix() if where.is_relative_to(root) else str(where)
        folder = "" if relative == "." else relative.rstrip("/") + "/"
        reason = f"{err.strerror or err}: folder not read, its documents keep their version"
        logger.warning("Cannot read knowledge folder {folder}: {error}", folder=folder, error=err.strerror or err)
        unreadable.append({"source": folder, "reason": reason})

    entries: list[Path] = []
    for folder, folders, names in os.walk(root, onerror=note):
        folders[:] = sorted(name for name in folders if not name.startswith("."))
        base = Path(folder)
        entries.extend(base / name for name in folders if (base / name).is_symlink())  # reported, never followed
        entries.extend(base / name for name in names if not name.startswith("."))
    found.unusable.extend(unreadable)
    for path in sorted(entries):
        source = path.relative_to(root).as_posix()
        reason = _unusable(path, root)
        if reason:
            logger.warning("Skipping knowledge entry {source}: {reason}", source=source, reason=reason)
            found.unusable.append({"source": source, "reason": reason})
        else:
            found.files[path] = source
    return found
