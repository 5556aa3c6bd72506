"""The GPU check (run by scripts/gpu_check.sh): a bf16 LoRA and a QLoRA CuSeT run, generation
through the worker's model cache with both adapters on one base, tier-3 (GPU) verification of the
demo solutions, tier 3 alone on every hostile-candidate class of tests/security (what a real GPU
says of each attack that tier 2 catches), and a KernelBench level-1 eval at tier gpu over the
labelled Sakana kernels (``<assets>/level1.jsonl``, written by ``gpu_check.sh prepare``). Every
step is timed; the figures go to ``<out>/gpu_check.json`` and ``<out>/gpu_check.md``, and a failed
step is recorded and the next one still runs. The verifications run on the CPU cores in the
background while the GPU trains (each check is its own process; tier 3 mostly compiles).

``--dry-run`` runs the same steps on a CPU at toy sizes (a 2-layer model, 2 steps, static
verification; QLoRA is GPU-only and reported as skipped), so the script is tested before a GPU
session spends minutes on it. Nothing is downloaded: the model is built from a config with the
SmolLM2 tokenizer found in ``--assets`` (written by ``gpu_check.sh prepare``) or in the bundled
model package.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import sys
import time
import traceback
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

QLORA = {"bits": 4, "type": "nf4", "double_quant": True}
VERIFY_WORKERS = 8  # checks at once, per pool (attacks, the level-1 eval): 16 on the 16 cores of the H200 machine

# Every thread adds into its row's sum without an atomic: a GPU loses updates, tier 2's fibers
# never interleave (issue 23 part 5's race schedule is still open), so this one is the GPU's to catch.
RACY_ROWSUM = """
#include <torch/extension.h>
__global__ void rowsum_racy(const float* x, float* out, int cols) {
    for (int j = threadIdx.x; j < cols; j += blockDim.x) out[blockIdx.x] += x[blockIdx.x * cols + j];
}
torch::Tensor run(torch::Tensor x) {
    auto out = torch::zeros({x.size(0)}, x.options());
    rowsum_racy<<<x.size(0), 256>>>(x.data_ptr<float>(), out.data_ptr<float>(), x.size(1));
    return out;
}
"""


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
    kernels: int  # of the level-1 eval


SIZES = {
    # ~0.4B parameters with SmolLM2's 49k vocabulary: big enough that bf16 and 4-bit matter.
    "gpu": Size(
        hidden=1536,
        layers=16,
        steps=20,
        batch_size=8,
        max_seq_len=1024,
        new_tokens=128,
        problems=4,
        tier="gpu",
        kernels=18,
    ),
    "dry-run": Size(
        hidden=64,
        layers=2,
        steps=2,
        batch_size=2,
        max_seq_len=1024,
        new_tokens=8,
        problems=2,
        tier="static",
        kernels=2,
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


@dataclass(frozen=True)
class AttackCase:
    """One candidate of tests/security, and the verdict tier 2 gives it there."""

    name: str
    problem: str
    answer: str
    tier2: str


def attack_cases(hidden: Path) -> list[AttackCase]:
    """The hostile (and the honest control) candidates of tests/security, by class: the kernels that
    did no work, the GPU behaviours, and issue 13's forged verdicts (``hidden``: the secret file)."""
    for folder in ("security", "unit"):
        sys.path.insert(0, str(REPO / "tests" / folder))
    import test_gpu_behaviour as behaviour
    import test_kernels_did_the_work as work
    from attacks import PROBLEM as RELU_PROBLEM
    from attacks import suite

    fallback = "static_reject"
    forwards = {
        "honest row sums": ("        return ext.rowsum(x)", "pass"),
        "torch op then a custom epilogue kernel": (
            "        sums = torch.sum(x, 1) * 2\n        ext.halve_(sums)\n        return sums", "pass"),
        "torch in the C++ binding": ("        return ext.binding_sum(x)", fallback),
        "host loop over data_ptr beside a no-op launch": ("        return ext.host_loop(x)", fallback),
        "binding copies torch's sums into the kernel's output": ("        return ext.binding_copy(x)", fallback),
        "host loop on a C++ thread": ("        return ext.thread_loop(x)", fallback),
        "torch.sum(out=) after a launch": (
            "        out = ext.launch_only(x)\n        torch.sum(x, 1, out=out)\n        return out", fallback),
        "numpy through .numpy() after a launch": (
            "        out = ext.launch_only(x)\n        out.numpy()[:] = x.numpy().sum(1)\n        return out", fallback),
        "torch in a background thread": (
            "        out = ext.launch_only(x)\n        worker = threading.Thread(target=lambda: out.copy_(torch.sum(x, 1)))"
            "\n        worker.start()\n        worker.join()\n        return out", fallback),
    }  # fmt: skip
    cases = [
        AttackCase(name, work.PROBLEM, work.candidate(forward), tier2) for name, (forward, tier2) in forwards.items()
    ]
    rowsum = behaviour.PROBLEM
    cases += [
        AttackCase("atomicAdd into torch::empty", rowsum,
                   behaviour.candidate(behaviour.ATOMIC_ROWSUM.replace("ALLOCATE", "empty")), "value_mismatch"),
        AttackCase("atomicAdd into torch::zeros (honest)", rowsum,
                   behaviour.candidate(behaviour.ATOMIC_ROWSUM.replace("ALLOCATE", "zeros")), "pass"),
        AttackCase("uninitialised shared memory", rowsum, behaviour.candidate(
            behaviour.SHARED_ACCUMULATOR.replace("if (threadIdx.x == 0) total = 0.f;", "")), "value_mismatch"),
        AttackCase("96 KiB dynamic shared memory without the opt-in", rowsum,
                   behaviour.candidate(behaviour.BIG_SHARED.replace("OPT_IN", "")), "runtime_error"),
        AttackCase("96 KiB dynamic shared memory with the opt-in (honest)", rowsum,
                   behaviour.candidate(behaviour.BIG_SHARED.replace("OPT_IN", behaviour.OPT_IN)), "pass"),
        AttackCase("host-side sums beside an empty-grid launch", rowsum,
                   behaviour.candidate(behaviour.EMPTY_GRID), "runtime_error"),
        AttackCase("#ifdef on the CPU runtime's header guard", rowsum,
                   behaviour.candidate(behaviour.IFDEF_ON_THE_RUNTIME), "static_reject"),
        AttackCase("non-atomic += from 256 threads (race)", rowsum, behaviour.candidate(RACY_ROWSUM), "pass"),
    ]  # fmt: skip
    cases += [AttackCase(attack.name, RELU_PROBLEM, attack.candidate, attack.caught_as[0]) for attack in suite(hidden)]
    return cases


