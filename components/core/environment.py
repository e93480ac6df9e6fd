"""Every environment variable this project reads or sets, in one place: its name, its default and what it does.

Nothing else reads the environment (`tests/architecture/test_layers.py` checks it); the README's table of variables
is this list (`tests/test_readme.py` checks that too). Secrets (`MILVUS_TOKEN`, `TRACE_DB_PASSWORD`,
`LOOKUP_KNOWLEDGE_TOKEN`) are read as Haystack `Secret`s from the variables named here, never written into YAML.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Variable:
    """An environment variable: its name, its default (as a user reads it) and what it does."""

    name: str
    default: str
    meaning: str

    def read(self) -> str | None:
        """:returns: The variable's value, or None when it is unset."""
        return os.environ.get(self.name)

    def set_default(self, value: str) -> None:
        """
        Set the variable for this process (and its children) unless the user set it.

        :param value: The value.
        """
        os.environ.setdefault(self.name, value)


DATA_DIR = Variable(
    "LOOKUP_KNOWLEDGE_DATA_DIR",
    "`./data`",
    "the data folder (knowledge store, index, traces) when `--data-dir` is not given",
)
MILVUS_URI = Variable(
    "MILVUS_URI",
    "Milvus Lite in the data folder",
    "a Milvus server instead, e.g. `http://127.0.0.1:19530`",
)
MILVUS_TOKEN = Variable("MILVUS_TOKEN", "unset", "the Milvus server's token (a Haystack `Secret`)")
TRACE_DB_URL = Variable(
    "TRACE_DB_URL",
    "SQLite in the data folder",
    "the trace database, any SQLAlchemy URL, e.g. `postgresql+psycopg://user@host/db`",
)
TRACE_DB_PASSWORD = Variable("TRACE_DB_PASSWORD", "unset", "the trace database's password (a Haystack `Secret`)")
SERVER_TOKEN = Variable(
    "LOOKUP_KNOWLEDGE_TOKEN",
    "unset: HTTP on loopback only",
    "the bearer token `serve --transport http` requires of every request (a Haystack `Secret`)",
)
PRINCIPALS = Variable(
    "LOOKUP_KNOWLEDGE_PRINCIPALS",
    "`principals.yaml` in the data folder",
    "the principals file: who may read what, and the hashes of their bearer tokens (`lookup-knowledge principal`)",
)
PIPELINE = Variable("LOOKUP_KNOWLEDGE_PIPELINE", "the shipped `pipelines.yaml`", "hayhooks: the lookup pipeline YAML")
SPANS = Variable("LOOKUP_KNOWLEDGE_SPANS", "off", "`1`: each lookup is an OpenTelemetry span (the `otel` extra)")
LITE_LINGER = Variable(
    "LOOKUP_KNOWLEDGE_LITE_LINGER_S",
    "`60`",
    "seconds a data folder's Milvus Lite host stays up after its last process",
)
CACHE_DIR = Variable(
    "LOOKUP_KNOWLEDGE_CACHE_DIR",
    "`$XDG_CACHE_HOME/lookup-knowledge`",
    "where the offline models' unpacked files are cached; `off`: none",
)
XDG_CACHE_HOME = Variable("XDG_CACHE_HOME", "`~/.cache`", "the user's cache folder (the default of the one above)")
TELEMETRY = Variable(
    "HAYSTACK_TELEMETRY_ENABLED", "`False` (set here)", "Haystack's telemetry; no network at run time unless set"
)
OMP_WAIT_POLICY = Variable(
    "OMP_WAIT_POLICY", "`PASSIVE` (set here)", "idle OpenMP threads of the e5 model sleep instead of spinning"
)
OPENBLAS_THREADS = Variable(
    "OPENBLAS_NUM_THREADS", "`1` for `ask` and `serve` (set here)", "BLAS threads per process (D73)"
)
PYTHONPATH = Variable("PYTHONPATH", "unset", "read to hand this project's path to the Milvus Lite host process")

#: every variable, in the order the README lists them
ALL = (
    DATA_DIR,
    MILVUS_URI,
    MILVUS_TOKEN,
    TRACE_DB_URL,
    TRACE_DB_PASSWORD,
    SERVER_TOKEN,
    PRINCIPALS,
    PIPELINE,
    SPANS,
    LITE_LINGER,
    CACHE_DIR,
    XDG_CACHE_HOME,
    TELEMETRY,
    OMP_WAIT_POLICY,
    OPENBLAS_THREADS,
    PYTHONPATH,
)
