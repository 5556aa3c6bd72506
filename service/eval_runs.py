"""An ``Eval`` row's bookkeeping, spread over the workers (worker/tasks/evals.py runs the model and
the verifier, and calls these between).

``claim`` takes the row ``queued -> running``. ``generate_batches`` answers ``config.batch_size``
problems at a time (the core's batches, in set order, so the samples and seeds are those of one
``run_eval`` over the whole set), stores each batch's problems (``EvalProblem``, with their code)
and answers (``EvalAttempt``, one per answer), then sends them as one Celery group of
verification messages that name only the eval and the problem, so verification runs beside
generation on every cpu worker. ``progress`` counts problems ``generated`` and ``done``
(verified and recorded) out of ``total``.

There is no result backend (Postgres holds the results), so no chord: a verification task scores
its problem's attempts not yet scored, storing each record as it is made (``store_record``: a
redelivered message scores only what is left), then ``after_scoring`` records the problem's row
under a lock on the eval row; the one that records the last problem computes the aggregate (the
core's ``aggregate`` over every problem row) and settles the eval. Cancellation (status set to
``cancelled`` by the API) is seen between batches and by every verification task, which then
records nothing.

With ``repair_rounds`` R, a problem whose attempts failed in a repairable way (and has rounds
left) is not recorded yet: ``after_scoring`` sends it to ``cuset.eval_repair``, which decodes the
next round of repairs of its failing attempts (``repairs_due``; the core's follow-up turn, seed
``seed + round``), stores them as attempts of that round (``store_repairs``) and sends the
problem back to verification; the row is recorded, with its figures within R repairs, once no
attempt is left to repair. Repairs are decoded per problem, so their sampled draws may differ
from a ``cuset eval`` run's, whose batches mix problems; greedy ones do not.

When an engine serves the model (``settings.inference_engines``), ``eval_model`` names its route
and no model is loaded; an engine that cannot be reached or answers with an error fails the eval
with ``engine_unreachable`` or ``engine_error``, naming the request's URL and the connection
error or HTTP status.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session

from cuset_core.evaluation.config import EvalConfig
from cuset_core.evaluation.decoding import Answer, EvalEngineError
from cuset_core.evaluation.inputs import EvalInputError
from cuset_core.evaluation.metrics import aggregate
from cuset_core.evaluation.problems import DEMO_HELD_OUT, DEMO_PROBLEMS, Problem, load_problems, select_problems
from cuset_core.evaluation.scoring import SampleRecord, repair_candidates, row_of
from cuset_core.models import ModelNotFoundError
from cuset_core.verify.result import Tier
from db.engine_routes import EngineRoute
from db.errors import ErrorCode, ErrorInfo
from db.evals import EvalProgress, EvalSampleRecord
from db.models import Eval, EvalAttempt, EvalProblem, File
from db.session import rows_changed, session_scope
from db.settings import Settings
from db.statuses import EvalStatus
from service.dispatch import send_eval_repair, send_eval_verify
from service.engine_routing import engine_route_for
from service.jobs import model_spec

log = logging.getLogger(__name__)


class EvalStopped(Exception):
    """The eval is no longer ``running`` (cancelled): stop without touching it."""


def claim(settings: Settings, eval_id: str) -> bool:
    """Move a queued eval to ``running``; False when it is not queued (nothing to do)."""
    with session_scope(settings.resolved_database_url) as session:
        claimed = rows_changed(
            session,
            update(Eval).where(Eval.id == eval_id, Eval.status == EvalStatus.QUEUED).values(status=EvalStatus.RUNNING),
        )
        if not claimed:
            return False
        # A requeued eval starts over: rows of an earlier, interrupted run would mix two runs.
        session.execute(delete(EvalAttempt).where(EvalAttempt.eval_id == eval_id))
        session.execute(delete(EvalProblem).where(EvalProblem.eval_id == eval_id))
    return True


def fail(settings: Settings, eval_id: str, exc: Exception) -> None:
    """Fail the eval with the error code and message that say what went wrong."""
    url = settings.resolved_database_url
    if isinstance(exc, EvalEngineError):
        code = ErrorCode.ENGINE_UNREACHABLE if exc.status is None else ErrorCode.ENGINE_ERROR
        error = ErrorInfo(code=code, message=f"The inference engine failed: {str(exc).removeprefix('model: ')}")
    elif isinstance(exc, EvalInputError):
        error = ErrorInfo(code=ErrorCode.INVALID_EVAL_INPUT, message=str(exc))
    elif isinstance(exc, ModelNotFoundError):
        # The detail names server paths; the log keeps it, the user gets the model id.
        log.exception("eval %s: model unavailable", eval_id, exc_info=exc)
        error = ErrorInfo(code=ErrorCode.MODEL_UNAVAILABLE, message=_model_gone(url, eval_id))
    else:
        log.exception("eval %s failed", eval_id, exc_info=exc)
        error = ErrorInfo(code=ErrorCode.EVAL_FAILED, message=f"{type(exc).__name__}: {exc}")
    with session_scope(url) as session:  # a cancelled eval stays cancelled
        session.execute(
            update(Eval)
            .where(Eval.id == eval_id, Eval.status == EvalStatus.RUNNING)
            .values(status=EvalStatus.FAILED, error=error, finished_at=time.time())
        )


@dataclass(frozen=True)
class EvalModel:
    """What decodes an eval's answers: its config (the model field the core decodes), and the
    model to load (``spec``, cached as ``model_id``) unless an ``engine`` serves it."""

    config: EvalConfig
    spec: str
    model_id: str
    engine: EngineRoute | None


def eval_model(settings: Settings, eval_id: str) -> EvalModel:
    """The eval's config and where its model is decoded."""
    with session_scope(settings.resolved_database_url) as session:
        row = session.get_one(Eval, eval_id)
        try:
            spec = model_spec(session, settings, row)
        except LookupError as exc:
            raise ModelNotFoundError(str(exc)) from exc
        engine = engine_route_for(session, settings, row.owner, row.model)
        model = spec if engine is None else engine.spec()
        config = EvalConfig.of(row.config, model=model, problems=_problems_spec(session, settings, row))
        return EvalModel(config, spec, row.model, engine)


