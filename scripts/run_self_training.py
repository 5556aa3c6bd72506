"""Issue 27's experiment: verified self-training from the elementwise comparison's seed-0 runs.

    nice -n 19 .venv/bin/python scripts/run_self_training.py run      # every stage not done yet (resumes)
    .venv/bin/python scripts/run_self_training.py save                 # finished stages (and the
                                                                       # unfinished one's checkpoint) into experiments/
    .venv/bin/python scripts/run_self_training.py report               # experiments/self_training/report.md
    .venv/bin/python scripts/run_self_training.py reverify             # do the evaluations' passes still pass?

Two arms, one per inner objective: ``sft`` and ``cuset``. Each starts from its comparison run of seed
0 (``experiments/elementwise/comparison/<arm>-s0``: the job trained again here into
``runs/self-training/<arm>-s0``, same data, seed and settings, since weights are not committed), then
runs ROUNDS rounds of ``python -m cuset_core.improve`` over the committed pool of 96 elementwise
problems (``pool.jsonl``): K=SAMPLES answers per problem at T 0.8, verified at tier cpu, at most 2
kept per problem, and every round tunes the base model afresh on the family's training data plus
everything kept so far, with the arm's objective and the comparison's settings (50 steps, LoRA).
A round after the first that keeps nothing new tunes nothing (the loop's rule): its model, and so
its evaluation, is the round before's.

After each round the round's adapter is evaluated with the comparison's protocol (docs/results.md):
the unseen-operation and seen-operation sets, one greedy answer and 4 answers at T 0.7 per problem,
tier cpu. Round 0 is the comparison's own evaluation of the arm's start run. The pool shares no
problem with either eval set (checked before anything runs).

Rounds alternate between the arms (round 1 of both, then round 2 of both, ...), so each session's
hours give comparable figures. Small results go to ``experiments/self_training/<arm>/round_<r>/``
(eval/results.json once the round's samples are verified, then kept_new.jsonl, round.json,
eval_unseen/, eval_seen/); so does each finished tuning, the arm's start run (``<arm>/start/``)
and each round's adapter (``<arm>/round_<r>/model/``): the adapter in float16 with its base spec
and progress log, which a later checkout restores instead of tuning it again. Each stage's CPU
seconds, summed over the sessions that worked on it, go to ``cpu_seconds.json`` beside them.

The rule for the adapter to ship was written before the first round ran: see ``SHIP_RULE``;
``report`` applies it once every arm's last round is evaluated.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import resource
import shutil
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from cuset_core.evaluation.compare import EvalRun

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run_comparison as common  # noqa: E402
import run_elementwise as elementwise  # noqa: E402

ROOT = common.ROOT
RESULTS = ROOT / "experiments" / "self_training"
RUNS = ROOT / "runs" / "self-training"
POOL = RESULTS / "pool.jsonl"
ARMS = ("cuset", "sft")
ROUNDS = 3
SAMPLES = 4
MAX_KEPT = 2
SIZE = elementwise.COMPARE
COMPARISON = elementwise.COMPARE_DIR
SETS = elementwise.EVAL_SETS  # ("unseen", "seen")
# Reported heading -> the metric's name in cuset_core.evaluation.compare.
METRICS = {
    "pass@1": "sampled:cpu_correct@1",
    "pass@4": "sampled:cpu_correct@4",
    "greedy cpu_correct@1": "greedy:cpu_correct@1",
}

# The adapter the project ships as `cuset-ew-135m` (docs/results.md): the comparison's cuset_v1 run of seed 1.
SHIPPED = COMPARISON / "cuset_v1-s1"
PASS_AT_4 = METRICS["pass@4"]
SEEN_MARGIN = 0.1

SHIP_RULE = """\
The adapter to ship, fixed before the first round ran: among the two arms' last rounds, the one with
the highest pass@4 pooled over both held-out sets; it replaces the shipped `cuset-ew-135m` only if
the paired bootstrap 95% interval of its pass@4 minus the shipped adapter's pass@4, over the
unseen-operation problems, lies wholly above 0, and its seen-operation pass@4 is not lower than the
shipped adapter's by more than 0.1. Otherwise the shipped adapter stays."""


