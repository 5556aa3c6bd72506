"""An ``Eval`` row, spread over the workers: ``cuset.eval`` (infer queue) generates, and one
``cuset.eval_verify`` per problem (cpu queue; ``cuset.eval_verify_gpu`` on the infer queue for
tier gpu) verifies and records that problem's row.

``cuset.eval`` claims the row ``queued -> running``, takes the model from the worker's model
cache (loaded once, kept for the next eval or generation), and generates a batch of
``config.batch_size`` problems at a time (the core's batches, in set order, so the samples and
seeds are those of one ``run_eval`` over the whole set). Each batch's problems (``EvalProblem``,
with their code) and answers (``EvalAttempt``, one per answer) are stored, then sent as one
Celery group of verification messages that name only the eval and the problem, so verification
runs beside generation on every cpu worker. ``progress`` counts problems ``generated`` and
``done`` (verified and recorded) out of ``total``.

There is no result backend (Postgres holds the results), so no chord: a verification task scores
its problem's attempts not yet scored, storing each record as it is made (a redelivered message
scores only what is left), and records the problem's row under a lock on the eval row; the one
that records the last problem computes the aggregate (the core's ``aggregate`` over every
problem row) and settles the eval. Cancellation (status set to ``cancelled`` by the API) is seen
between batches and by every verification task, which then records nothing.

With ``repair_rounds`` R, a verification task whose problem has attempts that failed in a
repairable way (and rounds left) records nothing yet: it sends the problem to
``cuset.eval_repair`` (infer queue), which decodes the next round of repairs of its failing
attempts (the core's follow-up turn, seed ``seed + round``), stores them as attempts of that
round and sends the problem back to verification; the row is recorded, with its figures within
R repairs, once no attempt is left to repair. Repairs are decoded per problem, so their sampled
draws may differ from a ``cuset eval`` run's, whose batches mix problems; greedy ones do not.

When an engine serves the model (``settings.inference_engines``), the answers come from it, a
batch's problems as concurrent requests (the core's ``openai:URL#NAME`` model), and no model is
loaded here. An engine that cannot be reached or answers with an error fails the eval with
``engine_unreachable`` or ``engine_error``, naming the request's URL and the connection error or
HTTP status.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from celery import shared_task
from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session

from cuset_core.evaluation.config import EvalConfig
from cuset_core.evaluation.decoding import Answer, Decode, EvalEngineError, answers_for, endpoint_decoder, model_decoder
from cuset_core.evaluation.inputs import EvalInputError
from cuset_core.evaluation.metrics import ProblemRow, aggregate
from cuset_core.evaluation.problems import DEMO_HELD_OUT, DEMO_PROBLEMS, Problem, load_problems, select_problems
from cuset_core.evaluation.scoring import SampleRecord, repair_answers, repair_candidates, row_of, score_attempt
from cuset_core.models import ModelNotFoundError
from cuset_core.verify.reference_pool import ReferencePool
from cuset_core.verify.result import Tier
from db.errors import ErrorCode, ErrorInfo
from db.evals import EvalSampleRecord
from db.model_specs import engine_route_for
from db.models import Eval, EvalAttempt, EvalProblem, File
from db.session import session_scope
from db.settings import Settings
from db.statuses import EvalStatus
from service.dispatch import TaskName, send_eval_repair, send_eval_verify
from service.jobs import model_spec
from worker.heartbeat import heartbeat
from worker.runtime import RuntimeTask, WorkerRuntime
from worker.tasks.verify import service_verify_settings

log = logging.getLogger(__name__)


class EvalStopped(Exception):
    """The eval is no longer ``running`` (cancelled): stop without touching it."""


@shared_task(name=TaskName.EVAL, base=RuntimeTask, bind=True)
def run_eval_task(self: RuntimeTask, eval_id: str) -> None:
    """Generate every problem of eval ``eval_id`` and send each batch off to be verified."""
    settings = self.runtime.settings
    url = settings.resolved_database_url
    with session_scope(url) as session:
        claimed = session.execute(
            update(Eval).where(Eval.id == eval_id, Eval.status == EvalStatus.QUEUED).values(status=EvalStatus.RUNNING)
        ).rowcount
        if not claimed:
            log.info("eval %s is not queued; nothing to do", eval_id)
            return
        # A requeued eval starts over: rows of an earlier, interrupted run would mix two runs.
        session.execute(delete(EvalAttempt).where(EvalAttempt.eval_id == eval_id))
        session.execute(delete(EvalProblem).where(EvalProblem.eval_id == eval_id))
    try:
        with heartbeat(url, Eval, eval_id, settings.heartbeat_interval_s):
            _generate(self.runtime, eval_id)
    except EvalStopped:
        log.info("eval %s stopped (cancelled)", eval_id)
    except Exception as exc:  # noqa: BLE001 - any failure is recorded on the row, never lost
        _fail(url, eval_id, exc)


def _fail(url: str, eval_id: str, exc: Exception) -> None:
    """Fail the eval with the error code and message that say what went wrong."""
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
    _finish(url, eval_id, status=EvalStatus.FAILED, error=error)


@contextmanager
def _decoding(runtime: WorkerRuntime, eval_id: str) -> Iterator[tuple[EvalConfig, Decode]]:
    """The eval's config and the core's ``Decode`` of its model: through the engine that serves
    it, or the model from this worker's cache (held for the context)."""
    settings = runtime.settings
    with session_scope(settings.resolved_database_url) as session:
        row = session.get(Eval, eval_id)
        try:
            spec = model_spec(session, settings, row)
        except LookupError as exc:
            raise ModelNotFoundError(str(exc)) from exc
        model_id = row.model
        engine = engine_route_for(session, settings, row.owner, row.model)
        model = spec if engine is None else engine.spec()
        config = EvalConfig.of(row.config, model=model, problems=_problems_spec(session, settings, row))
    if engine is not None:
        with endpoint_decoder(config, engine.api_key(), supports_n=engine.supports_n) as decode:
            yield config, decode
        return
    with runtime.loaded_models().use(spec, model_id) as (model, tokenizer):
        yield config, model_decoder(model, tokenizer, config)


