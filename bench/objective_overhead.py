"""Overhead of the CuSeT objective over plain SFT: one training step, same model, same batches.

Usage: python bench/objective_overhead.py [--tiny] [--seq-len 512] [--batch 2] [--reps 4]

One run prints ONE JSON line:
- time: one process holds the model and alternates full training steps (forward,
  ``per_token_loss``, ``compute_objective``, backward, AdamW step on LoRA adapters of rank 16
  on every linear projection) with ``sft`` and ``cuset`` (online confidence), swapping the
  order every repetition; ``time_ratio`` = median cuset step / median sft step.
- memory: each method runs in a fresh child process with the same model and batches; after a
  warm-up step the child resets the kernel's resident-set high-water mark
  (``/proc/self/clear_refs``), runs steps and reads ``VmHWM``. ``memory_ratio`` compares the
  peak growth over the post-warm-up baseline (the training step's own memory); the ratio of
  absolute peaks is reported too. Children use a fixed glibc mmap threshold so large tensors
  are returned to the OS when freed and RSS follows live memory.

Both methods go through the same ``per_token_loss`` + ``compute_objective`` path, so the
figures isolate the objective. Sensitivity here is a stand-in (a regex over CUDA identifiers,
one region per line): the overhead depends on the masks' sizes, not on how they were found.
Targets (issue 2): time_ratio <= 1.05 and memory_ratio <= 1.05 on this CPU with SmolLM2-135M.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import re
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cuset_core.models import BUNDLED_MODEL, load_model, load_tokenizer, tiny_model  # noqa: E402
from cuset_core.objectives import (  # noqa: E402
    IGNORE_INDEX,
    MethodConfig,
    ObjectiveBatch,
    compute_objective,
    per_token_loss,
    supervised_mask,
)

METHODS = ("sft", "cuset")
TARGET = 1.05
PROMPT_TOKENS = 64
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
# Large allocations go through mmap and are unmapped on free, so RSS tracks live tensors.
CHILD_ENV = {"MALLOC_MMAP_THRESHOLD_": "131072"}

PROMPT = "Write a CUDA kernel for the following PyTorch operation, as a load_inline extension.\n"
CUDA_ANSWER = r'''
import torch
from torch.utils.cpp_extension import load_inline

cuda_source = """
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void scale_add_kernel(const float* __restrict__ x, const float* __restrict__ y,
                                 float* __restrict__ out, float alpha, int n) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < n) {
        out[idx] = alpha * x[idx] + y[idx];
    }
}

__global__ void row_sum_kernel(const float* __restrict__ in, float* __restrict__ out, int cols) {
    extern __shared__ float partial[];
    int row = blockIdx.x;
    float acc = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        acc += in[row * cols + c];
    }
    for (int offset = warpSize / 2; offset > 0; offset /= 2) {
        acc += __shfl_down_sync(0xffffffff, acc, offset);
    }
    if ((threadIdx.x & (warpSize - 1)) == 0) {
        partial[threadIdx.x / warpSize] = acc;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        float total = 0.0f;
        for (int w = 0; w < blockDim.x / warpSize; ++w) {
            total += partial[w];
        }
        out[row] = total;
    }
}

#define TILE 16
__global__ void tiled_matmul_kernel(const float* A, const float* B, float* C, int M, int N, int K) {
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    int row = blockIdx.y * TILE + threadIdx.y;
    int col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.0f;
    for (int t = 0; t < (K + TILE - 1) / TILE; ++t) {
        int a_col = t * TILE + threadIdx.x;
        int b_row = t * TILE + threadIdx.y;
        As[threadIdx.y][threadIdx.x] = (row < M && a_col < K) ? A[row * K + a_col] : 0.0f;
        Bs[threadIdx.y][threadIdx.x] = (b_row < K && col < N) ? B[b_row * N + col] : 0.0f;
        __syncthreads();
        for (int k = 0; k < TILE; ++k) {
            acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
        }
        __syncthreads();
    }
    if (row < M && col < N) {
        C[row * N + col] = acc;
    }
}