def tier3_alone(case: AttackCase, settings: Any) -> dict[str, Any]:
    """Tier 3's own verdict on ``case``: the GPU harness run directly, without the tiers before it."""
    from cuset_core.verify.candidate import parse_candidate
    from cuset_core.verify.gpu import run_gpu_tier

    started = time.perf_counter()
    try:
        result = run_gpu_tier(case.problem, parse_candidate(case.answer), settings)
        verdict, reason = result.verdict.value, result.reason
    except Exception as exc:  # noqa: BLE001 - one case's failure is a finding, not the step's
        verdict, reason = "check_failed", f"{type(exc).__name__}: {exc}"
    return {
        "tier3": verdict,
        "tier2_in_tests": case.tier2,
        "reason": reason[:300],
        "seconds": round(time.perf_counter() - started, 1),
    }


def start_attacks(pool: ThreadPoolExecutor, work: Path) -> dict[str, Future]:
    """Tier 3 alone on every attack class, submitted to ``pool``."""
    from cuset_core.verify.result import Tier
    from cuset_core.verify.settings import SandboxLimits, VerifySettings

    hidden = work / "hidden.txt"
    cases = attack_cases(hidden)
    from attacks import SECRET  # tests/security is on sys.path once attack_cases ran

    hidden.write_text(SECRET)
    settings = VerifySettings(tier=Tier.GPU, limits=SandboxLimits(wall_s=300, cpu_s=300))
    return {case.name: pool.submit(tier3_alone, case, settings) for case in cases}


def attacks_report(futures: dict[str, Future]) -> dict[str, Any]:
    """Each class's tier-3 verdict beside tier 2's; a pass of a class tier 2 rejects is a GPU miss."""
    from attacks import SECRET

    cases = {name: future.result() for name, future in futures.items()}
    leaked = [name for name, case in cases.items() if SECRET in json.dumps(case)]
    return {
        "classes": len(cases),
        "tier3_passed": sorted(name for name, case in cases.items() if case["tier3"] == "pass"),
        "tier3_agrees_with_tier2": sum(case["tier3"] == case["tier2_in_tests"] for case in cases.values()),
        "secret_leaked": leaked,
        "cases": cases,
    }


