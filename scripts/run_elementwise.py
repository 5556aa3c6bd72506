"""Issue 14's regime with power: the elementwise family, its gate, then the comparison.

    .venv/bin/python scripts/run_elementwise.py gate        # data, sft seed 0 to GATE_STEPS, greedy evals
    .venv/bin/python scripts/run_elementwise.py data        # only write the family's data and split.json
    .venv/bin/python scripts/run_elementwise.py compare     # the comparison at the gate's steps (resumes)
    .venv/bin/python scripts/run_elementwise.py report      # comparison/report.md from what has finished
    .venv/bin/python scripts/run_elementwise.py gate --model qwen2.5-coder-0.5b      # the 0.5B model's gate
    .venv/bin/python scripts/run_elementwise.py compare --model qwen2.5-coder-0.5b   # its comparison

A 135M model can learn a narrow template. The family is every KernelBench level-1 problem of
../shared/data whose reference is one elementwise operation, plus the demo's elementwise problems
(problem files this project wrote). Operations, not rows, are held out: a seeded draw of a third of
the KernelBench operations never reaches training, so their problems (and the demo problems of an
operation outside training) measure transfer to *unseen operations*; the demo problems whose
operation *is* trained on are new problem files of a *seen operation*, reported apart.

Training answers are compacted (``cuset_core.data.compact``: no comments, redundant includes or
build chatter; the code otherwise unchanged) and prompts are compact. The proxies of
``cuset confidence-report`` (region-token NLL, top-1 accuracy, region exact match) read the
reference answers of every held-out problem, prepared the same way (``confidence_heldout.jsonl``),
once for the base model (``comparison/base/confidence``) and once per comparison run
(``comparison/<run>/confidence``).

The gate (issue 14, part 4): train ``sft`` seed 0 (LoRA, 4 sequences per optimizer step) for
GATE_STEPS steps and evaluate greedy answers (tier cpu) of both held-out sets at GATE_EVAL_STEPS,
while training goes on. It passes when greedy compile@1 on unseen operations >= 0.2 or
cpu_correct@1 on seen operations >= 0.2, at the first evaluated step that does (training stops there:
later steps cannot change the decision). Everything is resumable: rerunning skips finished stages
and resumes training from its last checkpoint. Outputs: ``experiments/elementwise/`` (split.json,
status.json, gate.json, runs/<name>/ with job, progress and evals); data and weights go to
gitignored ``runs/elementwise-data``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import shutil
import signal
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cuset_core.data import Record
    from cuset_core.demo import DemoProblem

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run_comparison as common  # noqa: E402  (shared stage runners: train, evaluate, call, log)

ROOT = common.ROOT
OUT = ROOT / "experiments" / "elementwise"
DATA_DIR = ROOT / "runs" / "elementwise-data"
SPLIT_SEED = 0

# KernelBench level-1 problems whose reference is one elementwise operation (problem -> operation).
KERNELBENCH_OPS = {
    "5": "scale",
    "19": "relu",
    "20": "leaky_relu",
    "21": "sigmoid",
    "22": "tanh",
    "25": "swish",
    "27": "selu",
    "28": "hardsigmoid",
    "30": "softsign",
    "31": "elu",
    "32": "hardtanh",
    "88": "gelu",
}
# The demo's elementwise problems (cuset_core/demo). clamp(min, max) is hardtanh with other bounds;
# the demo's gelu is the erf form, KernelBench 88 the tanh approximation: the same operation.
DEMO_OPS = {
    "01_vector_add": "add",
    "02_relu": "relu",
    "03_gelu": "gelu",
    "04_scale_bias": "scale_bias",
    "05_clamp": "hardtanh",
    "06_sigmoid": "sigmoid",
    "07_leaky_relu": "leaky_relu",
    "08_swish": "swish",
    "09_multiply_add": "multiply_add",
    "10_softplus": "softplus",
    "11_elu": "elu",
}
HELD_OUT_SHARE = 1 / 3
CONFIDENCE_FILE = "confidence_heldout.jsonl"  # in DATA_DIR: the held-out answers the proxies read

GATE_STEPS, GATE_EVAL_STEPS = 150, (50, 100, 150)
GATE_COMPILE_UNSEEN, GATE_CORRECT_SEEN = 0.2, 0.2
SIZE = common.Size(
    "smollm2-135m",
    GATE_STEPS,
    2,
    1024,
    1e-3,
    10,
    0,
    1,
    768,
    (0, 1),
    gradient_checkpointing=False,
    eval_batch_size=8,
    save_steps=10,
    grad_accum=2,
)

# Issue 48, part 3: the same regime for Qwen2.5-Coder-0.5B-Instruct (``--model qwen2.5-coder-0.5b``;
# opt-in: `cuset install-model qwen2.5-coder-0.5b`), gate first. A model four times the size that
# already writes code: a lower learning rate than the 135M model's 1e-3, fewer steps, gradient
# checkpointing; outputs under experiments/elementwise-qwen05b/ (its own split.json, status.json,
# gate.json and runs/), the data shared with the 135M regime (runs/elementwise-data).
QWEN_GATE_STEPS, QWEN_GATE_EVAL_STEPS = 60, (20, 40, 60)
# Its evaluations generate with bfloat16 weights: on this machine's CPUs (AMX) twice float32's tokens
# per second (docs/results.md); of the gate's step-20 evaluations, the unseen set's ran in float32, before this.
QWEN_SIZE = dataclasses.replace(
    SIZE,
    model="qwen2.5-coder-0.5b",
    max_steps=QWEN_GATE_STEPS,
    learning_rate=5e-4,
    gradient_checkpointing=True,
    eval_dtype="bfloat16",
)
REGIMES = {
    SIZE.model: (SIZE, OUT, GATE_EVAL_STEPS),
    QWEN_SIZE.model: (QWEN_SIZE, ROOT / "experiments" / "elementwise-qwen05b", QWEN_GATE_EVAL_STEPS),
}


# The comparison (issue 14, part 5) at the gate's number of steps: the gate passed at its first
# evaluation, step 50, so every run trains 50 steps (its learning-rate schedule ends there too).
# Per problem: one greedy answer and 4 i.i.d. answers at temperature 0.7 (pass@1, pass@4).
COMPARE_STEPS = 50
COMPARE = dataclasses.replace(SIZE, max_steps=COMPARE_STEPS, samples=5, temperature=0.7)
COMPARE_DIR = OUT / "comparison"
RESULTS_DOC = ROOT / "docs" / "results.md"  # its `generated:<DOC_BLOCK>` block is report.md's tables
DOC_BLOCK = "elementwise"
COMPARE_METHODS = (
    common.Run("sft", 0),
    common.Run("cuset", 0),
    common.Run("dft", 0),
    common.Run("cuset_v1", 0),
    common.Run("cuset", 0, {"mask_rule": "uncertain_plain"}, "cuset-uncertain"),
)
COMPARE_RUNS = [*COMPARE_METHODS, *(dataclasses.replace(run, seed=1) for run in COMPARE_METHODS)]
EVAL_SETS = ("unseen", "seen")
# The proxies read every held-out answer untruncated (the longest is ~1,150 tokens with its prompt,
# over the training cut of 1,024); the base model's report sits beside the runs.
CONFIDENCE_MAX_TOKENS = 2048
BASE = "base"
PROXIES = ("nll", "top1_accuracy", "region_exact_match", "mean_p")

# The 0.5B comparison (issue 48, part 3): the two arms and two seeds of the rule written before its
# first run (experiments/elementwise-qwen05b/README.md), in its tie-break order. Its step count is
# the one its gate passed at (gate.json), its sampling the 135M comparison's.
QWEN_COMPARE_RUNS = [common.Run("sft", 0), common.Run("cuset", 0), common.Run("sft", 1), common.Run("cuset", 1)]


def use_regime(model: str) -> None:
    """Point the stages at ``model``'s regime (REGIMES): its size, output folder and gate steps,
    and for the 0.5B model its comparison (runs, steps from its gate, report block)."""
    global \
        SIZE, \
        OUT, \
        GATE_STEPS, \
        GATE_EVAL_STEPS, \
        COMPARE, \
        COMPARE_DIR, \
        COMPARE_STEPS, \
        COMPARE_RUNS, \
        DOC_BLOCK, \
        SHIP_SET
    SIZE, OUT, GATE_EVAL_STEPS = REGIMES[model]
    GATE_STEPS = SIZE.max_steps
    if model != QWEN_SIZE.model:
        return
    COMPARE_DIR, COMPARE_RUNS, DOC_BLOCK = OUT / "comparison", QWEN_COMPARE_RUNS, "elementwise-qwen05b"
    SHIP_SET = "unseen"
    gate_file = OUT / "gate.json"
    passed = json.loads(gate_file.read_text())["passed_at"] if gate_file.is_file() else []
    COMPARE_STEPS = min(passed) if passed else 0  # 0: compare() refuses until the gate has passed
    COMPARE = dataclasses.replace(SIZE, max_steps=COMPARE_STEPS, samples=5, temperature=0.7)


def split_ops() -> tuple[list[str], list[str]]:
    """(trained operations, held-out operations): a seeded draw of a third of KernelBench's."""
    ops = sorted(set(KERNELBENCH_OPS.values()))
    held = sorted(random.Random(SPLIT_SEED).sample(ops, round(len(ops) * HELD_OUT_SHARE)))
    return [op for op in ops if op not in held], held


