"""The `lookup-knowledge` command line."""

from __future__ import annotations

import argparse
import atexit
import contextlib
import json
import logging as stdlib_logging
import os
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from pipelines.pipeline_file import read_pipeline_file
from pipelines.settings import (
    DEFAULT_MCP_HOST,
    DEFAULT_MCP_PORT,
    Deployment,
    StoreUnavailableError,
    lite_file_in,
    start_store,
)
from pipelines.startup import one_blas_thread, pause_collection, resume_collection


def _add_set(parser: argparse.ArgumentParser, example: str) -> None:
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="COMPONENT.PARAM=VALUE",
        help=f"override one parameter of the pipeline's YAML (repeatable), e.g. {example}",
    )


def _add_caller(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--as",
        dest="as_principal",
        default=None,
        metavar="PRINCIPAL",
        help=f"{what} as this principal of the principals file ('anonymous': public pages only; default: the local "
        "operator, who reads every page)",
    )
    parser.add_argument(
        "--principals",
        default=None,
        metavar="FILE",
        help="the principals file (default: LOOKUP_KNOWLEDGE_PRINCIPALS, else principals.yaml in the data folder)",
    )


def _caller(args: argparse.Namespace) -> Any:
    """The principal a command runs as: `--as NAME` (from the principals file), else the local operator."""
    from pipelines.access import ANONYMOUS, LOCAL_OPERATOR

    name = getattr(args, "as_principal", None)
    if not name:
        return LOCAL_OPERATOR
    if name == "anonymous":
        return ANONYMOUS
    return _principals(args).get(name)


def _principals(args: argparse.Namespace) -> Any:
    from pipelines.access import Principals

    return Principals.load(args.principals or Principals.default_path(Deployment.resolve(args.data_dir).data_dir))


def _overrides(specs: list[str]) -> dict[str, dict[str, Any]] | None:
    """`--set` values as `component_params` (parsed before anything is started, so a bad one costs nothing)."""
    from pipelines.loading import component_params_from

    return component_params_from(specs) or None


def _print_index_summary(summary: dict, deployment: Deployment) -> None:
    from pipelines.traces import redact_url

    print(
        f"Indexed {summary['indexed']} of {summary['files']} files: {summary['chunks']} chunks, "
        f"{summary['skipped']} unchanged (skipped, nothing re-embedded), {summary['failed']} failed, "
        f"{summary['deleted']} deleted, {summary['stale_chunks_removed']} stale chunks removed; "
        f"{summary['seconds']:.1f} s, {summary['characters']} characters embedded "
        f"({summary['chars_per_second']:.0f} chars/s)"
    )
    for failure in summary["failures"]:
        print(f"  FAILED {failure['source']}: {failure['reason']}")
    for skipped in summary.get("not_indexed") or []:
        print(f"  NOT INDEXED {skipped['source']}: {skipped['reason']}")
    for warning in summary.get("warnings") or []:
        print(f"  WARNING {warning['source']}: {warning['reason']}")
    unsupported = summary.get("unsupported") or []
    if unsupported:
        types = sorted({u["type"] for u in unsupported})
        shown = ", ".join(u["source"] for u in unsupported[:5]) + (", ..." if len(unsupported) > 5 else "")
        print(
            f"  UNSUPPORTED {len(unsupported)} files of a type no converter takes ({', '.join(types)}): {shown} "
            "(add a converter to the indexing pipeline: docs/extending.md)"
        )
    for doc_id, sources in summary.get("duplicate_ids", {}).items():
        print(f"  DUPLICATE id {doc_id!r} in {', '.join(sources)} (ids must be unique; set `id:` in the frontmatter)")
    if summary.get("bm25_index"):
        milvus = summary["bm25"] == "milvus"
        inside = "`lexical_source: milvus` runs it inside Milvus" if milvus else "the collection has no full-text field"
        print(f"BM25: in-process on {deployment.index_path.parent / summary['bm25_index']} ({inside})")
    elif summary["bm25"] == "milvus":
        print("BM25: inside Milvus (full-text search on the collection)")
    else:
        print(
            "BM25: in-process (this collection has no BM25 full-text field; on Milvus Lite or Milvus 2.5+, "
            "`lookup-knowledge index --rebuild` adds it)"
        )
    if not summary.get("crosslingual"):
        print(
            "Cross-lingual vectors: none (this collection predates them or was created without them; "
            "`lookup-knowledge index --rebuild` adds them), so answers in another language rank by e5 alone"
        )
    if summary["statistics"]:
        print(f"Calibration: {summary['statistics']}")
    milvus = deployment.milvus_uri
    if "://" in milvus:  # a server URI may carry a password too (`http://user:password@host:19530`)
        milvus = redact_url(milvus)
    print(
        f"Data: Milvus at {milvus}, knowledge index at {deployment.index_path}, "
        f"lookup traces in {redact_url(deployment.trace_db_url)}"
    )


