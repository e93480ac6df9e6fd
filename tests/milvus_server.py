"""Run a real Milvus standalone server for the test suite, without Docker.

The server comes from the ``milvus`` PyPI package (Milvus 2.3.5): its
compressed binaries are unpacked once into a cache directory
(``$LOOKUP_KNOWLEDGE_MILVUS_CACHE`` or ``~/.cache/lookup-knowledge/milvus-server``)
and every start uses a fresh data directory passed in by the caller.

Loopback only: Milvus 2.3.5 has no setting for the address its gRPC servers
and its metrics/health server listen on (they bind ``*:<port>``; the
``<role>.ip`` settings only change the *advertised* address). So, when the
machine allows it (root, or CAP_SYS_ADMIN), the server runs in its own network
namespace, which has nothing but a loopback interface, and an in-process relay
forwards ``127.0.0.1:<port>`` on the host to the proxy inside it. Elsewhere the
server falls back to the host network (etcd still binds 127.0.0.1, the other
ports bind all interfaces); pass ``isolate_network=True`` to refuse that.

    with MilvusTestServer(tmp_path / "milvus") as server:
        client = pymilvus.MilvusClient(server.uri)
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import fcntl
import lzma
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from pathlib import Path

import milvus as _milvus_pkg
from milvus import MilvusServerConfig

HOST = "127.0.0.1"
CACHE_ENV = "LOOKUP_KNOWLEDGE_MILVUS_CACHE"
DEFAULT_CACHE = Path("~/.cache/lookup-knowledge/milvus-server")
_ROLES = ("rootCoord", "proxy", "queryCoord", "queryNode", "indexNode", "dataCoord", "dataNode")
_CLONE_NEWNET = 0x40000000
_START_LOCK = Path(tempfile.gettempdir()) / "lookup-knowledge-milvus-start.lock"
_SERVER_ID_DIR = Path("/tmp/milvus")  # Milvus writes server_id_<pid> here, always

# Runs as the server's parent-to-be: optionally enters a new network namespace
# (loopback only, brought up), asks for SIGTERM when the test process dies,
# then execs milvus (same pid).
_LAUNCHER = r"""
import ctypes, fcntl, os, signal, socket, struct, sys
isolate, ppid, argv = sys.argv[1] == "1", int(sys.argv[2]), sys.argv[3:]
libc = ctypes.CDLL(None, use_errno=True)
if ppid:
    libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
    if os.getppid() != ppid:
        sys.exit(0)
if isolate:
    if libc.unshare(0x40000000) != 0:
        sys.stderr.write("unshare(CLONE_NEWNET): %s\n" % os.strerror(ctypes.get_errno()))
        sys.exit(97)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    ifr = fcntl.ioctl(s, 0x8913, struct.pack("16sh22x", b"lo", 0))  # SIOCGIFFLAGS
    flags = struct.unpack("16sh", ifr[:18])[1] | 0x1 | 0x40  # IFF_UP | IFF_RUNNING
    fcntl.ioctl(s, 0x8914, struct.pack("16sh22x", b"lo", flags))  # SIOCSIFFLAGS
    s.close()
