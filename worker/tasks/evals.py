"""An ``Eval`` row, spread over the workers: ``cuset.eval`` (infer queue) generates, and one
``cuset.eval_verify`` per problem (cpu queue; ``cuset.eval_verify_gpu`` on the infer queue for
tier gpu) verifies and records that problem's row.

``cuset.eval`` claims the row ``queued -> running``, takes the model from the worker's model
cache (loaded once, kept for the next eval or generation), and generates a batch of
``config.batch_size`` problems at a time (the core's batches, in set order, so the samples and
seeds are those of one ``run_eval`` over the whole set). After each batch it sends that batch's
problems, with their answers, as one Celery group of verification tasks, so verification runs
beside generation on every cpu worker. ``progress`` counts problems ``generated`` and ``done``
(verified and recorded) out of ``total``.

There is no result backend (Postgres holds the results), so no chord: each verification task
records its problem under a lock on the eval row, and the one that records the last problem
computes the aggregate (the core's ``aggregate`` over every problem row) and settles the eval.
Cancellation (status set to ``cancelled`` by the API) is seen between batches and by every
verification task, which then records nothing.

With ``repair_rounds`` R, a verification task whose problem has attempts that failed in a
repairable way (and rounds left) records nothing yet: it sends the problem's attempts so far to
``cuset.eval_repair`` (infer queue), which decodes the next round of repairs of that problem (the
core's follow-up turn, seed ``seed + round``) and sends them back to verification; the row is
recorded, with its figures within R repairs, once no attempt is left to repair. Repairs are
decoded per problem, so their sampled draws may differ from a ``cuset eval`` run's, whose
batches mix problems; greedy ones do not.

When an engine serves the model (``settings.inference_engines``), the answers come from it, a
batch's problems as concurrent requests (the core's ``openai:URL#NAME`` model), and no model is
loaded here. An engine that cannot be reached or answers with an error fails the eval with
``engine_unreachable`` or ``engine_error``, naming the request's URL and the connection error or
HTTP status.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from celery import shared_task
from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session

from cuset_core.evaluation.inputs import EvalInputError
from cuset_core.evaluation.metrics import ProblemRow, aggregate
from cuset_core.evaluation.runner import (
    DEMO_HELD_OUT,
    DEMO_PROBLEMS,
    Answer,
    Decode,
    EvalConfig,
    EvalEngineError,
    Problem,
    SampleRecord,
    answers_for,
    endpoint_decoder,
    load_problems,
    model_decoder,
    repair_answers,
    repair_candidates,
    row_of,
    score_problem,
    score_repairs,
    select_problems,
)
from cuset_core.models import ModelNotFoundError
from cuset_core.verify.result import Tier
from db.dispatch import enqueue, enqueue_group
from db.evals import dump_samples, read_row
from db.job_rows import model_spec
from db.model_specs import engine_route_for
from db.models import Eval, EvalProblem, File
from db.session import session_scope
from db.settings import Settings, get_settings
from db.statuses import EvalStatus
from worker.device_share import hold
from worker.heartbeat import heartbeat
from worker.model_cache import models
from worker.tasks.verify import service_verify_settings

log = logging.getLogger(__name__)


class EvalStopped(Exception):
    """The eval is no longer ``running`` (cancelled): stop without touching it."""


@shared_task(name="cuset.eval")
def run_eval_task(eval_id: str) -> None:
    """Generate every problem of eval ``eval_id`` and send each batch off to be verified."""
    settings = get_settings()
    url = settings.resolved_database_url
    with session_scope(url) as session:
        claimed = session.execute(
            update(Eval).where(Eval.id == eval_id, Eval.status == EvalStatus.QUEUED).values(status=EvalStatus.RUNNING)
        ).rowcount
        if not claimed:
            log.info("eval %s is not queued; nothing to do", eval_id)
            return
        # A requeued eval starts over: rows of an earlier, interrupted run would mix two runs.
        session.execute(delete(EvalProblem).where(EvalProblem.eval_id == eval_id))
    try:
        with heartbeat(url, Eval, eval_id, settings.heartbeat_interval_s):
            _generate(settings, eval_id)
    except EvalStopped:
        log.info("eval %s stopped (cancelled)", eval_id)
    except Exception as exc:  # noqa: BLE001 - any failure is recorded on the row, never lost
        _fail(url, eval_id, exc)


def _fail(url: str, eval_id: str, exc: Exception) -> None:
    """Fail the eval with the error code and message that say what went wrong."""
    if isinstance(exc, EvalEngineError):
        code = "engine_unreachable" if exc.status is None else "engine_error"
        error = {"code": code, "message": f"The inference engine failed: {str(exc).removeprefix('model: ')}"}
    elif isinstance(exc, EvalInputError):
        error = {"code": "invalid_eval_input", "message": str(exc)}
    elif isinstance(exc, ModelNotFoundError):
        # The detail names server paths; the log keeps it, the user gets the model id.
        log.exception("eval %s: model unavailable", eval_id, exc_info=exc)
        error = {"code": "model_unavailable", "message": _model_gone(url, eval_id)}
    else:
        log.exception("eval %s failed", eval_id, exc_info=exc)
        error = {"code": "eval_failed", "message": f"{type(exc).__name__}: {exc}"}
    _finish(url, eval_id, status=EvalStatus.FAILED, error=error)


@contextmanager
def _decoding(settings: Settings, eval_id: str) -> Iterator[tuple[EvalConfig, Decode]]:
    """The eval's config and the core's ``Decode`` of its model: through the engine that serves
    it, or the model from this worker's cache (held for the context)."""
    with session_scope(settings.resolved_database_url) as session:
        row = session.get(Eval, eval_id)
        try:
            spec = model_spec(session, settings, row)
        except LookupError as exc:
            raise ModelNotFoundError(str(exc)) from exc
        model_id = row.model
        engine = engine_route_for(session, settings, row.owner, row.model)
        model = spec if engine is None else engine.spec()
        config = EvalConfig(model=model, problems=_problems_spec(session, settings, row), **row.config)
    if engine is not None:
        with endpoint_decoder(config, engine.api_key(), supports_n=engine.supports_n) as decode:
            yield config, decode
        return
    hold(settings, models)
    with models.use(spec, model_id) as (model, tokenizer):
        yield config, model_decoder(model, tokenizer, config)