def cmd_index(args: argparse.Namespace) -> int:
    deployment = Deployment.resolve(args.data_dir)
    if args.pipeline:  # refused before anything is started or created for the data folder
        read_pipeline_file(args.pipeline)
    overrides = _overrides(args.set)
    start_store(deployment.milvus_uri)
    from pipelines.indexing import KnowledgeIndexer
    from pipelines.settings import DEFAULT_INDEXING_PIPELINE

    indexer = KnowledgeIndexer(
        deployment, pipeline_path=args.pipeline or DEFAULT_INDEXING_PIPELINE, component_params=overrides
    )
    announce = None if args.json or args.quiet else _print_estimate
    try:
        summary = indexer.index(args.knowledge, rebuild=args.rebuild, progress=not args.quiet, announce=announce)
        if args.json:
            print(json.dumps(summary.as_dict(), ensure_ascii=False, indent=1))
        else:
            _print_index_summary(summary.as_dict(), deployment)
        if args.watch:
            from pipelines.watching import watch_and_index

            watch_and_index(indexer, args.knowledge, debounce_ms=args.debounce_ms, json_lines=args.json)
    finally:
        indexer.close()
    return 0


def _print_estimate(estimate: dict) -> None:
    """A run of some length says first what it expects, so that nobody waits without knowing for how long."""
    if estimate["minutes"] < 0.5:
        return
    print(
        f"Indexing {estimate['files']} files ({estimate['bytes']:,} bytes): about {estimate['minutes']:.0f} min "
        f"at {estimate['bytes_per_second']:.0f} bytes/s ({estimate['rate']})",
        flush=True,
    )


def _print_result(result: dict) -> None:
    print(
        f"found={result['found']} status={result['evidenceStatus']} relevance={result['relevanceLevel']} "
        f"completeness={result['completenessHint']} trace={result.get('traceId')}"
    )
    print(result["message"])
    hints = result["l0Hints"]
    if hints["domains"] or hints["matchedKeywords"]:
        print(
            f"L0 hints: domains={hints['domains']} keywords={hints['matchedKeywords']} filter={hints['categoryFilter']}"
        )
    trace = result["retrievalTrace"]
    if trace["fallbackReason"]:
        print(f"retry: {trace['fallbackReason']}")
    for block in result["evidenceBlocks"]:
        print(
            f"\n- {block['source']} | {block['breadcrumb']} | {block['score']:.3f} | {', '.join(block['hitReasons'])}"
        )
        if block.get("citation"):
            print(f"  cite: {block['citation']}")
        text = " ".join(block["content"].split())
        print(f"  {text[:300]}{'…' if len(text) > 300 else ''}")
    if result.get("moreAvailable"):
        print(f"\nmore: --cursor {result['cursor']}")


def _filters(specs: list[str]) -> dict[str, str | list[str]] | None:
    """`--filter KEY=VALUE` options as `filters`: a key given twice is any of its values."""
    filters: dict[str, list[str]] = {}
    for spec in specs:
        key, sep, value = spec.partition("=")
        if not sep or not key.strip():
            msg = f"--filter {spec!r} must be KEY=VALUE, e.g. category=alerts"
            raise ValueError(msg)
        filters.setdefault(key.strip(), []).append(value)
    return {k: v[0] if len(v) == 1 else v for k, v in filters.items()} or None


