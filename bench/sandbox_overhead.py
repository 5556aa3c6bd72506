"""Start-up overhead of one sandboxed run, measured side by side in one process.

Times ``true`` and ``python -c pass`` run plainly (``subprocess.run``), in the current sandbox
(:func:`cuset_core.verify.sandbox.run_sandboxed`) and, with ``--old FILE``, in another version of
the sandbox module (e.g. ``git show REV:cuset_core/verify/sandbox.py > /tmp/old_sandbox.py``),
interleaving the variants so that load on the machine hits all of them alike. Prints the median
seconds per run and the ratios.

    .venv/bin/python bench/sandbox_overhead.py [--runs 20] [--old /tmp/old_sandbox.py]
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cuset_core.verify.sandbox import run_sandboxed
from cuset_core.verify.settings import SandboxLimits

LIMITS = SandboxLimits(wall_s=60, cpu_s=30)
COMMANDS = {"true": ["true"], "python -c pass": [sys.executable, "-S", "-c", "pass"]}


def _load(path: Path):
    spec = importlib.util.spec_from_file_location("old_sandbox", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _timed(run) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="runs per variant and command")
    parser.add_argument("--old", type=Path, help="another sandbox.py to compare with")
    args = parser.parse_args()
    old = _load(args.old) if args.old else None
    with tempfile.TemporaryDirectory(prefix="cuset-bench-") as folder:
        workdir = Path(folder)
        (workdir / "job.json").write_text("{}")  # a job folder is never empty
        variants = {"plain": lambda argv: subprocess.run(argv, cwd=workdir, check=True),
                    "sandbox": lambda argv: run_sandboxed(argv, workdir=workdir, limits=LIMITS)}
        if old is not None:
            variants["old sandbox"] = lambda argv: old.run_sandboxed(argv, workdir=workdir, limits=LIMITS)
        for name, argv in COMMANDS.items():
            for run in variants.values():
                run(argv)  # warm: page cache, the isolation probe
            times: dict[str, list[float]] = {variant: [] for variant in variants}
            for _ in range(args.runs):
                for variant, run in variants.items():
                    times[variant].append(_timed(lambda: run(argv)))
            medians = {variant: statistics.median(values) for variant, values in times.items()}
            line = ", ".join(f"{variant} {seconds * 1000:.0f} ms" for variant, seconds in medians.items())
            print(f"{name}: median per run: {line}")
            sandbox = medians["sandbox"]
            print(f"  overhead of the sandbox: {(sandbox - medians['plain']) * 1000:.0f} ms per run")
            if old is not None:
                print(f"  sandbox / old sandbox: {sandbox / medians['old sandbox']:.2f}x "
                      f"(old overhead {(medians['old sandbox'] - medians['plain']) * 1000:.0f} ms)")


if __name__ == "__main__":
    main()