def compacted(record: Record) -> Record:
    """``record`` with its answer compacted as training answers are."""
    from cuset_core.data.compact import compact_answer
    from cuset_core.data.records import Message

    answer = compact_answer(record.answer)
    return record.model_copy(update={"messages": [*record.prompt_messages, Message(role="assistant", content=answer)]})


def heldout_answers(family: list[Record], held_ops: list[str], demo: list[DemoProblem]) -> list[Record]:
    """The records the proxies read: every KernelBench record (``family``, compact prompts) of a
    held-out operation, then the solution of every demo problem of DEMO_OPS in ``demo`` (none is
    trained on, whichever eval set it belongs to) as the demo's own compact-prompt record; all
    answers compacted. A demo record's group is its problem id."""
    from cuset_core.data.records import Message, Record
    from cuset_core.demo import demo_record

    kernelbench = [r for r in family if KERNELBENCH_OPS[str(r.meta["problem"])] in held_ops]
    solutions = [
        Record(
            messages=[Message(**message) for message in demo_record(problem)["messages"]],
            line=0,
            group=problem.id,
            problem=problem.problem_code,
        )
        for problem in demo
        if problem.id in DEMO_OPS
    ]
    return [compacted(record) for record in kernelbench + solutions]


def write_data() -> dict:
    """The family's training JSONL (compacted answers), both eval problem sets, the proxies'
    held-out answers and split.json."""
    from cuset_core.data import LoadOptions, load_records
    from cuset_core.demo import demo_problems

    if not common.PARQUET.is_file():
        sys.exit(f"error: {common.PARQUET} not found (the experiment needs ../shared/data)")
    trained_ops, held_ops = split_ops()
    loaded = load_records(common.PARQUET, LoadOptions(prompt_style="compact", require_kernel=True))
    family = [
        r for r in loaded.records if str(r.meta.get("level")) == "1" and str(r.meta.get("problem")) in KERNELBENCH_OPS
    ]
    problems = demo_problems()
    demo = {problem.id: problem.problem_code for problem in problems}
    train = [compacted(record) for record in family if KERNELBENCH_OPS[str(record.meta["problem"])] in trained_ops]
    heldout = heldout_answers(family, held_ops, problems)
    references: dict[str, str] = {}
    for record in family:
        references.setdefault(str(record.meta["problem"]), record.problem)
    unseen = [
        {"id": f"L1_P{p}", "op": op, "problem": references[p]}
        for p, op in sorted(KERNELBENCH_OPS.items(), key=lambda item: int(item[0]))
        if op in held_ops
    ]
    unseen += [{"id": name, "op": op, "problem": demo[name]} for name, op in DEMO_OPS.items() if op not in trained_ops]
    seen = [{"id": name, "op": op, "problem": demo[name]} for name, op in DEMO_OPS.items() if op in trained_ops]
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    common._write_jsonl(DATA_DIR / "train.jsonl", [r.to_chat_row() for r in train])
    for name, rows in (("unseen", unseen), ("seen", seen)):
        common._write_jsonl(DATA_DIR / f"eval_{name}.jsonl", [{"id": r["id"], "problem": r["problem"]} for r in rows])
    common._write_jsonl(DATA_DIR / CONFIDENCE_FILE, [r.to_chat_row() for r in heldout])
    split = {
        "source": common.PARQUET.name,
        "family": "KernelBench level 1, one elementwise operation per reference; demo elementwise problems",
        "kernelbench_ops": KERNELBENCH_OPS,
        "demo_ops": DEMO_OPS,
        "held_out_rule": f"seeded draw (seed {SPLIT_SEED}) of {HELD_OUT_SHARE:.2f} of the KernelBench operations",
        "trained_ops": trained_ops,
        "held_out_ops": held_ops,
        "train": {
            "records": len(train),
            "problems": sorted({str(r.meta["problem"]) for r in train}, key=int),
            "answers": "compacted (cuset_core.data.compact)",
        },
        "eval_unseen": [{"id": r["id"], "op": r["op"]} for r in unseen],
        "eval_seen": [{"id": r["id"], "op": r["op"]} for r in seen],
        "confidence_heldout": {
            "file": CONFIDENCE_FILE,
            "records": len(heldout),
            "groups": dict(Counter(str(r.group) for r in heldout)),
            "rule": "every KernelBench record of a held-out operation and the solution of every demo problem "
            "(both eval sets), compact prompts, answers compacted as in training",
        },
        "prompt_style": "compact",
    }
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "split.json").write_text(json.dumps(split, indent=1) + "\n")
    return split