# Issue 48, part 5: the same loop from the 0.5B comparison's start (`--model qwen2.5-coder-0.5b`),
# sized to two cores. A 135M round (96 problems x 4 answers) took 2.4 CPU-hours; the 0.5B model
# decodes about a third as many tokens per CPU second, so its K=8 over the whole pool would be ~15
# CPU-hours a round. Hence one arm (CuSeT, the method under test), K=8, a seeded quarter of the pool
# (QWEN_POOL_PROBLEMS: 192 answers, ~3.5 CPU-hours a round) and two rounds. Round 0 is the 0.5B
# comparison's cuset-s0 run, whose adapter is the start when this checkout trained it.
QWEN = "qwen2.5-coder-0.5b"
QWEN_POOL_PROBLEMS = 24


def use_regime(model: str) -> None:
    """Point every stage at ``model``'s self-training (the 0.5B one: its own folders, arms, K, pool)."""
    global RESULTS, RUNS, POOL, ARMS, ROUNDS, SAMPLES, SIZE, COMPARISON
    elementwise.use_regime(model)
    if model != QWEN:
        return
    RESULTS, RUNS = ROOT / "experiments" / "self_training_qwen05b", ROOT / "runs" / "self-training-qwen05b"
    POOL, ARMS, ROUNDS, SAMPLES = RESULTS / "pool.jsonl", ("cuset",), 2, 8
    SIZE, COMPARISON = elementwise.COMPARE, elementwise.COMPARE_DIR
    if not POOL.is_file():
        RESULTS.mkdir(parents=True, exist_ok=True)
        POOL.write_text(pool_subset((ROOT / "experiments" / "self_training" / "pool.jsonl").read_text()))


def pool_subset(pool: str) -> str:
    """QWEN_POOL_PROBLEMS of the pool's JSONL lines, a seeded draw, in the pool's order."""
    rows = pool.splitlines(keepends=True)
    drawn = set(random.Random(0).sample(range(len(rows)), QWEN_POOL_PROBLEMS))
    return "".join(row for index, row in enumerate(rows) if index in drawn)


def start_from_comparison(arm: str, start: Path) -> None:
    """Take the comparison's own run of ``arm`` seed 0 as the start when this checkout has its
    weights (the same job: data, seed and settings), instead of training it again."""
    trained = COMPARISON / f"{arm}-s0"
    files = [trained / name for name in ("adapter_config.json", "adapter_model.safetensors", *ADAPTER_FILES)]
    if common.trained(start) or not common.trained(trained) or not all(path.is_file() for path in files):
        return
    start.mkdir(parents=True, exist_ok=True)
    for path in [*files, *trained.glob("cuset_base.json")]:
        shutil.copyfile(path, start / path.name)
    common.log(f"{common.rel(start)}: the comparison's {common.rel(trained)}")


def improve_config(arm: str, start: Path, rounds: int) -> dict:
    """The arm's self-training run, ``rounds`` rounds long (a longer run resumes a shorter one)."""
    job = common.job_config(SIZE, common.Run(arm, 0), SIZE.model)
    return {
        "model": common.rel(start),
        "problems": common.rel(POOL),
        "out_dir": common.rel(RUNS / arm),
        "rounds": rounds,
        "samples_per_problem": SAMPLES,
        "max_kept_per_problem": MAX_KEPT,
        "tier": "cpu",
        "train_file": common.rel(elementwise.DATA_DIR / "train.jsonl"),
        "eval_problems": common.rel(elementwise.DATA_DIR / "eval_unseen.jsonl"),
        "temperature": 0.8,
        "max_new_tokens": SIZE.max_new_tokens,
        "dtype": SIZE.eval_dtype,
        "prompt_style": "compact",
        "method": job["method"],
        "lora": job["lora"],
        "hyperparameters": job["hyperparameters"],
        "batch_size": SIZE.eval_batch_size,
        "seed": 0,
    }