def _require_data_folder(deployment: Deployment) -> None:
    """
    Refuse a data folder that does not exist when the knowledge base would be in it: nothing was indexed there.

    :param deployment: The resolved deployment.
    :raises ValueError: If it does not exist and the store is a Milvus Lite file inside it (a mistyped `--data-dir`
        must not leave an empty knowledge base and trace database behind).
    """
    folder = deployment.data_dir
    if not folder.exists() and lite_file_in(deployment.milvus_uri, folder) is not None:
        raise ValueError(
            f"data folder {folder} does not exist, so nothing is indexed there: run `lookup-knowledge index "
            f"--data-dir {folder}` first, or point --data-dir (or LOOKUP_KNOWLEDGE_DATA_DIR) at an indexed folder"
        )


def cmd_ask(args: argparse.Namespace) -> int:
    from pipelines.service import KnowledgeService
    from pipelines.settings import DEFAULT_LOOKUP_PIPELINE

    caller = _caller(args)
    deployment = Deployment.resolve(args.data_dir)
    _require_data_folder(deployment)
    if args.pipeline:  # refused before anything is started for the data folder
        read_pipeline_file(args.pipeline)
    overrides = _overrides(args.set)
    start_store(deployment.milvus_uri)
    # a store or knowledge index that cannot be opened fails the lookup, which is then recorded (exit 1)
    service = KnowledgeService.load(
        args.pipeline or DEFAULT_LOOKUP_PIPELINE, data_dir=args.data_dir, component_params=overrides, warm_up=False
    )
    result = service.lookup(
        args.query,
        session_id=args.session,
        filters=_filters(args.filter),
        max_chars=args.max_chars,
        cursor=args.cursor,
        principal=caller,
    )
    if args.json:
        print(json.dumps(result, ensure_ascii=False, indent=1))
    else:
        _print_result(result)
    if result["evidenceStatus"] == "invalid_query":
        print(f"lookup-knowledge: {result['error']}", file=sys.stderr)
        return 2
    if result["evidenceStatus"] == "error":
        print(f"lookup-knowledge: {result['error']}", file=sys.stderr)
        return 1
    return 0


def cmd_trace(args: argparse.Namespace) -> int:
    from pipelines.entrypoints import trace_browser
    from pipelines.traces import open_traces

    caller = _caller(args)
    # an operator sees every principal's rows; anyone else only its own (an anonymous caller, the anonymous rows)
    owner = None if caller.operator else (caller.name or "")
    store = open_traces(Deployment.resolve(args.data_dir))
    try:
        if args.action == "replay":
            report = store.replay()
            if args.json:
                print(json.dumps(report.as_dict()))
            else:
                rejected = store.spool.rejected_path if store.spool else "-"
                print(
                    f"Replayed {report.files} spool files: {report.stored} rows stored, {report.duplicates} already "
                    f"stored, {report.rejected} damaged lines moved to {rejected}"
                    + ("; nothing was waiting" if not report.files and not report.in_progress else "")
                    + (
                        f"; {report.in_progress} spool files are being stored by another replay right now"
                        if report.in_progress
                        else ""
                    )
                    + (f"; database unavailable ({report.error}), rows stay spooled" if report.error else "")
                )
            return 1 if report.error else 0
        if args.action == "list":
            rows = store.list(
                limit=args.limit,
                session_id=args.session,
                status=args.status,
                since=trace_browser.parse_time(args.since) if args.since else None,
                until=trace_browser.parse_time(args.until) if args.until else None,
                principal=owner,
            )
            if args.json:
                print(
                    json.dumps([trace_browser.row_json(r, details=False) for r in rows], ensure_ascii=False, indent=1)
                )
            else:
                for row in rows:
                    print(trace_browser.row_line(row))
            return 0
        if args.id is None:
            raise ValueError("trace show needs an ID (see `lookup-knowledge trace list`)")
        found = store.get(args.id)
        if found is None or (owner is not None and not found.belongs_to(owner or None)):
            # another principal's row is answered as a row that does not exist
            raise ValueError(f"no tool_invocation row with id {args.id}")
        if args.json:
            print(json.dumps(trace_browser.row_json(found), ensure_ascii=False, indent=1))
        else:
            print(trace_browser.row_report(found))
        return 0
    finally:
        store.close()


