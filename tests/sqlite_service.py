"""Fixtures of the embedded service, for fast tests: the migrated SQLite schema, a data dir per
test holding a copy of it (the SQLite broker and the artifacts beside it), an API key, an
in-process client of ``create_app(settings)``, and a worker runtime of the same settings for the
task functions. No server, no worker: what a test needs a worker for, it calls directly.
"""

from __future__ import annotations

import base64
import json
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect, text

from db.keys import create_key
from db.migrate import upgrade
from db.session import engine_for, session_scope
from db.settings import Settings

FAST_OWNER = "tester"  # owner of the test's API key; rows a test inserts directly belong to it
OTHER_OWNER = "someone-else"


@pytest.fixture(scope="session")
def sqlite_schema(tmp_path_factory) -> Path:
    """A database file the migrations built once per session, copied for each test (migrating takes a second)."""
    path = tmp_path_factory.mktemp("schema") / "cuset.sqlite"
    url = f"sqlite:///{path}"
    upgrade(url)
    engine_for(url).dispose()  # closing the last connection folds the WAL into the file
    return path


@pytest.fixture
def sqlite_settings(tmp_path, sqlite_schema) -> Settings:
    """Embedded settings on a fresh copy of the migrated schema in this test's ``tmp_path``; the
    verification cache beside the data dir (candidates never see the data dir)."""
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    shutil.copyfile(sqlite_schema, data_dir / sqlite_schema.name)
    return Settings(data_dir=data_dir, verify_cache_dir=tmp_path / "verify-cache", rate_limit_rps=0)


@pytest.fixture
def fast_settings(sqlite_settings, tiny_model_dir) -> Settings:
    """``sqlite_settings`` serving the tiny config-built model as the base ``tiny`` and nothing
    else (no shipped adapter, whether or not this checkout has their weights)."""
    return sqlite_settings.model_copy(update={"base_models": {"tiny": str(tiny_model_dir)}, "shipped_adapters": False})


@contextmanager
def api_client(settings: Settings) -> Iterator:
    """A TestClient of ``create_app(settings)`` sending a fresh API key of ``FAST_OWNER``."""
    from fastapi.testclient import TestClient

    from api.main import create_app

    with session_scope(settings.resolved_database_url) as session:
        secret = create_key(session, FAST_OWNER).secret
    with TestClient(create_app(settings), headers={"Authorization": f"Bearer {secret}"}) as client:
        yield client


@pytest.fixture
def fast_client(fast_settings) -> Iterator:
    """``api_client`` of ``fast_settings``."""
    with api_client(fast_settings) as client:
        yield client


@pytest.fixture
def task_settings(fast_settings) -> Iterator[Settings]:
    """``fast_settings``, as the settings of this process's worker runtime: the tasks called as
    functions here run with them, as they would in a worker started with them."""
    from worker.runtime import start_runtime, stop_runtime

    start_runtime(fast_settings)
    try:
        yield fast_settings
    finally:
        stop_runtime()


def enqueued(settings: Settings) -> list[tuple[str, list]]:
    """(task name, args) of every message waiting in the embedded SQLite broker, oldest first."""
    path = settings.data_dir / "broker.sqlite"
    if not path.exists():
        return []
    engine = create_engine(f"sqlite:///{path}")
    try:
        if not inspect(engine).has_table("kombu_message"):
            return []
        with engine.connect() as connection:
            payloads = connection.execute(text("SELECT payload FROM kombu_message ORDER BY id")).scalars().all()
    finally:
        engine.dispose()
    messages = [json.loads(payload) for payload in payloads]
    # Celery's message protocol 2: the task in the headers, a base64 JSON body of [args, kwargs, embed].
    return [(m["headers"]["task"], json.loads(base64.b64decode(m["body"]))[0]) for m in messages]
