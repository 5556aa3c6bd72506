"""How much slower a bigger base model is than the bundled SmolLM2-135M on this machine (issue 48):
generation tokens/s at batch 1 and batch 8, and seconds per LoRA optimizer step, measured side by
side in one run, with the ratio of each figure to the bundled model's.

Usage (from the repository root; the model must be installed: `cuset install-model qwen2.5-coder-0.5b`):

    .venv/bin/python bench/model_speed.py [--model qwen2.5-coder-0.5b] [--baseline smollm2-135m]
        [--max-new-tokens 64] [--seq-len 512] [--steps 3] [--reps 2] [--skip-training]
    .venv/bin/python bench/model_speed.py --model qwen2.5-coder-0.5b@bfloat16 \
        --baseline qwen2.5-coder-0.5b@float32     # what bfloat16 weights gain (AMX CPUs: about 2x)

A model is ``NAME[@DTYPE]``, its weights float32 unless a dtype is named.

Generation: ``cuset_core.generation.sampling.generate`` (what the service and evals run:
``model.generate`` with its KV cache, the prompt rendered with the model's own chat template),
sampling at temperature 0.7 / top-p 0.95 as evaluated, the compact prompt of one elementwise
problem, ``--max-new-tokens`` per completion; batch 1 is one completion, batch 8 is 8 completions
of the prompt decoded together (``n=8``). tokens/s counts the tokens the completions kept (each
up to its stop token) over the wall time of the call, and over its process CPU time (which moves
far less with other processes' load); each repetition times both models in turn, alternating
which goes first. Ratios are 0.5B / 135M, of the medians, for each clock.

Training: one optimizer step as ``cuset tune`` runs it with the job's defaults (LoRA rank 16 on
every projection, the chunked loss, method cuset) plus gradient checkpointing, at batch 1 and
``--seq-len`` tokens (the first eighth a prompt, CUDA-sensitive regions over a third of the
answer): the model is prepared by ``cuset_core.training.run.prepare_model``, the loss is
``CusetTrainer.compute_loss``, then backward and AdamW. Both models are held at once; one untimed
warm-up step each, then ``--steps`` timed steps per model, alternating; the median wall and CPU
seconds.

Prints the machine's load average before and after (wall figures mean something only on an
otherwise idle machine) and ONE JSON line. float32 on the CPU, ``--threads`` torch threads (default:
the cores). On a loaded machine, threads waiting for each other spin and count as CPU time, the
more so for the smaller model (more synchronisations per FLOP), which pulls CPU-time ratios
towards 1; ``--threads 1`` (OMP_NUM_THREADS=1 too) measures the work alone.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent))
sys.path.insert(0, str(BENCH))

from loss_memory import make_batch  # noqa: E402

from cuset_core.generation.prompts import build_messages  # noqa: E402
from cuset_core.generation.sampling import generate  # noqa: E402
from cuset_core.models import load_model, resolve_dtype  # noqa: E402

PROBLEM = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(x)


def get_inputs():
    return [torch.randn(16, 16384)]


def get_init_inputs():
    return []"""
BATCHES = (1, 8)


@dataclass
class Timed:
    """Wall and process CPU seconds of one call (CPU seconds move far less with a shared machine's load)."""

    wall_s: float
    cpu_s: float


def model_and_dtype(label: str) -> tuple[str, str]:
    """``NAME[@DTYPE]`` as ``(name, weights' dtype name)``: float32 unless a dtype is named."""
    name, _, dtype = label.partition("@")
    return name, dtype or "float32"