def _generate(runtime: WorkerRuntime, eval_id: str) -> None:
    settings = runtime.settings
    with _decoding(runtime, eval_id) as (config, decode):
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
    """Answer each batch of problems with ``answer``, store the answers and send the batch's
    problems off to be verified."""
    url = settings.resolved_database_url
    generated = 0
    for batch in batches:
        _check_running(url, eval_id)
        answers = answer(batch)
        generated += len(batch)
        with session_scope(url) as session:
            row = _locked_eval(session, eval_id)
            if row is None or row.status != EvalStatus.RUNNING:
                raise EvalStopped(eval_id)
            row.progress = row.progress.model_copy(update={"generated": generated})
            for problem in batch:
                session.add(EvalProblem(eval_id=eval_id, problem_id=problem.id, code=problem.code))
                session.add_all(
                    EvalAttempt(eval_id=eval_id, problem_id=problem.id, index=index, round=0, answer=drawn)
                    for index, drawn in enumerate(answers[problem.id])
                )
        send_eval_verify(settings, eval_id, [problem.id for problem in batch], gpu=config.tier is Tier.GPU)


def verify_problem(self: RuntimeTask, eval_id: str, problem_id: str) -> None:
    """Score the attempts of one problem not yet scored; then send it to be repaired again or
    record its row, and the last problem recorded settles the eval."""
    settings = self.runtime.settings
    url = settings.resolved_database_url
    with session_scope(url) as session:
        row = session.get(Eval, eval_id)
        stored = session.get(EvalProblem, (eval_id, problem_id))
        if row is None or row.status != EvalStatus.RUNNING or stored is None or stored.row is not None:
            return  # cancelled, failed, or a redelivered message for a problem already recorded
        config = _stored_config(row)
        problem = Problem(problem_id, stored.code or "")
        attempts = _attempts(session, eval_id, problem_id)
    checks = service_verify_settings(settings, config.verify_settings())
    records: dict[int, SampleRecord] = {}
    references = ReferencePool()  # the attempts scored here share one reference run
    for attempt in attempts:
        record = attempt.record
        if record is None:
            repaired = None if attempt.repair_of is None else records[attempt.repair_of]
            record = score_attempt(
                problem,
                attempt.index,
                attempt.answer,
                checks,
                settings.verify_cache_dir,
                config.cache,
                repaired,
                references,
                self.runtime.warm_sides,
            )
            _store_record(url, eval_id, problem_id, record)
        records[attempt.index] = record
    scored = list(records.values())
    round_ = max(record.round for record in scored)
    if round_ < config.repair_rounds and repair_candidates(scored, round_ + 1):
        send_eval_repair(settings, eval_id, problem_id)
        return
    _record(url, eval_id, row_of(problem_id, scored, config.repair_rounds), scored, config)


