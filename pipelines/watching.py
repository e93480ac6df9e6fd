"""
`lookup-knowledge index --watch`: the knowledge folder and its index kept in step until stopped.

Each burst of changes (debounced) runs the same incremental index run as `index`: changed files get new versions
beside the old ones and are switched to at the end, deleted files leave, and lookups in other processes (`serve`,
`ask`) answer from the new version as soon as the index file names it. Hidden files and the data folder (when it
lies inside the knowledge folder) are not watched.
"""

from __future__ import annotations

import contextlib
import json
import signal
import threading
import time
from pathlib import Path
from typing import Any

from haystack import logging
from watchfiles import Change, DefaultFilter, watch

logger = logging.getLogger(__name__)


class KnowledgeChanges(DefaultFilter):
    """The changes that matter to the index: files under the knowledge root, not hidden, not in the data folder."""

    def __init__(self, root: Path, data_dir: Path) -> None:
        """
        :param root: The knowledge root (resolved).
        :param data_dir: The data folder (resolved): the index run writes there, which must not start another run.
        """
        super().__init__()
        self.root = root
        self.data_dir = data_dir

    def __call__(self, change: Change, path: str) -> bool:
        where = Path(path)
        if where.is_relative_to(self.data_dir) or not where.is_relative_to(self.root):
            return False
        if any(part.startswith(".") for part in where.relative_to(self.root).parts):
            return False
        return bool(super().__call__(change, path))


def _report(summary: dict[str, Any], changes: int, json_lines: bool) -> None:
    if json_lines:
        print(json.dumps({"changes": changes, **summary}, ensure_ascii=False), flush=True)
        return
    print(
        f"{time.strftime('%H:%M:%S')} {changes} change(s): {summary['indexed']} indexed, {summary['deleted']} deleted, "
        f"{summary['failed']} failed, {summary['skipped']} unchanged ({summary['seconds']:.1f} s)",
        flush=True,
    )
    for failure in summary["failures"]:
        print(f"  FAILED {failure['source']}: {failure['reason']}", flush=True)


def watch_and_index(
    indexer: Any,
    knowledge_dir: str | Path,
    debounce_ms: int = 1500,
    json_lines: bool = False,
    stop: threading.Event | None = None,
) -> int:
    """
    Index the knowledge folder again after every burst of changes, until stopped (Ctrl-C, SIGTERM or `stop`).

    :param indexer: A `KnowledgeIndexer` (kept open between runs).
    :param knowledge_dir: The knowledge root.
    :param debounce_ms: How long the folder must stay quiet before a run starts.
    :param json_lines: Print each run's summary as one JSON line.
    :param stop: Set to stop watching (tests; SIGTERM sets it too).
    :returns: The number of runs.
    :raises ValueError: If `debounce_ms` is not positive.
    """
    if debounce_ms < 1:
        msg = f"--debounce-ms {debounce_ms} must be a positive number of milliseconds"
        raise ValueError(msg)
    root = Path(knowledge_dir).resolve()
    stop = stop or threading.Event()
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
    changes_of = KnowledgeChanges(root, Path(indexer.deployment.data_dir).resolve())
    print(f"Watching {root} for changes (Ctrl-C stops)", flush=True)
    runs = 0
    with contextlib.suppress(KeyboardInterrupt):
        for changes in watch(root, watch_filter=changes_of, debounce=debounce_ms, stop_event=stop):
            try:
                summary = indexer.index(root, progress=False).as_dict()
            except (OSError, ValueError) as err:  # e.g. the folder was removed: say so, keep watching
                logger.warning("Index run failed: {error}", error=err)
                print(f"{time.strftime('%H:%M:%S')} index run failed: {err}", flush=True)
                continue
            runs += 1
            _report(summary, len(changes), json_lines)
    print(f"Stopped watching after {runs} run(s)", flush=True)
    return runs