def problem_batches(config: EvalConfig) -> list[list[Problem]]:
    """The eval's problems, ``config.batch_size`` at a time, in set order."""
    problems = select_problems(load_problems(config.problems), config.problem_ids)
    return [problems[i : i + config.batch_size] for i in range(0, len(problems), config.batch_size)]


def generate_batches(
    settings: Settings,
    eval_id: str,
    config: EvalConfig,
    batches: list[list[Problem]],
    answer: Callable[[list[Problem]], dict[str, list[Answer]]],
) -> None:
    """Answer each batch of problems with ``answer``, store the answers and send the batch's
    problems off to be verified; ``EvalStopped`` once the eval is no longer running."""
    url = settings.resolved_database_url
    generated = 0
    for batch in batches:
        check_running(settings, eval_id)
        answers = answer(batch)
        generated += len(batch)
        with session_scope(url) as session:
            row = _locked_eval(session, eval_id)
            if row is None or row.status != EvalStatus.RUNNING:
                raise EvalStopped(eval_id)
            row.progress = _progress(row).model_copy(update={"generated": generated})
            for problem in batch:
                session.add(EvalProblem(eval_id=eval_id, problem_id=problem.id, code=problem.code))
                session.add_all(
                    EvalAttempt(eval_id=eval_id, problem_id=problem.id, index=index, round=0, answer=drawn)
                    for index, drawn in enumerate(answers[problem.id])
                )
        send_eval_verify(settings, eval_id, [problem.id for problem in batch], gpu=config.tier is Tier.GPU)


@dataclass(frozen=True)
class ProblemAttempts:
    """A problem of a running eval and its attempts in index order (a repair comes after the
    attempt it repairs), with the eval's stored config."""

    config: EvalConfig
    problem: Problem
    attempts: list[EvalAttempt]


def problem_to_verify(settings: Settings, eval_id: str, problem_id: str) -> ProblemAttempts | None:
    """The problem's attempts to score; None when the eval is no longer running or the problem's
    row is already recorded (a redelivered message)."""
    with session_scope(settings.resolved_database_url) as session:
        row = session.get(Eval, eval_id)
        stored = session.get(EvalProblem, (eval_id, problem_id))
        if row is None or row.status != EvalStatus.RUNNING or stored is None or stored.row is not None:
            return None
        attempts = _attempts(session, eval_id, problem_id)
        return ProblemAttempts(_stored_config(row), Problem(problem_id, stored.code or ""), attempts)


def store_record(settings: Settings, eval_id: str, problem_id: str, record: SampleRecord) -> None:
    """Store one attempt's score as soon as it is made."""
    with session_scope(settings.resolved_database_url) as session:
        session.execute(
            update(EvalAttempt)
            .where(
                EvalAttempt.eval_id == eval_id,
                EvalAttempt.problem_id == problem_id,
                EvalAttempt.index == record.index,
            )
            .values(record=record)
        )


def after_scoring(
    settings: Settings, eval_id: str, problem_id: str, scored: list[SampleRecord], config: EvalConfig
) -> None:
    """Send a problem whose every attempt is scored to be repaired again (failures left to
    repair, rounds left) or record its row; the last problem recorded settles the eval."""
    round_ = max(record.round for record in scored)
    if round_ < config.repair_rounds and repair_candidates(scored, round_ + 1):
        send_eval_repair(settings, eval_id, problem_id)
        return
    _record(settings, eval_id, problem_id, scored, config)