__global__ void histogram_kernel(const int* __restrict__ values, int* __restrict__ bins, int n, int num_bins) {
    int stride = gridDim.x * blockDim.x;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        int b = values[i] % num_bins;
        atomicAdd(&bins[b], 1);
    }
}

torch::Tensor scale_add(torch::Tensor x, torch::Tensor y, double alpha) {
    TORCH_CHECK(x.is_cuda() && y.is_cuda(), "inputs must be CUDA tensors");
    TORCH_CHECK(x.numel() == y.numel(), "size mismatch");
    auto out = torch::empty_like(x);
    int n = x.numel();
    int threads = 256;
    int blocks = (n + threads - 1) / threads;
    scale_add_kernel<<<blocks, threads>>>(x.data_ptr<float>(), y.data_ptr<float>(),
                                          out.data_ptr<float>(), static_cast<float>(alpha), n);
    return out;
}

torch::Tensor row_sum(torch::Tensor in) {
    int rows = in.size(0);
    int cols = in.size(1);
    auto out = torch::empty({rows}, in.options());
    int threads = 256;
    row_sum_kernel<<<rows, threads, (threads / 32) * sizeof(float)>>>(
        in.data_ptr<float>(), out.data_ptr<float>(), cols);
    return out;
}

torch::Tensor matmul(torch::Tensor A, torch::Tensor B) {
    int M = A.size(0), K = A.size(1), N = B.size(1);
    auto C = torch::zeros({M, N}, A.options());
    dim3 block(TILE, TILE);
    dim3 grid((N + TILE - 1) / TILE, (M + TILE - 1) / TILE);
    tiled_matmul_kernel<<<grid, block>>>(A.data_ptr<float>(), B.data_ptr<float>(),
                                         C.data_ptr<float>(), M, N, K);
    return C;
}
"""

cpp_source = """
torch::Tensor scale_add(torch::Tensor x, torch::Tensor y, double alpha);
torch::Tensor row_sum(torch::Tensor in);
torch::Tensor matmul(torch::Tensor A, torch::Tensor B);
"""

ops = load_inline(name="bench_ops", cpp_sources=cpp_source, cuda_sources=cuda_source,
                  functions=["scale_add", "row_sum", "matmul"], verbose=False)


class ModelNew(torch.nn.Module):
    def __init__(self, alpha: float = 0.5):
        super().__init__()
        self.alpha = alpha

    def forward(self, a, b):
        mixed = ops.scale_add(a.contiguous(), b.contiguous(), self.alpha)
        return ops.row_sum(ops.matmul(mixed, b.t().contiguous()))
'''

SENSITIVE_PATTERN = re.compile(
    r"__global__|__shared__|__restrict__|__syncthreads|__shfl_down_sync|0xffffffff|warpSize"
    r"|threadIdx\.[xyz]|blockIdx\.[xyz]|blockDim\.[xyz]|gridDim\.[xyz]|atomicAdd|<<<.*?>>>"
    r"|dim3|data_ptr<\w+>\(\)|TORCH_CHECK|torch::Tensor|load_inline|functions=\[[^\]]*\]"
    r"|\b\w+ < [A-Za-z]\w*\b"
)


@dataclass
class Batch:
    """Model inputs and objective masks of one micro-batch, all [B, T]."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    labels: torch.Tensor
    sensitive: torch.Tensor
    region_ids: torch.Tensor


def token_stream(tokenizer) -> tuple[list[int], list[bool], list[int]]:
    """Token ids of the answer text, a sensitive flag per token and its line number as region."""
    text = CUDA_ANSWER
    encoded = tokenizer(text, return_offsets_mapping=True, add_special_tokens=False)
    spans = [m.span() for m in SENSITIVE_PATTERN.finditer(text)]
    sensitive, lines = [], []
    for start, end in encoded["offset_mapping"]:
        sensitive.append(any(s < end and start < e for s, e in spans))
        lines.append(text.count("\n", 0, start))
    return encoded["input_ids"], sensitive, lines