def _generate(settings: Settings, eval_id: str) -> None:
    with _decoding(settings, eval_id) as (config, decode):
        problems = select_problems(load_problems(config.problems), config.problem_ids)
        batches = [problems[i : i + config.batch_size] for i in range(0, len(problems), config.batch_size)]
        _generate_batches(settings, eval_id, config, batches, lambda batch: answers_for(decode, config, batch))


def _generate_batches(
    settings: Settings,
    eval_id: str,
    config: EvalConfig,
    batches: list[list[Problem]],
    answer: Callable[[list[Problem]], dict[str, list[Answer]]],
) -> None:
    """Answer each batch of problems with ``answer`` and send its problems off to be verified."""
    url = settings.resolved_database_url
    task = _verify_task(config)
    generated = 0
    for batch in batches:
        _check_running(url, eval_id)
        answers = answer(batch)
        generated += len(batch)
        _set_generated(url, eval_id, generated)
        calls = [
            (eval_id, problem.id, problem.code, [dataclasses.asdict(a) for a in answers[problem.id]])
            for problem in batch
        ]
        enqueue_group(settings, task, calls)


def _verify_task(config: EvalConfig) -> str:
    return "cuset.eval_verify_gpu" if config.tier is Tier.GPU else "cuset.eval_verify"


def verify_problem(
    eval_id: str,
    problem_id: str,
    problem_code: str,
    answers: list[dict],
    records: list[dict] | None = None,
    repairs: list[list] | None = None,
) -> None:
    """Verify one problem's answers, or (given its ``records`` so far) its ``repairs`` as
    ``[index repaired, answer]`` pairs; then send it to be repaired again or record its row, and
    the last problem recorded settles the eval."""
    settings = get_settings()
    url = settings.resolved_database_url
    with session_scope(url) as session:
        row = session.get(Eval, eval_id)
        if (
            row is None
            or row.status != EvalStatus.RUNNING
            or session.get(EvalProblem, (eval_id, problem_id)) is not None
        ):
            return  # cancelled, failed, or a redelivered message for a problem already recorded
        config = _stored_config(row)
    checks = service_verify_settings(settings, config.verify_settings())
    problem = Problem(problem_id, problem_code)
    if records is None:
        scored = score_problem(
            problem, [Answer(**answer) for answer in answers], checks, settings.verify_cache_dir, config.cache
        )[1]
    else:
        scored = [SampleRecord.model_validate(record) for record in records]
        pairs = [(index, Answer(**answer)) for index, answer in repairs or []]
        score_repairs(problem, scored, pairs, checks, settings.verify_cache_dir, config.cache)
    round_ = max(record.round for record in scored)
    if round_ < config.repair_rounds and repair_candidates(scored, round_ + 1):
        dumped = [record.model_dump(mode="json") for record in scored]
        enqueue(settings, "cuset.eval_repair", eval_id, problem_id, problem_code, dumped)
        return
    _record(url, eval_id, row_of(problem_id, scored, config.repair_rounds), scored, config)


# One body, two queues: tier gpu verifies on the infer workers, which hold the GPUs.
verify_problem_task = shared_task(name="cuset.eval_verify")(verify_problem)
verify_problem_gpu_task = shared_task(name="cuset.eval_verify_gpu")(verify_problem)


