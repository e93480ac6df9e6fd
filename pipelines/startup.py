"""How a command starts: one BLAS thread per lookup, and Python's cyclic garbage collector paused until the lookup
pipeline is ready.

A lookup's matrix work is small (a query against a hundred candidates): under concurrent lookups (a served tool)
OpenBLAS' own threads, spinning, take the cores the other lookups need. `serve` starts with `OPENBLAS_NUM_THREADS=1`
unless the operator set it (`one_blas_thread`): through the real HTTP server, 8 clients x 50 calls against the same
calls one at a time, 1.67x the throughput instead of 1.16x (`python benchmarks/served_concurrency.py`, D73). One
lookup alone is about as fast either way (p50 70.7 vs 66.8 ms, five alternated runs each), so `ask` keeps the
default. e5's own threads are set per call (`components.core.embedding_backends`).

Starting `ask` (or the MCP server) imports Haystack, pymilvus with pandas, SQLAlchemy and Milvus Lite, and loads
two models and the knowledge index: objects that live as long as the process, hundreds of thousands of them.
Meanwhile the cyclic collector, triggered every 700 allocations, walks them again and again; none of them is
garbage. The command line pauses it as the process starts (`pause_collection`), and `load_pipeline` resumes it
once the pipeline is warmed up (`resume_collection`), after `gc.freeze()` has put everything allocated so far out
of its reach: from then on a collection looks only at what lookups allocate. What was already garbage at that
moment is frozen with the rest and never freed — about 3,500 objects after `ask`'s start, once per process — which
costs less than the one full collection (0.2–0.4 s over 350,000 objects) that would find it. A process that never
paused the collector (an application calling `load_pipeline`, a test) is left as it is.
"""

from __future__ import annotations

import gc
import threading

from components.core.environment import OPENBLAS_THREADS

_lock = threading.Lock()
_paused: list[bool] = []  # holds True while this module has the collector paused


def one_blas_thread() -> None:
    """Limit OpenBLAS to one thread in this process, unless set already (effective only before numpy's import)."""
    OPENBLAS_THREADS.set_default("1")


def pause_collection() -> None:
    """Pause the cyclic garbage collector, unless something else already turned it off."""
    with _lock:
        if gc.isenabled():
            gc.disable()
            _paused.append(True)


def resume_collection() -> None:
    """Freeze what was allocated while paused, then resume the collector (nothing if this module did not pause it)."""
    with _lock:
        if _paused:
            gc.freeze()
            gc.enable()
            _paused.clear()