def ensure_data() -> dict:
    """split.json, writing the data first when a file is missing (rewritten files come out the same)."""
    files = (OUT / "split.json", DATA_DIR / "train.jsonl", DATA_DIR / CONFIDENCE_FILE)
    if not all(path.is_file() for path in files):
        split = write_data()
        common.log(
            f"data: {split['train']['records']} train records; {len(split['eval_unseen'])} unseen, "
            f"{len(split['eval_seen'])} seen eval problems; {split['confidence_heldout']['records']} held-out answers"
        )
    return json.loads((OUT / "split.json").read_text())


def snapshot(run_dir: Path, step: int) -> Path | None:
    """Copy checkpoint-<step>'s adapter to ``step-<step>/`` (checkpoints rotate); None until it exists."""
    target = run_dir / f"step-{step}"
    if (target / "adapter_config.json").is_file():
        return target
    checkpoint = run_dir / f"checkpoint-{step}"
    files = ("adapter_config.json", "adapter_model.safetensors")
    if not all((checkpoint / name).is_file() for name in files):
        return None
    from cuset_core.models import write_base_spec

    partial = run_dir / f".step-{step}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir()
    for name in files:
        shutil.copy2(checkpoint / name, partial / name)
    write_base_spec(partial, SIZE.model)
    # The step's folder may hold evaluations already (of this step trained in another checkout,
    # whose weights are not committed): the adapter joins them, its config last, which marks it whole.
    target.mkdir(exist_ok=True)
    for path in sorted(partial.iterdir(), key=lambda path: path.name == "adapter_config.json"):
        path.replace(target / path.name)
    partial.rmdir()
    return target


