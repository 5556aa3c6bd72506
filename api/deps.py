"""Request dependencies: settings, a database session per request, the caller's identity."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.orm import Session

from api.auth import authenticate
from db.session import session_factory
from db.settings import Settings


def get_settings(request: Request) -> Settings:
    """The settings the app was created with."""
    return request.app.state.settings


def get_session(settings: Annotated[Settings, Depends(get_settings)]) -> Iterator[Session]:
    """A session for one request: committed by the router, rolled back if anything raises."""
    session = session_factory(settings.resolved_database_url)()
    try:
        yield session
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()


def current_owner(request: Request, settings: Annotated[Settings, Depends(get_settings)]) -> str:
    """Who is calling (the API key's owner); every query on owned rows filters on it."""
    return authenticate(request, settings)


SettingsDep = Annotated[Settings, Depends(get_settings)]
# Fewer concurrent sessions than the engine's pool holds (db/session.py: 10 + 20): otherwise,
# under a burst, every worker thread can wait for a connection held by a request whose
# teardown is itself waiting for a thread. The rest of the pool serves API-key lookups.
SessionDep = Annotated[Session, Depends(get_session, max_concurrency=20)]
OwnerDep = Annotated[str, Depends(current_owner)]
