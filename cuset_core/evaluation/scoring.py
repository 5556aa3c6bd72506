"""Verifying answers and repairing the failing ones: each answer becomes a :class:`SampleRecord`
(its verdict beside it), a problem's records its metrics row (:func:`row_of`), and with repair
rounds a failing attempt goes back to the model with its verifier error (:func:`repair`)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field
from tqdm import tqdm

from cuset_core.evaluation.config import EvalConfig
from cuset_core.evaluation.decoding import Answer, Decode, repair_run
from cuset_core.evaluation.metrics import ProblemRow, problem_row, repaired_counts
from cuset_core.evaluation.problems import Problem
from cuset_core.verify.execution.reference_pool import ReferencePool
from cuset_core.verify.execution.tier_run import WarmSides
from cuset_core.verify.readiness import stop_if_broken
from cuset_core.verify.result import VerifyResult
from cuset_core.verify.run import verify
from cuset_core.verify.settings import VerifySettings


class SampleRecord(BaseModel):
    """One scored attempt: the answer text, generation facts when generated, and its result.
    ``greedy`` marks the problem's greedy sample (index 0 when there is one) and its repairs.
    A repair (round r >= 1) answers the follow-up turn showing attempt ``repair_of`` (of round
    r - 1) and its verifier error; repairs follow a problem's drawn samples, in rounds."""

    problem_id: str
    index: int
    greedy: bool = False
    answer: str
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    finish_reason: str | None = None
    result: VerifyResult
    round: int = Field(0, description="0 for a drawn or given sample, r for the r-th repair of one")
    repair_of: int | None = Field(None, description="index of the failed attempt this one repairs")


def score_problem(
    problem: Problem,
    answers: list[Answer],
    settings: VerifySettings,
    cache_dir: Path | None,
    use_cache: bool,
    warm: WarmSides | None = None,
) -> tuple[ProblemRow, list[SampleRecord]]:
    """Verify every answer of one problem; its row (greedy and i.i.d. apart) and the samples.

    The answers share one reference run per tier (:class:`ReferencePool`): one secret input seed
    for the problem in this eval. With ``warm``, tier 2 takes its sides ready-made."""
    references = ReferencePool()
    records = [
        score_attempt(problem, index, sample, settings, cache_dir, use_cache, references=references, warm=warm)
        for index, sample in enumerate(answers)
    ]
    return row_of(problem.id, records), records


def score_attempt(
    problem: Problem,
    index: int,
    sample: Answer,
    settings: VerifySettings,
    cache_dir: Path | None,
    use_cache: bool,
    repair_of: SampleRecord | None = None,
    references: ReferencePool | None = None,
    warm: WarmSides | None = None,
) -> SampleRecord:
    """``sample`` verified as attempt ``index`` of ``problem`` (a repair of ``repair_of`` when given),
    on the reference runs of ``references`` when given (the problem's other attempts'), on tier-2
    sides from ``warm`` when given. ``VerifierBroken`` when tier 2 cannot run on this machine."""
    result = verify(problem.code, sample.answer, settings, cache_dir, use_cache, references, warm=warm)
    stop_if_broken(result)  # a verifier that cannot run tier 2 stops the eval, not every sample after
    return SampleRecord(
        problem_id=problem.id,
        index=index,
        greedy=sample.greedy,
        answer=sample.answer,
        prompt_tokens=sample.prompt_tokens,
        completion_tokens=sample.completion_tokens,
        finish_reason=sample.finish_reason,
        result=result,
        round=0 if repair_of is None else repair_of.round + 1,
        repair_of=None if repair_of is None else repair_of.index,
    )