def check_pool() -> None:
    """Refuse to start when a pool problem is one of either held-out set."""
    from cuset_core.improve.loop import SelfTrainingConfig, check_no_leakage

    for name in SETS:
        config = SelfTrainingConfig(
            model="unused",
            problems=str(POOL),
            out_dir=RUNS,
            eval_problems=str(elementwise.DATA_DIR / f"eval_{name}.jsonl"),
        )
        check_no_leakage(config)


# What a round leaves in experiments/ besides its evaluations, stage by stage: enough for another
# checkout to resume after it (the loop skips a sampled-and-verified stage whose results exist, and
# tunes a missing adapter again from the same data and seed). An unfinished sampling stage leaves its
# checkpoint (the answers drawn and verified so far, problem by problem), so sessions add up.
STAGE_FILES = ("eval/results.json", "kept_new.jsonl", "round.json")
CHECKPOINT = "eval/checkpoint.jsonl"


def restore(results: Path, folder: Path) -> None:
    """Put the stages of a round that another checkout finished (its committed files) back where the
    loop looks."""
    names = STAGE_FILES if (results / STAGE_FILES[0]).is_file() else (*STAGE_FILES, CHECKPOINT)
    for name in names:
        source, target = results / name, folder / name
        if source.is_file() and not target.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
            common.log(f"{common.rel(target)}: restored from {common.rel(source)}")


# A finished tuning (the start run, and each round's adapter), kept for other checkouts: its adapter
# in float16 (about 9.4 MiB, as the shipped adapter is kept) with its base spec and progress log
# (and the start run's configuration). Restored, it spares a later session the tuning (about 11-14
# minutes of two idle cores each).
ADAPTER_FILES = ("job_base.json", "progress.jsonl")


def _complete(kept: Path) -> bool:
    """Whether ``kept`` holds a whole saved tuning: its weights as well as its progress log (a
    checkout without the weights tunes the round again)."""
    return all(
        (kept / name).is_file() for name in ("adapter_model.safetensors", "adapter_config.json", "progress.jsonl")
    )