def level1_eval(work: Path, size: Size, assets: Path) -> dict[str, Any]:
    """A KernelBench level-1 eval at ``size.tier`` over the labelled Sakana kernels of level 1 (one
    "problem" per kernel), beside each kernel's GPU label from the data set."""
    from cuset_core.evaluation.config import EvalConfig
    from cuset_core.evaluation.runner import run_eval
    from cuset_core.verify.cpu.build import prepare_preludes

    every = [json.loads(line) for line in (assets / "level1.jsonl").read_text().splitlines()]
    wrong = [row for row in every if not row["Correct"]][: size.kernels // 3]  # the GPU's labels: 26 right, 8 wrong
    rows = wrong + [row for row in every if row["Correct"]][: size.kernels - len(wrong)]
    problems, answers = work / "level1_problems.jsonl", work / "level1_answers.jsonl"
    ids = [f"L1_{row['Task_ID']}_{row['row']}" for row in rows]
    problems.write_text(
        "".join(json.dumps({"id": i, "problem": r["PyTorch_Code_Module"]}) + "\n" for i, r in zip(ids, rows))
    )
    answers.write_text(
        "".join(json.dumps({"problem_id": i, "answer": r["CUDA_Code"]}) + "\n" for i, r in zip(ids, rows))
    )
    if size.tier != "static":
        prepare_preludes()  # once, before the workers all ask for them
    config = EvalConfig(problems=str(problems), answers=answers, tier=size.tier, workers=VERIFY_WORKERS, cache=False)
    report = run_eval(config, progress=False)
    labels = dict(zip(ids, (bool(row["Correct"]) for row in rows)))
    results = {sample.problem_id: sample.result for sample in report.samples}
    agree = sum(results[i].passed == labels[i] for i in ids)
    return {
        "kernels": len(ids),
        "gpu_label_correct": sum(labels.values()),
        "aggregate": report.aggregate.model_dump(mode="json", exclude_none=True),
        "agrees_with_label": agree,
        "passed_but_labelled_incorrect": sorted(i for i in ids if results[i].passed and not labels[i]),
        "failed_but_labelled_correct": {
            i: f"{results[i].verdict.value} ({results[i].tier.value}): {results[i].reason[:200]}"
            for i in ids if labels[i] and not results[i].passed
        },
    }  # fmt: skip


def qlora_skipped(dry_run: bool) -> str | None:
    """Why the QLoRA step cannot run here, or None."""
    if dry_run:
        return "4-bit weights need a CUDA GPU"
    if importlib.util.find_spec("bitsandbytes") is None:
        return "bitsandbytes is not installed (its 43 MB wheel may be left behind to fit the device's 64 MiB carry)"
    return None


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
    options.work.mkdir(parents=True, exist_ok=True)
    pool = ThreadPoolExecutor(max_workers=VERIFY_WORKERS)
    # The verifications compile on the CPU cores while the GPU trains; their steps collect them.
    attacks: dict[str, Future] = {}

    def submit_attacks() -> dict[str, Any]:
        attacks.update(start_attacks(pool, options.work))
        return {"classes": len(attacks)}

    submitted = report.step("attacks_submitted", submit_attacks)
    level1_file = options.assets / "level1.jsonl"
    level1 = pool.submit(level1_eval, options.work, size, options.assets) if level1_file.is_file() else None
    if report.step("base_model", lambda: build_base(options.work, size, options.assets))["status"] != "ok":
        return 1
    bf16 = {} if options.dry_run else {"dtype": "bfloat16"}
    report.step("lora_bf16", lambda: train(options.work, size, "lora", bf16))
    qlora = report.step(
        "qlora",
        lambda: train(options.work, size, "qlora", {**bf16, "quantization": QLORA}),
        skip=qlora_skipped(options.dry_run),
    )
    adapters = ["lora"] + (["qlora"] if qlora["status"] == "ok" else [])
    report.step("generate", lambda: generate(options.work, size, adapters))
    report.step("verify_demo", lambda: verify_demo(options.work, size))
    report.step(
        "attacks_tier3_alone",
        lambda: attacks_report(attacks),
        skip=None if submitted["status"] == "ok" else "the attack cases could not be built",
    )
    report.step(
        "kernelbench_level1_eval",
        lambda: level1.result() if level1 else {},
        skip=None if level1 else f"{level1_file} is missing: run `bash scripts/gpu_check.sh prepare` first",
    )
    pool.shutdown()
    failed = [name for name, result in report.figures.items() if result["status"] == "failed"]
    print(f"[gpu_check] figures in {options.out}; failed steps: {failed or 'none'}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