os.execv(argv[0], argv)
"""

_netns_supported: bool | None = None
_running: weakref.WeakSet[MilvusTestServer] = weakref.WeakSet()


def _launcher_cmd(isolate: bool, ppid: int, argv: list[str]) -> list[str]:
    return [sys.executable, "-I", "-S", "-c", _LAUNCHER, "1" if isolate else "0", str(ppid), *argv]


def netns_supported() -> bool:
    """Whether this process may run the server in its own network namespace."""
    global _netns_supported
    if _netns_supported is None:
        if not sys.platform.startswith("linux"):
            _netns_supported = False
        else:
            true = shutil.which("true") or "/bin/true"
            try:
                rc = subprocess.run(_launcher_cmd(True, 0, [true]), capture_output=True, timeout=20).returncode
            except (OSError, subprocess.SubprocessError):
                rc = -1
            _netns_supported = rc == 0
    return _netns_supported


def _bind_probe(port: int) -> socket.socket | None:
    """Bind+listen 127.0.0.1:port with SO_REUSEADDR (TIME_WAIT leftovers don't count as busy)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((HOST, port))
        sock.listen()
        return sock
    except OSError:
        sock.close()
        return None


def _free_port(start: int, exclude: set[int]) -> int:
    for port in range(start, min(start + 2000, 65536)):
        if port not in exclude and (sock := _bind_probe(port)):
            sock.close()
            return port
    raise RuntimeError(f"no free port on {HOST} from {start}")


class _NoProbe:
    def close(self) -> None:
        pass


class _Config(MilvusServerConfig):
    """The package's config writer with a loopback, SO_REUSEADDR port probe."""

    probe_ports = True

    def try_bind_port(self, port):  # overrides MilvusServerConfig.try_bind_port
        if not self.probe_ports:  # inside a private network namespace every port is free
            return _NoProbe()
        return _bind_probe(port)


def cache_dir() -> Path:
    root = Path(os.environ.get(CACHE_ENV) or DEFAULT_CACHE).expanduser()
    return root / _milvus_pkg.__version__


def ensure_binaries() -> Path:
    """Unpack the package's milvus binary and libraries once; return the bin dir."""
    src = Path(_milvus_pkg.__file__).parent / "data" / "bin"
    lzmas = sorted(src.glob("*.lzma"))
    stamp = "\n".join(f"{p.name} {p.stat().st_size}" for p in lzmas)
    root = cache_dir()
    bin_dir = root / "bin"
    stamp_file = bin_dir / ".unpacked"
    if stamp_file.is_file() and stamp_file.read_text() == stamp:
        return bin_dir
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp_file.is_file() and stamp_file.read_text() == stamp:
            return bin_dir
        tmp = Path(tempfile.mkdtemp(prefix="bin.", dir=root))
        for p in lzmas:
            with lzma.open(p) as fin, open(tmp / p.name[:-5], "wb") as fout:
                shutil.copyfileobj(fin, fout, 1 << 20)
            os.chmod(tmp / p.name[:-5], 0o755)
        (tmp / ".unpacked").write_text(stamp)
        shutil.rmtree(bin_dir, ignore_errors=True)
        os.rename(tmp, bin_dir)
    return bin_dir


class _Relay:
    """127.0.0.1:<port> on the host -> 127.0.0.1:<target_port> inside the server's netns."""

    def __init__(self, port: int, netns_path: str, target_port: int):
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self.listener.bind((HOST, port))
        except OSError:  # requested port taken: the next free one, as in host mode
            self.listener.bind((HOST, _free_port(port + 1, set())))
        self.listener.listen(64)
        self.listener.settimeout(0.2)
        self.port = self.listener.getsockname()[1]
        self._ns_fd = os.open(netns_path, os.O_RDONLY)
        self._target = target_port
        self._libc = ctypes.CDLL(None, use_errno=True)
        self._stop = threading.Event()
        self._socks: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._acceptor = threading.Thread(target=self._accept_loop, name="milvus-relay", daemon=True)
        self._acceptor.start()

    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(None)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, outer: socket.socket) -> None:
        # setns() switches only this thread; sockets keep the namespace they were made in.
        if self._libc.setns(self._ns_fd, _CLONE_NEWNET) != 0:
            outer.close()
            return
        try:
            inner = socket.create_connection((HOST, self._target), timeout=5)
            inner.settimeout(None)
        except OSError:
            outer.close()
            return
        with self._lock:
            self._socks.update((outer, inner))
        other = threading.Thread(target=self._pump, args=(outer, inner), daemon=True)
        other.start()
        self._pump(inner, outer)
        other.join()
        with self._lock:
            self._socks.difference_update((outer, inner))
        inner.close()
        outer.close()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(1 << 16):
                dst.sendall(data)
            dst.shutdown(socket.SHUT_WR)
        except OSError:  # reset/closed: tear down both directions
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._stop.set()
        try:  # stops listening at once (close() alone waits for the acceptor's poll)
            self.listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._acceptor.join(timeout=2)
        self.listener.close()
        with self._lock:
            socks = list(self._socks)
        for s in socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
        os.close(self._ns_fd)


