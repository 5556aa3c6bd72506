"""The typed contract of an eval's rows (shared by api/ and worker/): an ``Eval``'s ``progress``
(``EvalProgress``), and an ``EvalProblem``'s ``row``, the core's ``ProblemRow`` (counts per tier,
greedy apart, the KernelBench-scored sample), and ``samples``, each an ``EvalSampleRecord`` (one
answer, the code scored and its result). The columns hold these types (``TypedJSON``); fields
added after rows were first stored have defaults, so old rows still read.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from cuset_core.analysis.extract import answer_code
from cuset_core.evaluation.compare import EvalRun
from cuset_core.evaluation.metrics import problem_row
from cuset_core.evaluation.scoring import SampleRecord
from cuset_core.verify.result import Tier, VerifyResult


class EvalSampleRecord(BaseModel):
    """One generated answer, the code extracted from it and its verification result."""

    index: int
    greedy: bool = Field(False, description="the problem's greedy sample (scored apart from pass@k)")
    answer: str
    code: str = Field(description="the code that was scored (first fenced block, or the whole answer)")
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    finish_reason: str | None = None
    result: VerifyResult = Field(description="the core's VerifyResult: verdict, tier, reason, log, timings, ...")
    round: int = Field(0, description="0 for a drawn sample, r for the r-th repair of one (repair_rounds)")
    repair_of: int | None = Field(None, description="index of the failed attempt this repair answers")

    @classmethod
    def of(cls, sample: SampleRecord) -> EvalSampleRecord:
        """The stored form of a scored sample of the core's runner."""
        return cls(code=answer_code(sample.answer).code, **sample.model_dump(exclude={"problem_id"}))


class EvalProgress(BaseModel):
    """Problems of the set: generated (answers drawn, verification under way) and done
    (verified, their row listed under ``/problems``), out of ``total``."""

    done: int
    total: int
    generated: int = 0


def eval_run(name: str, tier: Tier, k_values: list[int], problems: list[tuple[str, list[EvalSampleRecord]]]) -> EvalRun:
    """What a comparison needs of one stored eval (``cuset_core.evaluation.compare``): per problem
    (its id and stored samples) the row rebuilt from its drawn samples, the greedy one apart;
    repairs are left out, as the CLI's comparison of results files leaves them."""
    rows = []
    for problem_id, samples in problems:
        drawn = [sample for sample in samples if sample.round == 0]
        greedy = [sample.result for sample in drawn if sample.greedy]
        sampled = [sample.result for sample in drawn if not sample.greedy]
        rows.append(problem_row(problem_id, sampled, greedy[0] if greedy else None))
    return EvalRun(name=name, tier=tier, k_values=k_values, rows=rows)