def row_of(problem_id: str, records: list[SampleRecord], repair_rounds: int = 0) -> ProblemRow:
    """A problem's row from its attempts: the plain counts over the drawn samples (round 0) and,
    with ``repair_rounds``, the counts over each drawn sample's chain of repairs."""
    drawn = [r for r in records if r.round == 0]
    greedy = next((r for r in drawn if r.greedy), None)
    row = problem_row(problem_id, [r.result for r in drawn if not r.greedy], None if greedy is None else greedy.result)
    if not repair_rounds:
        return row
    chains = {r.index: [r] for r in drawn}
    for record in records:  # a repair comes after the attempt it repairs
        if record.repair_of is not None:
            chains[record.index] = chains.pop(record.repair_of) + [record]
    sampled = [[r.result for r in chain] for chain in chains.values() if not chain[0].greedy]
    greedy_chain = next(([r.result for r in chain] for chain in chains.values() if chain[0].greedy), None)
    return row.model_copy(update={"repaired": repaired_counts(repair_rounds, sampled, greedy_chain)})


def repair_candidates(records: list[SampleRecord], round_: int) -> list[SampleRecord]:
    """The attempts that round ``round_`` repairs: those of round ``round_ - 1`` that failed in a
    repairable way (the rule ``/v1/generate`` uses), in record order."""
    from cuset_core.generation.prompts import repairable

    return [r for r in records if r.round == round_ - 1 and repairable(r.result)]


def repair_answers(
    decode: Decode,
    config: EvalConfig,
    problems: dict[str, Problem],
    attempts: list[SampleRecord],
    round_: int,
    progress: bool = False,
) -> list[Answer]:
    """One repair per attempt, in ``attempts``' order: the follow-up turn showing the attempt and
    its verifier error, decoded like its drawn sample (greedy, or at the i.i.d. temperature, seed
    ``seed + round_``), ``batch_size`` at a time, greedy attempts first. ``problems`` by id."""
    from cuset_core.generation.prompts import build_messages, repair_messages

    answers: dict[int, Answer] = {}
    for greedy in (True, False):
        todo = [(i, r) for i, r in enumerate(attempts) if r.greedy is greedy]
        batches = [todo[i : i + config.batch_size] for i in range(0, len(todo), config.batch_size)]
        for batch in tqdm(batches, desc=f"repair {round_}", unit="batch", disable=not progress):
            conversations = [
                repair_messages(build_messages(problems[r.problem_id].code, config.style), r.answer, r.result)
                for _, r in batch
            ]
            replies = decode(conversations, repair_run(config, greedy=greedy), config.seed + round_)
            answers |= {i: reply[0] for (i, _), reply in zip(batch, replies)}
    return [answers[i] for i in range(len(attempts))]


def score_repairs(
    problem: Problem,
    records: list[SampleRecord],
    repairs: list[tuple[int, Answer]],
    settings: VerifySettings,
    cache_dir: Path | None,
    use_cache: bool,
) -> None:
    """Verify each ``(index, answer)`` of ``repairs`` as the repair of attempt ``index`` of
    ``records`` (one problem's attempts), on one shared reference run, and append it there."""
    references = ReferencePool()
    for index, answer in repairs:
        repaired = records[index]
        records.append(
            score_attempt(problem, len(records), answer, settings, cache_dir, use_cache, repaired, references)
        )


def repair(
    decode: Decode,
    config: EvalConfig,
    problems: list[Problem],
    records: dict[str, list[SampleRecord]],
    settings: VerifySettings,
    progress: bool = False,
) -> None:
    """Append up to ``config.repair_rounds`` rounds of repairs to ``records`` (per problem id):
    in round r every attempt of round r - 1 that failed in a repairable way is sent back to the
    model (:func:`repair_answers`) and its repair verified."""
    by_id = {p.id: p for p in problems}
    for round_ in range(1, config.repair_rounds + 1):
        failed = [r for p in problems for r in repair_candidates(records[p.id], round_)]
        answers = repair_answers(decode, config, by_id, failed, round_, progress)
        for problem in problems:
            own = [(a.index, answer) for a, answer in zip(failed, answers) if a.problem_id == problem.id]
            score_repairs(problem, records[problem.id], own, settings, config.cache_dir, config.cache)
