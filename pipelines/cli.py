"""The `lookup-knowledge` command line."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence

from pipelines.settings import Deployment

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")


def _print_index_summary(summary: dict, deployment: Deployment) -> None:
    print(
        f"Indexed {summary['indexed']} of {summary['files']} files: {summary['chunks']} chunks, "
        f"{summary['skipped']} unchanged (skipped, nothing re-embedded), {summary['failed']} failed, "
        f"{summary['deleted']} deleted, {summary['stale_chunks_removed']} stale chunks removed; "
        f"{summary['seconds']:.1f} s, {summary['characters']} characters embedded "
        f"({summary['chars_per_second']:.0f} chars/s)"
    )
    for failure in summary["failures"]:
        print(f"  FAILED {failure['source']}: {failure['reason']}")
    print(f"Data: Milvus at {deployment.milvus_uri}, knowledge index at {deployment.index_path}")


def cmd_index(args: argparse.Namespace) -> int:
    from pipelines.indexing import KnowledgeIndexer

    deployment = Deployment.resolve(args.data_dir)
    indexer = KnowledgeIndexer(deployment)
    try:
        summary = indexer.index(args.knowledge, rebuild=args.rebuild, progress=not args.quiet).as_dict()
    finally:
        indexer.close()
    if args.json:
        print(json.dumps(summary, ensure_ascii=False, indent=1))
    else:
        _print_index_summary(summary, deployment)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lookup-knowledge", description="Evidence-first knowledge lookup for agents")
    sub = parser.add_subparsers(dest="command", required=True)

    index = sub.add_parser("index", help="index a knowledge folder into Milvus")
    index.add_argument("--knowledge", default="knowledge", help="knowledge folder (default: knowledge/)")
    index.add_argument("--data-dir", default=None, help="data folder (default: ./data or LOOKUP_KNOWLEDGE_DATA_DIR)")
    index.add_argument("--rebuild", action="store_true", help="drop the collection and index everything again")
    index.add_argument("--json", action="store_true", help="print the summary as JSON")
    index.add_argument("--quiet", action="store_true", help="no progress bar")
    index.set_defaults(func=cmd_index)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """
    Run the command line.

    :param argv: Arguments (default: `sys.argv[1:]`).
    :returns: The exit code: 0 success, 2 bad input, 1 internal failure.
    """
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except (FileNotFoundError, ValueError) as err:
        print(f"lookup-knowledge: {err}", file=sys.stderr)
        return 2
    except Exception as err:
        print(f"lookup-knowledge: internal error: {type(err).__name__}: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
