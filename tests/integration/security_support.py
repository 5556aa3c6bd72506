"""Helpers the security, fault, concurrency and fuzz tests share: API keys made in the test
database, apps and uvicorn servers built with auth on (the shared fixtures run the service with
auth off)."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from fastapi.testclient import TestClient

from cuset_core.demo import demo_problems, demo_record
from db.keys import create_key, revoke_key
from db.session import session_scope
from db.settings import Settings
from tests.service import REPO, _free_port, service_env

ERROR_FIELDS = {"message", "type", "param", "code"}


def new_key(database_url: str, owner: str | None = None, revoked: bool = False) -> str:
    """A fresh API key's secret for ``owner`` (default: a new unique owner); revoked if asked."""
    owner = owner or f"owner-{secrets.token_hex(4)}"
    with session_scope(database_url) as session:
        key = create_key(session, name=f"test-{secrets.token_hex(3)}", owner=owner)
        if revoked:
            revoke_key(session, key.row.id)
        return key.secret


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


def secure_settings(settings: Settings, **update) -> Settings:
    """``settings`` with auth on and the rate limit off unless ``update`` says otherwise."""
    return settings.model_copy(update={"auth": True, "rate_limit_rps": 0.0, **update})


@contextmanager
def secure_client(settings: Settings, secret: str | None = None, **update) -> Iterator[TestClient]:
    """A TestClient of an app with auth on, sending ``secret`` as its key when given."""
    from api.main import create_app

    app = create_app(secure_settings(settings, **update))
    with TestClient(app, headers=bearer(secret) if secret else None) as client:
        yield client


def assert_error(response, status: int, code: str | None = None, param: str | None = None) -> dict:
    """The response is ``status`` in the documented error shape (with ``code``/``param`` if given)."""
    assert response.status_code == status, f"{response.status_code}: {response.text[:500]}"
    error = response.json()["error"]
    assert set(error) == ERROR_FIELDS, error
    assert isinstance(error["message"], str) and error["message"]
    if code is not None:
        assert error["code"] == code, error
    if param is not None:
        assert error["param"] == param, error
    return error


class ServiceServer:
    """A real uvicorn serving ``settings`` on a free loopback port (``base`` is its URL)."""

    def __init__(self, settings: Settings, log_dir: Path):
        self.settings, self.log_path = settings, log_dir / "server.log"
        self.port = _free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None

    def start(self, timeout: float = 60) -> None:
        log = open(self.log_path, "a")
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "--factory",
                "api.main:app_factory",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--log-level",
                "warning",
            ],
            cwd=REPO,
            env=service_env(self.settings),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.base}/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.2)
            if self.process.poll() is not None:
                raise RuntimeError(self.log_path.read_text()[-3000:])
        self.stop()
        raise RuntimeError(f"server not up in {timeout} s: {self.log_path.read_text()[-3000:]}")

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(10)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def jsonl(*rows: dict) -> bytes:
    return b"".join(json.dumps(row).encode() + b"\n" for row in rows)


def training_rows() -> bytes:
    """Two valid fine-tune records (demo problems with their solutions)."""
    problems = demo_problems()
    return jsonl(demo_record(problems[0]), demo_record(problems[1]))
