"""Count the doc-site markup left in the chunks of a folder of markdown, as a new user's first look at their chunks.

    python benchmarks/markup_residue.py path/to/site/docs [--pipeline pipelines/indexing.yaml]

runs the shipped indexing pipeline's markdown converter, markup cleaner, metadata, cleaner and chunker (no embedding, no
store: seconds, not minutes) over the folder's `.md`, `.mdx`, `.qmd` and `.Rmd` pages, the partials and included pages
left out as `index` leaves them, and prints one JSON line: pages, chunks, unresolved includes, titles still holding a
heading anchor, and per residue pattern the chunks whose text outside code matches it. Run it on a checkout before and
after a change to the cleaning to see what the change did to a site. `--chunks FILE` also writes every chunk's source,
index, title, breadcrumb, lines and a hash of its text: two checkouts' files are equal exactly when they chunk the
folder alike (what an embedding sees), so a change that leaves an evaluation set's file equal cannot move its `eval`
figures.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml
from haystack.core.serialization import component_from_dict

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from components.core.markdown_text import without_code
from pipelines.knowledge_files import (
    DEFAULT_PARTIAL_FOLDERS,
    find_knowledge_files,
    headless_folders,
    included_pages,
    is_partial,
)
from pipelines.settings import DEFAULT_INDEXING_PIPELINE

#: markup that no chunk should carry outside code
PATTERNS = {
    "pymdownx /// marker": r"^\s*/{3,}(?:\s*[\w-]+)?(?:\s*\|.*)?$",
    "{* include *}": r"\{\*|\*\}",
    "Hugo shortcode": r"\{\{[<%]|[>%]\}\}",
    "Liquid/Vue {{ }} or {% %}": r"\{\{|\{%",
    "JSX tag": r"</?[A-Z][\w.]*[\s/>]",
    "HTML tag": r"</?(?:div|span|dfn|abbr|details|summary|img|br|p|a)\b",
    "import ... from": r"^import\s.*\sfrom\s",
    "export statement": r"^export\s+(?:const|default|(?:async\s+)?function|let|var|class)\b",
    "comment": r"<!--|-->",
    "admonition marker": r"^\s*(?::::*|!!!|\?\?\?)",
    "bare heading marks": r"^#{1,6}\s*$",
    "kramdown {: } / code span {:lang}": r"\{:[^}\n]*\}",
    "Docsify callout !> ?>": r"^[!?]> ",
    "Docsify link option": r"\]\(\S+ ['\"]:",
    "alert marker [!X]": r"\[![A-Za-z]+\]",
    "footnote marker [^x]": r"\[\^[^\]\s]+\]",
    "JSX fragment": r"<>|</>",
    "Pandoc attributes {.x} {#x} / Quarto {{{< >}}}": r"[\])]\{[.#][\w-]|\{\{\{<",
}
_STEPS = ("markup", "metadata", "cleaner", "chunker")


def _component(spec: dict[str, Any], name: str) -> Any:
    entry = spec[name]
    module, _, cls = entry["type"].rpartition(".")
    data = {"type": entry["type"], "init_parameters": entry.get("init_parameters", {})}
    return component_from_dict(getattr(importlib.import_module(module), cls), data, name)


def residue(folder: Path, pipeline: Path, chunks_file: Path | None = None, show: bool = False) -> dict[str, Any]:
    """The figures of one folder (see the module's docstring); `chunks_file` receives the chunks' digests, `show`
    prints each line of prose that matches a pattern to stderr."""
    spec = yaml.safe_load(pipeline.read_text(encoding="utf-8"))
    partial_folders = (spec.get("metadata") or {}).get("partial_folders", DEFAULT_PARTIAL_FOLDERS)
    files = find_knowledge_files(folder).files
    pages = {p: s for p, s in files.items() if p.suffix.lower() in (".md", ".mdx", ".qmd", ".rmd")}
    headless = headless_folders(files)
    pages = {p: s for p, s in pages.items() if not is_partial(s, partial_folders, headless)}
    converted = _component(spec["components"], "markdown").run(
        sources=list(pages), meta=[{"source": s} for s in pages.values()]
    )
    includes = {str(d.meta["source"]): list(d.meta.get("included_files") or []) for d in converted["documents"]}
    shown_by = included_pages(includes)  # as `index` leaves them out: their text is the including page's
    documents = [d for d in converted["documents"] if d.meta["source"] not in shown_by]
    for step in _STEPS:
        documents = _component(spec["components"], step).run(documents=documents)["documents"]
    counts = dict.fromkeys(PATTERNS, 0)
    for chunk in documents:
        prose = without_code(chunk.content or "")
        for name, pattern in PATTERNS.items():
            found = [match.start() for match in re.finditer(pattern, prose, re.MULTILINE)]
            counts[name] += bool(found)
            for start in found if show else ():
                line = prose[prose.rfind("\n", 0, start) + 1 :].split("\n", 1)[0]
                where = f"{chunk.meta['source']} #{chunk.meta['chunk_index']}"
                print(f"{where} [{name}] {line.strip()[:200]}", file=sys.stderr)
    if chunks_file is not None:
        rows = [
            [
                c.meta["source"],
                c.meta["chunk_index"],
                c.meta.get("title"),
                c.meta.get("breadcrumb"),
                c.meta.get("line_start"),
                c.meta.get("line_end"),
                hashlib.sha256((c.content or "").encode()).hexdigest()[:16],
            ]
            for c in documents
        ]
        chunks_file.write_text(json.dumps(sorted(rows, key=lambda r: (r[0], r[1])), ensure_ascii=False), "utf-8")
    titles = {c.meta["source"]: str(c.meta.get("title", "")) for c in documents}
    return {
        "pages": len(pages) - len(shown_by),
        "included pages": len(shown_by),
        "chunks": len(documents),
        "failures": len(converted["failures"]),
        "unresolved includes": len(converted["warnings"]),
        "titles with an anchor": sum(bool(re.search(r"\{\s*#", t)) for t in titles.values()),
        "chunks with residue": counts,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("folder", type=Path, help="a folder of markdown pages (a site's docs)")
    parser.add_argument("--pipeline", type=Path, default=DEFAULT_INDEXING_PIPELINE, help="indexing pipeline YAML")
    parser.add_argument("--chunks", type=Path, default=None, help="also write every chunk's digest to this file")
    parser.add_argument("--show", action="store_true", help="print each matching line of prose to stderr")
    args = parser.parse_args()
    print(json.dumps(residue(args.folder.resolve(), args.pipeline, args.chunks, args.show), ensure_ascii=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