def build_batches(tokenizer, count: int, batch_size: int, seq_len: int) -> list[Batch]:
    """Fixed micro-batches: a ``PROMPT_TOKENS`` prompt (not supervised) then a window of the
    repeated answer; every second row is padded to three quarters of ``seq_len``. Region ids
    are unique across each micro-batch."""
    prompt = tokenizer(PROMPT * PROMPT_TOKENS, add_special_tokens=False)["input_ids"][:PROMPT_TOKENS]
    ids, flags, lines = token_stream(tokenizer)
    answer_len = seq_len - len(prompt)
    repeats = (answer_len * (count * batch_size + 1)) // len(ids) + 1
    line_count = lines[-1] + 1
    ids, flags = ids * repeats, flags * repeats
    lines = [line + copy * line_count for copy in range(repeats) for line in lines]
    pad = tokenizer.pad_token_id
    batches = []
    for b in range(count):
        rows = {name: [] for name in ("input_ids", "attention_mask", "labels", "sensitive", "region_ids")}
        for r in range(batch_size):
            start = (b * batch_size + r) * (answer_len // 2)
            valid = answer_len if r % 2 == 0 else (3 * seq_len) // 4 - len(prompt)
            padding = seq_len - len(prompt) - valid
            answer = ids[start : start + valid]
            rows["input_ids"].append(prompt + answer + [pad] * padding)
            rows["attention_mask"].append([1] * (len(prompt) + valid) + [0] * padding)
            rows["labels"].append([IGNORE_INDEX] * len(prompt) + answer + [IGNORE_INDEX] * padding)
            rows["sensitive"].append([False] * len(prompt) + flags[start : start + valid] + [False] * padding)
            region = [
                r * 100_000 + line if flag else -1
                for line, flag in zip(lines[start : start + valid], flags[start : start + valid])
            ]
            rows["region_ids"].append([-1] * len(prompt) + region + [-1] * padding)
        batches.append(
            Batch(
                input_ids=torch.tensor(rows["input_ids"]),
                attention_mask=torch.tensor(rows["attention_mask"]),
                labels=torch.tensor(rows["labels"]),
                sensitive=torch.tensor(rows["sensitive"]),
                region_ids=torch.tensor(rows["region_ids"]),
            )
        )
    return batches


def prepare(tiny: bool, seq_len: int, batch_size: int, count: int):
    """(LoRA model, AdamW optimizer, batches), seeded, identical in every process."""
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(0)
    if tiny:
        tokenizer = load_tokenizer(BUNDLED_MODEL)
        model = tiny_model(len(tokenizer))
    else:
        model, tokenizer = load_model(BUNDLED_MODEL)
    model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules=LORA_TARGETS))
    model.train()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    return model, optimizer, build_batches(tokenizer, count, batch_size, seq_len)


def train_step(model, optimizer, batch: Batch, config: MethodConfig, step: int) -> tuple[float, float]:
    """One full optimizer step; returns (step seconds, compute_objective seconds)."""
    start = time.perf_counter()
    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
    token_loss = per_token_loss(logits, batch.labels)
    objective_start = time.perf_counter()
    output = compute_objective(
        config,
        ObjectiveBatch(
            token_loss=token_loss,
            supervised=supervised_mask(batch.labels),
            sensitive=batch.sensitive,
            region_ids=batch.region_ids,
            num_items_in_batch=None,
            step=step,
        ),
    )
    objective_s = time.perf_counter() - objective_start
    output.loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return time.perf_counter() - start, objective_s


def proc_status_kib(field: str) -> int:
    """A ``VmRSS``/``VmHWM``-style field of /proc/self/status, in KiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def release_memory() -> None:
    """Return freed heap pages to the OS so the RSS baseline is live memory only."""
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)


def memory_child(args) -> dict:
    """Peak RSS of ``args.memory_child``'s training steps, after one warm-up step (KiB)."""
    config = MethodConfig(type=args.memory_child)
    model, optimizer, batches = prepare(args.tiny, args.seq_len, args.batch, args.batches)
    train_step(model, optimizer, batches[0], config, 0)
    release_memory()
    Path("/proc/self/clear_refs").write_text("5")
    baseline = proc_status_kib("VmRSS")
    for step in range(1, args.mem_steps + 1):
        train_step(model, optimizer, batches[step % len(batches)], config, step)
    peak = proc_status_kib("VmHWM")
    return {"method": args.memory_child, "baseline_kib": baseline, "peak_kib": peak}


