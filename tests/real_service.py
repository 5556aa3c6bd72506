"""Fixtures of the real service, for integration and browser tests (loaded once for the whole
run by the root conftest, so both kinds share one database, worker and server): a fresh Postgres database migrated by Alembic, a
Redis database of its own, Celery worker processes and (for the openai client) a uvicorn server.

Each test run gets its own database (dropped at the end) and Redis db (flushed), so runs never
see each other's rows or messages. Tests create their own files and jobs and never depend on
what another test left.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis
from sqlalchemy import create_engine, text

from api.embedded import worker_command
from api.launch import ApiServer, stop_group
from db.migrate import upgrade
from db.settings import Settings

PG_ADMIN_URL = os.environ.get("CUSET_TEST_PG_ADMIN", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
TEST_OWNER = "tester"  # owner of the run's API key; rows a test inserts directly belong to it
REDIS_URL = os.environ.get("CUSET_TEST_REDIS", "redis://127.0.0.1:6379")
REPO = Path(__file__).resolve().parents[1]


@contextmanager
def fresh_database() -> Iterator[str]:
    """A new Postgres database migrated to head; dropped on exit. Skips when Postgres is down."""
    name = f"cuset_it_{os.getpid()}_{secrets.token_hex(3)}"
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as c:
            c.execute(text(f'CREATE DATABASE "{name}"'))
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"Postgres not reachable at {PG_ADMIN_URL}: {exc}")
    url = PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    try:
        upgrade(url)
        yield url
    finally:
        from db.session import engine_for

        engine_for(url).dispose()
        with admin.connect() as c:
            c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture(scope="session")
def database_url() -> Iterator[str]:
    """A fresh Postgres database for this run, migrated to head; dropped afterwards."""
    with fresh_database() as url:
        yield url


@pytest.fixture(scope="session")
def broker_key_prefix() -> Iterator[str]:
    """A Redis key prefix of this run's own (runs share Redis db 1); its keys go at the end."""
    client = redis.Redis.from_url(f"{REDIS_URL}/1")
    try:
        client.ping()
    except redis.RedisError as exc:
        pytest.skip(f"Redis not reachable at {REDIS_URL}: {exc}")
    prefix = f"cuset-test-{os.getpid()}-{secrets.token_hex(3)}:"
    yield prefix
    for key in client.scan_iter(match=f"{prefix}*"):
        client.delete(key)


@pytest.fixture(scope="session")
def broker_url(broker_key_prefix) -> str:
    return f"{REDIS_URL}/1"


@pytest.fixture(scope="session")
def service_settings(database_url, broker_url, broker_key_prefix, tmp_path_factory, tiny_model_dir) -> Settings:
    """Settings of the service under test: Postgres, Redis, a temp artifact root, and a tiny
    config-built model served as the base ``tiny`` (fast enough to train in a test)."""
    data_dir = tmp_path_factory.mktemp("service")
    return Settings(
        data_dir=data_dir,
        database_url=database_url,
        broker_url=broker_url,
        broker_key_prefix=broker_key_prefix,
        base_models={"tiny": str(tiny_model_dir)},
        heartbeat_interval_s=0.5,
        heartbeat_timeout_s=6,
        reaper_interval_s=2,
        generation_timeout_s=120,
        max_concurrent_jobs=100,  # tests create many jobs; the cap has its own test
        rate_limit_rps=0,  # likewise: the tests' bursts are not what the limiter is for
        # Training runs at the API's priority here: beside the other lanes a niced run can starve
        # for minutes, and the tests wait for its steps, not for its priority.
        train_nice=0,
        # A cancel's step and checkpoint save take seconds here but can take more than the default
        # 10 s on a crowded host; the cancel tests check the checkpoint, not the grace period
        # (tests/unit/test_jobs_lifecycle.py holds the run that outlives its grace).
        cancel_grace_s=120,
    )


@pytest.fixture(scope="session")
def api_key(database_url) -> str:
    """An API key (owner "tester") in this run's database; every client of the service uses it."""
    from db.keys import create_key
    from db.session import session_scope

    with session_scope(database_url) as session:
        return create_key(session, TEST_OWNER).secret


