"""The trace spool: a JSON-lines file of rows the database could not take, safe under several processes.

Appends and claims take one file lock (`<spool>.lock`), so a row is never appended to a file that is being taken
away. A replay first *claims* the spool by renaming it (`<spool>.<token>.claimed`), then inserts the claimed rows
and deletes the file: rows appended meanwhile go to a fresh spool. A claim left behind by a process that died (older
than `stale_claim_s`) is claimed again by the next replay; every row carries its `invocation_id`, and the store
inserts by that key, so a row replayed twice is stored once. A line that does not parse (a crash mid-append leaves
one) is moved to `<spool>.rejected` for inspection and counted; it never blocks the rest.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout
from haystack import logging

logger = logging.getLogger(__name__)


@dataclass
class SpoolBatch:
    """The rows of one claimed spool file, and the lines that did not parse."""

    path: Path
    rows: list[dict[str, Any]] = field(default_factory=list)
    rejected: int = 0


class TraceSpool:
    """
    Appends rows to the spool and hands claimed batches to the replay.

    ### Usage example

    ```python
    spool = TraceSpool("data/trace_spool.jsonl")
    spool.append({"invocation_id": "...", "query": "disk full"})
    for batch in spool.claim():
        ...  # insert batch.rows, then:
        spool.done(batch)
    ```
    """

    def __init__(self, path: str | Path, lock_timeout_s: float = 2.0, stale_claim_s: float = 60.0) -> None:
        """
        Create the spool; nothing is touched until the first append or claim.

        :param path: The spool file.
        :param lock_timeout_s: Longest wait for the file lock.
        :param stale_claim_s: Age after which a claimed file counts as left behind by a process that died.
        """
        self.path = Path(path)
        self.lock_timeout_s = lock_timeout_s
        self.stale_claim_s = stale_claim_s
        self._lock = FileLock(f"{self.path}.lock", timeout=lock_timeout_s)

    @property
    def rejected_path(self) -> Path:
        """Where lines that do not parse are kept."""
        return self.path.with_name(self.path.name + ".rejected")

    def _claimed(self) -> list[Path]:
        return sorted(self.path.parent.glob(self.path.name + ".*.claimed"))

    def pending(self) -> bool:
        """
        Whether anything waits for replay (a cheap check: no lock, no read).

        :returns: True when the spool or a claimed file exists.
        """
        return self.path.exists() or bool(self._claimed())

    def append(self, row: dict[str, Any]) -> None:
        """
        Append one row.

        :param row: A JSON-serializable row.
        :raises OSError: If the spool cannot be written (or its lock not taken within `lock_timeout_s`).
        """
        line = json.dumps(row, ensure_ascii=False) + "\n"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with self._lock, self.path.open("a", encoding="utf-8") as handle:
                handle.write(line)
        except Timeout as err:
            msg = f"trace spool {self.path} is locked by another process"
            raise OSError(msg) from err

    def claim(self) -> Iterator[SpoolBatch]:
        """
        Claim the spool and any stale claims, one batch per file.

        :returns: Batches to insert; call `done` for each once its rows are stored.
        """
        for path in self._claim_paths():
            yield self._read(path)

    def _claim_paths(self) -> list[Path]:
        token = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        claimed: list[Path] = []
        try:
            with self._lock:
                if self.path.exists():
                    target = self.path.with_name(f"{self.path.name}.{token}.claimed")
                    self.path.rename(target)
                    claimed.append(target)
        except Timeout:
            return []  # another process is appending or claiming; the next replay takes it
        now = time.time()
        for path in self._claimed():
            if path in claimed:
                continue
            try:
                if now - path.stat().st_mtime < self.stale_claim_s:
                    continue  # another process is replaying it right now
                target = path.with_name(f"{self.path.name}.{token}-{len(claimed)}.claimed")
                path.rename(target)  # atomic: of two replays taking over the same claim, one wins
                claimed.append(target)
            except FileNotFoundError:
                continue
        return claimed

    def _read(self, path: Path) -> SpoolBatch:
        batch = SpoolBatch(path)
        bad: list[str] = []
        with path.open("rb") as handle:
            for raw in handle:
                line = raw.decode("utf-8", errors="replace").strip()
                if not line:
                    continue
                try:
                    row = json.loads(line)
                    if not isinstance(row, dict):
                        raise ValueError("not a JSON object")
                    batch.rows.append(row)
                except ValueError:
                    bad.append(line)
        if bad:
            with self.rejected_path.open("a", encoding="utf-8") as handle:
                handle.writelines(line + "\n" for line in bad)
            batch.rejected = len(bad)
            logger.warning(
                "Trace spool {path}: {count} damaged lines moved to {rejected}",
                path=str(self.path),
                count=len(bad),
                rejected=str(self.rejected_path),
            )
        return batch

    def reject(self, rows: list[dict[str, Any]]) -> None:
        """
        Keep rows the database refused beside the damaged lines, for inspection.

        :param rows: The refused rows.
        """
        if rows:
            with self.rejected_path.open("a", encoding="utf-8") as handle:
                handle.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)

    def done(self, batch: SpoolBatch) -> None:
        """
        Delete a batch's file once its rows are stored.

        :param batch: A batch from `claim`.
        """
        batch.path.unlink(missing_ok=True)

    def release(self, batch: SpoolBatch) -> None:
        """
        Give a batch back after its rows could not be stored: the next replay claims it at once.

        :param batch: A batch from `claim`.
        """
        with contextlib.suppress(FileNotFoundError):
            os.utime(batch.path, (0, 0))

    def rows(self) -> Iterator[dict[str, Any]]:
        """
        Every row waiting for replay (spool and claimed files), for readers such as the session memory.

        :returns: Rows; damaged lines are skipped (the replay moves them aside).
        """
        for path in [self.path, *self._claimed()]:
            try:
                with path.open("rb") as handle:
                    lines = handle.read().decode("utf-8", errors="replace").splitlines()
            except FileNotFoundError:
                continue
            for line in lines:
                try:
                    row = json.loads(line)
                except ValueError:
                    continue
                if isinstance(row, dict):
                    yield row