def save_adapter(run_dir: Path, kept: Path) -> None:
    """Keep the finished tuning in ``run_dir`` at ``kept`` (nothing when it has not finished, or is
    kept already)."""
    import torch

    from cuset_core.models import read_base_spec, recorded_prompt_style, write_base_spec
    from cuset_core.training.export import export_adapter

    if not common.trained(run_dir) or _complete(kept):
        return
    partial = kept.with_name(f".{kept.name}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    base = read_base_spec(run_dir)
    export_adapter(run_dir, partial, base_model=base, dtype=torch.float16)
    write_base_spec(partial, base, recorded_prompt_style(run_dir))
    for name in ADAPTER_FILES:
        if (run_dir / name).is_file():
            shutil.copyfile(run_dir / name, partial / name)
    shutil.rmtree(kept, ignore_errors=True)  # an incomplete copy (no weights) of an earlier save
    partial.replace(kept)
    common.log(f"saved {common.rel(kept)} (float16)")


def restore_adapter(kept: Path, run_dir: Path) -> None:
    """Put a tuning that another checkout finished back where the loop looks."""
    if common.trained(run_dir) or not _complete(kept):
        return
    run_dir.mkdir(parents=True, exist_ok=True)
    for path in kept.iterdir():
        shutil.copyfile(path, run_dir / path.name)
    common.log(f"{common.rel(run_dir)}: restored from {common.rel(kept)}")


def save() -> None:
    """Copy every finished stage from runs/ into experiments/ (to commit before a session ends)."""
    for arm in ARMS:
        save_adapter(RUNS / f"{arm}-s0", RESULTS / arm / "start")
        for round_ in range(1, ROUNDS + 1):
            folder, results = RUNS / arm / f"round_{round_}", RESULTS / arm / f"round_{round_}"
            save_adapter(folder / "model", results / "model")
            for name in (*STAGE_FILES, CHECKPOINT):
                if (folder / name).is_file():
                    (results / name).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(folder / name, results / name)
                    common.log(f"saved {common.rel(results / name)}")
            if (results / STAGE_FILES[0]).is_file():
                (results / CHECKPOINT).unlink(missing_ok=True)  # the stage's results hold it all


CPU_FILE = "cpu_seconds.json"


def _children_cpu_s() -> float:
    """User and system CPU seconds of every child this process has waited for (their own
    children that they waited for included)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@contextlib.contextmanager
def counted(folder: Path, stage: str) -> Iterator[None]:
    """Add the CPU seconds of the processes a stage starts to ``folder/cpu_seconds.json``'s
    ``stage`` entry, which sums them over the sessions that worked on it (a stopped stage's too)."""
    before = _children_cpu_s()
    try:
        yield
    finally:
        spent = _children_cpu_s() - before
        if spent > 0:
            file = folder / CPU_FILE
            seconds = json.loads(file.read_text()) if file.is_file() else {}
            seconds[stage] = round(seconds.get(stage, 0.0) + spent, 1)
            folder.mkdir(parents=True, exist_ok=True)
            file.write_text(json.dumps(seconds, indent=1) + "\n")


def cpu_hours(folder: Path) -> float | None:
    """The CPU hours counted in ``folder`` (:func:`counted`), None when none were."""
    file = folder / CPU_FILE
    return sum(json.loads(file.read_text()).values()) / 3600 if file.is_file() else None


def run_round(arm: str, round_: int) -> bool:
    """Round ``round_`` of ``arm`` (and what it needs first) and its evaluation; whether all finished."""
    start = RUNS / f"{arm}-s0"
    restore_adapter(RESULTS / arm / "start", start)
    start_from_comparison(arm, start)
    with counted(RESULTS / arm / "start", "tune"):
        if not common.train(SIZE, common.Run(arm, 0), start, SIZE.model, elementwise.DATA_DIR / "train.jsonl"):
            return False
    save_adapter(start, RESULTS / arm / "start")
    for earlier in range(1, round_):
        restore_adapter(RESULTS / arm / f"round_{earlier}" / "model", RUNS / arm / f"round_{earlier}" / "model")
    results = RESULTS / arm / f"round_{round_}"
    done = RUNS / arm / f"round_{round_}" / "round.json"
    restore(results, done.parent)
    if not done.is_file():
        config = RUNS / arm / f"improve-{round_}.json"
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(json.dumps(improve_config(arm, start, round_), indent=1) + "\n")
        common.log(f"{arm} round {round_}: sample, verify, keep, tune")
        with counted(results, "improve"):
            finished = common.call([sys.executable, "-m", "cuset_core.improve", common.rel(config)]) == 0
        save()  # a stopped round keeps its finished stages too
        if not finished or not done.is_file():
            return False
    tuned = json.loads(done.read_text())["tuned_model"]
    for name in SETS:
        target = results / f"eval_{name}"
        if tuned is None:
            # Nothing new was kept, so the round tuned nothing: its model is the round before's,
            # and so is the evaluation (greedy and seeded sampling give the same answers).
            if not (target / "results.json").is_file():
                shutil.copytree(round_eval(arm, round_ - 1, name).parent, target, dirs_exist_ok=True)
                common.log(f"{common.rel(target)}: the model of round {round_ - 1}, so its evaluation")
            continue
        problems = elementwise.DATA_DIR / f"eval_{name}.jsonl"
        with counted(results, f"eval_{name}"):
            if not common.evaluate(SIZE, tuned, target, problems):
                return False
    return True


def run() -> None:
    common.yield_to_other_sessions()
    if SIZE.max_steps <= 0:
        common.log("the 0.5B gate has not passed yet: the comparison's steps, and so the start, are unknown")
        return
    elementwise.ensure_data()
    check_pool()
    signal.signal(signal.SIGTERM, common.stop_children)
    signal.signal(signal.SIGINT, common.stop_children)
    for round_ in range(1, ROUNDS + 1):
        for arm in ARMS:
            if not run_round(arm, round_):
                common.log(f"{arm} round {round_}: stopped; run again to resume")
                return
    report()


class Evaluated(NamedTuple):
    """One adapter's evaluations on the two held-out sets."""

    unseen: EvalRun
    seen: EvalRun


def ship_decision(last_rounds: dict[str, Evaluated], shipped: Evaluated) -> tuple[str | None, list[str]]:
    """:data:`SHIP_RULE` applied to each arm's last round: the arm whose adapter to ship (None: the
    shipped adapter stays) and report lines that give the figures the decision rests on. Of arms
    tied on pooled pass@4, the first given is taken."""
    from cuset_core.evaluation.compare import compare_runs

    def pass_at_4(a: EvalRun, b: EvalRun):
        (found,) = [i for i in compare_runs([a], [b]).intervals if i.metric == PASS_AT_4]
        return found

    against = {
        arm: (pass_at_4(runs.unseen, shipped.unseen), pass_at_4(runs.seen, shipped.seen))
        for arm, runs in last_rounds.items()
    }
    pooled = {
        arm: (unseen.a * unseen.problems + seen.a * seen.problems) / (unseen.problems + seen.problems)
        for arm, (unseen, seen) in against.items()
    }
    best = max(pooled, key=pooled.__getitem__)
    unseen, seen = against[best]
    beats = unseen.low > 0
    keeps_seen = seen.a >= seen.b - SEEN_MARGIN
    lines = [
        "Pass@4 pooled over both held-out sets, each arm's last round: "
        + ", ".join(f"{arm} {value:.3f}" for arm, value in pooled.items())
        + f"; the highest is {best}'s.",
        f"Its unseen-operation pass@4 against the shipped adapter's: {unseen.a:.3f} vs {unseen.b:.3f}, "
        f"difference {unseen.difference:+.3f} [{unseen.low:+.3f}, {unseen.high:+.3f}] "
        f"({'wholly above 0' if beats else 'not wholly above 0'}).",
        f"Its seen-operation pass@4: {seen.a:.3f} vs {seen.b:.3f} "
        f"({'within' if keeps_seen else 'more than'} {SEEN_MARGIN} below).",
    ]
    ship = best if beats and keeps_seen else None
    lines.append(
        f"**Decision: ship {best}'s round {ROUNDS} adapter.**" if ship else "**Decision: the shipped adapter stays.**"
    )
    return ship, lines


def _ship_section() -> list[str]:
    """The report's section on the rule applied, once every arm's last round is evaluated."""
    from cuset_core.evaluation.compare import read_run

    def evaluated(unseen: Path, seen: Path) -> Evaluated | None:
        return Evaluated(read_run(unseen), read_run(seen)) if unseen.is_file() and seen.is_file() else None

    last = {arm: evaluated(*(round_eval(arm, ROUNDS, name) for name in SETS)) for arm in ARMS}
    shipped = evaluated(*(SHIPPED / f"eval_{name}" / "results.json" for name in SETS))
    lines = ["## The rule applied", ""]
    if shipped is None or any(runs is None for runs in last.values()):
        return [*lines, f"Once every arm's round {ROUNDS} is evaluated.", ""]
    _, said = ship_decision({arm: runs for arm, runs in last.items() if runs is not None}, shipped)
    return [*lines, *said, ""]


def round_eval(arm: str, round_: int, name: str) -> Path:
    if round_ == 0:
        return COMPARISON / f"{arm}-s0" / f"eval_{name}" / "results.json"
    return RESULTS / arm / f"round_{round_}" / f"eval_{name}" / "results.json"


def report() -> None:
    """report.md: per arm and round, the round's figures and each held-out set's metrics with the
    paired bootstrap interval against round 0 of the same arm; then the ship rule applied."""
    from cuset_core.evaluation.compare import compare_runs, read_run

    lines = [f"# Verified self-training from {SIZE.model}: per-round figures", "", SHIP_RULE, ""]
    for arm in ARMS:
        lines += [
            f"## {arm}",
            "",
            "| round | sampled | compiled | passed | kept (all) | problems solved | wall hours | CPU hours |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for round_ in range(1, ROUNDS + 1):
            path = RESULTS / arm / f"round_{round_}" / "round.json"
            if path.is_file():
                r = json.loads(path.read_text())
                hours = sum(r["seconds"].values()) / 3600
                cpu = cpu_hours(path.parent)
                lines.append(
                    f"| {round_} | {r['sampled']} | {r['compiled']} | {r['passed']} | {r['kept']} ({r['kept_total']}) "
                    f"| {r['problems_solved']} | {hours:.2f} | {'—' if cpu is None else f'{cpu:.2f}'} |"
                )
        lines.append("")
        for name in SETS:
            lines += [f"### {arm}, {name} operations", "", "| round | " + " | ".join(METRICS) + " |"]
            lines.append("|---|" + "---|" * len(METRICS))
            base = round_eval(arm, 0, name)
            for round_ in range(0, ROUNDS + 1):
                path = round_eval(arm, round_, name)
                if not path.is_file() or not base.is_file():
                    continue
                comparison = compare_runs([read_run(path)], [read_run(base)])
                cells = []
                for metric in METRICS.values():
                    found = [i for i in comparison.intervals if i.metric == metric]
                    if not found:
                        cells.append("—")
                    elif round_ == 0:
                        cells.append(f"{found[0].a:.3f}")
                    else:
                        i = found[0]
                        cells.append(f"{i.a:.3f} ({i.difference:+.3f} [{i.low:+.3f}, {i.high:+.3f}])")
                lines.append(f"| {round_} | " + " | ".join(cells) + " |")
            lines.append("")
    lines += [
        "Wall hours: the round's sampling, verifying and tuning (`round.json`). CPU hours: every process the "
        "driver started for the round and its evaluations, over all sessions (counted since 2026-12-06; "
        "— where not).",
        "",
        "Cells after round 0: the metric, then its difference from round 0 with the paired bootstrap 95% interval.",
    ]
    lines += ["", *_ship_section()]
    (RESULTS / "report.md").write_text("\n".join(lines) + "\n")
    common.log(f"wrote {common.rel(RESULTS / 'report.md')}")


def reverify() -> None:
    """Verify again, with today's default tier-2 settings, every answer that passed in the committed
    evaluations (round 0 and each finished round, both arms) and every answer a finished round kept
    for tuning: whether each pass still stands (the verifier changed between rounds: the device
    boundary became the default, then the torch-made check joined it)."""
    from cuset_core.evaluation.problems import load_problems
    from cuset_core.verify.result import Tier, Verdict
    from cuset_core.verify.run import verify
    from cuset_core.verify.settings import VerifySettings

    elementwise.ensure_data()
    problems = {p.id: p.code for name in SETS for p in load_problems(str(elementwise.DATA_DIR / f"eval_{name}.jsonl"))}
    problems.update((p.id, p.code) for p in load_problems(str(POOL)))
    settings = VerifySettings(tier=Tier.CPU)
    stood = checked = 0
    for arm in ARMS:
        for round_ in range(0, ROUNDS + 1):
            for what, problem_id, answer in _passed_answers(arm, round_):
                result = verify(problems[problem_id], answer, settings, use_cache=False)
                checked += 1
                stood += result.verdict is Verdict.PASS
                common.log(f"{arm} round {round_} {what} {problem_id}: {result.verdict.value}")
    common.log(f"passes that stand with today's verifier: {stood} of {checked}")


def _passed_answers(arm: str, round_: int) -> list[tuple[str, str, str]]:
    """(where, problem id, answer) of each answer of ``round_`` that passed: in its committed
    evaluations, and among the answers it kept for tuning (``kept_new.jsonl``)."""
    from cuset_core.improve.loop import read_kept

    found = []
    for name in SETS:
        path = round_eval(arm, round_, name)
        if path.is_file():
            for sample in json.loads(path.read_text())["samples"]:
                if sample["result"]["verdict"] == "pass":
                    found.append((f"eval_{name} #{sample['index']}", sample["problem_id"], sample["answer"]))
    kept = RESULTS / arm / f"round_{round_}" / "kept_new.jsonl"
    if kept.is_file():
        found += [(f"kept #{sample.index}", sample.problem_id, sample.answer) for sample in read_kept(kept)]
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stage", choices=("run", "save", "report", "reverify"))
    parser.add_argument("--model", choices=(elementwise.SIZE.model, QWEN), default=elementwise.SIZE.model)
    args = parser.parse_args()
    use_regime(args.model)
    {"run": run, "save": save, "report": report, "reverify": reverify}[args.stage]()


if __name__ == "__main__":
    main()
