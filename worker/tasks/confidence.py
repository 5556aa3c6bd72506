"""``cuset.confidence``: how sure a model is of each token of one stored record's answer.

The row's bookkeeping (claim, the record it names, its end) is service/confidence_runs.py's; the
measurement, one forward pass of the model over the record, is worker/token_confidence.py's.
"""

from __future__ import annotations

import logging
import time
from contextlib import ExitStack

from celery import shared_task

from db.errors import ErrorCode
from db.generations import GenerationTimings
from db.statuses import GenerationStatus
from service.confidence_runs import ConfidenceError, claim, fail, finish, stored_record
from service.dispatch import TaskName
from worker.runtime import RuntimeTask
from worker.token_confidence import token_confidence

log = logging.getLogger(__name__)


@shared_task(name=TaskName.CONFIDENCE, base=RuntimeTask, bind=True)
def confidence(self: RuntimeTask, generation_id: str) -> None:
    """Measure the token confidence the row ``generation_id`` asks for and store it."""
    settings = self.runtime.settings
    claimed = claim(settings, generation_id)
    if claimed is None:
        return  # redelivered, or given up by the API
    request = claimed.request
    started = time.time()
    try:
        record = stored_record(settings, claimed)
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
        fail(settings, generation_id, exc.code, str(exc))
        return
    except Exception as exc:  # noqa: BLE001 - a failure fails the row, never the worker
        log.exception("confidence of %s failed", generation_id)
        fail(settings, generation_id, ErrorCode.CONFIDENCE_FAILED, f"{type(exc).__name__}: {exc}")
        return
    done = time.time()
    finish(
        settings,
        generation_id,
        status=GenerationStatus.SUCCEEDED,
        confidence=sample,
        timings=GenerationTimings(
            queue_s=round(started - claimed.created_at, 4),
            confidence_s=round(done - started, 4),
            total_s=round(done - claimed.created_at, 4),
        ),
    )
