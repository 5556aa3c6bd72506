"""Peak memory of one training step: the loss from full [B, T, V] logits vs the chunked loss
from final hidden states (issue 12), and the CuSeT/SFT step-time ratio with the chunked loss.

Usage: python bench/loss_memory.py [--vocab 150000] [--seq-len 2048] [--hidden 64] [--reps 5]

The model is config-built (SmolLM2's Llama architecture, 2 layers, ``--hidden``, tied embeddings,
a ``--vocab`` vocabulary) with LoRA adapters of rank 16 on every linear projection, float32 on
the CPU; the batch is one sequence of ``--seq-len`` tokens, the first eighth a prompt (not
supervised), with CUDA-sensitive regions of 8 tokens over a third of the answer. A step is what
training runs: ``CusetTrainer.compute_loss`` (method cuset), backward, AdamW step.

Memory: each variant runs in a fresh subprocess, which builds the model, returns freed memory to
the OS, resets the kernel's resident-set high-water mark and runs one step; the step's peak is
``VmHWM`` after it minus ``VmRSS`` before it (bench/objective_overhead.py's method: it sees
every allocation of torch, unlike tracemalloc). ``memory_ratio`` = chunked / full (target <= 0.5);
the chunk is the default ``loss_chunk_size``. Each subprocess also reports its step's CPU time
(one step: indicative only).
Time: one process alternates cuset and sft steps with the chunked loss, swapping the order
every repetition after one untimed warm-up step each; ``time_ratio`` = the median over
repetitions of cuset step / sft step of the same repetition, in process CPU time (target <=
1.05): pairing adjacent steps cancels most of the drift of a shared CPU's load, which moves
single steps by far more than the objective costs. ``median_time_ratio`` (median cuset / median
sft) is printed too. It prints ONE JSON line. Linux only (/proc/self).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent))
sys.path.insert(0, str(BENCH))

from objective_overhead import fix_mmap_threshold, proc_status_kib, reset_peak_rss  # noqa: E402

from cuset_core.data import IGNORE_INDEX  # noqa: E402
from cuset_core.models import tiny_model  # noqa: E402
from cuset_core.objectives import MethodConfig  # noqa: E402
from cuset_core.training.config import Hyperparameters  # noqa: E402

MEMORY_TARGET, TIME_TARGET = 0.5, 1.05
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
REGION_TOKENS = 8


def make_batch(vocab: int, seq_len: int) -> dict[str, torch.Tensor]:
    """One [1, seq_len] micro-batch: prompt, then an answer whose every third region of
    ``REGION_TOKENS`` tokens is sensitive (region ids unique)."""
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(3, vocab, (1, seq_len), generator=generator)
    prompt = seq_len // 8
    labels = ids.clone()
    labels[:, :prompt] = IGNORE_INDEX
    position = torch.arange(seq_len)
    region = (position - prompt) // REGION_TOKENS
    sensitive = (position >= prompt) & (region % 3 == 0)
    return {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "labels": labels,
        "sensitive": sensitive[None],
        "region_ids": torch.where(sensitive, region, -1)[None],
    }


def make_trainer(args, chunk: int, method: str = "cuset"):
    """A CusetTrainer over a config-built LoRA model, with its AdamW optimizer."""
    from peft import LoraConfig, get_peft_model
    from transformers import TrainingArguments

    from cuset_core.training.callbacks import MetricStash
    from cuset_core.training.trainer import CusetTrainer

    model = tiny_model(args.vocab, layers=2, hidden=args.hidden)
    model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules=LORA_TARGETS)).train()
    training = TrainingArguments(output_dir=str(BENCH / "unused"), report_to="none", use_cpu=True)
    trainer = CusetTrainer(
        model=model, args=training, method=MethodConfig(type=method), stash=MetricStash(), loss_chunk_size=chunk
    )
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    return trainer, optimizer


def step(trainer, optimizer, batch: dict[str, torch.Tensor]) -> float:
    """One optimizer step; its process CPU seconds."""
    start = time.process_time()
    loss = trainer.compute_loss(trainer.model, batch)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return time.process_time() - start


def child(args) -> None:
    """Peak resident-memory growth of one step (MiB) and the process's peak, as one JSON line."""
    fix_mmap_threshold()
    trainer, optimizer = make_trainer(args, args.child_chunk)
    batch = make_batch(args.vocab, args.seq_len)
    before = reset_peak_rss()
    cpu_s = step(trainer, optimizer, batch)
    peak = proc_status_kib("VmHWM")
    print(json.dumps({"step_peak_mib": (peak - before) / 1024, "process_peak_mib": peak / 1024, "cpu_s": cpu_s}))


def peak_of(args, chunk: int) -> dict[str, float]:
    command = [
        sys.executable,
        __file__,
        "--child-chunk",
        str(chunk),
        "--vocab",
        str(args.vocab),
        "--seq-len",
        str(args.seq_len),
        "--hidden",
        str(args.hidden),
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def time_ratio(args) -> tuple[float, dict[str, float]]:
    """Median over repetitions of the cuset / sft step CPU time ratio with the chunked loss
    (the order alternating), and each method's median step time."""
    batch = make_batch(args.vocab, args.seq_len)
    runners = {method: make_trainer(args, args.chunk, method) for method in ("sft", "cuset")}
    for trainer, optimizer in runners.values():
        step(trainer, optimizer, batch)
    samples: dict[str, list[float]] = {"sft": [], "cuset": []}
    for rep in range(args.reps):
        for method in ("sft", "cuset") if rep % 2 == 0 else ("cuset", "sft"):
            samples[method].append(step(*runners[method], batch))
    medians = {method: statistics.median(values) for method, values in samples.items()}
    paired = statistics.median(cuset / sft for cuset, sft in zip(samples["cuset"], samples["sft"]))
    return paired, medians


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=int, default=150_000)
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--hidden", type=int, default=64, help="hidden size (the LM head's cost grows with it)")
    parser.add_argument(
        "--chunk", type=int, default=Hyperparameters().loss_chunk_size, help="loss_chunk_size of the chunked variant"
    )
    parser.add_argument("--reps", type=int, default=5, help="timed steps per method")
    parser.add_argument("--child-chunk", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_chunk is not None:
        child(args)
        return
    full, chunked = peak_of(args, 0), peak_of(args, args.chunk)
    ratio, medians = time_ratio(args)
    memory_ratio = chunked["step_peak_mib"] / full["step_peak_mib"]
    print(
        json.dumps(
            {
                "vocab": args.vocab,
                "seq_len": args.seq_len,
                "chunk": args.chunk,
                "full_step_peak_mib": round(full["step_peak_mib"]),
                "chunked_step_peak_mib": round(chunked["step_peak_mib"]),
                "memory_ratio": round(memory_ratio, 3),
                "process_peak_ratio": round(chunked["process_peak_mib"] / full["process_peak_mib"], 3),
                "full_step_cpu_s": round(full["cpu_s"], 2),
                "chunked_step_cpu_s": round(chunked["cpu_s"], 2),
                "sft_step_cpu_s": round(medians["sft"], 2),
                "cuset_step_cpu_s": round(medians["cuset"], 2),
                "time_ratio": round(ratio, 3),
                "median_time_ratio": round(medians["cuset"] / medians["sft"], 3),
                "targets_met": memory_ratio <= MEMORY_TARGET and ratio <= TIME_TARGET,
            }
        )
    )


if __name__ == "__main__":
    main()
