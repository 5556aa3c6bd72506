"""The GPU check of issue 12 (run by scripts/gpu_check.sh): a bf16 LoRA and a QLoRA CuSeT run,
generation through the worker's model cache with both adapters on one base, and tier-3 (GPU)
verification of the demo solutions. Every step is timed; the figures go to
``<out>/gpu_check.json`` and ``<out>/gpu_check.md``, and a failed step is recorded and the next
one still runs.

``--dry-run`` runs the same steps on a CPU at toy sizes (a 2-layer model, 2 steps, static
verification; QLoRA is GPU-only and reported as skipped), so the script is tested before a GPU
session spends minutes on it. Nothing is downloaded: the model is built from a config with the
SmolLM2 tokenizer found in ``--assets`` (written by ``gpu_check.sh prepare``) or in the bundled
model package.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

QLORA = {"bits": 4, "type": "nf4", "double_quant": True}


@dataclass(frozen=True)
class Size:
    """How big each step is: the model's shape and the runs' lengths."""

    hidden: int
    layers: int
    steps: int
    batch_size: int
    max_seq_len: int
    new_tokens: int
    problems: int
    tier: str


SIZES = {
    # ~0.4B parameters with SmolLM2's 49k vocabulary: big enough that bf16 and 4-bit matter.
    "gpu": Size(
        hidden=1536, layers=16, steps=20, batch_size=8, max_seq_len=1024, new_tokens=128, problems=4, tier="gpu"
    ),
    "dry-run": Size(
        hidden=64, layers=2, steps=2, batch_size=2, max_seq_len=1024, new_tokens=8, problems=2, tier="static"
    ),
}


@dataclass
class Report:
    """Figures of every step, written after each one (a run cut short still leaves them)."""

    out: Path
    figures: dict[str, Any] = field(default_factory=dict)

    def step(self, name: str, run: Callable[[], dict[str, Any]], skip: str | None = None) -> dict[str, Any]:
        started = time.perf_counter()
        if skip:
            result = {"status": "skipped", "reason": skip}
        else:
            if torch.cuda.is_available():
                torch.cuda.reset_peak_memory_stats()
            try:
                result = {"status": "ok", **run()}
            except Exception as exc:  # noqa: BLE001 - a failed step is a finding; the next one still runs
                traceback.print_exc()
                result = {"status": "failed", "error": f"{type(exc).__name__}: {exc}"}
            if torch.cuda.is_available():
                result["peak_gpu_memory_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
        result["seconds"] = round(time.perf_counter() - started, 1)
        self.figures[name] = result
        print(f"[gpu_check] {name}: {json.dumps(result)}", flush=True)
        self.write()
        return result

    def write(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / "gpu_check.json").write_text(json.dumps(self.figures, indent=2) + "\n")
        lines = ["| step | status | seconds | figures |", "| --- | --- | --- | --- |"]
        for name, result in self.figures.items():
            rest = {k: v for k, v in result.items() if k not in ("status", "seconds")}
            lines.append(
                f"| {name} | {result['status']} | {result['seconds']} | {json.dumps(rest).replace('|', '/')} |"
            )
        (self.out / "gpu_check.md").write_text("\n".join(lines) + "\n")


def environment() -> dict[str, Any]:
    import peft
    import transformers

    info: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "peft": peft.__version__,
        "cuda": torch.cuda.is_available(),
    }
    if torch.cuda.is_available():
        info |= {"gpu": torch.cuda.get_device_name(), "bf16": torch.cuda.is_bf16_supported()}
    return info


def find_tokenizer(assets: Path):
    """The SmolLM2 tokenizer: from ``assets/tokenizer`` (carried to a GPU machine), else the bundled model."""
    from transformers import AutoTokenizer

    from cuset_core.models import BUNDLED_MODEL, load_tokenizer

    folder = assets / "tokenizer"
    return AutoTokenizer.from_pretrained(folder) if folder.is_dir() else load_tokenizer(BUNDLED_MODEL)


def build_base(work: Path, size: Size, assets: Path) -> dict[str, Any]:
    """A randomly initialised SmolLM2-architecture model of ``size`` saved as a Hugging Face folder."""
    from cuset_core.models import tiny_model

    tokenizer = find_tokenizer(assets)
    model = tiny_model(len(tokenizer), layers=size.layers, hidden=size.hidden)
    model.save_pretrained(work / "base")
    tokenizer.save_pretrained(work / "base")
    return {"parameters_m": round(sum(p.numel() for p in model.parameters()) / 1e6, 1)}


def train(work: Path, size: Size, name: str, hyperparameters: dict[str, Any]) -> dict[str, Any]:
    """A CuSeT LoRA run on the demo dataset, in this process (so its peak memory is measured)."""
    from cuset_core.demo import write_demo_dataset
    from cuset_core.training.callbacks import ProgressWriter
    from cuset_core.training.config import parse_config
    from cuset_core.training.run import run_job

    data = work / "demo.jsonl"
    if not data.is_file():
        write_demo_dataset(data)
    config = parse_config({
        "model": str(work / "base"), "train_file": str(data), "output_dir": str(work / name),
        "method": {"type": "cuset"}, "save_steps": 10_000,
        "hyperparameters": {"max_steps": size.steps, "batch_size": size.batch_size,
                            "max_seq_len": size.max_seq_len, **hyperparameters},
    })  # fmt: skip
    config.validate_paths()
    started = time.perf_counter()
    with open(os.devnull, "w") as quiet:  # the figures are the output; the lines stay in progress.jsonl
        outcome = run_job(config, ProgressWriter(config.progress_path, stream=quiet))
    elapsed = time.perf_counter() - started
    progress = [json.loads(line) for line in config.progress_path.read_text().splitlines()]
    steps = [line for line in progress if line.get("type") == "progress"]
    errors = [line["message"] for line in progress if line.get("type") == "error"]
    if errors or outcome.steps != size.steps:
        raise RuntimeError(f"{name}: {outcome.steps} of {size.steps} steps; {errors}")
    return {
        "steps": outcome.steps,
        "train_tokens": outcome.train_tokens,
        "tokens_per_s": round(outcome.train_tokens / elapsed, 1),
        "first_loss": steps[0]["loss"],
        "last_loss": steps[-1]["loss"],
        "kept_ratio": steps[-1].get("kept_ratio"),
    }


def generate(work: Path, size: Size, adapters: list[str]) -> dict[str, Any]:
    """Greedy answers to two demo problems from each adapter, both attached to one cached base."""
    from cuset_core.demo import demo_problems
    from cuset_core.generation.prompts import build_messages
    from cuset_core.generation.sampling import generate as sample
    from worker.model_cache import ModelCache

    cache = ModelCache()
    prompts = [build_messages(problem.problem_code, "compact") for problem in demo_problems()[:2]]
    figures: dict[str, Any] = {}
    for name in adapters:
        with cache.use(str(work / name), name) as (model, tokenizer):
            started = time.perf_counter()
            answers = sample(
                model, tokenizer, prompts, n=1, temperature=0.0, top_p=1.0, max_new_tokens=size.new_tokens, seed=0
            )
            elapsed = time.perf_counter() - started
            tokens = sum(answer.completion_tokens for batch in answers for answer in batch)
            figures[name] = {
                "completion_tokens": tokens,
                "tokens_per_s": round(tokens / elapsed, 1),
                "device": str(next(model.parameters()).device),
            }
    figures["bases_loaded"] = len(cache.loaded()["base"])
    figures["adapters_attached"] = cache.loaded()["adapters"]
    cache.release()
    return figures


def verify_demo(work: Path, size: Size) -> dict[str, Any]:
    """The demo solutions scored as answers up to ``size.tier`` (tier 3, ``gpu``, on a GPU), timed
    against eager PyTorch and torch.compile, with KernelBench's fast_p block."""
    from cuset_core.demo import demo_problems
    from cuset_core.evaluation.config import EvalConfig
    from cuset_core.evaluation.runner import run_eval

    chosen = demo_problems()[: size.problems]
    problems, answers = work / "problems.jsonl", work / "answers.jsonl"
    problems.write_text("".join(json.dumps({"id": p.id, "problem": p.problem_code}) + "\n" for p in chosen))
    answers.write_text(
        "".join(json.dumps({"problem_id": p.id, "answer": f"```python\n{p.solution_code}\n```"}) + "\n" for p in chosen)
    )
    config = EvalConfig(problems=str(problems), answers=answers, tier=size.tier, compile_baseline=True, cache=False)
    report = run_eval(config, progress=False)
    kernelbench = report.aggregate.kernelbench
    results = {sample.problem_id: sample.result for sample in report.samples}
    return {
        "tier": size.tier,
        "passed": sum(result.passed for result in results.values()),
        "of": len(results),
        "verdicts": {pid: result.verdict.value for pid, result in results.items()},
        "reasons": {pid: result.reason for pid, result in results.items() if not result.passed},
        "speedup": {pid: result.speedup for pid, result in results.items() if result.speedup is not None},
        "compile_speedup": {
            pid: result.compile_speedup for pid, result in results.items() if result.compile_speedup is not None
        },
        "kernelbench": None if kernelbench is None else kernelbench.model_dump(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="toy sizes on a CPU (QLoRA skipped)")
    parser.add_argument("--out", type=Path, required=True, help="folder for gpu_check.json and gpu_check.md")
    parser.add_argument("--work", type=Path, required=True, help="scratch folder (model, adapters)")
    parser.add_argument("--assets", type=Path, default=REPO / ".gpu_check", help="prepared tokenizer (and wheels)")
    options = parser.parse_args(argv)
    if not options.dry_run and not torch.cuda.is_available():
        print("gpu_check: no CUDA GPU here; use --dry-run on a CPU", file=sys.stderr)
        return 2
    size = SIZES["dry-run" if options.dry_run else "gpu"]
    report = Report(options.out)
    report.step("environment", environment)
    if report.step("base_model", lambda: build_base(options.work, size, options.assets))["status"] != "ok":
        return 1
    bf16 = {} if options.dry_run else {"dtype": "bfloat16"}
    report.step("lora_bf16", lambda: train(options.work, size, "lora", bf16))
    qlora = report.step(
        "qlora",
        lambda: train(options.work, size, "qlora", {**bf16, "quantization": QLORA}),
        skip="4-bit weights need a CUDA GPU" if options.dry_run else None,
    )
    adapters = ["lora"] + (["qlora"] if qlora["status"] == "ok" else [])
    report.step("generate", lambda: generate(options.work, size, adapters))
    report.step("verify_demo", lambda: verify_demo(options.work, size))
    failed = [name for name, result in report.figures.items() if result["status"] == "failed"]
    print(f"[gpu_check] figures in {options.out}; failed steps: {failed or 'none'}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
