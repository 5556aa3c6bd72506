"""A private PostgreSQL and a private Redis for fault tests, each in a temp folder on a free
loopback port, so a test may stop, kill and restart them without touching the machine's shared
servers (other runs use those at the same time).

PostgreSQL refuses to run as root, so as root its commands run as the ``postgres`` user
(``runuser``) on a data folder owned by that user.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from api.launch import free_port

START_TIMEOUT_S = 30.0


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _wait(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise RuntimeError(f"{what} not reached within {timeout} s")


def postgres_bin() -> Path | None:
    """The newest PostgreSQL server's bin folder installed here, or None."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


class PrivatePostgres:
    """``initdb`` into a fresh temp folder and a ``postgres`` server on its own port; trust auth
    on loopback. The folder is made directly under the system temp folder because pytest's temp
    folders are private to root and the ``postgres`` user could not enter them."""

    def __init__(self):
        self.bin = postgres_bin()
        if self.bin is None:
            pytest.skip("PostgreSQL server binaries (initdb, postgres) are not installed")
        self.folder = Path(tempfile.mkdtemp(prefix="cuset-private-pg-"))
        self.data = self.folder / "data"
        self.port = free_port()
        self.process: subprocess.Popen | None = None
        self._as_user: list[str] = []
        if os.geteuid() == 0:
            if not shutil.which("runuser"):
                pytest.skip("running as root without runuser: cannot start PostgreSQL as the postgres user")
            self._as_user = ["runuser", "-u", "postgres", "--"]
            shutil.chown(self.folder, "postgres", "postgres")
        init = subprocess.run(
            [
                *self._as_user,
                str(self.bin / "initdb"),
                "-D",
                str(self.data),
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if init.returncode != 0:
            raise RuntimeError(f"initdb failed: {init.stderr[-2000:]}")

    @property
    def admin_url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def url(self, database: str) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def start(self) -> None:
        """Start the server (again) on the same port and data; returns once it accepts connections."""
        log = open(self.folder / "postgres.log", "a")
        self.process = subprocess.Popen(
            [
                *self._as_user,
                str(self.bin / "postgres"),
                "-D",
                str(self.data),
                "-p",
                str(self.port),
                "-h",
                "127.0.0.1",
                "-k",
                str(self.folder),
                "-c",
                "fsync=off",
                "-c",
                "max_connections=200",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        _wait(lambda: _listening(self.port) or self.process.poll() is not None, START_TIMEOUT_S, "postgres up")
        if self.process.poll() is not None:
            raise RuntimeError((self.folder / "postgres.log").read_text()[-3000:])
        # Listening precedes accepting: wait until a connection gets past startup.
        _wait(self._accepts, START_TIMEOUT_S, "postgres accepting connections")

    def _accepts(self) -> bool:
        probe = subprocess.run(
            [str(self.bin / "pg_isready"), "-h", "127.0.0.1", "-p", str(self.port)], capture_output=True
        )
        return probe.returncode == 0

    def stop(self) -> None:
        """Fast shutdown (SIGINT: disconnect clients, stop); waits until the port is closed."""
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGINT)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(10)
        _wait(lambda: not _listening(self.port), START_TIMEOUT_S, "postgres down")

    def remove(self) -> None:
        """Stop the server and delete its folder."""
        self.stop()
        shutil.rmtree(self.folder, ignore_errors=True)

    def create_database(self, name: str) -> str:
        """A new database on this server; its SQLAlchemy URL."""
        subprocess.run(
            [str(self.bin / "createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", name],
            check=True,
            capture_output=True,
            timeout=60,
        )
        return self.url(name)


class PrivateRedis:
    """A ``redis-server`` on its own port with an append-only file, so a restart keeps what a
    real deployment's Redis keeps (queued messages survive)."""

    def __init__(self, folder: Path):
        self.binary = shutil.which("redis-server")
        if self.binary is None:
            pytest.skip("redis-server is not installed")
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        log = open(self.folder / "redis.log", "a")
        self.process = subprocess.Popen(
            [
                self.binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(self.folder),
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--save",
                "",
                "--protected-mode",
                "no",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        _wait(lambda: _listening(self.port) or self.process.poll() is not None, START_TIMEOUT_S, "redis up")
        if self.process.poll() is not None:
            raise RuntimeError((self.folder / "redis.log").read_text()[-3000:])

    def stop(self, kill: bool = False) -> None:
        """SIGTERM (a clean shutdown) or SIGKILL; waits until the port is closed."""
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
            self.process.wait(30)
        _wait(lambda: not _listening(self.port), START_TIMEOUT_S, "redis down")