def metric(results: Path, name: str) -> float:
    """One metric of the greedy block of a ``cuset eval`` results.json."""
    return json.loads(results.read_text())["aggregate"]["greedy"]["metrics"][name]


def gate(args) -> None:
    split = ensure_data()
    status = OUT / "status.json"
    run = common.Run("sft", 0)
    run_dir = OUT / "runs" / run.name
    problems = {name: DATA_DIR / f"eval_{name}.jsonl" for name in ("unseen", "seen")}

    def evaluate(model: str, label: str) -> None:
        """Greedy evals of both sets: the base model's beside the runs, a step's inside its run."""
        stage = label if label == "base" else f"{run.name}/{label}"
        for name, path in problems.items():
            ok = common.evaluate(SIZE, model, run_dir.parent / stage / f"eval_{name}", path)
            common.mark(status, f"{stage}/eval_{name}", "done" if ok else "failed")

    def watch() -> None:
        """Evaluate each gate step's adapter as soon as training has saved it."""
        for step in GATE_EVAL_STEPS:
            while (model := snapshot(run_dir, step)) is None:
                if trainer.done.is_set() or common.STOPPING.is_set():
                    model = snapshot(run_dir, step)
                    break
                time.sleep(20)
            if model is None or common.STOPPING.is_set():
                return
            evaluate(common.rel(model), f"step-{step}")
            if step in gate_steps(run_dir)["passed_at"]:
                # The rule takes the first passing step: later steps cannot change the decision, and
                # at 0.5B each costs an hour of training and evaluation on two cores.
                common.log(f"gate: passed at step {step}; training stops here")
                trainer.passed_at = step
                for process in list(common.CHILDREN):
                    process.send_signal(signal.SIGINT)  # `cuset tune` checkpoints and stops
                return

    class Trainer(threading.Thread):
        def __init__(self) -> None:
            super().__init__()
            self.done = threading.Event()
            self.ok = False
            self.passed_at: int | None = None

        def run(self) -> None:
            try:
                self.ok = common.train(SIZE, run, run_dir, SIZE.model, DATA_DIR / "train.jsonl")
                passed = f"stopped at step {self.passed_at} (the gate passed)"
                state = passed if self.passed_at and not self.ok else common.stage_state(self.ok)
                common.mark(status, f"{run.name}/train", state)
            finally:
                self.done.set()

    signal.signal(signal.SIGTERM, common.stop_children)
    signal.signal(signal.SIGINT, common.stop_children)
    trainer = Trainer()
    if not gate_steps(run_dir)["passed_at"]:
        trainer.start()
        watch()
        trainer.join()
    if args.base and not common.STOPPING.is_set():
        evaluate(SIZE.model, "base")
    write_gate(split, run_dir)


def gate_steps(run_dir: Path) -> dict:
    """The greedy figures of every gate step evaluated on both sets, and the steps that pass."""
    steps = {}
    for step in GATE_EVAL_STEPS:
        unseen, seen = (run_dir / f"step-{step}" / f"eval_{n}" / "results.json" for n in ("unseen", "seen"))
        if unseen.is_file() and seen.is_file():
            steps[step] = {
                "unseen_compile@1": metric(unseen, "compile@1"),
                "unseen_cpu_correct@1": metric(unseen, "cpu_correct@1"),
                "seen_compile@1": metric(seen, "compile@1"),
                "seen_cpu_correct@1": metric(seen, "cpu_correct@1"),
            }
    passed = [
        step
        for step, f in steps.items()
        if f["unseen_compile@1"] >= GATE_COMPILE_UNSEEN or f["seen_cpu_correct@1"] >= GATE_CORRECT_SEEN
    ]
    return {"steps": steps, "passed_at": passed}


def write_gate(split: dict, run_dir: Path) -> None:
    """gate.json: the greedy figures at each evaluated step and the decision."""
    figures = gate_steps(run_dir)
    steps, passed = figures["steps"], figures["passed_at"]
    gate = {
        "rule": f"greedy compile@1 on unseen operations >= {GATE_COMPILE_UNSEEN} or cpu_correct@1 on seen "
        f"operations >= {GATE_CORRECT_SEEN}",
        "run": {
            "method": "sft",
            "seed": 0,
            "steps": GATE_STEPS,
            "sequences_per_step": SIZE.batch_size * SIZE.grad_accum,
            "learning_rate": SIZE.learning_rate,
            "lora": True,
            "train_records": split["train"]["records"],
        },
        "steps": steps,
        "passed_at": passed,
        "decision": "pass" if passed else ("fail" if len(steps) == len(GATE_EVAL_STEPS) else "incomplete"),
    }
    (OUT / "gate.json").write_text(json.dumps(gate, indent=1) + "\n")
    common.log(f"gate: {gate['decision']} {json.dumps(steps)}")


def confidence(model: str, label: str, records: int) -> bool:
    """`cuset confidence-report` of ``model`` on all ``records`` held-out answers into
    ``comparison/<label>/confidence``; skipped when its report.json exists."""
    out = COMPARE_DIR / label / "confidence"
    ok = common.confidence(COMPARE, model, out, DATA_DIR / CONFIDENCE_FILE, records, CONFIDENCE_MAX_TOKENS)
    common.mark(COMPARE_DIR / "status.json", f"{label}/confidence", "done" if ok else "failed")
    return ok


