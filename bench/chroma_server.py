"""A real Chroma server on loopback, run as a child process (by the server-mode tests and
``bench.reconcile``)."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Optional

HOST = "127.0.0.1"


def chroma_script() -> Path:
    """The ``chroma`` command installed beside this Python (chromadb ships it)."""
    script = Path(sys.executable).parent / "chroma"
    if not script.exists():
        raise FileNotFoundError(f"no chroma command beside {sys.executable}: is chromadb installed?")
    return script


def free_port() -> int:
    """A loopback TCP port nothing listens on (at the time of asking)."""
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


class ChromaServer:
    """``chroma run --path <path> --host 127.0.0.1 --port <port>``: start, kill, restart.

    Args:
        path: where the server keeps its data (a restart on the same path keeps it).
        port: default a free port.
        log: the server's output goes here.
    """

    def __init__(self, path: Path, port: Optional[int] = None, log: Optional[Path] = None) -> None:
        self.path = Path(path)
        self.port = port or free_port()
        self.log = log or self.path.with_suffix(".log")
        self.process: Optional[subprocess.Popen] = None

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://{HOST}:{self.port}"

    def start(self, timeout: float = 60.0) -> "ChromaServer":
        """Start the server and wait until its heartbeat answers."""
        command = [
            str(chroma_script()), "run", "--path", str(self.path),
            "--host", HOST, "--port", str(self.port),
        ]  # fmt: skip
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"chroma server exited with {self.process.returncode}; see {self.log}")
            try:
                with urllib.request.urlopen(f"{self.url}/api/v2/heartbeat", timeout=1):
                    return self
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"chroma server on port {self.port} did not answer in {timeout} s")

    def kill(self) -> None:
        """Kill the server at once (SIGKILL), as a crash or a pulled cable would."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)
        self.process = None

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL if it lingers)."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self.process = None
