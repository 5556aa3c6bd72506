"""Run a model (or score given answers) over a KernelBench-format problem set: the problems
(:mod:`.problems`), the decoding (:mod:`.decoding`) and the verification and repairs
(:mod:`.scoring`) of one :class:`~.config.EvalConfig`, into an :class:`EvalReport`.

With a model, samples are generated in batches of problems: one greedy sample per problem
when ``greedy`` is on, drawn apart, and ``samples`` i.i.d. samples at ``temperature``. The model
is loaded in this process, or is any OpenAI-compatible endpoint (``openai:URL#NAME``), asked
``batch_size`` problems at a time. Every sample is verified up to ``tier`` with the run's
verification knobs (correctness trials and their input seed, tolerances, nvcc arch, the
torch.compile baseline); the greedy sample feeds the greedy metrics and the i.i.d. ones pass@k
(:mod:`.metrics`), never the other way round.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import nullcontext
from pathlib import Path

from pydantic import BaseModel
from tqdm import tqdm

from cuset_core.evaluation.checkpoint import EvalCheckpoint
from cuset_core.evaluation.config import EvalConfig
from cuset_core.evaluation.decoding import Answer, Decode, answers_for, decoder_for
from cuset_core.evaluation.inputs import EvalInputError, ProblemAnswers
from cuset_core.evaluation.metrics import Aggregate, ProblemRow, aggregate
from cuset_core.evaluation.problems import Problem, load_answers, load_problems, select_problems
from cuset_core.evaluation.scoring import SampleRecord, repair, row_of, score_problem
from cuset_core.verify.execution.tier_run import WarmSides
from cuset_core.verify.settings import VerifySettings


class EvalReport(BaseModel):
    """The whole run: config, aggregate metrics, per-problem rows and every sample."""

    config: EvalConfig
    aggregate: Aggregate
    problems: list[ProblemRow]
    samples: list[SampleRecord]
    elapsed_s: float  # wall seconds, the earlier runs' included when it resumed a checkpoint


# Told ``(stage, problems done, problems in all)`` as an eval advances: stage "sampling" after each
# batch of problems is generated, "verifying" after each problem's samples are verified.
StageProgress = Callable[[str, int, int], None]


def _unheard(stage: str, done: int, total: int) -> None:
    """The default :data:`StageProgress`: nobody listens."""


def run_eval(
    config: EvalConfig,
    *,
    progress: bool = True,
    api_key: str | None = None,
    on_progress: StageProgress = _unheard,
    checkpoint: Path | None = None,
) -> EvalReport:
    """Generate (or read) the samples, verify each, repair failing ones (``repair_rounds``), and
    compute the metrics. ``api_key`` is the bearer token of an ``openai:`` endpoint (never
    recorded in the report); ``on_progress`` hears each stage advance (a job's progress lines);
    ``checkpoint`` is a file that keeps the answers drawn and verified so far, from which a
    stopped run resumes (:mod:`.checkpoint`)."""
    start = time.perf_counter()
    every_problem = load_problems(config.problems)
    problems = select_problems(every_problem, config.problem_ids)
    if config.answers is not None:
        # Answers may cover problems the selection leaves out (a KernelBench run folder holds a whole level).
        chosen = {p.id for p in problems}
        answers = {
            pid: found
            for pid, found in load_answers(config.answers, [p.id for p in every_problem]).items()
            if pid in chosen
        }
        k_values = _answer_k_values(config, answers)
        samples = {pid: _answer_samples(a) for pid, a in answers.items()}
    else:
        k_values = config.k_values
    settings = config.verify_settings()
    saved = EvalCheckpoint(checkpoint, config) if checkpoint is not None else None
    all_drawn = saved is not None and all(p.id in saved.drawn for p in problems)
    # A resumed run that has every answer it needs does not load the model again.
    needs_model = config.model is not None and (config.repair_rounds > 0 or (config.answers is None and not all_drawn))
    with decoder_for(config, api_key) if needs_model else nullcontext() as decode:
        if config.answers is None:
            samples = _generate_samples(decode, config, problems, progress, on_progress, saved)
        records = _verify_all(problems, samples, settings, config, progress, on_progress, saved)
        if config.repair_rounds:
            if decode is None:
                raise EvalInputError("repair_rounds: repairs are asked of a model; give model")
            repair(decode, config, problems, records, settings, progress)
    rows = [row_of(p.id, records[p.id], config.repair_rounds) for p in problems]
    return EvalReport(
        config=config,
        aggregate=aggregate(rows, config.tier, k_values),
        problems=rows,
        samples=[record for p in problems for record in records[p.id]],
        elapsed_s=time.perf_counter() - start + (saved.earlier_s if saved is not None else 0.0),
    )


def _generate_samples(
    decode: Decode | None,
    config: EvalConfig,
    problems: list[Problem],
    progress: bool,
    on_progress: StageProgress,
    saved: EvalCheckpoint | None,
) -> dict[str, list[Answer]]:
    """:func:`answers_for` over the whole set, ``config.batch_size`` problems at a time; a batch
    whose problems the checkpoint holds all is not drawn again (the same batches get the same
    seeds, so what is drawn matches an unstopped run)."""
    batches = [problems[i : i + config.batch_size] for i in range(0, len(problems), config.batch_size)]
    drawn = saved.drawn if saved is not None else {}
    out: dict[str, list[Answer]] = {}
    for batch in tqdm(batches, desc="generate", unit="batch", disable=not progress):
        if all(p.id in drawn for p in batch):
            out |= {p.id: drawn[p.id] for p in batch}
        else:
            if decode is None:  # no model is loaded only when the checkpoint holds every batch
                raise RuntimeError("a batch the checkpoint lacks has no model to draw it")
            answers = answers_for(decode, config, batch)
            if saved is not None:
                saved.add_drawn(answers)
            out |= answers
        on_progress("sampling", len(out), len(problems))
    return out


def _verify_all(
    problems: list[Problem],
    samples: dict[str, list[Answer]],
    settings: VerifySettings,
    config: EvalConfig,
    progress: bool,
    on_progress: StageProgress,
    saved: EvalCheckpoint | None,
) -> dict[str, list[SampleRecord]]:
    """Every problem's samples verified, ``config.workers`` problems at a time (each verification
    runs its own sandboxed processes, so threads are enough to keep the cores busy); problems the
    checkpoint holds verified are taken from it. Tier 2 takes its sides from one
    :class:`WarmSides` (one of each kind per worker), started while the previous checks finish."""
    verified = saved.verified if saved is not None else {}
    records = {p.id: verified[p.id] for p in problems if p.id in verified}
    bar = tqdm(
        total=len(problems),
        initial=len(records),
        desc=f"verify ({config.tier.value})",
        unit="problem",
        disable=not progress,
    )
    with bar, WarmSides(per_side=config.workers) as warm, ThreadPoolExecutor(max_workers=config.workers) as pool:
        futures = {
            pool.submit(
                score_problem, problem, samples[problem.id], settings, config.cache_dir, config.cache, warm
            ): problem
            for problem in problems
            if problem.id not in records
        }
        for future in as_completed(futures):
            problem_id = futures[future].id
            records[problem_id] = future.result()[1]
            if saved is not None:
                saved.add_verified(problem_id, records[problem_id])
            bar.update()
            on_progress("verifying", len(records), len(problems))
    return records


def _answer_samples(answers: ProblemAnswers) -> list[Answer]:
    """The greedy answer first (when given), then the i.i.d. ones."""
    first = [] if answers.greedy is None else [Answer(answers.greedy, greedy=True)]
    return first + [Answer(text) for text in answers.sampled]


def _answer_k_values(config: EvalConfig, answers: dict[str, ProblemAnswers]) -> list[int]:
    """The k of pass@k over given answers: ``config.k``, or 1 and the fewest i.i.d. answers
    of a problem that has some; every such problem needs at least max(k) of them."""
    counts = {pid: len(a.sampled) for pid, a in answers.items() if a.sampled}
    if not counts:
        return []
    fewest = min(counts.values())
    k_values = sorted(set(config.k)) if config.k is not None else sorted({1, fewest})
    if k_values[-1] > fewest:
        short = min(counts, key=lambda problem: counts[problem])
        raise EvalInputError(
            f"k: pass@{k_values[-1]} needs at least {k_values[-1]} i.i.d. answers per problem; "
            f"problem {short!r} has {fewest}"
        )
    return k_values