@pytest.fixture(scope="session")
def auth_headers(api_key) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"}


def service_env(settings: Settings) -> dict[str, str]:
    """The environment that gives a child process ``settings``."""
    env = dict(os.environ)
    for name, value in settings.model_dump(exclude_none=True).items():
        env[f"CUSET_{name.upper()}"] = json.dumps(value) if isinstance(value, (dict, list)) else str(value)
    env["PYTHONUNBUFFERED"] = "1"
    return env


WORKER_READY_S = 240


class WorkerProcess:
    """A real ``celery worker`` child process, with beat (the reaper's schedule) embedded."""

    def __init__(self, settings: Settings, log_dir: Path, queues: str = "train,infer,cpu", concurrency: int = 2):
        self.settings, self.log_dir, self.queues, self.concurrency = settings, log_dir, queues, concurrency
        self.process: subprocess.Popen | None = None
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        log = open(self.log_dir / f"worker-{self.starts}.log", "w")
        self.process = subprocess.Popen(
            worker_command(
                queues=tuple(self.queues.split(",")),
                concurrency=self.concurrency,
                schedule_file=self.log_dir / f"beat-{self.starts}",
                # Node names unique per worker object: they key the workers' entries in /readyz.
                hostname=f"test{self.starts}-{self.log_dir.name}@%h",
            ),
            cwd=REPO,
            env=service_env(self.settings),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        # A worker imports torch and transformers before it says ready: seconds on an idle machine,
        # over a minute on a crowded one (a CI host's neighbours), which must not fail a test.
        deadline = time.monotonic() + WORKER_READY_S
        path = self.log_dir / f"worker-{self.starts}.log"
        while time.monotonic() < deadline:
            if " ready." in path.read_text(errors="replace"):
                return
            if self.process.poll() is not None:
                raise RuntimeError(f"worker exited: {path.read_text()[-3000:]}")
            time.sleep(0.2)
        raise RuntimeError(f"worker not ready in {WORKER_READY_S} s: {path.read_text()[-3000:]}")

    def kill(self) -> None:
        """SIGKILL the whole worker process group (main process, pool children, training runs)."""
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)

    def stop(self) -> None:
        if self.process:
            stop_group(self.process, timeout_s=20)

    def log(self) -> str:
        return (self.log_dir / f"worker-{self.starts}.log").read_text(errors="replace")


@pytest.fixture(scope="session")
def worker(service_settings, tmp_path_factory) -> Iterator[WorkerProcess]:
    """One worker process serving every queue for the whole run (tests may kill and restart it)."""
    process = WorkerProcess(service_settings, tmp_path_factory.mktemp("worker-logs"))
    process.start()
    yield process
    process.stop()


@pytest.fixture(scope="session")
def app(service_settings):
    from api.main import create_app

    return create_app(service_settings)


@pytest.fixture()
def client(app, auth_headers) -> Iterator:
    """An in-process HTTP client for the API, sending the run's API key (no worker needed for
    pure API behaviour)."""
    from fastapi.testclient import TestClient

    with TestClient(app, headers=auth_headers) as test_client:
        yield test_client


class ServiceServer(ApiServer):
    """A real uvicorn serving ``settings`` on a free loopback port (``base`` is its URL)."""

    def __init__(self, settings: Settings, log_dir: Path):
        super().__init__(service_env(settings), log_dir / "server.log")


@pytest.fixture(scope="session")
def server(service_settings, tmp_path_factory) -> Iterator[str]:
    """A real uvicorn server on a free loopback port; yields its base URL."""
    process = ServiceServer(service_settings, tmp_path_factory.mktemp("server-logs"))
    process.start()
    yield process.base
    process.stop()


def wait_for(predicate, timeout: float = 60, interval: float = 0.2, what: str = "condition"):
    """Poll ``predicate`` until it returns something truthy; return it, or fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    pytest.fail(f"timed out after {timeout} s waiting for {what}")
