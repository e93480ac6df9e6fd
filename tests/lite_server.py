"""`milvus-lite server` on a free loopback port, for tests: the one process that opens the data, everyone else connects.

server = LiteServer(tmp_path / "milvus")
server.start()       # listening on 127.0.0.1
server.stop()        # SIGTERM; start() again serves the same data on the same port
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

from tests.postgres_server import free_port


class LiteServer:
    """A `milvus-lite server` process on 127.0.0.1, restartable on the same port and data folder."""

    def __init__(self, data_dir: Path, port: int | None = None) -> None:
        self.data_dir = data_dir
        self.port = port or free_port()
        self.log_path = data_dir.parent / f"{data_dir.name}-lite.log"
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60) -> None:
        command = [
            str(Path(sys.executable).parent / "milvus-lite"),
            "server",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--data-dir",
            str(self.data_dir),
        ]
        with self.log_path.open("a") as log:
            self._proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while True:
            assert self._proc.poll() is None, self.log_path.read_text()
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                assert time.monotonic() < deadline, "milvus-lite server did not listen"
                time.sleep(0.2)

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.terminate()
            self._proc.wait(timeout=20)
            self._proc = None