def timed(call) -> tuple[object, Timed]:
    """``call()``'s result and its :class:`Timed`."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = call()
    return result, Timed(time.perf_counter() - wall, time.process_time() - cpu)


def sample(model, tokenizer, batch: int, max_new_tokens: int, seed: int) -> tuple[int, Timed]:
    """Kept completion tokens of one ``generate`` call of ``batch`` samples, and its time."""
    messages = build_messages(PROBLEM, "compact")
    options = {"n": batch, "temperature": 0.7, "top_p": 0.95, "max_new_tokens": max_new_tokens, "seed": seed}
    samples, took = timed(lambda: generate(model, tokenizer, [messages], **options)[0])
    return sum(one.completion_tokens for one in samples), took  # type: ignore[attr-defined]


def alternating(specs: list[str], reps: int):
    """``(rep, spec)`` pairs, each repetition visiting every spec, the order reversed every other one."""
    for rep in range(reps):
        for spec in specs if rep % 2 == 0 else list(reversed(specs)):
            yield rep, spec


def generation(specs: list[str], args) -> dict[str, dict[int, dict[str, float]]]:
    """Per model and batch size: median tokens per wall second and per CPU second over repetitions."""
    loaded = {}
    for spec in specs:
        name, dtype = model_and_dtype(spec)
        loaded[spec] = load_model(name, resolve_dtype(dtype))
    for model, tokenizer in loaded.values():  # warm-up: first-call allocations, lazy imports
        sample(model.eval(), tokenizer, 1, 8, seed=0)
    runs: dict[str, dict[int, list[tuple[int, Timed]]]] = {spec: {batch: [] for batch in BATCHES} for spec in specs}
    for rep, spec in alternating(specs, args.reps):
        model, tokenizer = loaded[spec]
        for batch in BATCHES:
            runs[spec][batch].append(sample(model, tokenizer, batch, args.max_new_tokens, seed=rep))
    return {
        spec: {
            batch: {
                "wall": statistics.median(tokens / took.wall_s for tokens, took in done),
                "cpu": statistics.median(tokens / took.cpu_s for tokens, took in done),
            }
            for batch, done in by_batch.items()
        }
        for spec, by_batch in runs.items()
    }


def trainer_for(spec: str, args, folder: str):
    """``(trainer, optimizer, batch)``: a LoRA model prepared as ``cuset tune`` prepares it, with
    gradient checkpointing, its AdamW and one batch of ``args.seq_len`` tokens."""
    from transformers import TrainingArguments

    from cuset_core.objectives import MethodConfig
    from cuset_core.training.callbacks import MetricStash
    from cuset_core.training.config import Hyperparameters, TuneConfig
    from cuset_core.training.run import prepare_model
    from cuset_core.training.trainer import CusetTrainer

    name, dtype = model_and_dtype(spec)
    hp = Hyperparameters(batch_size=1, max_seq_len=args.seq_len, gradient_checkpointing=True, dtype=dtype)
    config = TuneConfig(
        model=name, train_file=Path(folder) / "unused.jsonl", output_dir=Path(folder) / spec, hyperparameters=hp
    )
    model = prepare_model(config).train()
    training = TrainingArguments(output_dir=folder, report_to="none", use_cpu=True)
    trainer = CusetTrainer(
        model=model,
        args=training,
        method=MethodConfig(type="cuset"),
        stash=MetricStash(),
        loss_chunk_size=hp.loss_chunk_size,
    )
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=hp.learning_rate)
    return trainer, optimizer, make_batch(model.get_input_embeddings().num_embeddings, args.seq_len)


def optimizer_step(trainer, optimizer, batch) -> Timed:
    """One step: the loss (method cuset, chunked), backward, AdamW; its time."""

    def step() -> None:
        trainer.compute_loss(trainer.model, batch).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return timed(step)[1]


def training(specs: list[str], args) -> dict[str, dict[str, float]]:
    """Per model: median wall and CPU seconds of an optimizer step, the models alternating after
    one untimed warm-up step each."""
    with tempfile.TemporaryDirectory(prefix="cuset-bench-") as folder:
        runners = {spec: trainer_for(spec, args, folder) for spec in specs}
        for runner in runners.values():
            optimizer_step(*runner)
        times: dict[str, list[Timed]] = {spec: [] for spec in specs}
        for _, spec in alternating(specs, args.steps):
            times[spec].append(optimizer_step(*runners[spec]))
    return {
        spec: {"wall": statistics.median(t.wall_s for t in done), "cpu": statistics.median(t.cpu_s for t in done)}
        for spec, done in times.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b", help="NAME[@DTYPE] (default dtype float32)")
    parser.add_argument(
        "--baseline",
        default="smollm2-135m",
        help="NAME[@DTYPE]: qwen2.5-coder-0.5b@float32 beside "
        "--model qwen2.5-coder-0.5b@bfloat16 measures what bfloat16 weights gain",
    )
    parser.add_argument("--max-new-tokens", type=int, default=64, help="tokens per completion")
    parser.add_argument("--seq-len", type=int, default=512, help="tokens of the training step's sequence")
    parser.add_argument("--steps", type=int, default=3, help="timed optimizer steps per model")
    parser.add_argument("--reps", type=int, default=2, help="timed generation calls per model and batch size")
    parser.add_argument("--skip-training", action="store_true")
    parser.add_argument(
        "--threads",
        type=int,
        default=os.cpu_count() or 1,
        help="torch threads (1: CPU seconds count work, not spinning)",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    load_before = os.getloadavg()[0]
    specs = [args.baseline, args.model]
    result: dict[str, object] = {
        "model": args.model,
        "baseline": args.baseline,
        "max_new_tokens": args.max_new_tokens,
        "threads": args.threads,
    }
    speed = generation(specs, args)
    for batch in BATCHES:
        result[f"tokens_per_s_b{batch}"] = {spec: round(speed[spec][batch]["wall"], 2) for spec in specs}
        result[f"tokens_per_cpu_s_b{batch}"] = {spec: round(speed[spec][batch]["cpu"], 2) for spec in specs}
        for clock in ("wall", "cpu"):
            ratio = speed[args.model][batch][clock] / speed[args.baseline][batch][clock]
            result[f"ratio_b{batch}_{clock}"] = round(ratio, 3)
    result["batch8_over_batch1_wall"] = {
        spec: round(speed[spec][8]["wall"] / speed[spec][1]["wall"], 2) for spec in specs
    }
    if not args.skip_training:
        steps = training(specs, args)
        result["seq_len"] = args.seq_len
        result["step_s"] = {spec: round(steps[spec]["wall"], 2) for spec in specs}
        result["step_cpu_s"] = {spec: round(steps[spec]["cpu"], 2) for spec in specs}
        for clock in ("wall", "cpu"):
            result[f"step_ratio_{clock}"] = round(steps[args.model][clock] / steps[args.baseline][clock], 3)
    result["load_avg_1m"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
    print(json.dumps(result))


if __name__ == "__main__":
    main()
