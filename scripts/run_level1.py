"""Issue 48, part 4: beyond elementwise. KernelBench level 1 at 0.5B: one SFT and one CuSeT run,
judged on level-1 problems they never saw.

    nice -n 19 .venv/bin/python scripts/run_level1.py run      # split, then each run: train, greedy eval (resumes)
    .venv/bin/python scripts/run_level1.py data                # only the split and its data files
    .venv/bin/python scripts/run_level1.py report              # report.md from what has finished

The data are the level-1 answers of ``../shared/data/kernelbench_sft_train.parquet`` that hold a
``__global__`` kernel (the 388 plain PyTorch rewrites are dropped), compacted as the elementwise
regime's are, with compact prompts. The twelve elementwise problems (``run_elementwise.KERNELBENCH_OPS``)
are left out altogether: their operations are the elementwise regime's seen and unseen sets, and
this regime measures what lies beyond them. Problems, never rows, are held out: a seeded draw of
HELD_OUT problems among those whose median compacted answer fits the eval's token limit (an answer
the model cannot finish writing is not a fair question); every record of every other problem is
training data.

Sized to two CPU cores: each run trains STEPS optimizer steps of 4 sequences (LoRA, the 0.5B
elementwise gate's learning rate) and is judged by one greedy answer per held-out problem at tier
cpu (`kernels` policy): compile@1 and cpu_correct@1, with a paired bootstrap interval of CuSeT - SFT
over the problems. Outputs: ``experiments/level1-qwen05b/`` (split.json, status.json, runs/<run>/
with job, progress and eval/, report.md); data files go to gitignored ``runs/level1-data``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import signal
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cuset_core.data.records import Record

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run_comparison as common  # noqa: E402
import run_elementwise as elementwise  # noqa: E402

ROOT = common.ROOT
OUT = ROOT / "experiments" / "level1-qwen05b"
DATA_DIR = ROOT / "runs" / "level1-data"
SPLIT_SEED = 0
HELD_OUT = 12  # held-out problems: two eval batches of the 0.5B model's greedy decoding
STEPS = 30  # optimizer steps of 4 sequences: about an hour of training per run on two idle cores
SIZE = dataclasses.replace(elementwise.QWEN_SIZE, max_steps=STEPS, samples=1, save_steps=10)
FIT_TOKENS = SIZE.max_new_tokens  # a held-out problem's median compacted answer fits the eval's limit
RUNS = (common.Run("sft", 0), common.Run("cuset", 0))
METRICS = ("compile@1", "cpu_correct@1")


@dataclasses.dataclass(frozen=True)
class Split:
    """Which level-1 problems train and which are held out (groups ``"1/<problem>"``)."""

    train: list[Record]
    held_out: list[str]
    median_answer_tokens: dict[str, float]  # per held-out candidate problem, compacted answers


def level1_split(records: Sequence[Record], answer_tokens: Callable[[str], int]) -> Split:
    """Hold out HELD_OUT level-1 problems (seeded) among those whose median compacted answer is at
    most FIT_TOKENS tokens (``answer_tokens`` counts them); train on every record of the others.
    Level-2 records and the elementwise regime's problems are left out. ``records`` carry compact
    prompts; the returned training records have compacted answers."""
    family = [
        elementwise.compacted(record)
        for record in records
        if record.group is not None
        and record.group.startswith("1/")
        and record.group.removeprefix("1/") not in elementwise.KERNELBENCH_OPS
    ]
    lengths: dict[str, list[int]] = {}
    for record in family:
        lengths.setdefault(str(record.group), []).append(answer_tokens(record.answer))
    medians = {group: statistics.median(values) for group, values in sorted(lengths.items())}
    fits = sorted(group for group, median in medians.items() if median <= FIT_TOKENS)
    held = sorted(random.Random(SPLIT_SEED).sample(fits, HELD_OUT))
    return Split([record for record in family if record.group not in held], held, medians)


def write_data() -> dict:
    """split.json and the data files: training records as chat rows, one problem per held-out group."""
    from cuset_core.data import LoadOptions, load_records
    from cuset_core.models import load_tokenizer

    if not common.PARQUET.is_file():
        sys.exit(f"error: {common.PARQUET} not found (this regime needs ../shared/data)")
    loaded = load_records(common.PARQUET, LoadOptions(prompt_style="compact", require_kernel=True))
    tokenizer = load_tokenizer(SIZE.model)
    split = level1_split(loaded.records, lambda text: len(tokenizer(text).input_ids))
    problems = {}
    for record in loaded.records:
        problems.setdefault(record.group, record.problem)
    summary = {
        "source": common.PARQUET.name,
        "filter": "level 1, answers containing a __global__ kernel, not the elementwise regime's 12 problems",
        "prompt_style": "compact",
        "answers": "compacted (cuset_core.data.compact)",
        "seed": SPLIT_SEED,
        "train": {"records": len(split.train), "groups": sorted({str(r.group) for r in split.train})},
        "held_out": {
            "groups": split.held_out,
            "rule": f"seeded draw of {HELD_OUT} among the problems whose median compacted answer is <= "
            f"{FIT_TOKENS} tokens ({SIZE.model}'s tokenizer)",
        },
        "median_answer_tokens": split.median_answer_tokens,
    }
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "split.json").write_text(json.dumps(summary, indent=1) + "\n")
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    (DATA_DIR / "train.jsonl").write_text("".join(json.dumps(r.to_chat_row()) + "\n" for r in split.train))
    rows = [{"id": "L1_P" + group.removeprefix("1/"), "problem": problems[group]} for group in split.held_out]
    (DATA_DIR / "eval_heldout.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return summary


def ensure_data() -> None:
    """The data files, rebuilt from the parquet when a checkout lacks them (the split is seeded)."""
    if not (DATA_DIR / "eval_heldout.jsonl").is_file() or not (OUT / "split.json").is_file():
        write_data()


def run() -> None:
    """Train and evaluate each run in turn; finished stages are skipped, training resumes."""
    ensure_data()
    status = OUT / "status.json"
    signal.signal(signal.SIGTERM, common.stop_children)
    signal.signal(signal.SIGINT, common.stop_children)
    for run_ in RUNS:
        run_dir = OUT / "runs" / run_.name
        if not common.train(SIZE, run_, run_dir, SIZE.model, DATA_DIR / "train.jsonl"):
            common.mark(status, f"{run_.name}/train", common.stage_state(False))
            return
        common.mark(status, f"{run_.name}/train", "done")
        ok = common.evaluate(SIZE, common.rel(run_dir), run_dir / "eval", DATA_DIR / "eval_heldout.jsonl")
        common.mark(status, f"{run_.name}/eval", "done" if ok else "failed")
        if not ok:
            return
        report()


def report() -> None:
    """report.md: each finished run's greedy figures, and CuSeT - SFT paired over the problems."""
    from cuset_core.evaluation.compare import compare_runs, read_run

    finished = {r.name: OUT / "runs" / r.name / "eval" for r in RUNS}
    finished = {name: folder for name, folder in finished.items() if (folder / "results.json").is_file()}
    lines = [
        f"# KernelBench level 1 beyond elementwise, {SIZE.model}, {STEPS} steps",
        "",
        f"{len(finished)} of {len(RUNS)} runs finished. One greedy answer per held-out problem "
        f"({HELD_OUT} level-1 problems never trained on), tier cpu, `kernels` policy.",
        "",
        "| run | " + " | ".join(METRICS) + " |",
        "|---|" + "---|" * len(METRICS),
    ]
    for name, folder in finished.items():
        greedy = json.loads((folder / "results.json").read_text())["aggregate"]["greedy"]["metrics"]
        lines.append(f"| {name} | " + " | ".join(f"{greedy[m]:.3f}" for m in METRICS) + " |")
    if len(finished) == len(RUNS):
        sft, cuset = (read_run(finished[f"{method}-s0"]) for method in ("sft", "cuset"))
        comparison = compare_runs([cuset], [sft])
        lines += ["", "CuSeT - SFT, paired bootstrap 95% over problems:", ""]
        lines += [f"- {i.metric}: {i.difference:+.3f} [{i.low:+.3f}, {i.high:+.3f}]" for i in comparison.intervals]
    (OUT / "report.md").write_text("\n".join(lines) + "\n")
    common.log(f"report: {len(finished)} runs; {common.rel(OUT / 'report.md')}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stage", choices=("data", "run", "report"))
    args = parser.parse_args()
    if args.stage == "data":
        print(json.dumps({k: v for k, v in write_data().items() if k != "median_answer_tokens"}, indent=1))
    elif args.stage == "run":
        run()
    else:
        report()


if __name__ == "__main__":
    main()