def compare() -> None:
    """The base model's proxies, then train, evaluate and measure the proxies of every comparison
    run in turn; finished stages are skipped on a rerun, and an interrupted training run resumes
    from its last checkpoint."""
    if COMPARE_STEPS == 0:
        common.log(f"compare: the gate has not passed (no {common.rel(OUT / 'gate.json')} with a passing step)")
        return
    records = ensure_data()["confidence_heldout"]["records"]
    status = COMPARE_DIR / "status.json"
    signal.signal(signal.SIGTERM, common.stop_children)
    signal.signal(signal.SIGINT, common.stop_children)
    if not confidence(COMPARE.model, BASE, records):
        return
    # A run that must train again only for a leftover stage costs a whole training run for one
    # stage's figures: new runs come first, so each session's hours buy new results.
    for run in sorted(COMPARE_RUNS, key=lambda run: weights_lost(run.name, COMPARE_DIR / run.name)):
        run_dir = COMPARE_DIR / run.name
        ensure_weights(run.name, run_dir)
        if not common.train(COMPARE, run, run_dir, COMPARE.model, DATA_DIR / "train.jsonl"):
            common.mark(status, f"{run.name}/train", common.stage_state(False))
            return
        common.mark(status, f"{run.name}/train", "done")
        for name in EVAL_SETS:
            ok = common.evaluate(
                COMPARE, common.rel(run_dir), run_dir / f"eval_{name}", DATA_DIR / f"eval_{name}.jsonl"
            )
            common.mark(status, f"{run.name}/eval_{name}", "done" if ok else "failed")
            if not ok:
                return
        if not confidence(common.rel(run_dir), run.name, records):
            return
        report()


# Finished runs whose weights the project ships: a checkout restores them from there.
SHIPPED_FROM = {"cuset_v1-s1": "cuset-ew-135m"}
WEIGHT_FILES = ("adapter_config.json", "adapter_model.safetensors")
LOST_LOG = "progress.lost-weights.jsonl"  # the first training's log, kept when a run trains again


def needs_weights(run_dir: Path) -> bool:
    """Whether a finished run has a stage left to run but not its weights: they are gitignored,
    so a new checkout has a finished run's logs and not its adapter."""
    stages = [run_dir / f"eval_{eval_set}" / "results.json" for eval_set in EVAL_SETS]
    stages.append(run_dir / "confidence" / "report.json")  # where confidence() writes it
    weights = run_dir / WEIGHT_FILES[1]
    return common.trained(run_dir) and not weights.is_file() and not all(path.is_file() for path in stages)


def weights_lost(name: str, run_dir: Path) -> bool:
    """Whether a run must train again for its leftover stages (no shipped copy of its weights)."""
    return name not in SHIPPED_FROM and needs_weights(run_dir)


def ensure_weights(name: str, run_dir: Path) -> None:
    """When a stage of a finished run still needs its missing weights: copy them from the shipped
    adapter made from this run (float16, the same weights rounded), else train the run again."""
    if not needs_weights(run_dir):
        return
    if name in SHIPPED_FROM:
        from cuset_core.adapters import shipped_adapter_dir

        for file in WEIGHT_FILES:
            shutil.copyfile(shipped_adapter_dir(SHIPPED_FROM[name]) / file, run_dir / file)
        common.log(f"{name}: weights restored from the shipped adapter {SHIPPED_FROM[name]}")
        return
    common.log(f"{name}: weights missing (trained in another checkout); training it again")
    progress = run_dir / "progress.jsonl"
    if (run_dir / LOST_LOG).is_file():  # trained again before: the first log is the evaluated one
        progress.unlink()
    else:
        progress.rename(run_dir / LOST_LOG)


def proxies(label: str) -> dict | None:
    """The overall judges of ``comparison/<label>/confidence`` (region tokens: mean NLL in nats,
    top-1 accuracy, region exact match, and mean p, the paper's finding); None until it has run."""
    path = COMPARE_DIR / label / "confidence" / "report.json"
    if not path.is_file():
        return None
    overall = json.loads(path.read_text())["judges"]["groups"]["all"]
    return {key: overall[key] for key in ("regions", "tokens", *PROXIES)}


