"""Where a deployment keeps its data, and the few settings that can be overridden without editing YAML."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from components.core.environment import DATA_DIR, MILVUS_URI, TRACE_DB_URL
from components.core.errors import StoreUnavailableError

__all__ = ["Deployment", "StoreUnavailableError", "lite_file_in", "start_store"]

DATA_DIR_ENV = DATA_DIR.name
MILVUS_URI_ENV = MILVUS_URI.name
TRACE_DB_URL_ENV = TRACE_DB_URL.name

REPO_ROOT = Path(__file__).resolve().parent.parent
#: the shipped pipelines, package data (in a checkout, `lookup.yaml` is a link to the repository's `pipelines.yaml`)
DEFAULT_LOOKUP_PIPELINE = Path(__file__).resolve().parent / "lookup.yaml"
DEFAULT_INDEXING_PIPELINE = Path(__file__).resolve().parent / "indexing.yaml"
ALLOWED_MODULES = ["components", "pipelines"]
DEFAULT_MCP_HOST = "127.0.0.1"  # loopback unless the operator says otherwise
DEFAULT_MCP_PORT = 8765


def lite_file_in(milvus_uri: str, folder: Path) -> str | None:
    """
    Where a Milvus Lite file lies inside a data folder.

    :param milvus_uri: A Milvus URI.
    :param folder: The data folder.
    :returns: The file's path relative to the folder (posix), or None for a server URI or a file outside it.
    """
    if "://" in milvus_uri:
        return None
    path, folder = Path(milvus_uri).resolve(), folder.resolve()
    return path.relative_to(folder).as_posix() if path.is_relative_to(folder) else None


def start_store(milvus_uri: str) -> None:
    """
    Start the Milvus Lite host of a deployment's data, if it uses Milvus Lite and none runs, without waiting for it
    (`components.store.lite_host`): every command calls this first, so the host opens the data while the command
    imports its libraries. A server URI needs nothing.

    :param milvus_uri: The deployment's Milvus URI.
    :raises StoreUnavailableError: If the host cannot be started.
    """
    if "://" in milvus_uri:
        return
    from components.store.lite_host import start_soon

    start_soon(milvus_uri)


#: the files the project writes into a data folder
DATA_FILES = ("milvus.db", "traces.db", "trace_spool.jsonl", "knowledge_index.json", "index.lock", "rebuild.json")


def _refuse_links_out(folder: Path) -> None:
    """Refuse a data file that is a symbolic link leaving the folder: writing it would write somewhere else."""
    for name in DATA_FILES:
        path = folder / name
        if path.is_symlink() and not path.resolve().is_relative_to(folder):
            msg = (
                f"{path} is a link to {path.resolve()}, outside the data folder; remove the link or use another folder"
            )
            raise ValueError(msg)


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
        :raises ValueError: If the data folder is an existing file, or a file the project writes there is a link out
            of it.
        """
        folder = Path(data_dir or DATA_DIR.read() or "data").resolve()
        if folder.exists() and not folder.is_dir():
            msg = f"data folder {folder} is a file, not a folder; point --data-dir (or {DATA_DIR_ENV}) at a folder"
            raise ValueError(msg)
        _refuse_links_out(folder)
        uri = milvus_uri or MILVUS_URI.read() or str(folder / "milvus.db")
        trace = trace_db_url or TRACE_DB_URL.read() or f"sqlite:///{folder / 'traces.db'}"
        return cls(data_dir=folder, milvus_uri=uri, trace_db_url=trace)

    def overrides(self) -> dict[str, str]:
        """Init-parameter values that this deployment sets on every component that has the parameter."""
        return {
            "uri": self.milvus_uri,
            "index_path": str(self.index_path),
            "database_url": self.trace_db_url,
            "spool_path": str(self.spool_path),
        }
