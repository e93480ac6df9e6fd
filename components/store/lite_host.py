"""One Milvus Lite host process per data folder, shared by every process that uses the folder.

Milvus Lite opens its data in one process only. So that `ask`, `index`, `serve` and `eval` can run at once on one data
folder with nothing for the user to start, no process opens the folder itself: the first one that needs it starts a
host (`python -m components.store.lite_host`), a detached process that opens the folder and serves Milvus' gRPC API on
a Unix socket that only the folder's owner can connect to; every process connects to it. Each connected process
holds a *lease*: an open connection to the host's lease socket, which the kernel closes when the process ends,
however it ends. The host stops once no lease has been held for `LOOKUP_KNOWLEDGE_LITE_LINGER_S` seconds (default
60), so a burst of one-shot commands finds it warm and nothing is left running for long.

Everything lives in a folder of this user's only, `/tmp/lookup-knowledge-<uid>/<digest of the .db folder's real
path>` (named by the uid alone, so that every process of the user finds it whatever its environment), not in the
data folder, which stays a plain folder to copy or back up: `state.json` (the host's pid, status and sockets), the
two sockets, `spawn.lock` (taken to start a host, to attach to one, and by a host to stop) and `host.log`.

The host logs with the standard library's `logging` to its log file: it imports no Haystack, so it starts in a
fraction of a second.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import logging as stdlib_logging
import os
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from components.core.environment import LITE_LINGER, PYTHONPATH
from components.core.errors import StoreUnavailableError

# the host process imports no Haystack (it starts in a fraction of a second), so it logs with the standard library
logger = stdlib_logging.getLogger(__name__)

LINGER_ENV = LITE_LINGER.name
DEFAULT_LINGER_S = 60.0
#: how long a process waits for a host to open the data (a 100k-chunk folder takes seconds)
DEFAULT_START_TIMEOUT_S = 300.0
_ACK = b"1"
_ATTACH_TIMEOUT_S = 10.0
_LOCK_TIMEOUT_S = 30.0
#: gRPC workers of the host: concurrent lookups of every connected process
_GRPC_WORKERS = 16
_MAX_MESSAGE_BYTES = 256 * 1024 * 1024
#: a host log over this is started afresh by the next host
_MAX_LOG_BYTES = 1024 * 1024
#: how long a host waits for the data that a host stopping a moment ago still holds (it says `stopping` until the
#: data is closed, so this only covers a state file that went missing)
_LOCKED_RETRY_S = 3.0
#: how long a host that could not start is not tried again by this process (each component would start one)
_FAILURE_MEMORY_S = 5.0
#: how often a running host checks that its sockets and state are still where processes look for them
_CHECK_EVERY_S = 2.0


class LiteHostError(StoreUnavailableError):
    """The data folder's Milvus Lite host could not be started or reached."""


class LiteFolderBusyError(LiteHostError):
    """The Milvus Lite data is open in a process that is not a host of this project (it cannot be shared)."""


def linger_seconds() -> float:
    """
    :returns: How long a host outlives its last lease (`LOOKUP_KNOWLEDGE_LITE_LINGER_S`, default 60 s).
    :raises ValueError: If the variable is set to something other than a number of seconds >= 0.
    """
    raw = (LITE_LINGER.read() or "").strip()
    if not raw:
        return DEFAULT_LINGER_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value >= 0:  # also refuses nan
        msg = f"{LINGER_ENV}={raw!r} is not a number of seconds >= 0; set it to e.g. 60, or unset it"
        raise ValueError(msg)
    return value


