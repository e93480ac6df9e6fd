"""The trace spool: a JSON-lines file of rows the database could not take, safe under several processes.

Appends and claims take one file lock (`<spool>.lock`), so a row is never appended to a file that is being taken
away. A replay first *claims* the spool by renaming it (`<spool>.<token>.claimed`, its age reset to the claim's
time), then inserts the claimed rows and deletes the file: rows appended meanwhile go to a fresh spool. A claim left
behind by a process that died (not touched for `stale_claim_s`) is claimed again by the next replay, under the same
lock, so two replays never take one file from each other; every row carries its `invocation_id`, and the store
inserts by that key, so a row replayed twice is stored once. A line that does not parse (a crash mid-append leaves
one) is moved to `<spool>.rejected` for inspection and counted; it never blocks the rest.

Every file the spool writes is opened without following symbolic links: a link (or a hard link) in its place is
removed, the file it points to left alone, and a file of the spool's own is written instead, so nothing is ever
written outside the spool's folder. An append is all or nothing: on a full disk it leaves no half line behind.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout
from haystack import logging

logger = logging.getLogger(__name__)

_APPEND_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass
class SpoolBatch:
    """The rows of one claimed spool file, and the lines that did not parse."""

    path: Path
    rows: list[dict[str, Any]] = field(default_factory=list)
    rejected: int = 0


def _replace_link(path: Path) -> None:
    logger.warning(
        "Trace spool file {path} is a link; removed the link (its target is left alone) to write a file of its own",
        path=str(path),
    )
    path.unlink(missing_ok=True)


def _open_own_file(path: Path) -> int:
    """
    Open `path` for appending, never through a link.

    :raises OSError: If the file cannot be opened (or a link in its place keeps coming back).
    """
    for _ in range(3):
        try:
            fd = os.open(path, _APPEND_FLAGS, 0o666)
        except OSError as err:
            if err.errno != errno.ELOOP:  # ELOOP: the last component is a symbolic link
                raise
            _replace_link(path)
            continue
        if os.fstat(fd).st_nlink > 1:  # a hard link shares its data with a name elsewhere
            os.close(fd)
            _replace_link(path)
            continue
        return fd
    raise OSError(errno.ELOOP, "a link keeps reappearing in place of the trace spool file", str(path))


def _append_bytes(path: Path, data: bytes) -> None:
    """Append `data` to `path` whole, or not at all (a failed write is cut off again)."""
    fd = _open_own_file(path)
    try:
        start = os.fstat(fd).st_size
        try:
            remaining = memoryview(data)
            while remaining:
                remaining = remaining[os.write(fd, remaining) :]
        except OSError:
            # the caller keeps these rows elsewhere; half a line would only be moved aside as damaged later
            with contextlib.suppress(OSError):
                os.ftruncate(fd, start)
            raise
    finally:
        os.close(fd)


def _lines(rows: Iterable[dict[str, Any]]) -> bytes:
    # a lone surrogate left in a row becomes its JSON escape, which reads back as the same string
    text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    return text.encode("utf-8", "backslashreplace")


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
        self.append_rows([row])

    def append_rows(self, rows: list[dict[str, Any]]) -> None:
        """
        Append rows in their order, all of them or none.

        :param rows: JSON-serializable rows.
        :raises OSError: If the spool cannot be written (or its lock not taken within `lock_timeout_s`); then no
            line of them is in the spool.
        """
        if not rows:
            return
        data = _lines(rows)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with self._lock:
                _append_bytes(self.path, data)
        except Timeout as err:
            msg = f"trace spool {self.path} is locked by another process"
            raise OSError(msg) from err

    def claim(self) -> Iterator[SpoolBatch]:
        """
        Claim the spool and any stale claims, one batch per file.

        :returns: Batches to insert; call `done` for each once its rows are stored.
        """
        for path in self._claim_paths():
            batch = self._read(path)
            if batch is not None:
                yield batch

    def _claim_paths(self) -> list[Path]:
        token = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        claimed: list[Path] = []
        try:
            # taking over a stale claim happens under the lock too, and every claim's age restarts at its claim:
            # renaming keeps a file's time, so a spool last appended to a minute ago looked stale the moment it was
            # claimed, and concurrent replays took it from each other before they could read it
            with self._lock:
                if self.path.exists():
                    target = self.path.with_name(f"{self.path.name}.{token}.claimed")
                    self.path.rename(target)
                    os.utime(target)
                    claimed.append(target)
                now = time.time()
                for path in self._claimed():
                    if path in claimed:
                        continue
                    with contextlib.suppress(FileNotFoundError):
                        if now - path.stat().st_mtime < self.stale_claim_s:
                            continue  # another process is replaying it right now
                        target = path.with_name(f"{self.path.name}.{token}-{len(claimed)}.claimed")
                        path.rename(target)
                        os.utime(target)
                        claimed.append(target)
        except Timeout:
            pass  # another process is appending or claiming; what this one claimed so far is its to replay
        return claimed

    def in_progress(self) -> int:
        """
        Count the claims another replay is working on right now (claimed files younger than `stale_claim_s`).

        :returns: The number of such files.
        """
        now = time.time()
        count = 0
        for path in self._claimed():
            with contextlib.suppress(FileNotFoundError):
                count += now - path.stat().st_mtime < self.stale_claim_s
        return count

    def _read(self, path: Path) -> SpoolBatch | None:
        batch = SpoolBatch(path)
        bad: list[str] = []
        try:
            with path.open("rb") as handle:
                raw_lines = handle.readlines()
        except FileNotFoundError:  # taken over by another replay after a stall: its rows are that replay's now
            return None
        for raw in raw_lines:
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
            _append_bytes(self.rejected_path, "".join(line + "\n" for line in bad).encode("utf-8"))
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
            _append_bytes(self.rejected_path, _lines(rows))

    def keep(self, batch: SpoolBatch) -> None:
        """
        Renew a batch's claim while its rows are being stored (a long replay is not taken for a dead one).

        :param batch: A batch from `claim`.
        """
        with contextlib.suppress(FileNotFoundError):
            os.utime(batch.path)

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
