"""Engines and sessions. One engine per database URL and process; SQLite gets WAL mode so the
API and a worker process can write the same file."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Any, cast

from sqlalchemy import CursorResult, Engine, Executable, create_engine, event
from sqlalchemy.orm import Session, sessionmaker


@lru_cache(maxsize=8)
def engine_for(url: str) -> Engine:
    """The process's engine for ``url`` (created on first use)."""
    if url.startswith("sqlite"):
        path = url.split("///", 1)[-1]
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(connection, _record) -> None:
            cursor = connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA busy_timeout=30000")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.close()

        return engine
    return create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=20, pool_timeout=10)


def session_factory(url: str) -> sessionmaker[Session]:
    """Sessions bound to the engine for ``url``; objects stay readable after commit."""
    return sessionmaker(engine_for(url), expire_on_commit=False)


@lru_cache(maxsize=8)
def read_session_factory(url: str) -> sessionmaker[Session]:
    """Sessions for one-statement reads, on the same connection pool in autocommit: no BEGIN
    and ROLLBACK round trips around the statement, which a single SELECT does not need."""
    return sessionmaker(engine_for(url).execution_options(isolation_level="AUTOCOMMIT"))


@contextmanager
def session_scope(url: str) -> Iterator[Session]:
    """A session that commits when the block ends and rolls back if it raises."""
    session = session_factory(url)()
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()


def rows_changed(session: Session, statement: Executable) -> int:
    """Run an UPDATE or DELETE in ``session``; how many rows it changed (a compare-and-set's
    answer: 0 means another process moved the row first)."""
    return cast(CursorResult[Any], session.execute(statement)).rowcount