def _clean_server_ids() -> None:
    """Remove the /tmp/milvus/server_id_<pid> files Milvus leaves behind, for dead pids only."""
    try:
        names = os.listdir(_SERVER_ID_DIR)
    except OSError:
        return
    for name in names:
        m = re.fullmatch(r"server_id_(\d+)", name)
        if not m:
            continue
        try:
            os.kill(int(m.group(1)), 0)
            continue  # still alive (or not ours to judge)
        except ProcessLookupError:
            pass
        except OSError:
            continue
        with contextlib.suppress(OSError):
            os.unlink(_SERVER_ID_DIR / name)
    try:
        _SERVER_ID_DIR.rmdir()  # only if empty
    except OSError:
        pass


class MilvusTestServer:
    """A real Milvus 2.3.5 standalone server on 127.0.0.1 for tests.

    ``data_dir`` should be fresh per start (e.g. a pytest tmp dir); it receives
    the config, the data and the log (``milvus-server.log``, stdout+stderr).
    """

    def __init__(self, data_dir: str | Path, port: int = 19531, isolate_network: bool | None = None):
        self.data_dir = Path(data_dir).absolute()
        self.port = port
        self.isolate_network = isolate_network
        self.isolated = False
        self.uri = f"http://{HOST}:{port}"
        self.log_path = self.data_dir / "milvus-server.log"
        self._proc: subprocess.Popen | None = None
        self._relay: _Relay | None = None
        self._log = None

    # -- public API ---------------------------------------------------------
    def start(self, timeout: float = 90) -> None:
        if self._proc is not None:
            raise RuntimeError("Milvus test server already started")
        isolate = self.isolate_network
        if isolate is None:
            isolate = netns_supported()
        elif isolate and not netns_supported():
            raise RuntimeError("isolate_network=True but this process cannot create a network namespace")
        self.isolated = isolate
        deadline = time.monotonic() + timeout
        bin_dir = ensure_binaries()
        _clean_server_ids()  # leftovers of servers whose test process was killed
        self.data_dir.mkdir(parents=True, exist_ok=True)
        _START_LOCK.touch(exist_ok=True)
        # Serialise port choice + launch between test processes on this machine.
        with open(_START_LOCK) as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                self._launch(bin_dir, isolate)
                self._wait_ready(deadline)
            except BaseException as exc:
                tail = self.log_tail()
                self.stop()
                if isinstance(exc, RuntimeError):
                    raise RuntimeError(f"{exc}\n--- {self.log_path} (tail) ---\n{tail}") from None
                raise

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=20)  # common.gracefulStopTimeout is 3 s
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=20)
            _clean_server_ids()
        if self._relay is not None:
            self._relay.close()
            self._relay = None
        if self._log is not None:
            self._log.close()
            self._log = None
        _running.discard(self)

    def log_tail(self, lines: int = 60) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - 200_000))
                return b"\n".join(f.read().splitlines()[-lines:]).decode("utf-8", "replace")
        except OSError:
            return "(no log)"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def __enter__(self) -> MilvusTestServer:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- internals ----------------------------------------------------------
    def _write_config(self, isolate: bool) -> tuple[int, int]:
        cfg = _Config(data_dir=str(self.data_dir))
        cfg.probe_ports = not isolate
        if not isolate:
            cfg.configurable_items["proxy_port"][1] = self.port  # first choice; next free if taken
        for role in _ROLES:
            cfg.set(f"{role}.ip", HOST)
        cfg.set("proxy.timeTickInterval", 50)
        cfg.set("common.gracefulStopTimeout", 3)
        cfg.resolve()  # picks ports, writes <data_dir>/configs/milvus.yaml
        ports = {v[1] for k, v in cfg.configurable_items.items() if k.endswith("_port")}
        etcd_port = cfg.get("etcd_port")
        peer_port = 2380 if isolate else _free_port(etcd_port + 1, ports)
        metrics_port = 9091 if isolate else _free_port(9091, ports | {peer_port})
        # Embedded etcd otherwise uses its defaults (localhost:2379/2380) whatever etcd_port says.
        etcd_yaml = self.data_dir / "configs" / "etcd.yaml"
        client_url, peer_url = f"http://{HOST}:{etcd_port}", f"http://{HOST}:{peer_port}"
        etcd_yaml.write_text(
            "name: default\n"
            f"listen-client-urls: {client_url}\nadvertise-client-urls: {client_url}\n"
            f"listen-peer-urls: {peer_url}\ninitial-advertise-peer-urls: {peer_url}\n"
            f"initial-cluster: default={peer_url}\n"
        )
        milvus_yaml = self.data_dir / "configs" / "milvus.yaml"
        text = milvus_yaml.read_text()
        text = re.sub(r"^  endpoints: localhost:", f"  endpoints: {HOST}:", text, count=1, flags=re.M)
        text, n = re.subn(r"^etcd:[ \t]*$", f"etcd:\n  config:\n    path: {etcd_yaml}", text, count=1, flags=re.M)
        if n != 1:
            raise RuntimeError("unexpected milvus config template (no top-level etcd:)")
        milvus_yaml.write_text(text)
        return int(cfg.get("proxy_port")), metrics_port

    def _launch(self, bin_dir: Path, isolate: bool) -> None:
        proxy_port, metrics_port = self._write_config(isolate)
        env = dict(os.environ)
        env.update(
            DEPLOY_MODE="STANDALONE",
            METRICS_PORT=str(metrics_port),
            MILVUSCONF=str(self.data_dir / "configs"),
            MILVUS_RUN_DIR=str(self.data_dir / "run"),
            LD_LIBRARY_PATH=os.pathsep.join(filter(None, [str(bin_dir), os.environ.get("LD_LIBRARY_PATH")])),
        )
        main_thread = threading.current_thread() is threading.main_thread()
        # PR_SET_PDEATHSIG fires when the *thread* that forked exits: only use it from the main thread.
        ppid = os.getpid() if main_thread else 0
        self._log = open(self.log_path, "ab")
        self._proc = subprocess.Popen(
            _launcher_cmd(isolate, ppid, [str(bin_dir / "milvus"), "run", "standalone"]),
            cwd=self.data_dir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        _running.add(self)
        if isolate:
            self._wait_netns()
            self._relay = _Relay(self.port, f"/proc/{self._proc.pid}/ns/net", proxy_port)
            self.uri = f"http://{HOST}:{self._relay.port}"
        else:
            self.uri = f"http://{HOST}:{proxy_port}"

    def _wait_netns(self) -> None:
        """Wait until the launcher has left our network namespace (else the relay would enter ours)."""
        ours = os.stat("/proc/self/ns/net").st_ino
        for _ in range(200):
            if self._proc.poll() is not None:
                raise RuntimeError(f"Milvus launcher exited with code {self._proc.returncode}")
            try:
                if os.stat(f"/proc/{self._proc.pid}/ns/net").st_ino != ours:
                    return
            except FileNotFoundError:
                pass
            time.sleep(0.05)
        raise RuntimeError("Milvus launcher did not enter its network namespace")

    def _wait_ready(self, deadline: float) -> None:
        from pymilvus import MilvusClient

        last_err: Exception | None = None
        while True:
            if self._proc.poll() is not None:
                raise RuntimeError(f"Milvus server exited with code {self._proc.returncode} during start")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RuntimeError(f"Milvus server not ready at {self.uri} in time (last error: {last_err})")
            try:
                client = MilvusClient(uri=self.uri, timeout=min(3.0, max(remaining, 0.5)))
                try:
                    client.list_collections(timeout=min(3.0, max(remaining, 0.5)))
                    return
                finally:
                    client.close()
            except Exception as exc:  # not up yet
                last_err = exc
                time.sleep(0.2)


@atexit.register
def _stop_all() -> None:
    for server in list(_running):
        with contextlib.suppress(Exception):
            server.stop()