@dataclass(frozen=True)
class RepairsDue:
    """The next round of repairs of a problem: the failed attempts to answer (none when an
    earlier delivery stored this round already), the round, and where its attempts' indexes
    start."""

    problem: Problem
    failed: list[SampleRecord]
    round: int
    first_index: int
    config: EvalConfig


def repairs_due(settings: Settings, eval_id: str, problem_id: str) -> RepairsDue | None:
    """What ``cuset.eval_repair`` decodes for a problem; None when its row is recorded already."""
    with session_scope(settings.resolved_database_url) as session:
        stored = session.get(EvalProblem, (eval_id, problem_id))
        attempts = _attempts(session, eval_id, problem_id)
        if stored is None or stored.row is not None or not attempts:
            return None
        config = _stored_config(session.get_one(Eval, eval_id))
        problem = Problem(problem_id, stored.code or "")
    records = [attempt.record for attempt in attempts if attempt.record is not None]
    round_ = max(attempt.round for attempt in attempts)
    if len(records) < len(attempts):  # this round was stored by an earlier delivery
        return RepairsDue(problem, [], round_, len(attempts), config)
    return RepairsDue(problem, repair_candidates(records, round_ + 1), round_ + 1, len(attempts), config)


def store_repairs(settings: Settings, eval_id: str, due: RepairsDue, answers: list[Answer]) -> None:
    """Store the decoded repairs (one per failed attempt) as attempts of their round, and send
    the problem back to verification."""
    with session_scope(settings.resolved_database_url) as session:
        session.add_all(
            EvalAttempt(
                eval_id=eval_id,
                problem_id=due.problem.id,
                index=due.first_index + offset,
                round=due.round,
                repair_of=failed.index,
                answer=answer,
            )
            for offset, (failed, answer) in enumerate(zip(due.failed, answers))
        )
    send_eval_verify(settings, eval_id, [due.problem.id], gpu=due.config.tier is Tier.GPU)


def check_running(settings: Settings, eval_id: str) -> None:
    """``EvalStopped`` unless the eval is still running."""
    with session_scope(settings.resolved_database_url) as session:
        if session.scalar(select(Eval.status).where(Eval.id == eval_id)) != EvalStatus.RUNNING:
            raise EvalStopped(eval_id)


def _attempts(session: Session, eval_id: str, problem_id: str) -> list[EvalAttempt]:
    """A problem's attempts in index order (a repair comes after the attempt it repairs)."""
    query = select(EvalAttempt).where(EvalAttempt.eval_id == eval_id, EvalAttempt.problem_id == problem_id)
    return list(session.scalars(query.order_by(EvalAttempt.index)))


def _stored_config(row: Eval) -> EvalConfig:
    """The eval's config as stored (the model and problems fields only satisfy validation)."""
    return EvalConfig.of(row.config, model=row.model, problems=row.problems or row.eval_file or "")


def _progress(row: Eval) -> EvalProgress:
    """A started eval's progress (the API writes it when it creates the eval)."""
    if row.progress is None:
        raise ValueError(f"eval {row.id} has no progress record")
    return row.progress


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
    file = session.get_one(File, row.eval_file)
    return str(settings.artifacts / file.path)


def _record(settings: Settings, eval_id: str, problem_id: str, records: list[SampleRecord], config: EvalConfig) -> None:
    """Store one problem's row with its samples and advance ``done``; the problem that makes
    ``done`` reach ``total`` also writes the aggregate and settles the eval."""
    row = row_of(problem_id, records, config.repair_rounds)
    with session_scope(settings.resolved_database_url) as session:
        evaluation = _locked_eval(session, eval_id)
        if evaluation is None or evaluation.status != EvalStatus.RUNNING:
            return
        stored = session.get(EvalProblem, (eval_id, row.id), populate_existing=True)
        if stored is None or stored.row is not None:
            return  # another delivery of this message recorded it first
        stored.row, stored.samples = row, [EvalSampleRecord.of(record) for record in records]
        session.flush()
        done = session.execute(
            select(func.count()).select_from(EvalProblem).where(EvalProblem.eval_id == eval_id, EvalProblem.recorded())
        ).scalar_one()
        progress = _progress(evaluation).model_copy(update={"done": done})
        evaluation.progress, evaluation.heartbeat_at = progress, time.time()
        if done < progress.total:
            return
        recorded = select(EvalProblem.row).where(EvalProblem.eval_id == eval_id, EvalProblem.recorded())
        evaluation.aggregate = aggregate(list(session.scalars(recorded)), config.tier, config.k_values)
        evaluation.status, evaluation.finished_at = EvalStatus.SUCCEEDED, time.time()
