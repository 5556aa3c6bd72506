"""``cuset.eval``: run an ``Eval`` row through the core's evaluation runner, a batch of problems
at a time, so ``EvalProblem`` rows appear and progress advances as problems finish.

Each batch is one ``run_eval`` call over a JSONL file holding just that batch (the batches are
the runner's own, ``config.batch_size`` problems in set order, so the samples and seeds are
those of one ``run_eval`` over the whole set). The final aggregate is the core's ``aggregate``
over every problem row. The row is claimed ``queued -> running`` atomically; a message for an
eval that is not queued does nothing. Cancellation (status set to ``cancelled`` by the API) is
seen between batches; every write checks the row is still ``running``.
"""

from __future__ import annotations

import json
import logging
import tempfile
import time
from pathlib import Path

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from cuset_core.evaluation.metrics import ProblemRow, aggregate
from cuset_core.evaluation.runner import (
    DEMO_HELD_OUT,
    DEMO_PROBLEMS,
    EvalConfig,
    EvalInputError,
    EvalReport,
    Problem,
    SampleRecord,
    load_problems,
    run_eval,
)
from cuset_core.generation.extract import answer_code
from cuset_core.models import ModelNotFoundError
from db.job_rows import model_spec
from db.models import Eval, EvalProblem, File
from db.session import session_scope
from db.settings import Settings, get_settings
from db.statuses import EvalStatus
from worker.app import app
from worker.heartbeat import heartbeat

log = logging.getLogger(__name__)


class EvalStopped(Exception):
    """The eval is no longer ``running`` (cancelled): stop without touching it."""


@app.task(name="cuset.eval")
def run_eval_task(eval_id: str) -> None:
    """Generate and verify every problem of eval ``eval_id``, recording rows as problems finish."""
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
            _run(settings, eval_id)
    except EvalStopped:
        log.info("eval %s stopped (cancelled)", eval_id)
    except EvalInputError as exc:
        _finish(url, eval_id, status=EvalStatus.FAILED, error={"code": "invalid_eval_input", "message": str(exc)})
    except ModelNotFoundError:
        # The detail names server paths; the log keeps it, the user gets the model id.
        log.exception("eval %s: model unavailable", eval_id)
        _finish(
            url,
            eval_id,
            status=EvalStatus.FAILED,
            error={"code": "model_unavailable", "message": _model_gone(url, eval_id)},
        )
    except Exception as exc:  # noqa: BLE001 - any failure is recorded on the row, never lost
        log.exception("eval %s failed", eval_id)
        _finish(
            url,
            eval_id,
            status=EvalStatus.FAILED,
            error={"code": "eval_failed", "message": f"{type(exc).__name__}: {exc}"},
        )


def _run(settings: Settings, eval_id: str) -> None:
    url = settings.resolved_database_url
    with session_scope(url) as session:
        row = session.get(Eval, eval_id)
        try:
            spec = model_spec(session, settings, row)
        except LookupError as exc:
            raise ModelNotFoundError(str(exc)) from exc
        config = EvalConfig(
            model=spec,
            problems=_problems_spec(session, settings, row),
            cache_dir=settings.verify_cache_dir,
            **row.config,
        )
    rows: list[ProblemRow] = []
    with tempfile.TemporaryDirectory(prefix=f"cuset-{eval_id}-") as work:
        problems = load_problems(config.problems)
        batches = [problems[i : i + config.batch_size] for i in range(0, len(problems), config.batch_size)]
        for number, batch in enumerate(batches):
            _check_running(url, eval_id)
            batch_file = _write_batch(Path(work) / f"batch-{number:04d}.jsonl", batch)
            report = run_eval(config.model_copy(update={"problems": str(batch_file)}), progress=False)
            _record(url, eval_id, report, done=len(rows) + len(report.problems), total=len(problems))
            rows.extend(report.problems)
    _finish(
        url,
        eval_id,
        status=EvalStatus.SUCCEEDED,
        result=aggregate(rows, config.tier, config.k_values).model_dump(mode="json"),
    )


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


def _write_batch(path: Path, batch: list[Problem]) -> Path:
    """A problems JSONL file (``{"id", "problem"}`` rows) holding just ``batch``."""
    path.write_text("".join(json.dumps({"id": p.id, "problem": p.code}) + "\n" for p in batch))
    return path


def _check_running(url: str, eval_id: str) -> None:
    with session_scope(url) as session:
        if session.scalar(select(Eval.status).where(Eval.id == eval_id)) != EvalStatus.RUNNING:
            raise EvalStopped(eval_id)


def _record(url: str, eval_id: str, report: EvalReport, *, done: int, total: int) -> None:
    """Store one batch's problem rows (each with its samples) and advance progress (problems)."""
    with session_scope(url) as session:
        row = session.scalar(select(Eval).where(Eval.id == eval_id).with_for_update())
        if row.status != EvalStatus.RUNNING:
            raise EvalStopped(eval_id)
        for problem in report.problems:
            samples = [_sample_json(s) for s in report.samples if s.problem_id == problem.id]
            session.add(
                EvalProblem(
                    eval_id=eval_id, problem_id=problem.id, row=problem.model_dump(mode="json"), samples=samples
                )
            )
        row.progress = {"done": done, "total": total}


def _sample_json(sample: SampleRecord) -> dict:
    """One sample as stored: the answer, the code that was scored, generation facts, the result."""
    return {
        "index": sample.index,
        "greedy": sample.greedy,
        "answer": sample.answer,
        "code": answer_code(sample.answer).code,
        "prompt_tokens": sample.prompt_tokens,
        "completion_tokens": sample.completion_tokens,
        "finish_reason": sample.finish_reason,
        "result": sample.result.model_dump(mode="json"),
    }


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
