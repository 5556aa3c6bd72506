"""Overhead of the CuSeT objective over plain SFT: one training step, same model, same batches.

Usage: python bench/objective_overhead.py [--tiny] [--seq-len 512] [--batch 2] [--reps 8]

One process holds the model and alternates full training steps (forward, ``per_token_loss``,
``compute_objective``, backward, AdamW step on LoRA adapters of rank 16 on every linear
projection, fp32 on the CPU) between ``sft`` and ``cuset`` (online confidence) on the same
fixed batches, swapping the order every repetition after one untimed warm-up step. It prints
ONE JSON line:
- ``time_ratio``: median cuset step / median sft step in process CPU time, which other
  processes on a shared CPU disturb far less than wall time (``wall_time_ratio`` is reported
  too); ``objective_share`` is the extra ``compute_objective`` wall time of cuset over sft as
  a share of the sft step.
- ``memory_ratio``: median peak RSS growth of a cuset step / of an sft step. Before every step
  freed memory goes back to the OS and the kernel's resident-set high-water mark is reset
  (``/proc/self/clear_refs``); growth = ``VmHWM`` after the step - ``VmRSS`` before it. A
  fixed glibc mmap threshold makes large tensors unmap on free, so RSS follows live memory.

Both methods go through the same ``per_token_loss`` + ``compute_objective`` path, so the
figures isolate the objective. Sensitivity here is a stand-in (a regex over CUDA identifiers,
one region per line): the overhead depends on the masks' sizes, not on how they were found.
Targets (issue 2): time_ratio <= 1.05 and memory_ratio <= 1.05 on this CPU with SmolLM2-135M.
Linux only (reads /proc/self).
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import re
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cuset_core.data import IGNORE_INDEX  # noqa: E402
from cuset_core.models import BUNDLED_MODEL, load_model, load_tokenizer, tiny_model  # noqa: E402
from cuset_core.objectives import MethodConfig  # noqa: E402
from cuset_core.objectives.objective import ObjectiveBatch, compute_objective  # noqa: E402
from cuset_core.objectives.token_loss import per_token_loss, supervised_mask  # noqa: E402

METHODS = ("sft", "cuset")
TARGET = 1.05
PROMPT_TOKENS = 64
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
M_MMAP_THRESHOLD = -3  # glibc mallopt parameter
MMAP_THRESHOLD_BYTES = 128 * 1024

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

__global__ void histogram_kernel(const int* __restrict__ values, int* __restrict__ bins,
                                 int n, int num_bins) {
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


FIELDS = ("input_ids", "attention_mask", "labels", "sensitive", "region_ids")


def build_row(prompt, ids, flags, lines, length: int, region_base: int, pad_id: int) -> dict[str, list]:
    """One sequence of ``length`` tokens: the prompt (not supervised), the answer tokens, then
    padding. Sensitive answer tokens get region ``region_base + line``."""
    padding = length - len(prompt) - len(ids)
    regions = [region_base + line if flag else -1 for line, flag in zip(lines, flags)]
    return {
        "input_ids": prompt + ids + [pad_id] * padding,
        "attention_mask": [1] * (len(prompt) + len(ids)) + [0] * padding,
        "labels": [IGNORE_INDEX] * len(prompt) + ids + [IGNORE_INDEX] * padding,
        "sensitive": [False] * len(prompt) + flags + [False] * padding,
        "region_ids": [-1] * len(prompt) + regions + [-1] * padding,
    }


def build_batches(tokenizer, count: int, batch_size: int, seq_len: int) -> list[Batch]:
    """Fixed micro-batches: a ``PROMPT_TOKENS`` prompt then a window of the repeated answer;
    every second row is padded after three quarters of ``seq_len``. Region ids are unique
    across each micro-batch."""
    prompt = tokenizer(PROMPT * PROMPT_TOKENS, add_special_tokens=False)["input_ids"]
    prompt = prompt[:PROMPT_TOKENS]
    ids, flags, lines = token_stream(tokenizer)
    answer_len = seq_len - len(prompt)
    repeats = (answer_len * (count * batch_size + 1)) // len(ids) + 1
    line_count = lines[-1] + 1
    ids, flags = ids * repeats, flags * repeats
    lines = [line + copy * line_count for copy in range(repeats) for line in lines]
    batches = []
    for b in range(count):
        rows = []
        for r in range(batch_size):
            start = (b * batch_size + r) * (answer_len // 2)
            end = start + (answer_len if r % 2 == 0 else (3 * seq_len) // 4 - len(prompt))
            window = (ids[start:end], flags[start:end], lines[start:end])
            rows.append(build_row(prompt, *window, seq_len, r * len(lines), tokenizer.pad_token_id))
        batches.append(Batch(**{f: torch.tensor([row[f] for row in rows]) for f in FIELDS}))
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


def train_step(model, optimizer, batch: Batch, config: MethodConfig, step: int) -> tuple[float, float, float]:
    """One full optimizer step; returns (wall s, process CPU s, compute_objective wall s)."""
    start, cpu_start = time.perf_counter(), time.process_time()
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
    return time.perf_counter() - start, time.process_time() - cpu_start, objective_s


def proc_status_kib(field: str) -> int:
    """A ``VmRSS``/``VmHWM``-style field of /proc/self/status, in KiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def fix_mmap_threshold() -> None:
    """Serve allocations above 128 KiB by mmap, unmapped on free, so RSS tracks live tensors
    (glibc otherwise raises the threshold as tensors are freed and keeps them in the heap)."""
    ctypes.CDLL("libc.so.6").mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)


