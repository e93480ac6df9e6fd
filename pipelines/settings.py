"""Where a deployment keeps its data, and the few settings that can be overridden without editing YAML."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

DATA_DIR_ENV = "LOOKUP_KNOWLEDGE_DATA_DIR"
MILVUS_URI_ENV = "MILVUS_URI"
TRACE_DB_URL_ENV = "TRACE_DB_URL"

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_LOOKUP_PIPELINE = REPO_ROOT / "pipelines.yaml"
DEFAULT_INDEXING_PIPELINE = Path(__file__).resolve().parent / "indexing.yaml"
ALLOWED_MODULES = ["components", "pipelines"]
DEFAULT_MCP_HOST = "127.0.0.1"  # loopback unless the operator says otherwise
DEFAULT_MCP_PORT = 8765


@dataclass(frozen=True)
class Deployment:
    """The resolved locations of one deployment: its data folder, Milvus URI and trace database URL."""

    data_dir: Path
    milvus_uri: str
    trace_db_url: str

    @property
    def index_path(self) -> Path:
        """The knowledge index file (L0 hints and active document versions)."""
        return self.data_dir / "knowledge_index.json"

    @property
    def spool_path(self) -> Path:
        """The trace spool: rows the trace database could not take, until they are replayed."""
        return self.data_dir / "trace_spool.jsonl"

    @classmethod
    def resolve(
        cls, data_dir: str | Path | None = None, milvus_uri: str | None = None, trace_db_url: str | None = None
    ) -> Deployment:
        """
        Resolve the deployment from arguments, then environment variables, then defaults.

        :param data_dir: Data folder; else `LOOKUP_KNOWLEDGE_DATA_DIR`; else `./data`.
        :param milvus_uri: Milvus URI; else `MILVUS_URI`; else Milvus Lite at `<data_dir>/milvus.db`.
        :param trace_db_url: SQLAlchemy URL; else `TRACE_DB_URL`; else SQLite at `<data_dir>/traces.db`.
        :returns: The deployment.
        :raises ValueError: If the data folder is an existing file.
        """
        folder = Path(data_dir or os.environ.get(DATA_DIR_ENV) or "data").resolve()
        if folder.exists() and not folder.is_dir():
            msg = f"data folder {folder} is a file, not a folder; point --data-dir (or {DATA_DIR_ENV}) at a folder"
            raise ValueError(msg)
        uri = milvus_uri or os.environ.get(MILVUS_URI_ENV) or str(folder / "milvus.db")
        trace = trace_db_url or os.environ.get(TRACE_DB_URL_ENV) or f"sqlite:///{folder / 'traces.db'}"
        return cls(data_dir=folder, milvus_uri=uri, trace_db_url=trace)

    def overrides(self) -> dict[str, str]:
        """Init-parameter values that this deployment sets on every component that has the parameter."""
        return {
            "uri": self.milvus_uri,
            "index_path": str(self.index_path),
            "database_url": self.trace_db_url,
            "spool_path": str(self.spool_path),
        }