def cmd_serve(args: argparse.Namespace) -> int:
    from pipelines.catalog import parse_knowledge
    from pipelines.entrypoints.mcp_server import serve

    with contextlib.suppress(KeyboardInterrupt):
        serve(
            args.transport,
            host=args.host,
            port=args.port,
            data_dir=args.data_dir,
            pipeline_path=args.pipeline,
            allow_remote=args.allow_remote,
            allowed_hosts=args.allowed_host,
            component_params=_overrides(args.set),
            tool_name=args.tool_name,
            tool_description=args.tool_description,
            knowledge=[parse_knowledge(spec) for spec in args.knowledge] or None,
            principals_path=args.principals,
            as_principal=args.as_principal if args.as_principal != "anonymous" else None,
        )
    return 0


def cmd_principal(args: argparse.Namespace) -> int:
    principals = _principals(args)
    if args.action == "list":
        described = principals.describe()
        if args.json:
            print(json.dumps(described, ensure_ascii=False, indent=1))
        for each in [] if args.json else described:
            flags = " operator" if each["operator"] else ""
            print(f"{each['name']}: groups {', '.join(each['groups']) or '-'}{flags}; {each['tokens']} token(s)")
        return 0
    if not args.name:
        raise ValueError(f"principal {args.action} needs a NAME")
    if args.action == "remove":
        principals.remove(args.name)
        print(f"Removed {args.name} and its tokens from {principals.path}")
        return 0
    token = principals.add(args.name, args.group, operator=args.operator)
    print(token)
    print(
        f"Added a token for {args.name} to {principals.path} (only its hash is kept: this is the one time it is shown)",
        file=sys.stderr,
    )
    return 0


