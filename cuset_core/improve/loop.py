"""The self-training rounds: sample, verify, keep, tune; resumable round by round.

Round r (folder ``round_<r>`` under ``out_dir``):

1. sample ``samples_per_problem`` answers per problem from the current model (round 1: the given
   model; later: the adapter the previous round tuned) and verify them up to ``tier``: an eval run
   (``cuset_core.evaluation``), whose results are kept in ``round_<r>/eval``;
2. keep the passing answers that are new after normalisation, at most ``max_kept_per_problem`` per
   problem over all rounds (``keep``);
3. tune the given model afresh on the original training data plus every answer kept so far
   (``round_<r>/train.jsonl``, the configured objective) into ``round_<r>/model``; a later round
   that kept nothing new does not tune (its rows are those of the model it sampled from), and the
   next round samples from that model again.

Each finished stage leaves a file (``eval/results.json``, ``trained.json``, ``round.json``), so a run
that stopped resumes at the first unfinished stage; within the sampling stage,
``eval/checkpoint.jsonl`` keeps each problem's answers as they are drawn and verified, so it resumes
problem by problem. ``kept.jsonl`` (chat rows, the problem's prompt and the kept answer) is
everything kept so far: a training file. ``report.json`` gives every round's figures and the
problems that fed it.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from cuset_core.data import LoadOptions, load_records
from cuset_core.evaluation.checkpoint import CHECKPOINT_FILE, write_whole
from cuset_core.evaluation.config import EvalConfig
from cuset_core.evaluation.metrics import passed_tier
from cuset_core.evaluation.problems import load_problems
from cuset_core.evaluation.runner import EvalReport, run_eval
from cuset_core.generation.prompts import PromptStyle, build_messages
from cuset_core.improve.keep import KeptSample, keep_passing, shared_problems
from cuset_core.models import tuning_base
from cuset_core.objectives import MethodConfig
from cuset_core.training.callbacks import ProgressWriter
from cuset_core.training.config import Hyperparameters, LoraSettings, SelfTrainingRounds, TuneConfig
from cuset_core.training.progress_lines import RoundReport
from cuset_core.training.run import run_job
from cuset_core.verify.result import Tier

KEPT_FILE = "kept.jsonl"
REPORT_FILE = "report.json"
PROGRESS_FILE = "progress.jsonl"  # where ``python -m cuset_core.improve`` writes its progress lines


class SelfTrainingError(ValueError):
    """The run cannot start or go on; the message says why."""


class SelfTrainingStopped(BaseException):
    """A stop was asked for (SIGTERM or the cancel file) while a round's tuning ran; the stages
    finished before it are kept, so the same run resumes from there.

    A ``BaseException``, as ``KeyboardInterrupt`` is: the signal handler raises it wherever the run
    is, and no ``except Exception`` on the way may take it for an error of what it interrupted (the
    verifier makes any exception while it analyses a candidate that candidate's verdict, so a stop
    during sampling was swallowed and the run went on sampling)."""


class SelfTrainingConfig(SelfTrainingRounds):
    """Everything that defines a self-training run (recorded in its report): its rounds, which
    model and problems, and the tuning every round runs."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    model: str = Field(
        description="the model round 1 samples from (a model spec); every round tunes its base model "
        "(the model itself, or the base a tuned adapter was trained on) afresh"
    )
    problems: str = Field(description="problem-only set to sample answers for (see evaluation.load_problems)")
    out_dir: Path
    train_file: Path | None = Field(None, description="the original training data, mixed into every round")
    eval_problems: str | None = Field(
        None, description="the set the tuned model will be measured on: refused when a pool problem is one of it"
    )
    prompt_style: PromptStyle = "compact"
    method: MethodConfig = Field(default_factory=MethodConfig)
    lora: LoraSettings | None = Field(default_factory=LoraSettings)
    hyperparameters: Hyperparameters = Field(default_factory=Hyperparameters)
    batch_size: int = Field(4, ge=1, description="problems per generation batch")
    workers: int = Field(1, ge=1, le=64, description="verifications at once")
    seed: int = 0


class SelfTrainingReport(BaseModel):
    config: SelfTrainingConfig
    rounds: list[RoundReport]

    @property
    def final_model(self) -> str | None:
        """The last model a round tuned (a round that kept nothing new tunes none), None if none did."""
        tuned = [r.tuned_model for r in self.rounds if r.tuned_model is not None]
        return tuned[-1] if tuned else None


# Told ``(round, stage, problems done, problems in all)`` as a round's sampling and verifying advance.
RoundStage = Callable[[int, str, int, int], None]


def _unheard(round_: int, stage: str, done: int, total: int) -> None:
    """The default :data:`RoundStage`: nobody listens."""


