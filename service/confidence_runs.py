"""A confidence request's row (a Generation of kind ``confidence``, written by the files
router's analysis endpoint; its ``request`` a ``ConfidenceRequest``): claimed ``queued ->
running`` first, so a redelivered message does nothing (``claim``); the record it names read as
the files API reads it (``stored_record``); ended with its answer or its error (``finish``,
``fail``), its follower told.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from sqlalchemy import update

from cuset_core.data import LoadOptions, Record, load_records
from db.confidence_scores import ConfidenceRequest
from db.errors import ErrorCode, ErrorInfo
from db.models import File, Generation
from db.session import rows_changed, session_scope
from db.settings import Settings
from db.statuses import GenerationStatus
from service.generation_events import GenerationEvent, publish


class ConfidenceError(Exception):
    """A failure the row records as ``error = {"code", "message"}``."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class ConfidenceClaim:
    """What the task needs of a claimed row: its request, when it was created, and the stored
    file's path under the artifact root (None when the file is gone or not the owner's)."""

    request: ConfidenceRequest
    created_at: float
    relative: str | None


def claim(settings: Settings, generation_id: str) -> ConfidenceClaim | None:
    """Mark the row running if it is still queued; None when it is not (redelivered, or given
    up by the API)."""
    with session_scope(settings.resolved_database_url) as session:
        claimed = rows_changed(
            session,
            update(Generation)
            .where(Generation.id == generation_id, Generation.status == GenerationStatus.QUEUED)
            .values(status=GenerationStatus.RUNNING),
        )
        if claimed != 1:
            return None
        row = session.get_one(Generation, generation_id)
        request, created_at = row.request, row.created_at
        if not isinstance(request, ConfidenceRequest):
            raise TypeError(f"generation {generation_id} is a {row.kind} request, not a confidence one")
        stored = session.get(File, request.file_id)
        relative = None if stored is None or stored.owner != row.owner else stored.path
    return ConfidenceClaim(request, created_at, relative)


def stored_record(settings: Settings, claimed: ConfidenceClaim) -> Record:
    """The record the request names, from its stored file; ``ConfidenceError`` when either is gone."""
    if claimed.relative is None:
        raise ConfidenceError(ErrorCode.FILE_NOT_FOUND, f"file {claimed.request.file_id!r} no longer exists")
    return _record(_stored_path(settings.artifacts, claimed.relative), claimed.request.n)


def fail(settings: Settings, generation_id: str, code: ErrorCode, message: str) -> None:
    """End the running row as failed with ``code`` and ``message``."""
    finish(settings, generation_id, status=GenerationStatus.FAILED, error=ErrorInfo(code=code, message=message))


def _record(path: Path, n: int) -> Record:
    """Record ``n`` (0-based) of a stored fine-tune file, read as the files API reads it."""
    records = load_records(path, LoadOptions(require_kernel=True)).records
    if not 0 <= n < len(records):
        raise ConfidenceError(ErrorCode.RECORD_NOT_FOUND, f"the file has no record {n} (it has {len(records)})")
    return records[n]


def _stored_path(artifacts: Path, relative: str) -> Path:
    """The stored file under the artifact root; refuses a path that would leave it."""
    path = (artifacts / PurePosixPath(relative)).resolve()
    if PurePosixPath(relative).is_absolute() or not path.is_relative_to(artifacts.resolve()):
        raise ConfidenceError(ErrorCode.FILE_NOT_FOUND, f"stored path {relative!r} leaves the artifact root")
    return path


def finish(settings: Settings, generation_id: str, **values: Any) -> None:
    """End the running row with ``values`` and tell its follower (the analysis endpoint) so."""
    with session_scope(settings.resolved_database_url) as session:
        session.execute(
            update(Generation)
            .where(Generation.id == generation_id, Generation.status == GenerationStatus.RUNNING)
            .values(finished_at=time.time(), **values)
        )
    publish(settings, generation_id, GenerationEvent(status=values["status"]))