def cmd_export_pipelines(args: argparse.Namespace) -> int:
    from pipelines.settings import DEFAULT_INDEXING_PIPELINE, DEFAULT_LOOKUP_PIPELINE

    folder = Path(args.folder)
    targets = {folder / "pipelines.yaml": DEFAULT_LOOKUP_PIPELINE, folder / "indexing.yaml": DEFAULT_INDEXING_PIPELINE}
    existing = [str(target) for target in targets if target.exists()]
    if existing:
        raise ValueError(f"{', '.join(existing)} already exist(s); remove it or export into another folder")
    folder.mkdir(parents=True, exist_ok=True)
    for target, shipped in targets.items():
        target.write_text(shipped.read_text(encoding="utf-8"), encoding="utf-8")
    lookup_yaml, indexing_yaml = targets
    print(
        f"Wrote {lookup_yaml} and {indexing_yaml}. Edit them, then: lookup-knowledge index --pipeline {indexing_yaml} "
        f"...; lookup-knowledge ask --pipeline {lookup_yaml} ... (also serve, eval)"
    )
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from pipelines.loading import component_params_from
    from pipelines.measure.evaluation import evaluate, format_table, plot_report
    from pipelines.settings import DEFAULT_LOOKUP_PIPELINE

    report = evaluate(
        args.dataset,
        data_dir=args.data_dir,
        pipeline_path=args.pipeline or DEFAULT_LOOKUP_PIPELINE,
        component_params=component_params_from(args.set) or None,
        progress=not args.quiet,
        limit=args.limit,
        negatives=args.negatives,
        principal=_caller(args),
    )
    print(format_table(report))
    if args.json:
        Path(args.json).write_text(json.dumps(report, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        print(f"JSON report: {args.json}")
    if args.plot:
        plot_report(report, args.plot)
        print(f"Plot: {args.plot}")
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from pipelines.loading import component_params_from
    from pipelines.measure.bench import parse_scales, run_bench

    figures = run_bench(
        args.knowledge,
        rounds=args.rounds,
        compare=component_params_from(args.compare) or None,
        scales=parse_scales(args.scale),
        cold_start_runs=args.cold_start_runs,
        progress=lambda line: print(line, file=sys.stderr, flush=True),
        formats=args.formats,
    )
    text = json.dumps(figures, ensure_ascii=False, indent=1)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n", encoding="utf-8")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lookup-knowledge", description="Evidence-first knowledge lookup for agents")
    sub = parser.add_subparsers(dest="command", required=True)

    index = sub.add_parser("index", help="index a knowledge folder into Milvus")
    index.add_argument("--knowledge", default="knowledge", help="knowledge folder (default: knowledge/)")
    index.add_argument("--data-dir", default=None, help="data folder (default: ./data or LOOKUP_KNOWLEDGE_DATA_DIR)")
    index.add_argument(
        "--rebuild", action="store_true", help="index everything again into a new collection, switched to at the end"
    )
    index.add_argument("--pipeline", default=None, help="indexing pipeline YAML (default: the shipped indexing.yaml)")
    index.add_argument("--json", action="store_true", help="print the summary as JSON")
    index.add_argument("--quiet", action="store_true", help="no progress bar")
    index.add_argument(
        "--watch",
        action="store_true",
        help="after the run, index again whenever files change (deletions included) until stopped (Ctrl-C)",
    )
    index.add_argument(
        "--debounce-ms", type=int, default=1500, help="--watch: wait this long after the last change (default 1500)"
    )
    _add_set(index, "chunker.max_chars=800")
    index.set_defaults(func=cmd_index)

    ask = sub.add_parser("ask", help="one lookup_knowledge call")
    ask.add_argument("query")
    ask.add_argument("--session", default=None, help="session id: evidence already returned in it is not repeated")
    ask.add_argument("--json", action="store_true", help="print exactly the LookupResult JSON")
    ask.add_argument("--data-dir", default=None)
    ask.add_argument("--pipeline", default=None, help="lookup pipeline YAML (default: the shipped pipelines.yaml)")
    ask.add_argument(
        "--filter",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="search only documents with this value (repeatable; a key twice: either value), e.g. category=alerts",
    )
    ask.add_argument("--max-chars", type=int, default=None, help="the most characters of evidence to return")
    ask.add_argument("--cursor", default=None, help="a previous result's cursor: that lookup's next blocks")
    _add_set(ask, "packer.char_budget=2000")
    _add_caller(ask, "look up")
    ask.set_defaults(func=cmd_ask)

    trace = sub.add_parser("trace", help="browse recorded tool_invocation rows")
    trace.add_argument("action", choices=["list", "show", "replay"], help="replay: store the spooled rows now")
    trace.add_argument("id", nargs="?", type=int)
    trace.add_argument("--json", action="store_true")
    trace.add_argument("--data-dir", default=None)
    trace.add_argument("--limit", type=int, default=20)
    trace.add_argument("--session", default=None, help="only this session's rows")
    trace.add_argument("--status", default=None, help="only rows of this status (evidence, no_evidence, error, ...)")
    trace.add_argument("--since", default=None, help="only rows created at or after this ISO time (UTC by default)")
    trace.add_argument("--until", default=None, help="only rows created before this ISO time")
    _add_caller(trace, "browse (a principal that is no operator sees only its own rows)")
    trace.set_defaults(func=cmd_trace)

    serve_p = sub.add_parser(
        "serve",
        help="serve lookup_knowledge over MCP (stdio, or HTTP: /mcp plus REST /lookup, Dify /retrieval, /health)",
    )
    serve_p.add_argument(
        "--transport",
        choices=["stdio", "http"],
        default="stdio",
        help="default: stdio; http also serves the REST routes",
    )
    serve_p.add_argument("--host", default=DEFAULT_MCP_HOST, help=f"HTTP bind address (default: {DEFAULT_MCP_HOST})")
    serve_p.add_argument("--port", type=int, default=DEFAULT_MCP_PORT, help=f"HTTP port (default: {DEFAULT_MCP_PORT})")
    serve_p.add_argument("--data-dir", default=None, help="data folder (default: ./data or LOOKUP_KNOWLEDGE_DATA_DIR)")
    serve_p.add_argument("--pipeline", default=None, help="lookup pipeline YAML (default: the shipped pipelines.yaml)")
    serve_p.add_argument(
        "--allow-remote",
        action="store_true",
        help="allow a non-loopback --host (requires a bearer token in LOOKUP_KNOWLEDGE_TOKEN)",
    )
    serve_p.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="NAME[:PORT]",
        help="a Host header to serve besides loopback and --host (repeatable), e.g. kb.internal:8765",
    )
    serve_p.add_argument(
        "--knowledge",
        action="append",
        default=[],
        metavar="NAME=DATA_DIR",
        help="serve several knowledge bases (repeatable), each indexed into its own data folder: one lookup tool "
        "lookup_NAME each; REST and the reads take `knowledge`, Dify's knowledge_id is NAME",
    )
    serve_p.add_argument(
        "--tool-name",
        default=None,
        help="the lookup tool's name (default: lookup_knowledge); give each knowledge base served to one agent its own",
    )
    serve_p.add_argument(
        "--tool-description",
        default=None,
        help="the lookup tool's description (default: pipelines.yaml metadata.tool_description, else one naming the "
        "knowledge base's categories and languages)",
    )
    _add_set(serve_p, "gate.max_gap=0.03")
    serve_p.add_argument(
        "--as",
        dest="as_principal",
        default=None,
        metavar="PRINCIPAL",
        help="stdio: serve every call as this principal of the principals file (default: anonymous, public pages "
        "only); over HTTP each request is the principal whose token it sends",
    )
    serve_p.add_argument(
        "--principals",
        default=None,
        metavar="FILE",
        help="the principals file (default: LOOKUP_KNOWLEDGE_PRINCIPALS, else principals.yaml in the data folder)",
    )
    serve_p.set_defaults(func=cmd_serve)

    principal = sub.add_parser(
        "principal", help="who may read what: add a principal (prints its new bearer token once), list, remove"
    )
    principal.add_argument("action", choices=["add", "list", "remove"])
    principal.add_argument("name", nargs="?", default=None)
    principal.add_argument(
        "--group",
        action="append",
        default=[],
        help="an access group (repeatable): it reads pages whose front matter `access` names it; '*' reads every page",
    )
    principal.add_argument("--operator", action="store_true", help="it sees every principal's trace rows")
    principal.add_argument("--data-dir", default=None, help="data folder (its principals.yaml)")
    principal.add_argument("--principals", default=None, metavar="FILE", help="the principals file")
    principal.add_argument("--json", action="store_true", help="list: as JSON")
    principal.set_defaults(func=cmd_principal)

    export = sub.add_parser(
        "export-pipelines", help="write the shipped pipelines.yaml and indexing.yaml into a folder, to edit them"
    )
    export.add_argument("folder", nargs="?", default=".", help="where to write them (default: here)")
    export.set_defaults(func=cmd_export_pipelines)

    evaluate = sub.add_parser("eval", help="score a labelled dataset: pipeline vs dense vs bm25, in one run")
    evaluate.add_argument("dataset", help="folder with knowledge/ and eval.jsonl")
    evaluate.add_argument("--data-dir", default=None, help="where the dataset is indexed (default data/eval/<name>)")
    evaluate.add_argument("--json", default=None, help="write the report here")
    evaluate.add_argument("--plot", default=None, help="write a PNG comparing the configs here")
    evaluate.add_argument("--pipeline", default=None, help="pipeline YAML measured as 'pipeline'")
    evaluate.add_argument("--limit", type=int, default=None, help="only the first N judged queries")
    evaluate.add_argument(
        "--negatives",
        action="append",
        default=[],
        metavar="FILE",
        help="unanswerable queries (eval.jsonl format, no judgments), besides the dataset's own negatives.jsonl",
    )
    _add_set(evaluate, "sidecar.enabled=true")
    _add_caller(evaluate, "measure the pipeline's lookups")
    evaluate.add_argument("--quiet", action="store_true", help="no progress bars")
    evaluate.set_defaults(func=cmd_eval)

    bench = sub.add_parser("bench", help="latency of the lookup pipeline next to a bare Haystack retrieval pipeline")
    bench.add_argument("--knowledge", default=None, help="knowledge folder with eval.jsonl (default: knowledge/)")
    bench.add_argument("--rounds", type=int, default=3)
    bench.add_argument("--json", default=None, help="also write the figures to this file")
    bench.add_argument(
        "--compare",
        action="append",
        default=[],
        metavar="COMPONENT.PARAM=VALUE",
        help="also time the lookup pipeline with this override (repeatable), e.g. retriever.top_k=30",
    )
    bench.add_argument(
        "--scale",
        default=None,
        metavar="SIZES",
        help="also time lookups on synthetic collections of these many chunks, e.g. 1k,10k,100k",
    )
    bench.add_argument("--cold-start-runs", type=int, default=5, help="fresh `ask` processes timed (0: none)")
    bench.add_argument(
        "--formats",
        nargs="?",
        const="",
        default=None,
        metavar="FOLDER",
        help="also time indexing per file type on the documents of FOLDER (default: the repository's real documents)",
    )
    bench.set_defaults(func=cmd_bench)
    return parser


