"""
What a Sphinx site's `conf.py` says that the converters use, read as a parsed file, never run: only a literal value
assigned to a name at its top level counts (`source_suffix = ".txt"`, `rst_epilog = \"\"\"...\"\"\"`).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: a Sphinx configuration larger than this is not read (a real one is a few kilobytes)
MAX_CONF_BYTES = 256 * 1024
#: a substitution definition (`.. |name| replace:: text`) and the indented lines that continue it
_DEFINITION = re.compile(r"^\.\.[ \t]+\|[^|\n]+\|[ \t]+[\w:-]+::.*(?:\n(?:[ \t]+.*)?)*", re.MULTILINE)


@dataclass(frozen=True)
class SiteConfiguration:
    """The `conf.py` nearest above a page under the knowledge root, and where a nearer one could appear."""

    source: str | None  #: its path relative to the root (None: there is none, or it is a link leaving the root)
    path: Path | None  #: its path on disk
    watched: list[str]  #: the folders' `conf.py` paths from the page up to it (the files whose creation matters)


def nearest_configuration(page: Path, root: Path) -> SiteConfiguration:
    """
    The Sphinx `conf.py` nearest above a page, under the knowledge root.

    :param page: The page's path under `root`.
    :param root: The knowledge root.
    :returns: The configuration (none when no folder from the page's up to the root holds one, or the one found is a
        link leaving the root) and the configuration paths to watch.
    """
    folder = page.parent
    candidates: list[str] = []
    while folder.is_relative_to(root):
        conf = folder / "conf.py"
        name = conf.relative_to(root).as_posix()
        if conf.is_file():
            try:
                inside = conf.resolve(strict=True).is_relative_to(root)  # a link leaving the root is not read
            except (OSError, RuntimeError):
                inside = False
            if not inside:
                return SiteConfiguration(None, None, candidates)
            return SiteConfiguration(name, conf, [*candidates, name])
        candidates.append(name)
        if folder == root:
            break
        folder = folder.parent
    return SiteConfiguration(None, None, candidates)


def literal_setting(conf: Path, name: str) -> Any:
    """
    The literal value a `conf.py` assigns to a name at its top level (the last assignment).

    :param conf: The configuration file.
    :param name: The setting, e.g. `source_suffix`.
    :returns: The value; None when the file is over `MAX_CONF_BYTES`, cannot be read or parsed, or assigns the name
        no literal (a call, an f-string, a name).
    """
    try:
        if conf.stat().st_size > MAX_CONF_BYTES:
            return None
        tree = ast.parse(conf.read_bytes())
        values = [
            node.value
            for node in tree.body
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
        ]
        return ast.literal_eval(values[-1]) if values else None
    except (OSError, SyntaxError, ValueError, TypeError, RecursionError, MemoryError):
        return None


def source_suffixes(conf: Path) -> frozenset[str]:
    """
    The suffixes of a Sphinx site's reStructuredText pages, as its `source_suffix` names them.

    :param conf: The site's `conf.py`.
    :returns: The suffixes, lower-case (`.txt` for Django's documentation); `{".rst"}` when it names none Sphinx
        reads as reStructuredText (a dict maps a suffix to its parser: `restructuredtext`).
    """
    value = literal_setting(conf, "source_suffix")
    if isinstance(value, str):
        suffixes = [value]
    elif isinstance(value, list | tuple):
        suffixes = [s for s in value if isinstance(s, str)]
    elif isinstance(value, dict):
        suffixes = [s for s, parser in value.items() if isinstance(s, str) and parser == "restructuredtext"]
    else:
        suffixes = []
    return frozenset(s.lower() for s in suffixes if s.startswith(".")) or frozenset({".rst"})


def substitution_definitions(conf: Path) -> str:
    """
    The substitution definitions a Sphinx site adds to every page: `|version|` and `|release|` (when literal), and
    those of `rst_prolog` and `rst_epilog`.

    :param conf: The site's `conf.py`.
    :returns: The definitions (`.. |name| replace:: ...`, each with its indented lines), one after the other; '' for
        none. Other markup of the prolog or epilog (roles, text) is left out.
    """
    given = [(name, literal_setting(conf, name)) for name in ("version", "release")]
    own = [f".. |{name}| replace:: {value}" for name, value in given if isinstance(value, str) and value.strip()]
    texts = [literal_setting(conf, name) for name in ("rst_prolog", "rst_epilog")]
    return "\n\n".join(own + definitions_in("\n".join(text for text in texts if isinstance(text, str))))


def definitions_in(text: str) -> list[str]:
    """
    The substitution definitions of a reStructuredText text.

    :param text: The text.
    :returns: Its definitions, each with its indented lines.
    """
    return [match.group(0).rstrip() for match in _DEFINITION.finditer(text)]
