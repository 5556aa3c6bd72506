"""An eval's answers and their verdicts live in rows, and its messages name only the eval and the
problem: the generation step stores each problem with its attempts, a verification message scores
the attempts not yet scored (so a redelivered one redoes nothing) and records the problem's row,
and the last problem recorded settles the eval. Task bodies are called directly, on the embedded
SQLite database and broker."""

from __future__ import annotations

from sqlalchemy import select

from cuset_core.demo import demo_problems
from cuset_core.evaluation.config import EvalConfig, EvalKnobs
from cuset_core.evaluation.decoding import Answer
from cuset_core.evaluation.problems import Problem
from cuset_core.evaluation.scoring import SampleRecord
from cuset_core.verify.result import Tier, Verdict, VerifyResult
from db.evals import EvalProgress
from db.models import Eval, EvalAttempt, EvalProblem
from db.session import session_scope
from db.settings import Settings
from db.statuses import EvalStatus
from service.eval_runs import generate_batches
from tests.integration.job_support import insert_eval
from tests.sqlite_service import enqueued
from worker.tasks.evals import verify_problem_task

DEMO = demo_problems()[:2]
PROBLEMS = [Problem(p.id, p.problem_code) for p in DEMO]
SOLVED = {p.id: f"```python\n{p.solution_code}\n```" for p in DEMO}


def _running_eval(settings: Settings, eval_id: str) -> EvalConfig:
    knobs = EvalKnobs(samples=2, greedy=False, tier=Tier.STATIC)
    insert_eval(
        settings.resolved_database_url,
        eval_id,
        config=knobs,
        status=EvalStatus.RUNNING,
        progress=EvalProgress(done=0, total=len(PROBLEMS)),
    )
    return EvalConfig.of(knobs, model="tiny", problems="demo")


def _answers(batch: list[Problem]) -> dict[str, list[Answer]]:
    return {problem.id: [Answer(SOLVED[problem.id]), Answer("no code at all")] for problem in batch}


def _attempts(settings: Settings, eval_id: str) -> list[EvalAttempt]:
    with session_scope(settings.resolved_database_url) as session:
        query = select(EvalAttempt).where(EvalAttempt.eval_id == eval_id)
        return list(session.scalars(query.order_by(EvalAttempt.problem_id, EvalAttempt.index)))


def test_generated_answers_are_stored_as_attempts_and_the_messages_name_only_the_problems(task_settings):
    config = _running_eval(task_settings, "eval-rows")

    generate_batches(task_settings, "eval-rows", config, [PROBLEMS], _answers)

    assert enqueued(task_settings) == [("cuset.eval_verify", ["eval-rows", p.id]) for p in PROBLEMS]
    attempts = _attempts(task_settings, "eval-rows")
    assert [(a.problem_id, a.index, a.round, a.record) for a in attempts] == [
        (p.id, i, 0, None) for p in sorted(PROBLEMS, key=lambda p: p.id) for i in (0, 1)
    ]
    assert isinstance(attempts[0].answer, Answer)
    with session_scope(task_settings.resolved_database_url) as session:
        stored = session.get(EvalProblem, ("eval-rows", PROBLEMS[0].id))
        assert stored.code == PROBLEMS[0].code and stored.row is None
        assert session.get(Eval, "eval-rows").progress.generated == len(PROBLEMS)


def test_verifying_every_problem_records_its_row_and_the_last_one_settles_the_eval(task_settings):
    config = _running_eval(task_settings, "eval-settle")
    generate_batches(task_settings, "eval-settle", config, [PROBLEMS], _answers)

    for problem in PROBLEMS:
        verify_problem_task("eval-settle", problem.id)

    with session_scope(task_settings.resolved_database_url) as session:
        row = session.get(Eval, "eval-settle")
        assert row.status == EvalStatus.SUCCEEDED and row.progress.done == len(PROBLEMS)
        assert row.aggregate.samples == 2 * len(PROBLEMS)
    verdicts = [a.record.result.verdict for a in _attempts(task_settings, "eval-settle")]
    assert verdicts == [Verdict.PASS, Verdict.NO_CODE] * len(PROBLEMS)


def test_a_redelivered_verification_scores_only_the_attempts_left_and_records_once(task_settings):
    config = _running_eval(task_settings, "eval-redelivered")
    generate_batches(task_settings, "eval-redelivered", config, [PROBLEMS[:1]], _answers)
    problem = PROBLEMS[0]
    # A delivery that stopped after scoring the first attempt (its verdict marked to be told apart).
    earlier = SampleRecord(
        problem_id=problem.id,
        index=0,
        answer=SOLVED[problem.id],
        result=VerifyResult(verdict=Verdict.PASS, tier=Tier.STATIC, reason="scored by an earlier delivery"),
    )
    with session_scope(task_settings.resolved_database_url) as session:
        session.get(EvalAttempt, ("eval-redelivered", problem.id, 0)).record = earlier

    verify_problem_task("eval-redelivered", problem.id)
    verify_problem_task("eval-redelivered", problem.id)  # the same message again

    with session_scope(task_settings.resolved_database_url) as session:
        stored = session.get(EvalProblem, ("eval-redelivered", problem.id))
        reasons = [sample.result.reason for sample in stored.samples]
        assert reasons[0] == "scored by an earlier delivery" and len(reasons) == 2