def reset_peak_rss() -> int:
    """Return freed memory to the OS, reset the RSS high-water mark; the current RSS in KiB."""
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    Path("/proc/self/clear_refs").write_text("5")
    return proc_status_kib("VmRSS")


def measure(args) -> dict[str, dict[str, float]]:
    """Per method: median step wall and CPU seconds, compute_objective ms, peak growth KiB."""
    fix_mmap_threshold()
    model, optimizer, batches = prepare(args.tiny, args.seq_len, args.batch, args.batches)
    configs = {method: MethodConfig(type=method) for method in METHODS}
    train_step(model, optimizer, batches[0], configs["sft"], 0)
    names = ("step_s", "cpu_s", "objective_ms", "growth_kib")
    samples = {method: {name: [] for name in names} for method in METHODS}
    for rep in range(args.reps):
        order = METHODS if rep % 2 == 0 else METHODS[::-1]
        batch = batches[rep % len(batches)]
        for method in order:
            baseline = reset_peak_rss()
            step = train_step(model, optimizer, batch, configs[method], rep + 1)
            step_s, cpu_s, objective_s = step
            growth = proc_status_kib("VmHWM") - baseline
            for name, value in zip(names, (step_s, cpu_s, 1e3 * objective_s, growth)):
                samples[method][name].append(value)
    return {
        method: {name: statistics.median(values) for name, values in figures.items()}
        for method, figures in samples.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="config-built tiny model (smoke run)")
    parser.add_argument("--seq-len", type=int, default=512, help="tokens per sequence")
    parser.add_argument("--batch", type=int, default=2, help="sequences per micro-batch")
    parser.add_argument("--batches", type=int, default=3, help="distinct fixed micro-batches")
    parser.add_argument(
        "--reps",
        type=int,
        default=8,
        help="timed steps per method (fewer leave the ratio within this CPU's +-7%% noise)",
    )
    args = parser.parse_args()

    figures = measure(args)
    sft, cuset = figures["sft"], figures["cuset"]
    time_ratio = cuset["cpu_s"] / sft["cpu_s"]
    memory_ratio = cuset["growth_kib"] / sft["growth_kib"]
    result = {
        "bench": "objective_overhead",
        "model": "tiny" if args.tiny else BUNDLED_MODEL,
        "train": "LoRA r16 on all linear projections, AdamW, fp32, CPU",
        "seq_len": args.seq_len,
        "batch": args.batch,
        "reps": args.reps,
        "threads": torch.get_num_threads(),
        "sft_step_s": round(sft["step_s"], 3),
        "cuset_step_s": round(cuset["step_s"], 3),
        "sft_step_cpu_s": round(sft["cpu_s"], 3),
        "cuset_step_cpu_s": round(cuset["cpu_s"], 3),
        "time_ratio": round(time_ratio, 4),
        "wall_time_ratio": round(cuset["step_s"] / sft["step_s"], 4),
        "sft_objective_ms": round(sft["objective_ms"], 2),
        "cuset_objective_ms": round(cuset["objective_ms"], 2),
        "objective_share": round((cuset["objective_ms"] - sft["objective_ms"]) / (1e3 * sft["step_s"]), 5),
        "sft_step_peak_growth_mib": round(sft["growth_kib"] / 1024, 1),
        "cuset_step_peak_growth_mib": round(cuset["growth_kib"] / 1024, 1),
        "memory_ratio": round(memory_ratio, 4),
        "target": TARGET,
        "pass": time_ratio <= TARGET and memory_ratio <= TARGET,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