@dataclass(frozen=True)
class HostPaths:
    """Where the host of one Milvus Lite data folder keeps its state and sockets: a private folder of this user."""

    db: Path
    folder: Path

    @classmethod
    def of(cls, db_path: str | os.PathLike[str]) -> HostPaths:
        """
        :param db_path: The Milvus Lite `.db` folder.
        :returns: Its host's paths, named by the folder's real path (one host however the folder is reached).
        """
        db = Path(os.path.realpath(db_path))
        digest = hashlib.sha256(str(db).encode()).hexdigest()[:24]
        return cls(db=db, folder=_runtime_folder() / digest)

    @property
    def state(self) -> Path:
        """The host's state: `{status: starting|ready|stopping|failed, pid, ...}`."""
        return self.folder / "state.json"

    @property
    def lock(self) -> Path:
        """Taken to start a host, to attach to one, and by a host to stop."""
        return self.folder / "spawn.lock"

    @property
    def log(self) -> Path:
        """What the host process printed."""
        return self.folder / "host.log"

    @property
    def grpc_socket(self) -> Path:
        """Milvus' gRPC API."""
        return self.folder / "grpc.sock"

    @property
    def lease_socket(self) -> Path:
        """Where processes hold their leases."""
        return self.folder / "lease.sock"

    def make_folders(self) -> None:
        """Create the host folders, for the owner only (whoever can reach the sockets in them can use the data)."""
        for folder in (self.folder.parent, self.folder):
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            info = folder.lstat()
            if folder.is_symlink() or not folder.is_dir() or info.st_uid != os.getuid():
                msg = f"{folder} is not a folder of this user; remove it so that the Milvus Lite host can use it"
                raise LiteHostError(msg)
            if info.st_mode & 0o077:
                folder.chmod(0o700)


def _runtime_folder() -> Path:
    """
    This user's folder for hosts, the same for every process of the user (no environment variable decides it).

    Not the data folder: a copy or backup of it must not carry sockets, nor a state file naming another folder's host.
    """
    base = Path("/tmp") if Path("/tmp").is_dir() else Path(tempfile.gettempdir())  # noqa: S108 - a 0700 folder of ours
    return base / f"lookup-knowledge-{os.getuid()}"