def check_no_leakage(config: SelfTrainingConfig) -> None:
    """Refuse a pool that shares a problem with the eval set the model will be measured on."""
    if config.eval_problems is None:
        return
    pool = {p.id: p.code for p in load_problems(config.problems)}
    evaluation = {p.id: p.code for p in load_problems(config.eval_problems)}
    shared = shared_problems(pool, evaluation)
    if shared:
        named = ", ".join(f"{pool_id} (= {eval_id})" for pool_id, eval_id in shared[:10])
        raise SelfTrainingError(
            f"problems: {len(shared)} problem(s) of the pool are in the eval set {config.eval_problems}: {named}; "
            "a model tuned on their answers would be measured on what it was trained on"
        )


def run_self_training(
    config: SelfTrainingConfig,
    *,
    progress: bool = True,
    say: Callable[[str], None] = print,
    on_round: Callable[[RoundReport], None] | None = None,
    on_stage: RoundStage = _unheard,
) -> SelfTrainingReport:
    """Run (or resume) every round; returns the report, also written to ``out_dir/report.json``.
    ``on_round`` hears each round's figures as the round finishes (not rounds done before a resume);
    ``on_stage`` hears ``(round, stage, problems done, problems in all)`` as a round's sampling
    and verifying advance.

    Raises SelfTrainingStopped when a stop is asked for during a round's tuning."""
    check_no_leakage(config)
    problems = {p.id: p.code for p in load_problems(config.problems)}
    config.out_dir.mkdir(parents=True, exist_ok=True)
    (config.out_dir / "config.json").write_text(config.model_dump_json(indent=1) + "\n")
    kept: list[KeptSample] = []
    reports: list[RoundReport] = []
    current = config.model
    for round_ in range(1, config.rounds + 1):
        folder = config.out_dir / f"round_{round_}"
        done = folder / "round.json"
        if done.is_file():
            report = RoundReport.model_validate_json(done.read_text())
            kept += read_kept(folder / "kept_new.jsonl")
            say(f"round {round_}: done before ({report.kept} kept, {report.problems_solved} problems solved)")
            if report.tuned_model is not None and not Path(report.tuned_model).is_dir():
                # Another checkout ran it (adapters are not kept with results): the same data and
                # seed tune it again, so the next round samples from it.
                say(f"round {round_}: its tuned model is missing here; tuning it again")
                (folder / "trained.json").unlink(missing_ok=True)
                _tune(config, round_, folder, kept, problems, say)
        else:
            report, new = _round(config, round_, folder, current, problems, kept, progress, say, on_stage)
            kept += new
            write_whole(done, report.model_dump_json(indent=1) + "\n")
            if on_round is not None:
                on_round(report)
        reports.append(report)
        current = report.tuned_model or current
        _write_kept(config.out_dir / KEPT_FILE, kept, problems, config.prompt_style)
    result = SelfTrainingReport(config=config, rounds=reports)
    write_whole(config.out_dir / REPORT_FILE, result.model_dump_json(indent=1) + "\n")
    return result


def _round(
    config: SelfTrainingConfig,
    round_: int,
    folder: Path,
    model: str,
    problems: dict[str, str],
    kept: list[KeptSample],
    progress: bool,
    say: Callable[[str], None],
    on_stage: RoundStage = _unheard,
) -> tuple[RoundReport, list[KeptSample]]:
    folder.mkdir(parents=True, exist_ok=True)
    source = "the start model" if model == config.model else "the last round's tuned model"
    say(f"round {round_}: sampling {config.samples_per_problem} answers for {len(problems)} problems from {source}")
    evaluation = _sample_and_verify(
        config,
        round_,
        folder / "eval",
        model,
        progress,
        lambda stage, done, total: on_stage(round_, stage, done, total),
    )
    sample_s = evaluation.elapsed_s  # with the time of earlier runs a stop cut short
    new = keep_passing(evaluation.samples, config.tier, round_, kept, config.max_kept_per_problem)
    _write_kept(folder / "kept_new.jsonl", new, problems, config.prompt_style, with_origin=True)
    every = kept + new
    clock = time.perf_counter()
    if new or model == config.model:
        tuned, tokens = _tune(config, round_, folder, every, problems, say)
    else:
        # The model sampled from was tuned by an earlier round on exactly these rows: tuning
        # again would only draw another seed of the same model.
        say(f"round {round_}: nothing new kept, so no tuning; the next round samples from {model} again")
        tuned, tokens = None, 0
    train_s = time.perf_counter() - clock
    passed = sum(passed_tier(r.result, config.tier) for r in evaluation.samples)
    report = RoundReport(
        round=round_,
        model=model,
        sampled=len(evaluation.samples),
        compiled=sum(passed_tier(r.result, Tier.COMPILE) for r in evaluation.samples),
        passed=passed,
        kept=len(new),
        kept_total=len(every),
        problems_solved=len({sample.problem_id for sample in every}),
        fed_by=sorted({sample.problem_id for sample in new}),
        trained=tuned is not None,
        tuned_model=str(tuned) if tuned is not None else None,
        trained_tokens=tokens,
        seconds={"sample_verify": round(sample_s, 3), "train": round(train_s, 3)},
    )
    say(
        f"round {round_}: {report.sampled} sampled, {report.compiled} compiled, {passed} passed, {len(new)} kept "
        f"({report.kept_total} in all, {report.problems_solved} problems solved)"
    )
    return report, new


