"""Peak memory of tuning SmolLM2-135M on the demo's records (issue 50, item 4): `cuset tune`'s
defaults and the two demos' jobs, each as it was configured before and as it is now, side by side.

Usage: python bench/tune_memory.py [--steps 2] [--only NAME ...] [--model smollm2-135m]

Each configuration is one real training subprocess (``python -m cuset_core.training JOB.json``,
what `cuset tune` and the worker start) running ``--steps`` optimizer steps of LoRA tuning with
method cuset on the demo's training records (cuset_core/demo, the held-out problems left out).
Its peak is the child's ``ru_maxrss`` from ``os.wait4`` (the kernel's resident-set high-water
mark of that process: model loading, the GGUF dequantisation, the steps and saving included).
Configurations:

- ``tune-defaults-before``: `cuset tune --data demo.jsonl` as it was: batch 4, 1,024 tokens, no
  gradient checkpointing (the issue's ~15 GB).
- ``tune-defaults``: the same command now (gradient checkpointing chosen automatically on a CPU).
- ``tune-defaults-accum``: batch 1 x 4 accumulation steps without checkpointing (the same
  effective batch; for comparison only).
- ``demo``: `cuset demo`'s job (batch 2, 1,664 tokens, checkpointing).
- ``demo-service-before`` / ``demo-service``: scripts/demo_service.py's job (batch 2, 2,048
  tokens) with checkpointing off as it was, and left to the default now.

Prints one line per configuration as it finishes, then ONE JSON line with every figure.
Linux only (ru_maxrss in KiB). Run it at ``nice -n 10`` on a shared machine: each step of the
135M model takes tens of seconds on two cores.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cuset_core.demo import HELD_OUT, write_demo_dataset  # noqa: E402

TARGET_GIB = 4.0

# name -> (what it stands for, job hyperparameters beyond max_steps)
CONFIGS: dict[str, tuple[str, dict]] = {
    "tune-defaults-before": ("cuset tune defaults, no checkpointing (before)", {"gradient_checkpointing": False}),
    "tune-defaults": ("cuset tune defaults (now)", {}),
    "tune-defaults-accum": (
        "batch 1 x 4 accumulation, no checkpointing",
        {"batch_size": 1, "gradient_accumulation_steps": 4, "gradient_checkpointing": False},
    ),
    "demo": (
        "cuset demo's job",
        {"batch_size": 2, "learning_rate": 3e-4, "max_seq_len": 1664, "gradient_checkpointing": True},
    ),
    "demo-service-before": (
        "demo_service.py's job (before)",
        {"batch_size": 2, "learning_rate": 3e-4, "max_seq_len": 2048, "gradient_checkpointing": False},
    ),
    "demo-service": ("demo_service.py's job (now)", {"batch_size": 2, "learning_rate": 3e-4, "max_seq_len": 2048}),
}


def run_config(name: str, hyper: dict, data: Path, work: Path, steps: int, model: str) -> dict:
    """Train ``steps`` steps in a fresh subprocess; its peak RSS, wall time and auto choices."""
    out = work / name
    job = {
        "model": model,
        "train_file": str(data),
        "output_dir": str(out),
        "hyperparameters": {"max_steps": steps, **hyper},
        "save_steps": 1000,
    }
    out.mkdir(parents=True)
    job_file = out / "job.json"
    job_file.write_text(json.dumps(job))
    started = time.monotonic()
    with open(out / "stderr.log", "wb") as log:
        pid = os.posix_spawn(
            sys.executable,
            [sys.executable, "-m", "cuset_core.training", str(job_file)],
            os.environ,
            file_actions=[(os.POSIX_SPAWN_DUP2, log.fileno(), 1), (os.POSIX_SPAWN_DUP2, log.fileno(), 2)],
        )
        _, status, usage = os.wait4(pid, 0)
    wall = time.monotonic() - started
    events = []
    progress = out / "progress.jsonl"
    if progress.exists():
        for line in progress.read_text().splitlines():
            record = json.loads(line)
            if record.get("type") == "event" and "memory" in record.get("message", ""):
                events.append(record["message"])
    return {
        "name": name,
        "exit": os.waitstatus_to_exitcode(status),
        "peak_gib": round(usage.ru_maxrss / 2**20, 2),
        "wall_s": round(wall, 1),
        "events": events,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2, help="optimizer steps per configuration")
    parser.add_argument("--only", nargs="*", choices=sorted(CONFIGS), help="run only these configurations")
    parser.add_argument("--model", default="smollm2-135m")
    args = parser.parse_args(argv)
    names = args.only or list(CONFIGS)
    results = []
    with tempfile.TemporaryDirectory(prefix="tune-memory-") as tmp:
        work = Path(tmp)
        data = work / "demo_train.jsonl"
        records = write_demo_dataset(data, held_out=HELD_OUT)
        print(f"{records} demo records; {args.steps} steps per configuration; model {args.model}", flush=True)
        for name in names:
            described, hyper = CONFIGS[name]
            result = run_config(name, hyper, data, work, args.steps, args.model)
            result["config"] = described
            results.append(result)
            mark = "ok" if result["peak_gib"] <= TARGET_GIB else f"over {TARGET_GIB:g} GiB"
            print(
                f"{name:22} peak {result['peak_gib']:6.2f} GiB  {result['wall_s']:7.1f} s  exit {result['exit']}  "
                f"{mark}  ({described}) {' '.join(result['events'])}",
                flush=True,
            )
            if result["exit"] != 0:
                print((work / name / "stderr.log").read_text()[-2000:], file=sys.stderr)
    print(json.dumps({"steps": args.steps, "model": args.model, "target_gib": TARGET_GIB, "results": results}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