def _read_state(paths: HostPaths) -> dict[str, Any]:
    try:
        state = json.loads(paths.state.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return state if isinstance(state, dict) else {}


def _write_state(paths: HostPaths, state: dict[str, Any]) -> None:
    temporary = paths.state.with_name(f".state.{os.getpid()}.tmp")
    temporary.write_text(json.dumps(state), encoding="utf-8")
    os.replace(temporary, paths.state)


def _alive(pid: Any) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process has that pid now
        return False
    with contextlib.suppress(OSError):  # a host that died and was not reaped yet by its parent
        if Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z"):
            return False
    return True


class LiteHostLease:
    """
    This process's hold on a data folder's host: the host runs as long as a lease is open.

    ### Usage example

    ```python
    lease = LiteHostLease.acquire("data/milvus.db")
    client = MilvusClient(uri=lease.uri)
    ...
    lease.release()
    ```
    """

    def __init__(self, uri: str, connection: socket.socket) -> None:
        """
        :param uri: The host's gRPC address for pymilvus (`unix:<path>`).
        :param connection: The open lease connection.
        """
        self.uri = uri
        self._connection: socket.socket | None = connection

    @classmethod
    def acquire(cls, db_path: str | os.PathLike[str], timeout_s: float = DEFAULT_START_TIMEOUT_S) -> LiteHostLease:
        """
        Attach to the data folder's host, starting one when none runs.

        A host that is starting, stopping or slow to answer is waited for; one whose process is gone is replaced.

        :param db_path: The Milvus Lite `.db` folder.
        :param timeout_s: How long to wait for a host that is starting to open the data.
        :returns: The lease.
        :raises LiteFolderBusyError: If a process that is not a host holds the data.
        :raises LiteHostError: If no host could be started or reached in time (with the reason from its log).
        """
        paths = HostPaths.of(db_path)
        paths.make_folders()
        _raise_recent_failure(paths)
        deadline = time.monotonic() + timeout_s
        started: subprocess.Popen[bytes] | None = None
        while True:
            with _spawn_lock(paths):
                state = _read_state(paths)
                status, alive = state.get("status"), _alive(state.get("pid"))
                if status == "ready" and alive and state.get("db") == str(paths.db):
                    lease = _attach(state)
                    if isinstance(lease, LiteHostLease):
                        return lease
                    if not lease:  # nothing listens where it said: replaced below on the next round
                        _forget(paths, state)
                elif status == "failed":
                    _forget(paths, state)
                    if started is not None or state.get("spawner") == os.getpid():
                        _raise_failure(paths, state)
                elif status not in ("starting", "stopping", "ready") or not alive:
                    _forget(paths, state)  # none, or its process is gone
                    started = _spawn(paths)
            if started is not None and started.poll() is not None and _read_state(paths).get("status") != "failed":
                msg = (
                    f"the Milvus Lite host of {paths.db} exited with code {started.returncode} before it was ready: "
                    f"{_log_tail(paths)} (log: {paths.log})"
                )
                raise LiteHostError(msg)
            if time.monotonic() > deadline:
                msg = f"the Milvus Lite host of {paths.db} was not ready within {timeout_s:g} s (log: {paths.log})"
                raise LiteHostError(msg)
            time.sleep(0.05)

    def release(self) -> None:
        """Give the lease back (idempotent); the host stops once no process holds one for its linger time."""
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    @property
    def held(self) -> bool:
        """Whether the lease is still open, on a host that still runs (a host that ended closed its side)."""
        if self._connection is None:
            return False
        try:
            ended = self._connection.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
        except BlockingIOError:  # open, nothing to read: the host is there
            return True
        except OSError:
            ended = True
        if ended:
            self.release()
        return not ended


@contextlib.contextmanager
def _spawn_lock(paths: HostPaths, timeout_s: float = _LOCK_TIMEOUT_S) -> Any:
    lock = FileLock(paths.lock, timeout=timeout_s)
    try:
        with lock:
            yield
    except Timeout:
        msg = f"the Milvus Lite host lock {paths.lock} was held for over {timeout_s:g} s by another process"
        raise LiteHostError(msg) from None


def _attach(state: dict[str, Any]) -> LiteHostLease | bool:
    """
    Open a lease on a running host.

    :returns: The lease; False when nothing listens on its lease socket (the host is gone, whatever its pid says);
        True when it did not answer in time (busy: ask again).
    """
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    connection.settimeout(_ATTACH_TIMEOUT_S)
    try:
        connection.connect(str(state["lease"]))
        answered = connection.recv(1) == _ACK
    except (ConnectionRefusedError, FileNotFoundError, KeyError, TypeError):
        connection.close()
        return False
    except OSError:  # a timeout, or a reset by a host that is stopping
        connection.close()
        return True
    if not answered:
        connection.close()
        return True
    connection.settimeout(None)
    return LiteHostLease(str(state["grpc"]), connection)


def _forget(paths: HostPaths, state: dict[str, Any]) -> None:
    if _read_state(paths) == state:
        with contextlib.suppress(FileNotFoundError):
            paths.state.unlink()


#: a host start that failed in this process, by folder: when, and its state
_FAILURES: dict[Path, tuple[float, dict[str, Any]]] = {}


def _raise_recent_failure(paths: HostPaths) -> None:
    failed = _FAILURES.get(paths.db)
    if failed is not None and time.monotonic() - failed[0] < _FAILURE_MEMORY_S:
        _raise_failure(paths, failed[1])


def _raise_failure(paths: HostPaths, state: dict[str, Any]) -> None:
    _FAILURES[paths.db] = (time.monotonic(), state)
    reason = str(state.get("error") or "it stopped without saying why")
    if state.get("busy"):
        msg = (
            f"the knowledge base {paths.db} is open in another process that is not a lookup-knowledge command; "
            f"stop that process, or serve the folder with `milvus-lite server` and set MILVUS_URI ({reason})"
        )
        raise LiteFolderBusyError(msg)
    msg = f"the Milvus Lite host of {paths.db} could not start: {reason} (log: {paths.log})"
    raise LiteHostError(msg)


def start_soon(db_path: str | os.PathLike[str]) -> None:
    """
    Start the data folder's host when none runs or is starting, without waiting for it: a command calls this first,
    so that the host opens the data while the command imports its libraries; `LiteHostLease.acquire` then waits.

    :param db_path: The Milvus Lite `.db` folder.
    :raises LiteHostError: If the host folder cannot be made or its lock is held too long.
    """
    paths = HostPaths.of(db_path)
    paths.make_folders()
    with _spawn_lock(paths):
        state = _read_state(paths)
        if state.get("status") not in ("ready", "starting", "stopping") or not _alive(state.get("pid")):
            _forget(paths, state)
            _spawn(paths)


#: hosts this process started, reaped once they stop (they outlive it when it ends first)
_CHILDREN: list[subprocess.Popen[bytes]] = []


def _spawn(paths: HostPaths) -> subprocess.Popen[bytes]:
    """Start a host for the folder (under the spawn lock) and record it as starting."""
    paths.db.parent.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "components.store.lite_host", "--db", str(paths.db)]
    with paths.log.open("ab") as log:
        if log.tell() > _MAX_LOG_BYTES:
            log.truncate(0)
        process = subprocess.Popen(  # noqa: S603 - our own module, no shell
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd="/",  # holds no folder of the command that started it
            start_new_session=True,  # not stopped by the terminal's Ctrl-C meant for the command that started it
            env={**os.environ, "PYTHONPATH": _import_path()},
        )
    _write_state(paths, {"status": "starting", "pid": process.pid, "spawner": os.getpid()})
    for child in list(_CHILDREN):  # reap hosts this process started that have stopped since
        if child.poll() is not None:
            _CHILDREN.remove(child)
    _CHILDREN.append(process)
    return process


