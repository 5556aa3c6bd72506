"""``cuset.confidence``: how sure a model is of each token of one stored record's answer.

The row (a Generation of kind ``confidence``, written by the files router's analysis endpoint)
carries ``request = {"file_id", "n", "model", "spec"}``. One forward pass of the model over the
record, rendered and encoded exactly as training sees it (``cuset_core.data.encode_record``),
gives p, the model's probability of each reference answer token
(``cuset_core.evaluation.confidence_report.record_confidence``); the core's token alignment says which
sensitive region each token falls in. The row's ``samples`` becomes one entry::

    {"tokens": [{"start", "end", "p"}, ...],        # answer character offsets, half-open
     "regions": [{"index", "mean_p", "min_p", "tokens"}, ...]}   # index = the analysis region id

The row is claimed queued -> running first, so a redelivered message does nothing.
"""

from __future__ import annotations

import logging
import time
from contextlib import ExitStack
from pathlib import Path, PurePosixPath
from typing import Any

from celery import shared_task
from sqlalchemy import update

from cuset_core.data import IGNORE_INDEX, EncodedRecord, LoadOptions, Record, encode_record, load_records
from cuset_core.evaluation.confidence_report import record_confidence
from cuset_core.evaluation.confidence_settings import ReportSettings
from db.confidence_scores import AnswerScores, ConfidenceRequest, RegionScore, TokenScore
from db.errors import ErrorCode, ErrorInfo
from db.generations import GenerationTimings
from db.models import File, Generation
from db.session import session_scope
from db.settings import Settings
from db.statuses import GenerationStatus
from service.dispatch import TaskName
from service.generation_events import GenerationEvent, publish
from worker.runtime import RuntimeTask

log = logging.getLogger(__name__)

# The confidence report's own limit: longer records are measured on their first tokens only.
MAX_TOKENS: int = ReportSettings.model_fields["max_tokens"].default


class ConfidenceError(Exception):
    """A failure the row records as ``error = {"code", "message"}``."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


@shared_task(name=TaskName.CONFIDENCE, base=RuntimeTask, bind=True)
def confidence(self: RuntimeTask, generation_id: str) -> None:
    """Measure the token confidence the row ``generation_id`` asks for and store it."""
    settings = self.runtime.settings
    url = settings.resolved_database_url
    with session_scope(url) as session:
        claimed = session.execute(
            update(Generation)
            .where(Generation.id == generation_id, Generation.status == GenerationStatus.QUEUED)
            .values(status=GenerationStatus.RUNNING)
        ).rowcount
        if claimed != 1:
            return  # redelivered, or given up by the API
        row = session.get(Generation, generation_id)
        request, created_at = row.request, row.created_at
        if not isinstance(request, ConfidenceRequest):
            raise TypeError(f"generation {generation_id} is a {row.kind} request, not a confidence one")
        stored = session.get(File, request.file_id)
        relative = None if stored is None or stored.owner != row.owner else stored.path
    started = time.time()
    try:
        if relative is None:
            raise ConfidenceError(ErrorCode.FILE_NOT_FOUND, f"file {request.file_id!r} no longer exists")
        record = _record(_stored_path(settings.artifacts, relative), request.n)
        models = self.runtime.loaded_models()
        with ExitStack() as in_use:
            try:
                model, tokenizer = in_use.enter_context(models.use(request.spec, request.model))
            except Exception as exc:  # noqa: BLE001 - any load failure is the request's failure
                raise ConfidenceError(
                    ErrorCode.MODEL_LOAD_FAILED, f"could not load model {request.spec!r}: {exc}"
                ) from exc
            sample = token_confidence(model, tokenizer, record)
    except ConfidenceError as exc:
        _finish(
            settings, generation_id, status=GenerationStatus.FAILED, error=ErrorInfo(code=exc.code, message=str(exc))
        )
        return
    except Exception as exc:  # noqa: BLE001 - a failure fails the row, never the worker
        log.exception("confidence of %s failed", generation_id)
        _finish(
            settings,
            generation_id,
            status=GenerationStatus.FAILED,
            error=ErrorInfo(code=ErrorCode.CONFIDENCE_FAILED, message=f"{type(exc).__name__}: {exc}"),
        )
        return
    done = time.time()
    _finish(
        settings,
        generation_id,
        status=GenerationStatus.SUCCEEDED,
        confidence=sample,
        timings=GenerationTimings(
            queue_s=round(started - created_at, 4),
            confidence_s=round(done - started, 4),
            total_s=round(done - created_at, 4),
        ),
    )


def token_confidence(model, tokenizer, record: Record) -> AnswerScores:
    """The stored answer: every answer token with p, and every region's mean and min p."""
    encoded = encode_record(record, tokenizer, MAX_TOKENS)
    measured = record_confidence(model, encoded, record.answer, record.line)
    if measured is None:
        return AnswerScores()
    p = [min(max(value, 0.0), 1.0) for value in measured.p]  # float32 rounding can step past 1
    tokens = [
        TokenScore(start=start, end=end, p=value)
        for (start, end), value in zip(_answer_offsets(encoded), p)
        if end > start  # the end-of-turn token is supervised but lies outside the answer
    ]
    return AnswerScores(tokens=tokens, regions=_region_stats(p, measured.region))


def _answer_offsets(encoded: EncodedRecord) -> list[tuple[int, int]]:
    """Answer character spans of the tokens ``record_confidence`` scores, in its order.

    It scores the supervised positions from ``max(first supervised, 1)`` on (token 0 has no
    prediction); spans are clipped to the answer, so a token straddling its edge keeps its
    answer part only.
    """
    supervised = [t for t, label in enumerate(encoded.labels) if label != IGNORE_INDEX]
    first = max(supervised[0], 1)
    length = encoded.answer_end - encoded.answer_start
    spans = []
    for t in supervised:
        if t < first:
            continue
        start, end = (offset - encoded.answer_start for offset in encoded.offsets[t])
        spans.append((min(max(start, 0), length), min(max(end, 0), length)))
    return spans


def _region_stats(p: list[float], regions: list[int]) -> list[RegionScore]:
    """Mean and min p of each region's tokens (``regions[k]``: region id of token k, -1 for
    none); regions without a scored token are left out."""
    by_region: dict[int, list[float]] = {}
    for value, region in zip(p, regions):
        if region >= 0:
            by_region.setdefault(region, []).append(value)
    return [
        RegionScore(index=region, mean_p=sum(values) / len(values), min_p=min(values), tokens=len(values))
        for region, values in sorted(by_region.items())
    ]


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


def _finish(settings: Settings, generation_id: str, **values: Any) -> None:
    """End the running row with ``values`` and tell its follower (the analysis endpoint) so."""
    with session_scope(settings.resolved_database_url) as session:
        session.execute(
            update(Generation)
            .where(Generation.id == generation_id, Generation.status == GenerationStatus.RUNNING)
            .values(finished_at=time.time(), **values)
        )
    publish(settings, generation_id, GenerationEvent(status=values["status"]))
