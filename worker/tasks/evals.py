"""An ``Eval`` row's tasks: ``cuset.eval`` (infer queue) generates every problem's answers with
the eval's model, one ``cuset.eval_verify`` per problem (cpu queue; ``cuset.eval_verify_gpu`` on
the infer queue for tier gpu) scores its attempts, and ``cuset.eval_repair`` (infer queue)
decodes a problem's next round of repairs. The bookkeeping between (what is stored, what is sent
next, when the eval is settled) is service/eval_runs.py's.

The model comes from the worker's model cache (loaded once, kept for the next eval or
generation), or, when an engine serves it, from the engine: a batch's problems as concurrent
requests (the core's ``openai:URL#NAME`` model), no model loaded here.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from celery import shared_task

from cuset_core.evaluation.config import EvalConfig
from cuset_core.evaluation.decoding import Decode, answers_for, endpoint_decoder, model_decoder
from cuset_core.evaluation.scoring import SampleRecord, repair_answers, score_attempt
from cuset_core.models import resolve_dtype
from cuset_core.verify.execution.reference_pool import ReferencePool
from db.models import Eval
from service.dispatch import TaskName
from service.eval_runs import (
    EvalStopped,
    after_scoring,
    check_running,
    claim,
    eval_model,
    fail,
    generate_batches,
    problem_batches,
    problem_to_verify,
    repairs_due,
    store_record,
    store_repairs,
)
from worker.heartbeat import heartbeat
from worker.runtime import RuntimeTask, WorkerRuntime
from worker.tasks.verify import service_verify_settings

log = logging.getLogger(__name__)


@contextmanager
def _decoding(runtime: WorkerRuntime, eval_id: str) -> Iterator[tuple[EvalConfig, Decode]]:
    """The eval's config and the core's ``Decode`` of its model: through the engine that serves
    it, or the model from this worker's cache (held for the context)."""
    model = eval_model(runtime.settings, eval_id)
    if model.engine is not None:
        with endpoint_decoder(model.config, model.engine.api_key(), supports_n=model.engine.supports_n) as decode:
            yield model.config, decode
        return
    dtype = resolve_dtype(model.config.dtype)
    with runtime.loaded_models().use(model.spec, model.model_id, dtype) as (loaded, tokenizer):
        yield model.config, model_decoder(loaded, tokenizer, model.config)


@shared_task(name=TaskName.EVAL, base=RuntimeTask, bind=True)
def run_eval_task(self: RuntimeTask, eval_id: str) -> None:
    """Generate every problem of eval ``eval_id`` and send each batch off to be verified."""
    settings = self.runtime.settings
    if not claim(settings, eval_id):
        log.info("eval %s is not queued; nothing to do", eval_id)
        return
    try:
        with heartbeat(settings.resolved_database_url, Eval, eval_id, settings.heartbeat_interval_s):
            with _decoding(self.runtime, eval_id) as (config, decode):
                answer = lambda batch: answers_for(decode, config, batch)  # noqa: E731
                generate_batches(settings, eval_id, config, problem_batches(config), answer)
    except EvalStopped:
        log.info("eval %s stopped (cancelled)", eval_id)
    except Exception as exc:  # noqa: BLE001 - any failure is recorded on the row, never lost
        fail(settings, eval_id, exc)


def verify_problem(self: RuntimeTask, eval_id: str, problem_id: str) -> None:
    """Score the attempts of one problem not yet scored; the service then sends it to be
    repaired again or records its row."""
    settings = self.runtime.settings
    work = problem_to_verify(settings, eval_id, problem_id)
    if work is None:
        return  # cancelled, failed, or a redelivered message for a problem already recorded
    checks = service_verify_settings(settings, work.config.verify_settings())
    records: dict[int, SampleRecord] = {}
    references = ReferencePool()  # the attempts scored here share one reference run
    for attempt in work.attempts:
        record = attempt.record
        if record is None:
            repaired = None if attempt.repair_of is None else records[attempt.repair_of]
            record = score_attempt(
                work.problem,
                attempt.index,
                attempt.answer,
                checks,
                settings.verify_cache_dir,
                work.config.cache,
                repaired,
                references,
                self.runtime.warm_sides,
            )
            store_record(settings, eval_id, problem_id, record)
        records[attempt.index] = record
    after_scoring(settings, eval_id, problem_id, list(records.values()), work.config)


# One body, two queues: tier gpu verifies on the infer workers, which hold the GPUs.
verify_problem_task = shared_task(name=TaskName.EVAL_VERIFY, base=RuntimeTask, bind=True)(verify_problem)
verify_problem_gpu_task = shared_task(name=TaskName.EVAL_VERIFY_GPU, base=RuntimeTask, bind=True)(verify_problem)


@shared_task(name=TaskName.EVAL_REPAIR, base=RuntimeTask, bind=True)
def repair_problem(self: RuntimeTask, eval_id: str, problem_id: str) -> None:
    """Decode the next round of repairs of one problem's failing attempts, store them as
    attempts and send the problem back to verification."""
    settings = self.runtime.settings
    due = repairs_due(settings, eval_id, problem_id)
    if due is None:
        return
    answers = []
    if due.failed:
        try:
            check_running(settings, eval_id)
            with _decoding(self.runtime, eval_id) as (config, decode):
                answers = repair_answers(decode, config, {problem_id: due.problem}, due.failed, due.round)
        except EvalStopped:
            return
        except Exception as exc:  # noqa: BLE001 - any failure is recorded on the row, never lost
            fail(settings, eval_id, exc)
            return
    store_repairs(settings, eval_id, due, answers)