def _log_tail(paths: HostPaths, lines: int = 3) -> str:
    try:
        tail = paths.log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-lines:]
    except OSError:
        return "no log"
    return " | ".join(tail) or "nothing in its log"


def _import_path() -> str:
    """The Python path that imports this project in the host as it is imported here (an editable or wheel install)."""
    root = str(Path(__file__).resolve().parents[2])
    current = PYTHONPATH.read() or ""
    return os.pathsep.join(p for p in (root, current) if p)


# --- the host process ---------------------------------------------------------------------------------------------


class _Host:
    """The host: Milvus Lite on the folder, its gRPC API on a Unix socket, and the leases that keep it running."""

    def __init__(self, paths: HostPaths, linger_s: float) -> None:
        self.paths = paths
        self.linger_s = linger_s
        self.stopping = False
        self.selector = selectors.DefaultSelector()
        self.leases: set[socket.socket] = set()
        self.listener: socket.socket | None = None

    def run(self) -> int:
        """
        Serve the folder until no lease was held for the linger time, or SIGTERM.

        :returns: The exit code: 0 stopped, 1 failed, 3 the data is held by another process.
        """
        try:
            db = self._open()
        except _DataHeld as err:
            return self._failed(str(err), busy=True)
        except Exception as err:
            return self._failed(f"{type(err).__name__}: {err}")
        try:
            server = self._serve(db)
        except Exception as err:
            db.close()
            return self._failed(f"{type(err).__name__}: {err}")
        signal.signal(signal.SIGTERM, self._stop)
        signal.signal(signal.SIGINT, self._stop)
        logger.info("serving %s on unix:%s", self.paths.db, self.paths.grpc_socket)
        try:
            self._wait_for_leases()
        finally:
            server.stop(grace=5).wait()
            db.close()  # flushes; the data's lock is released only now
            self._gone()
        logger.info("stopped: no process used %s for %s s", self.paths.db, self.linger_s)
        return 0

    def _open(self) -> Any:
        """Open the data; a host that stopped a moment ago may still be closing it, so a held lock is tried again."""
        from milvus_lite import DataDirLockedError, MilvusLite

        deadline = time.monotonic() + _LOCKED_RETRY_S
        while True:
            try:
                return MilvusLite(str(self.paths.db))
            except DataDirLockedError as err:
                if time.monotonic() > deadline:
                    raise _DataHeld(str(err)) from None
                time.sleep(0.2)

    def _failed(self, reason: str, busy: bool = False) -> int:
        logger.error("failed: %s", reason)
        state = _read_state(self.paths)
        if state.get("pid") == os.getpid():
            _write_state(self.paths, {**state, "status": "failed", "error": reason, "busy": busy})
        return 3 if busy else 1

    def _serve(self, db: Any) -> Any:
        from concurrent import futures

        import grpc
        from milvus_lite.adapter.grpc.servicer import MilvusServicer
        from pymilvus.grpc_gen import milvus_pb2_grpc

        for path in (self.paths.grpc_socket, self.paths.lease_socket):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()  # left by a host that was killed: the state says no host runs
        previous_umask = os.umask(0o077)  # the sockets: connectable by the owner only
        try:
            server = grpc.server(
                futures.ThreadPoolExecutor(max_workers=_GRPC_WORKERS),
                options=[
                    ("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES),
                    ("grpc.max_send_message_length", _MAX_MESSAGE_BYTES),
                ],
            )
            milvus_pb2_grpc.add_MilvusServiceServicer_to_server(MilvusServicer(db), server)
            if not server.add_insecure_port(f"unix:{self.paths.grpc_socket}"):
                msg = f"cannot listen on {self.paths.grpc_socket}"
                raise OSError(msg)
            server.start()
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            listener.bind(str(self.paths.lease_socket))
            listener.listen(128)
        finally:
            os.umask(previous_umask)
        listener.setblocking(False)
        self.listener = listener
        self.selector.register(listener, selectors.EVENT_READ)
        _write_state(self.paths, self._ready_state())
        return server

    def _ready_state(self) -> dict[str, Any]:
        return {
            "status": "ready",
            "pid": os.getpid(),
            "db": str(self.paths.db),
            "grpc": f"unix:{self.paths.grpc_socket}",
            "lease": str(self.paths.lease_socket),
        }

    def _stop(self, *_: Any) -> None:
        self.stopping = True

    def _accept(self) -> None:
        assert self.listener is not None
        while True:
            try:
                connection, _ = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            try:
                connection.sendall(_ACK)
            except OSError:
                connection.close()
                continue
            connection.setblocking(False)
            self.leases.add(connection)
            self.selector.register(connection, selectors.EVENT_READ)

    def _drop_closed(self, connection: socket.socket) -> None:
        try:
            data = connection.recv(64)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:  # the process closed its lease, or ended
            self.selector.unregister(connection)
            self.leases.discard(connection)
            connection.close()

    def _wait_for_leases(self) -> None:
        idle_since = checked = time.monotonic()
        while not self.stopping:
            for key, _ in self.selector.select(timeout=0.25):
                if key.fileobj is self.listener:
                    self._accept()
                else:
                    self._drop_closed(key.fileobj)  # type: ignore[arg-type]
            now = time.monotonic()
            if self.leases:
                idle_since = now
            elif now - idle_since >= self.linger_s and self._retire():
                return
            if now - checked >= _CHECK_EVERY_S:
                checked = now
                if not self._still_findable():
                    break
        self._retire(force=True)

    def _still_findable(self) -> bool:
        """
        Whether processes can still find and reach this host: its state is written again if something removed it; a
        socket that was removed (a cleaner of the temporary folder) cannot be, so the host stops and the next process
        starts another.
        """
        if not (self.paths.grpc_socket.is_socket() and self.paths.lease_socket.is_socket()):
            logger.warning("stopping: the sockets in %s were removed", self.paths.folder)
            return False
        with contextlib.suppress(LiteHostError, OSError), _spawn_lock(self.paths, timeout_s=1):
            if _read_state(self.paths).get("pid") != os.getpid():
                self.paths.make_folders()
                _write_state(self.paths, self._ready_state())
        return True

    def _retire(self, force: bool = False) -> bool:
        """
        Stop taking leases, unless one arrived meanwhile; under the spawn lock, so no process attaches as it goes.
        The state says `stopping` until the data is closed (`_gone`): a process arriving meanwhile waits for that,
        rather than starting a host that would find the data still locked.
        """
        try:
            with _spawn_lock(self.paths, timeout_s=0 if not force else 5):
                self._accept()
                if self.leases and not force:
                    return False
                if _read_state(self.paths).get("pid") == os.getpid():
                    _write_state(self.paths, {"status": "stopping", "pid": os.getpid(), "db": str(self.paths.db)})
                if self.listener is not None:
                    self.selector.unregister(self.listener)
                    self.listener.close()
                    self.listener = None
        except LiteHostError:
            return force  # someone is attaching: stay
        return True

    def _gone(self) -> None:
        """The data is closed: remove the sockets and the state, so that the next process starts a host."""
        with contextlib.suppress(LiteHostError), _spawn_lock(self.paths):
            if _read_state(self.paths).get("pid") == os.getpid():
                for path in (self.paths.grpc_socket, self.paths.lease_socket, self.paths.state):
                    with contextlib.suppress(FileNotFoundError):
                        path.unlink()


class _DataHeld(Exception):
    """Another process holds the Milvus Lite data."""


def main(argv: list[str] | None = None) -> int:
    """
    Run the host of one data folder until no process has used it for the linger time (or SIGTERM).

    :param argv: `--db PATH [--linger S]`.
    :returns: The exit code: 0 stopped, 1 failed, 3 the data is held by another process.
    """
    parser = argparse.ArgumentParser(prog="python -m components.store.lite_host")
    parser.add_argument("--db", required=True, help="the Milvus Lite .db folder")
    parser.add_argument("--linger", type=float, default=None, help=f"seconds without leases to stop ({LINGER_ENV})")
    args = parser.parse_args(argv)
    paths = HostPaths.of(args.db)
    paths.make_folders()
    linger = args.linger if args.linger is not None else linger_seconds()
    stdlib_logging.basicConfig(level=stdlib_logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    return _Host(paths, linger).run()


if __name__ == "__main__":
    sys.exit(main())