@shared_task(name="cuset.eval_repair")
def repair_problem(eval_id: str, problem_id: str, problem_code: str, records: list[dict]) -> None:
    """Decode the next round of repairs of one problem's failing attempts (``records``: every
    attempt so far) and send them to verification with the attempts."""
    settings = get_settings()
    url = settings.resolved_database_url
    attempts = [SampleRecord.model_validate(record) for record in records]
    round_ = max(record.round for record in attempts) + 1
    problem = Problem(problem_id, problem_code)
    try:
        _check_running(url, eval_id)
        with _decoding(settings, eval_id) as (config, decode):
            failed = repair_candidates(attempts, round_)
            answers = repair_answers(decode, config, {problem_id: problem}, failed, round_)
    except EvalStopped:
        return
    except Exception as exc:  # noqa: BLE001 - any failure is recorded on the row, never lost
        _fail(url, eval_id, exc)
        return
    repairs = [[attempt.index, dataclasses.asdict(answer)] for attempt, answer in zip(failed, answers)]
    enqueue(settings, _verify_task(config), eval_id, problem_id, problem_code, [], records, repairs)


def _stored_config(row: Eval) -> EvalConfig:
    """The eval's config as stored (the model and problems fields only satisfy validation)."""
    return EvalConfig(model=row.model, problems=row.problems or row.eval_file or "", **row.config)


def _set_generated(url: str, eval_id: str, generated: int) -> None:
    with session_scope(url) as session:
        row = _locked_eval(session, eval_id)
        if row is None or row.status != EvalStatus.RUNNING:
            raise EvalStopped(eval_id)
        row.progress = {**(row.progress or {}), "generated": generated}


def _locked_eval(session: Session, eval_id: str) -> Eval | None:
    """The eval row, locked for the rest of the transaction: a no-op UPDATE takes the row lock
    in Postgres and the write lock in SQLite (which has no ``FOR UPDATE``)."""
    session.execute(update(Eval).where(Eval.id == eval_id).values(status=Eval.status))
    return session.scalars(select(Eval).where(Eval.id == eval_id).execution_options(populate_existing=True)).first()


def _model_gone(url: str, eval_id: str) -> str:
    with session_scope(url) as session:
        model = session.scalar(select(Eval.model).where(Eval.id == eval_id))
    return f"model {model!r} cannot be loaded: its files are missing or unreadable"


def _problems_spec(session: Session, settings: Settings, row: Eval) -> str:
    """What ``load_problems`` reads: the demo set's name, or the eval file under the artifact root."""
    if row.eval_file is None:
        if row.problems not in (DEMO_PROBLEMS, DEMO_HELD_OUT):
            raise EvalInputError(f"problems: {row.problems!r} is not a problem set")
        return row.problems
    file = session.get(File, row.eval_file)
    return str(settings.artifacts / file.path)


def _check_running(url: str, eval_id: str) -> None:
    with session_scope(url) as session:
        if session.scalar(select(Eval.status).where(Eval.id == eval_id)) != EvalStatus.RUNNING:
            raise EvalStopped(eval_id)


def _record(url: str, eval_id: str, row: ProblemRow, records: list[SampleRecord], config: EvalConfig) -> None:
    """Store one problem's row with its samples and advance ``done``; the problem that makes
    ``done`` reach ``total`` also writes the aggregate and settles the eval."""
    with session_scope(url) as session:
        evaluation = _locked_eval(session, eval_id)
        if evaluation is None or evaluation.status != EvalStatus.RUNNING:
            return
        if session.get(EvalProblem, (eval_id, row.id)) is not None:
            return  # another delivery of this message recorded it first
        session.add(
            EvalProblem(
                eval_id=eval_id,
                problem_id=row.id,
                row=row.model_dump(mode="json"),
                samples=dump_samples(records),
            )
        )
        session.flush()
        done = session.scalar(select(func.count()).select_from(EvalProblem).where(EvalProblem.eval_id == eval_id))
        progress = {**evaluation.progress, "done": done}
        evaluation.progress, evaluation.heartbeat_at = progress, time.time()
        if done < progress["total"]:
            return
        stored = session.scalars(select(EvalProblem.row).where(EvalProblem.eval_id == eval_id)).all()
        rows = [read_row(r) for r in stored]
        evaluation.aggregate = aggregate(rows, config.tier, config.k_values).model_dump(mode="json")
        evaluation.status, evaluation.finished_at = EvalStatus.SUCCEEDED, time.time()


def _finish(
    url: str, eval_id: str, *, status: EvalStatus, result: dict | None = None, error: dict | None = None
) -> None:
    """Settle a running eval; a cancelled one stays cancelled."""
    with session_scope(url) as session:
        session.execute(
            update(Eval)
            .where(Eval.id == eval_id, Eval.status == EvalStatus.RUNNING)
            .values(status=status, aggregate=result, error=error, finished_at=time.time())
        )