# One body, two queues: tier gpu verifies on the infer workers, which hold the GPUs.
verify_problem_task = shared_task(name=TaskName.EVAL_VERIFY, base=RuntimeTask, bind=True)(verify_problem)
verify_problem_gpu_task = shared_task(name=TaskName.EVAL_VERIFY_GPU, base=RuntimeTask, bind=True)(verify_problem)


@shared_task(name=TaskName.EVAL_REPAIR, base=RuntimeTask, bind=True)
def repair_problem(self: RuntimeTask, eval_id: str, problem_id: str) -> None:
    """Decode the next round of repairs of one problem's failing attempts, store them as
    attempts and send the problem back to verification."""
    settings = self.runtime.settings
    url = settings.resolved_database_url
    with session_scope(url) as session:
        stored = session.get(EvalProblem, (eval_id, problem_id))
        attempts = _attempts(session, eval_id, problem_id)
    if stored is None or stored.row is not None or not attempts:
        return
    records = [attempt.record for attempt in attempts if attempt.record is not None]
    round_ = max(attempt.round for attempt in attempts)
    if len(records) == len(attempts):  # else this round was stored by an earlier delivery
        round_ += 1
        problem = Problem(problem_id, stored.code or "")
        try:
            _check_running(url, eval_id)
            with _decoding(self.runtime, eval_id) as (config, decode):
                failed = repair_candidates(records, round_)
                answers = repair_answers(decode, config, {problem_id: problem}, failed, round_)
        except EvalStopped:
            return
        except Exception as exc:  # noqa: BLE001 - any failure is recorded on the row, never lost
            _fail(url, eval_id, exc)
            return
        with session_scope(url) as session:
            session.add_all(
                EvalAttempt(
                    eval_id=eval_id,
                    problem_id=problem_id,
                    index=len(attempts) + offset,
                    round=round_,
                    repair_of=attempt.index,
                    answer=answer,
                )
                for offset, (attempt, answer) in enumerate(zip(failed, answers))
            )
    else:
        with session_scope(url) as session:
            config = _stored_config(session.get(Eval, eval_id))
    send_eval_verify(settings, eval_id, [problem_id], gpu=config.tier is Tier.GPU)


def _attempts(session: Session, eval_id: str, problem_id: str) -> list[EvalAttempt]:
    """A problem's attempts in index order (a repair comes after the attempt it repairs)."""
    query = select(EvalAttempt).where(EvalAttempt.eval_id == eval_id, EvalAttempt.problem_id == problem_id)
    return list(session.scalars(query.order_by(EvalAttempt.index)))


def _store_record(url: str, eval_id: str, problem_id: str, record: SampleRecord) -> None:
    with session_scope(url) as session:
        session.execute(
            update(EvalAttempt)
            .where(
                EvalAttempt.eval_id == eval_id,
                EvalAttempt.problem_id == problem_id,
                EvalAttempt.index == record.index,
            )
            .values(record=record)
        )


def _stored_config(row: Eval) -> EvalConfig:
    """The eval's config as stored (the model and problems fields only satisfy validation)."""
    return EvalConfig.of(row.config, model=row.model, problems=row.problems or row.eval_file or "")


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
        stored = session.get(EvalProblem, (eval_id, row.id), populate_existing=True)
        if stored is None or stored.row is not None:
            return  # another delivery of this message recorded it first
        stored.row, stored.samples = row, [EvalSampleRecord.of(record) for record in records]
        session.flush()
        done = session.scalar(
            select(func.count()).select_from(EvalProblem).where(EvalProblem.eval_id == eval_id, EvalProblem.recorded())
        )
        progress = evaluation.progress.model_copy(update={"done": done})
        evaluation.progress, evaluation.heartbeat_at = progress, time.time()
        if done < progress.total:
            return
        recorded = select(EvalProblem.row).where(EvalProblem.eval_id == eval_id, EvalProblem.recorded())
        evaluation.aggregate = aggregate(list(session.scalars(recorded)), config.tier, config.k_values)
        evaluation.status, evaluation.finished_at = EvalStatus.SUCCEEDED, time.time()


def _finish(url: str, eval_id: str, *, status: EvalStatus, error: ErrorInfo | None = None) -> None:
    """Settle a running eval; a cancelled one stays cancelled."""
    with session_scope(url) as session:
        session.execute(
            update(Eval)
            .where(Eval.id == eval_id, Eval.status == EvalStatus.RUNNING)
            .values(status=status, error=error, finished_at=time.time())
        )
