"""Request dependencies: settings, a database session per request, the caller's identity, and
``run_read`` for hot reads that need no session dependency.

Sync dependencies run in the thread pool, one hand-off each; the cheap ones here are ``async``
so that a request pays only for the hand-offs its database work needs (docs/deploy.md,
Measuring)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Annotated, TypeVar

from fastapi import Depends, Request
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from api.auth import authenticate
from db.session import read_session_factory, session_factory
from db.settings import Settings

Result = TypeVar("Result")


async def get_settings(request: Request) -> Settings:
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


async def current_owner(request: Request, settings: Annotated[Settings, Depends(get_settings)]) -> str:
    """Who is calling (the API key's owner); every query on owned rows filters on it."""
    return await authenticate(request, settings)


async def run_read(settings: Settings, read: Callable[[Session], Result]) -> Result:
    """``read(session)`` in one worker thread, on an autocommit session closed before it returns.

    For hot one-statement reads: a ``SessionDep`` costs three thread hand-offs (open, handler,
    close) and a transaction's two extra round trips; this costs one hand-off and the statement.
    The connection is back in the pool when the thread finishes, so no request holds one while
    waiting for a thread (the reason ``SessionDep`` caps its concurrency)."""

    def in_thread() -> Result:
        with read_session_factory(settings.resolved_database_url)() as session:
            return read(session)

    return await run_in_threadpool(in_thread)


SettingsDep = Annotated[Settings, Depends(get_settings)]
# Fewer concurrent sessions than the engine's pool holds (db/session.py: 10 + 20): otherwise,
# under a burst, every worker thread can wait for a connection held by a request whose
# teardown is itself waiting for a thread. The rest of the pool serves API-key lookups and
# `run_read`, whose threads hold a connection only while their statement runs.
SessionDep = Annotated[Session, Depends(get_session, max_concurrency=20)]
OwnerDep = Annotated[str, Depends(current_owner)]