def proxy_lines(labels: list[str]) -> list[str]:
    """report.md's proxy section: one row per label (the base model first), "not run yet" where
    its confidence stage has not finished."""
    from cuset_core.evaluation.confidence_report import FINDING_LABEL

    lines = [
        "## Proxies on the held-out answers",
        "",
        "`cuset confidence-report` on the reference answers of every held-out problem (compact prompts, "
        "compacted answers), over region tokens. Functional metrics decide; these proxies only explain. "
        f"Mean NLL (nats) is the primary proxy; mean p is {FINDING_LABEL}.",
        "",
        f"| model | regions | region tokens | mean NLL | top-1 accuracy | region exact match | mean p ({FINDING_LABEL}) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for label in labels:
        figures = proxies(label)
        if figures is None:
            lines.append(f"| {label} | not run yet |  |  |  |  |  |")
            continue
        lines.append(
            f"| {label} | {figures['regions']} | {figures['tokens']} | "
            + " | ".join("n/a" if figures[key] is None else f"{figures[key]:.3f}" for key in PROXIES)
            + " |"
        )
    return [*lines, ""]


# report.md's metric columns: (heading, name in ``results_report.metrics_of``); pass@k is
# cpu_correct@k over the i.i.d. samples.
METRIC_COLUMNS = (
    ("greedy compile@1", "greedy compile@1"),
    ("greedy cpu_correct@1", "greedy cpu_correct@1"),
    ("compile@1", "compile@1"),
    ("compile@4", "compile@4"),
    ("pass@1", "cpu_correct@1"),
    ("pass@4", "cpu_correct@4"),
)
# report.md's training columns: (progress key, heading), read from each run's last step.
TRAINING_COLUMNS = (
    ("weight_mean", "mean weight"),
    ("weight_max", "max weight"),
    ("tau_lo", "tau_lo"),
    ("dropped_grad_share", "masked share of SFT's gradient"),
)
# The plot's panels: (progress key, title).
CURVES = (
    ("ce", "plain cross-entropy"),
    ("weight_mean", "mean token weight"),
    ("dropped_grad_share", "share of SFT's gradient scale masked"),
)


def eval_figures(results: Path) -> dict:
    """One held-out set's figures from its ``cuset eval`` results.json: greedy compile@1 and
    cpu_correct@1, sampled compile@k and cpu_correct@k (pass@k), and every answer's verdicts."""
    import results_report

    data = json.loads(results.read_text())
    metrics = results_report.metrics_of(data["aggregate"])
    return {
        **{heading: metrics.get(name) for heading, name in METRIC_COLUMNS},
        "problems": len(data["problems"]),
        "verdicts": data["aggregate"].get("verdicts"),
    }


# Part 7's rule, fixed before the comparison ended: the adapter to ship is the finished run with
# the highest pass@4 over every held-out problem, then greedy cpu_correct@1, then compile@4;
# a tie left after that goes to the run listed first in COMPARE_RUNS.
BEST_RUN_KEYS = ("pass@4", "greedy cpu_correct@1", "compile@4")
SHIP_SET: str | None = None  # None: pooled over both sets; the 0.5B rule reads the unseen set alone


def pooled(row: dict, heading: str) -> float:
    """A metric over both held-out sets, each problem counted once."""
    problems = sum(row[name]["problems"] for name in EVAL_SETS)
    return sum((row[name][heading] or 0.0) * row[name]["problems"] for name in EVAL_SETS) / problems


def ship_figure(row: dict, key: str) -> float:
    """A run's figure for the ship rule: pooled over both sets, or on SHIP_SET alone."""
    return pooled(row, key) if SHIP_SET is None else row[SHIP_SET][key] or 0.0


def best_run_lines(rows: list[dict]) -> list[str]:
    """report.md's choice of the adapter to ship, by BEST_RUN_KEYS (pooled, or on SHIP_SET)."""
    if not rows:
        return []
    best = max(rows, key=lambda row: tuple(ship_figure(row, key) for key in BEST_RUN_KEYS))
    figures = ", ".join(f"{key} {ship_figure(best, key):.3f}" for key in BEST_RUN_KEYS)
    over = "over every held-out problem" if SHIP_SET is None else f"on the {SHIP_SET} operations"
    return [
        "## The adapter to ship",
        "",
        f"By the rule fixed in advance (highest {', then '.join(BEST_RUN_KEYS)}, {over}; "
        f"ties to the earlier run): **{best['run']}** ({figures}).",
        "",
    ]


def training_rows(run_dir: Path) -> list[dict]:
    """The progress rows of the training whose adapter was evaluated: the first log when the run
    was trained again for its lost weights (``ensure_weights``)."""
    import results_report

    lost = LOST_LOG if (run_dir / LOST_LOG).is_file() else "progress.jsonl"
    return results_report.progress_rows(run_dir, lost)


def training_figures(rows: list[dict]) -> dict | None:
    """A finished run's training from its ``training_rows``: wall-clock minutes, mean CE of its
    last 10 steps, and the TRAINING_COLUMNS of its last step (None where the objective does not
    log them); None without a progress log."""
    if not rows:
        return None
    last = rows[-1]
    return {
        "steps": last["step"],
        "minutes": round((last["time"] - rows[0]["time"]) / 60, 1),
        "ce_last10": sum(row["ce"] for row in rows[-10:]) / len(rows[-10:]),
        **{key: last.get(key) for key, _ in TRAINING_COLUMNS},
    }


def cell(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def verdict_lines(rows: list[dict]) -> list[str]:
    """report.md's verdict counts: every answer of a run (greedy and sampled) per held-out set,
    one column per verdict that occurs, in the order of ``Verdict``."""
    from cuset_core.verify.result import Verdict

    seen = {verdict for row in rows for name in EVAL_SETS for verdict in row[name]["verdicts"] or {}}
    columns = [verdict.value for verdict in Verdict if verdict.value in seen]
    lines = [
        "## Verdicts (greedy and sampled answers together)",
        "",
        "| run | problems | answers | " + " | ".join(columns) + " |",
        "|---|---|---:|" + "---:|" * len(columns),
    ]
    for row in rows:
        for name in EVAL_SETS:
            counts = row[name]["verdicts"] or {}
            lines.append(
                f"| {row['run']} | {name} | {sum(counts.values())} | "
                + " | ".join(str(counts.get(column, 0)) for column in columns)
                + " |"
            )
    return [*lines, ""]


def training_lines(rows: list[dict]) -> list[str]:
    lines = [
        "## Training (last step; CE averaged over the last 10 steps)",
        "",
        "| run | steps | minutes | CE | " + " | ".join(heading for _, heading in TRAINING_COLUMNS) + " |",
        "|---|---:|---:|---:|" + "---:|" * len(TRAINING_COLUMNS),
    ]
    for row in rows:
        figures = row["training"]
        if figures is None:
            lines.append(f"| {row['run']} | no progress log |  |  |" + "  |" * len(TRAINING_COLUMNS))
            continue
        lines.append(
            f"| {row['run']} | {figures['steps']} | {figures['minutes']} | {cell(figures['ce_last10'])} | "
            + " | ".join(cell(figures[key], 4) for key, _ in TRAINING_COLUMNS)
            + " |"
        )
    return [*lines, ""]


def plot_metrics(rows: list[dict], path: Path) -> None:
    """Grouped bars: one panel per held-out set, one group per run, one bar per METRIC_COLUMNS."""
    import results_report

    plt = results_report.plt
    figure, axes = plt.subplots(1, len(EVAL_SETS), figsize=(6.5 * len(EVAL_SETS), 3.8), sharey=True)
    width = 0.8 / len(METRIC_COLUMNS)
    for axis, name in zip(axes, EVAL_SETS):
        for index, (heading, _) in enumerate(METRIC_COLUMNS):
            values = [row[name][heading] or 0.0 for row in rows]
            axis.bar([i + index * width for i in range(len(rows))], values, width, label=heading)
        axis.set_xticks([i + 0.4 - width / 2 for i in range(len(rows))], [row["run"] for row in rows], fontsize=7)
        axis.set_title(f"{name} operations")
        axis.set_ylim(0, 1)
        axis.grid(axis="y", alpha=0.3)
    axes[0].legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


# The paired intervals' columns in report.md: the metric names of ``compare_runs``.
INTERVAL_COLUMNS = (
    ("greedy compile@1", "greedy:compile@1"),
    ("greedy cpu_correct@1", "greedy:cpu_correct@1"),
    ("compile@4", "sampled:compile@4"),
    ("pass@1", "sampled:cpu_correct@1"),
    ("pass@4", "sampled:cpu_correct@4"),
)
POOLED = "both"  # the two held-out sets together: every held-out problem once


def finished_evals(run: common.Run) -> dict[str, Path] | None:
    """A run's eval folders by held-out set, or None while one of them has not finished."""
    folders = {name: COMPARE_DIR / run.name / f"eval_{name}" for name in EVAL_SETS}
    return folders if all((folder / "results.json").is_file() for folder in folders.values()) else None


def read_evals(folders: dict[str, Path], eval_set: str):
    """One run's evaluation of ``eval_set``, or of every held-out problem (POOLED: the sets'
    problems are disjoint, so their rows are simply put together)."""
    from cuset_core.evaluation.compare import read_run

    if eval_set != POOLED:
        return read_run(folders[eval_set])
    parts = [read_run(folders[name]) for name in EVAL_SETS]
    rows = [row for part in parts for row in part.rows]
    tier = min((part.tier for part in parts), key=lambda tier: tier.rank)
    k_values = sorted(set.intersection(*(set(part.k_values) for part in parts)))
    return parts[0].model_copy(
        update={"name": str(folders[EVAL_SETS[0]].parent), "tier": tier, "k_values": k_values, "rows": rows}
    )


def paired_comparisons() -> list[dict]:
    """Every objective against SFT, and each objective's second seed against its first (how far
    two seeds of one objective differ: the noise floor the first kind must clear), as paired
    bootstrap 95% intervals over problems, per held-out set and on both together. An objective's
    side averages its seeds per problem, over the seeds both sides have finished."""
    from cuset_core.evaluation.compare import compare_runs

    finished: dict[str, list[dict[str, Path]]] = {}
    for run in COMPARE_RUNS:
        folders = finished_evals(run)
        if folders is not None:
            finished.setdefault(run.label or run.method, []).append(folders)
    pairs = [(label, "sft") for label in finished if label != "sft"]
    pairs += [(label, label) for label, seeds in finished.items() if len(seeds) > 1]
    comparisons = []
    for a, b in pairs:
        if b not in finished:
            continue
        if a == b:
            sides, seeds = ([finished[a][1]], [finished[a][0]]), 1
        else:
            seeds = min(len(finished[a]), len(finished[b]))
            sides = (finished[a][:seeds], finished[b][:seeds])
        for eval_set in (*EVAL_SETS, POOLED):
            result = compare_runs(*([read_evals(folders, eval_set) for folders in side] for side in sides))
            name = f"{a} s1 - s0" if a == b else f"{a} - sft"
            comparisons.append({"comparison": name, "set": eval_set, "seeds": seeds, **result.model_dump(mode="json")})
    return comparisons


def comparison_lines(comparisons: list[dict]) -> list[str]:
    """report.md's paired intervals: one row per comparison and held-out set."""
    if not comparisons:
        return []
    lines = [
        "## Paired differences (bootstrap 95% over problems)",
        "",
        "A - B, averaged over problems; an objective's side averages its seeds per problem. "
        "`X s1 - s0` compares two seeds of the same objective: differences of that size are noise. "
        f"`{POOLED}` is every held-out problem once (unseen and seen together).",
        "",
        "| A - B | problems | seeds | " + " | ".join(heading for heading, _ in INTERVAL_COLUMNS) + " |",
        "|---|---|---:|" + "---|" * len(INTERVAL_COLUMNS),
    ]
    for entry in comparisons:
        intervals = {item["metric"]: item for item in entry["intervals"]}
        cells = [
            "n/a"
            if metric not in intervals
            else f"{intervals[metric]['difference']:+.3f} [{intervals[metric]['low']:+.3f}, {intervals[metric]['high']:+.3f}]"
            for _, metric in INTERVAL_COLUMNS
        ]
        problems = next(iter(intervals.values()))["problems"] if intervals else 0
        lines.append(
            f"| {entry['comparison']} | {entry['set']} ({problems}) | {entry['seeds']} | " + " | ".join(cells) + " |"
        )
    return [*lines, ""]


def report() -> None:
    """comparison/report.{json,md} and its plots (curves.png, metrics.png): each finished run's
    figures, verdicts, training and proxies (the base model's too), and the paired intervals of
    ``paired_comparisons``."""
    import results_report

    rows, progress = [], {}
    for run in COMPARE_RUNS:
        folders = finished_evals(run)
        if folders is None:
            continue
        progress[run.name] = {"progress": training_rows(COMPARE_DIR / run.name)}
        row = {"run": run.name, **{name: eval_figures(folder / "results.json") for name, folder in folders.items()}}
        row["training"] = training_figures(progress[run.name]["progress"])
        row["proxies"] = proxies(run.name)
        rows.append(row)
    comparisons = paired_comparisons()
    table = [
        f"| {row['run']} | {name} | " + " | ".join(cell(row[name][heading]) for heading, _ in METRIC_COLUMNS) + " |"
        for row in rows
        for name in EVAL_SETS
    ]
    COMPARE_DIR.mkdir(parents=True, exist_ok=True)
    (COMPARE_DIR / "report.json").write_text(
        json.dumps(
            {"steps": COMPARE_STEPS, "base_proxies": proxies(BASE), "runs": rows, "comparisons": comparisons}, indent=1
        )
        + "\n"
    )
    plots = []
    if rows:
        order = [run.name for run in COMPARE_RUNS]
        results_report.plot_curves(progress, COMPARE_DIR / "curves.png", CURVES, order.index)
        plot_metrics(rows, COMPARE_DIR / "metrics.png")
        plots = ["![held-out metrics per run](metrics.png)", "", "![training curves per run](curves.png)", ""]
    lines = [
        f"# The elementwise comparison at {COMPARE_STEPS} steps",
        "",
        f"{len(rows)} of {len(COMPARE_RUNS)} runs finished. Greedy answers and 4 i.i.d. answers at temperature "
        f"{COMPARE.temperature} per problem, verified to tier cpu; compile@k and pass@k (cpu_correct@k) are "
        "over the sampled answers.",
        "",
        "| run | problems | " + " | ".join(heading for heading, _ in METRIC_COLUMNS) + " |",
        "|---|---|" + "---|" * len(METRIC_COLUMNS),
        *table,
        "",
        *plots,
        *verdict_lines(rows),
        *training_lines(rows),
        *best_run_lines(rows),
        *proxy_lines([BASE, *(row["run"] for row in rows)]),
    ]
    lines.extend(comparison_lines(comparisons))
    (COMPARE_DIR / "report.md").write_text("\n".join(lines))
    common.log(f"report: {len(rows)} runs; {COMPARE_DIR / 'report.md'}")
    if RESULTS_DOC.is_file() and f"<!-- generated:{DOC_BLOCK}:begin -->" in RESULTS_DOC.read_text():
        results_report.insert(RESULTS_DOC, DOC_BLOCK, "\n".join(doc_block(lines[2:])))


def doc_block(lines: list[str]) -> list[str]:
    """report.md's body as docs/results.md shows it: under that page's comparison heading (two
    levels down), its plots addressed from docs/."""
    relative = os.path.relpath(COMPARE_DIR, RESULTS_DOC.parent) + "/"
    shown = ["<!-- generated by scripts/run_elementwise.py report; do not edit by hand -->", ""]
    for line in lines:
        if line.startswith("## "):
            line = "##" + line
        elif line.startswith("!["):
            line = line.replace("](", "](" + relative, 1)
        shown.append(line)
    return shown


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stage", choices=("data", "gate", "compare", "report"))
    parser.add_argument(
        "--no-base",
        dest="base",
        action="store_false",
        help="skip the untuned base model's evaluation (after the gate's)",
    )
    parser.add_argument("--model", choices=tuple(REGIMES), default=SIZE.model, help="whose regime")
    args = parser.parse_args()
    use_regime(args.model)
    if args.stage == "data":
        print(json.dumps(write_data(), indent=1))
        return
    if args.stage == "compare":
        compare()
        return
    if args.stage == "report":
        report()
        return
    gate(args)


if __name__ == "__main__":
    main()
