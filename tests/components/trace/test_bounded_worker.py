from __future__ import annotations

import threading
import time

import pytest

from components.trace.bounded_worker import BoundedWorker, DeadlineExceeded


@pytest.fixture
def worker():
    w = BoundedWorker("test-worker")
    yield w
    w.stop()


class TestBoundedWorker:
    def test_init_starts_no_thread(self):
        before = threading.active_count()
        BoundedWorker("idle")
        assert threading.active_count() == before

    def test_runs_and_returns(self, worker):
        assert worker.run(lambda: 41 + 1, timeout_s=1) == 42
        assert worker.stalled_for() == 0.0

    def test_an_exception_reaches_the_caller(self, worker):
        def broken() -> None:
            raise ValueError("bad")

        with pytest.raises(ValueError, match="bad"):
            worker.run(broken, timeout_s=1)
        assert worker.run(lambda: "next", timeout_s=1) == "next"

    def test_a_blocked_task_costs_its_caller_the_deadline_only(self, worker):
        release = threading.Event()
        started = time.perf_counter()
        with pytest.raises(DeadlineExceeded):
            worker.run(release.wait, timeout_s=0.2)
        assert time.perf_counter() - started < 1.0
        time.sleep(0.05)
        assert worker.stalled_for() > 0.2  # what a store checks before queueing behind it
        release.set()
        assert worker.run(lambda: "after", timeout_s=1) == "after"

    def test_a_task_that_never_started_is_dropped(self, worker):
        release = threading.Event()
        ran: list[str] = []
        blocked = worker.submit(release.wait)
        queued = worker.submit(lambda: ran.append("queued"))
        with pytest.raises(DeadlineExceeded):
            worker.wait(queued, 0.1)
        release.set()
        worker.wait(blocked, 1)
        assert worker.run(lambda: "drained", timeout_s=1) == "drained"
        assert ran == []

    def test_without_cancel_a_late_task_still_runs(self, worker):
        release = threading.Event()
        ran: list[str] = []
        worker.submit(release.wait)
        later = worker.submit(lambda: ran.append("later"))
        with pytest.raises(DeadlineExceeded):
            worker.wait(later, 0.1, cancel=False)
        release.set()
        worker.wait(later, 1)
        assert ran == ["later"]

    def test_extend_keeps_waiting_while_it_says_so(self, worker):
        asked: list[float] = []

        def extend() -> bool:
            asked.append(time.perf_counter())
            return len(asked) < 3

        assert worker.run(lambda: time.sleep(0.25) or "slow", timeout_s=0.1, extend=extend) == "slow"
        assert 2 <= len(asked) <= 3

    def test_progress_resets_the_stall_clock(self, worker):
        release = threading.Event()

        def long_task() -> None:
            for _ in range(20):
                time.sleep(0.02)
                worker.progress()
            release.wait()

        task = worker.submit(long_task)
        time.sleep(0.2)
        assert worker.stalled_for() < 0.15
        release.set()
        worker.wait(task, 1)

    def test_waiting_sees_queued_tasks(self, worker):
        release = threading.Event()
        blocked = worker.submit(release.wait)
        time.sleep(0.05)
        assert not worker.waiting()
        queued = worker.submit(lambda: None)
        assert worker.waiting()
        release.set()
        worker.wait(blocked, 1)
        worker.wait(queued, 1)

    def test_stop_ends_the_thread_after_the_queued_tasks(self):
        worker = BoundedWorker("stopping")
        task = worker.submit(lambda: "last")
        worker.stop()
        assert worker.wait(task, 1) == "last"
        with pytest.raises(RuntimeError, match="stopped"):
            worker.submit(lambda: None)