#: commands whose time to a ready pipeline is what their user waits for (one answer; an MCP client's first call)
_STARTUP_BOUND = ("ask", "serve")


def main(argv: Sequence[str] | None = None) -> int:
    """
    Run the command line.

    Called without `argv` (the console script, `python -m pipelines.entrypoints.cli`), `ask` is the process's whole
    life: once its answer is out, the process ends without the interpreter's teardown (`_end_process`) instead of
    returning.

    :param argv: Arguments (default: `sys.argv[1:]`).
    :returns: The exit code: 0 success, 2 bad input, 1 internal failure, 141 (a shell's SIGPIPE code) when the reader
        of the output went away (`trace list | head`).
    """
    args = build_parser().parse_args(argv)
    if args.command == "serve":
        one_blas_thread()  # before numpy is imported: concurrent lookups need the cores (`pipelines.startup`)
    if argv is None and args.command in _STARTUP_BOUND:
        pause_collection()  # until the pipeline is ready: `load_pipeline` resumes it
    try:
        code = _run(args)
    finally:
        resume_collection()
    if argv is None and args.command == "ask":
        _end_process(code)
    return code


def _end_process(code: int) -> NoReturn:
    """
    End the process of a finished one-shot command now, without the interpreter's teardown.

    Exactly the normal exit, in its order, up to the point where only memory is left: wait for (and stop) the
    threads as the interpreter would, run the exit handlers (Milvus Lite's server shutdown, logging, span export),
    flush the output. What is skipped is freeing every module and object one by one, which after a lookup (two
    models, Milvus Lite, Haystack, SQLAlchemy loaded) took longer than the lookup itself.

    :param code: The exit code.
    """
    shutdown = getattr(threading, "_shutdown", None)
    if shutdown is not None:  # joins the thread pools (concurrent.futures) and the non-daemon threads
        shutdown()
    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
    except BrokenPipeError:  # nobody reads the rest, as in `main`
        code = 141
    with contextlib.suppress(Exception):
        sys.stderr.flush()
    os._exit(code)


def _run(args: argparse.Namespace) -> int:
    for stream in (sys.stdout, sys.stderr):
        # undecodable arguments (lone surrogates) are printed escaped instead of failing the command
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    # pymilvus logs every failed RPC itself; the CLI reports failures once, and the trace keeps the details
    stdlib_logging.getLogger("pymilvus").setLevel(stdlib_logging.CRITICAL)
    try:
        return int(args.func(args))
    except (FileNotFoundError, ValueError) as err:
        print(f"lookup-knowledge: {err}", file=sys.stderr)
        return 2
    except StoreUnavailableError as err:  # the data folder's Milvus Lite host could not start (or the data is held)
        print(f"lookup-knowledge: {err}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # nobody reads the rest: stop quietly, and let the exit flush go nowhere
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except Exception as err:
        print(f"lookup-knowledge: internal error: {type(err).__name__}: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
