"""Helpers the security, fault, concurrency and fuzz tests share: API keys made in the test
database and apps built with auth on (the shared fixtures run the service with auth off; a
uvicorn server of such settings is ``tests.real_service.ServiceServer``)."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from contextlib import contextmanager

from fastapi.testclient import TestClient

from cuset_core.demo import demo_problems, demo_record
from db.keys import create_key, revoke_key
from db.session import session_scope
from db.settings import Settings

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


def jsonl(*rows: dict) -> bytes:
    return b"".join(json.dumps(row).encode() + b"\n" for row in rows)


def training_rows() -> bytes:
    """Two valid fine-tune records (demo problems with their solutions)."""
    problems = demo_problems()
    return jsonl(demo_record(problems[0]), demo_record(problems[1]))
