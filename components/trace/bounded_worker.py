"""One worker thread that does a trace store's database work, so that every caller's wait has a deadline.

A blocked socket read cannot be interrupted from another thread: a PostgreSQL server that is stopped (SIGSTOP, a
hung host) or a filesystem that hangs leaves the reading thread waiting until the peer answers, whatever the client
timeouts say (`statement_timeout` is enforced by the server, libpq's keepalives and `tcp_user_timeout` are answered
by the kernel of a stopped process, and none of them apply to a unix socket). So the database work runs here and the
caller waits on it with a deadline; when the deadline passes the caller goes on (the trace row is spooled) and the
worker may stay blocked. There is one worker per store and tasks queue behind it, so blocked threads cannot pile
up: while a task is stalled, callers see `stalled_for()` and do not queue at all.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from haystack import logging

logger = logging.getLogger(__name__)


class DeadlineExceeded(TimeoutError):
    """The worker did not finish a task within the caller's deadline (the task may still run, or never will)."""


@dataclass
class _Task:
    fn: Callable[[], Any]
    done: threading.Event = field(default_factory=threading.Event)
    result: Any = None
    error: BaseException | None = None
    started: bool = False
    cancelled: bool = False


class BoundedWorker:
    """
    Runs callables on one daemon thread, one at a time; callers wait for them with a deadline.

    ### Usage example

    ```python
    worker = BoundedWorker("trace-db")
    try:
        rows = worker.run(lambda: read_rows(), timeout_s=0.5)
    except DeadlineExceeded:
        rows = []  # the database did not answer in time; the worker may still be waiting for it
    ```
    """

    def __init__(self, name: str) -> None:
        """
        Create the worker; its thread starts with the first task.

        :param name: The thread's name (shown in thread dumps).
        """
        self.name = name
        self._queue: queue.Queue[_Task | None] = queue.Queue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._progress_at: float | None = None  # None: idle; else when the running task started or last progressed
        self._stopped = False

    def _ensure_thread(self) -> None:
        with self._lock:
            if self._thread is None and not self._stopped:
                # a daemon: a worker blocked on a hung server must not keep the process from exiting
                self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
                self._thread.start()

    def _loop(self) -> None:
        while True:
            task = self._queue.get()
            if task is None:
                return
            with self._lock:
                if task.cancelled:
                    continue
                task.started = True
                self._progress_at = time.monotonic()
            try:
                task.result = task.fn()
            except BaseException as err:  # handed to the caller, who decides
                task.error = err
            finally:
                with self._lock:
                    self._progress_at = None
                task.done.set()

    def submit(self, fn: Callable[[], Any]) -> _Task:
        """
        Queue a callable.

        :param fn: What to run on the worker thread.
        :returns: The task, for `wait`.
        :raises RuntimeError: If the worker was stopped.
        """
        if self._stopped:
            raise RuntimeError(f"worker {self.name} is stopped")
        task = _Task(fn)
        self._ensure_thread()
        self._queue.put(task)
        return task

    def wait(self, task: _Task, timeout_s: float, extend: Callable[[], bool] | None = None, cancel: bool = True) -> Any:
        """
        Wait for a task's result.

        :param task: From `submit`.
        :param timeout_s: Longest wait.
        :param extend: Asked when the deadline passes: True grants another `timeout_s` (e.g. while a one-time schema
            migration runs on a database that answers); it is asked again at the end of each extension.
        :returns: The callable's return value.
        :raises DeadlineExceeded: If the task did not finish in time (a task that had not started is cancelled, unless
            `cancel` is False).
        :raises BaseException: Whatever the callable raised.
        """
        while not task.done.wait(timeout_s):
            if extend is not None and extend():
                continue
            if cancel:
                with self._lock:
                    task.cancelled = not task.started
            raise DeadlineExceeded(f"no answer within {timeout_s:g} s")
        if task.error is not None:
            raise task.error
        return task.result

    def run(self, fn: Callable[[], Any], timeout_s: float, extend: Callable[[], bool] | None = None) -> Any:
        """
        Run a callable on the worker and wait for it (`submit`, then `wait`).

        :param fn: What to run.
        :param timeout_s: Longest wait.
        :param extend: See `wait`.
        :returns: The callable's return value.
        :raises DeadlineExceeded: If it did not finish in time.
        """
        return self.wait(self.submit(fn), timeout_s, extend)

    def progress(self) -> None:
        """Tell the worker that the running task is moving (called from inside a long task, e.g. per chunk)."""
        with self._lock:
            if self._progress_at is not None:
                self._progress_at = time.monotonic()

    def stalled_for(self) -> float:
        """
        How long the running task has gone without finishing or reporting progress.

        :returns: Seconds; 0.0 when the worker is idle.
        """
        with self._lock:
            return 0.0 if self._progress_at is None else time.monotonic() - self._progress_at

    def waiting(self) -> bool:
        """
        Whether tasks are queued behind the running one (a long task can yield to them).

        :returns: True when at least one task waits.
        """
        return not self._queue.empty()

    def stop(self) -> None:
        """Let the thread end after the tasks already queued (a blocked task ends it when it returns)."""
        with self._lock:
            self._stopped = True
            started = self._thread is not None
        if started:
            self._queue.put(None)