def _sample_and_verify(
    config: SelfTrainingConfig,
    round_: int,
    folder: Path,
    model: str,
    progress: bool,
    on_progress: Callable[[str, int, int], None],
) -> EvalReport:
    results = folder / "results.json"
    if results.is_file():  # sampled and verified before the run stopped
        return EvalReport.model_validate_json(results.read_text())
    eval_config = EvalConfig(
        model=model,
        problems=config.problems,
        greedy=False,
        samples=config.samples_per_problem,
        temperature=config.temperature,
        top_p=config.top_p,
        max_new_tokens=config.max_new_tokens,
        prompt_style=config.prompt_style,
        seed=config.seed + round_,
        batch_size=config.batch_size,
        dtype=config.dtype,
        tier=config.tier,
        workers=config.workers,
    )
    checkpoint = folder / CHECKPOINT_FILE
    report = run_eval(eval_config, progress=progress, on_progress=on_progress, checkpoint=checkpoint)
    write_whole(results, report.model_dump_json() + "\n")
    checkpoint.unlink(missing_ok=True)  # results.json holds everything it did
    return report


def _tune(
    config: SelfTrainingConfig,
    round_: int,
    folder: Path,
    kept: list[KeptSample],
    problems: dict[str, str],
    say: Callable[[str], None],
) -> tuple[Path | None, int]:
    """Tune the start model's base on the original data plus ``kept``: the adapter's folder (None
    when there is nothing to tune on) and the input tokens the tuning saw."""
    marker = folder / "trained.json"
    if marker.is_file():
        done = json.loads(marker.read_text())
        return Path(done["model"]), done.get("trained_tokens", 0)
    rows = _original_rows(config) + [_chat_row(s, problems, config.prompt_style) for s in kept]
    if not rows:
        return None, 0
    say(f"round {round_}: tuning on {len(rows)} rows ({len(kept)} kept answers)")
    train_file = folder / "train.jsonl"
    # A round resumed after a stop tunes afresh: its earlier partial run left no result.
    train_file.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))
    tune = TuneConfig(
        model=tuning_base(config.model),
        train_file=train_file,
        method=config.method,
        lora=config.lora,
        hyperparameters=config.hyperparameters,
        prompt_style=config.prompt_style,
        seed=config.seed + round_,
        output_dir=folder / "model",
        save_steps=1_000_000,
    )
    # The training's progress lines go to its progress file (round_<r>/model), not the console.
    with open(os.devnull, "w") as quiet:
        outcome = run_job(tune, ProgressWriter(tune.progress_path, stream=quiet, enabled=True))
    if outcome.cancelled:
        raise SelfTrainingStopped(f"round {round_}: stopped while tuning, at step {outcome.steps}")
    write_whole(marker, json.dumps({"model": str(tune.output_dir), "trained_tokens": outcome.train_tokens}) + "\n")
    return tune.output_dir, outcome.train_tokens


def _original_rows(config: SelfTrainingConfig) -> list[dict]:
    if config.train_file is None:
        return []
    result = load_records(config.train_file, LoadOptions(prompt_style=config.prompt_style))
    if not result.records:
        raise SelfTrainingError(f"train_file: {config.train_file} holds no usable records")
    return [record.to_chat_row() for record in result.records]


def _chat_row(sample: KeptSample, problems: dict[str, str], style: PromptStyle) -> dict:
    messages = build_messages(problems[sample.problem_id], style)
    return {"messages": [*messages, {"role": "assistant", "content": sample.answer}]}


def _write_kept(
    path: Path, kept: list[KeptSample], problems: dict[str, str], style: PromptStyle, *, with_origin: bool = False
) -> None:
    """``kept`` as chat rows (a training file); ``with_origin`` adds where each came from, which the
    resume reads back."""
    lines = []
    for sample in kept:
        row = _chat_row(sample, problems, style)
        if with_origin:
            row["cuset_origin"] = {
                "problem_id": sample.problem_id,
                "round": sample.round,
                "index": sample.index,
                "fingerprint": sample.fingerprint,
            }
        lines.append(json.dumps(row, ensure_ascii=False) + "\n")
    write_whole(path, "".join(lines))


def read_kept(path: Path) -> list[KeptSample]:
    """The samples a round kept, from its ``kept_new.jsonl`` (written with their origin)."""
    kept = []
    for line in path.read_text().splitlines():
        row = json.loads(line)
        origin = row["cuset_origin"]
        answer = row["messages"][-1]["content"]
        kept.append(KeptSample(origin["problem_id"], origin["round"], origin["index"], answer, origin["fingerprint"]))
    return kept