def measure_memory(args) -> dict[str, dict]:
    """Run each method's memory child in turn, each in a fresh process."""
    results = {}
    for method in METHODS:
        command = [sys.executable, __file__, "--memory-child", method, *forwarded_args(args)]
        done = subprocess.run(
            command, env={**os.environ, **CHILD_ENV}, capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            raise SystemExit(f"memory child for {method} failed: {done.stderr.strip().splitlines()[-1:]}")
        results[method] = json.loads(done.stdout.strip().splitlines()[-1])
    return results


def forwarded_args(args) -> list[str]:
    """The options a memory child needs to rebuild the same model and batches."""
    options = ["--seq-len", str(args.seq_len), "--batch", str(args.batch), "--batches", str(args.batches)]
    options += ["--mem-steps", str(args.mem_steps)]
    return options + (["--tiny"] if args.tiny else [])


def measure_time(args) -> dict[str, dict[str, float]]:
    """Median step and objective seconds per method, alternating methods on one model."""
    model, optimizer, batches = prepare(args.tiny, args.seq_len, args.batch, args.batches)
    configs = {method: MethodConfig(type=method) for method in METHODS}
    for method in METHODS:
        train_step(model, optimizer, batches[0], configs[method], 0)
    steps = {method: [] for method in METHODS}
    objectives = {method: [] for method in METHODS}
    for rep in range(args.reps):
        order = METHODS if rep % 2 == 0 else METHODS[::-1]
        batch = batches[rep % len(batches)]
        for method in order:
            step_s, objective_s = train_step(model, optimizer, batch, configs[method], rep + 1)
            steps[method].append(step_s)
            objectives[method].append(objective_s)
    return {
        method: {"step_s": statistics.median(steps[method]), "objective_ms": 1e3 * statistics.median(objectives[method])}
        for method in METHODS
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="config-built tiny model (smoke run)")
    parser.add_argument("--seq-len", type=int, default=512, help="tokens per sequence")
    parser.add_argument("--batch", type=int, default=2, help="sequences per micro-batch")
    parser.add_argument("--batches", type=int, default=3, help="distinct fixed micro-batches")
    parser.add_argument("--reps", type=int, default=4, help="timed steps per method")
    parser.add_argument("--mem-steps", type=int, default=2, help="steps per memory child")
    parser.add_argument("--memory-child", choices=METHODS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_child:
        print(json.dumps(memory_child(args)))
        return

    memory = measure_memory(args)
    timing = measure_time(args)
    growth = {m: memory[m]["peak_kib"] - memory[m]["baseline_kib"] for m in METHODS}
    time_ratio = timing["cuset"]["step_s"] / timing["sft"]["step_s"]
    memory_ratio = growth["cuset"] / max(growth["sft"], 1)
    result = {
        "bench": "objective_overhead",
        "model": "tiny" if args.tiny else BUNDLED_MODEL,
        "train": "LoRA r16 on all linear projections, AdamW, fp32, CPU",
        "seq_len": args.seq_len,
        "batch": args.batch,
        "reps": args.reps,
        "threads": torch.get_num_threads(),
        "sft_step_s": round(timing["sft"]["step_s"], 4),
        "cuset_step_s": round(timing["cuset"]["step_s"], 4),
        "sft_objective_ms": round(timing["sft"]["objective_ms"], 3),
        "cuset_objective_ms": round(timing["cuset"]["objective_ms"], 3),
        "time_ratio": round(time_ratio, 4),
        "sft_step_peak_growth_mib": round(growth["sft"] / 1024, 1),
        "cuset_step_peak_growth_mib": round(growth["cuset"] / 1024, 1),
        "memory_ratio": round(memory_ratio, 4),
        "peak_rss_ratio": round(memory["cuset"]["peak_kib"] / memory["sft"]["peak_kib"], 4),
        "target": TARGET,
        "pass": time_ratio <= TARGET and memory_ratio <= TARGET,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
