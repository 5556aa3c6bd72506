"""The API under uvicorn as a child process on a loopback port: the command line, the wait
until it answers, and the stop. Tests, benchmarks and scripts that need a real server over
HTTP all start it here (``cuset serve`` runs uvicorn in-process instead: ``api.embedded``)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
HOST = "127.0.0.1"


class LaunchError(RuntimeError):
    """The child exited, or did not answer in time; the message ends with its log's tail."""


def free_port() -> int:
    """A loopback TCP port that nothing listens on now."""
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def uvicorn_command(port: int, workers: int = 1, log_level: str = "warning", access_log: bool = True) -> list[str]:
    """The argv that serves ``api.main:app_factory`` (settings from the ``CUSET_*`` environment)
    on ``HOST:port`` with ``workers`` processes."""
    command = [sys.executable, "-m", "uvicorn", "--factory", "api.main:app_factory", "--host", HOST]
    command += ["--port", str(port), "--log-level", log_level]
    if workers != 1:
        command += ["--workers", str(workers)]
    if not access_log:
        command.append("--no-access-log")
    return command


def _tail(log_path: Path | None, chars: int = 3000) -> str:
    if log_path is None or not log_path.exists():
        return ""
    return log_path.read_text(errors="replace")[-chars:]


def wait_until_up(
    base: str,
    process: subprocess.Popen | None = None,
    path: str = "/healthz",
    timeout_s: float = 60.0,
    log_path: Path | None = None,
) -> None:
    """Poll ``base + path`` every 0.2 s until it answers 200; LaunchError when ``process`` exits
    first or ``timeout_s`` seconds pass (``/healthz``: the process serves; ``/readyz``: its
    database and broker answer too)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise LaunchError(f"exited with status {process.returncode}:\n{_tail(log_path)}")
        try:
            if httpx.get(f"{base}{path}", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise LaunchError(f"{base}{path} did not answer in {timeout_s:g} s:\n{_tail(log_path)}")


def stop_group(process: subprocess.Popen, timeout_s: float = 15.0) -> None:
    """SIGTERM to the process group ``process`` leads (uvicorn's worker processes stop with it),
    SIGKILL after ``timeout_s`` seconds."""
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)


class ApiServer:
    """uvicorn serving the API with the settings that ``env`` holds, on a free loopback port
    (``base`` is its URL), its output appended to ``log_path``."""

    def __init__(self, env: dict[str, str], log_path: Path, workers: int = 1, access_log: bool = True):
        self.env, self.log_path = env, log_path
        self.port = free_port()
        self.base = f"http://{HOST}:{self.port}"
        self.command = uvicorn_command(self.port, workers=workers, access_log=access_log)
        self.process: subprocess.Popen | None = None

    def start(self, timeout_s: float = 60.0) -> None:
        """Start it in a process group of its own and return once ``/healthz`` answers;
        LaunchError (and nothing left running) otherwise."""
        with open(self.log_path, "ab") as log:  # the child holds its own descriptor
            self.process = subprocess.Popen(
                self.command, cwd=REPO, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        try:
            wait_until_up(self.base, self.process, timeout_s=timeout_s, log_path=self.log_path)
        except LaunchError:
            self.stop()
            raise

    def stop(self) -> None:
        if self.process is not None:
            stop_group(self.process)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")
