"""Start-up overhead of one sandboxed run, measured side by side in one process.

Times ``true`` and ``python -c pass`` run plainly (``subprocess.run``), in the current sandbox
(:func:`cuset_core.verify.sandbox.run_sandboxed`) and, with ``--old FILE``, in another version of
the sandbox module (e.g. ``git show REV:cuset_core/verify/sandbox.py > /tmp/old_sandbox.py``),
interleaving the variants so that load on the machine hits all of them alike. Prints the median
seconds per run and the ratios. With ``--tier2 N`` (and ``--old``) it also times N tier-2
verifications of the bundled ReLU solution (cache off) in each sandbox, alternately.

    .venv/bin/python bench/sandbox_overhead.py [--runs 20] [--old /tmp/old_sandbox.py] [--tier2 3]
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
DEMO = Path(__file__).resolve().parents[1] / "cuset_core" / "demo"


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
    parser.add_argument("--tier2", type=int, default=0, help="tier-2 verifications per sandbox (needs --old)")
    args = parser.parse_args()
    old = _load(args.old) if args.old else None
    if old is not None and args.tier2:
        _tier2(old, args.tier2)
    with tempfile.TemporaryDirectory(prefix="cuset-bench-") as folder:
        workdir = Path(folder)
        (workdir / "job.json").write_text("{}")  # a job folder is never empty
        variants = {
            "plain": lambda argv: subprocess.run(argv, cwd=workdir, check=True),
            "sandbox": lambda argv: run_sandboxed(argv, workdir=workdir, limits=LIMITS),
        }
        if old is not None:
            variants["old sandbox"] = lambda argv: old.run_sandboxed(argv, workdir=workdir, limits=LIMITS)
        for name, argv in COMMANDS.items():
            for run in variants.values():
                run(argv)  # warm: page cache, the isolation probe
            times: dict[str, list[float]] = {variant: [] for variant in variants}
            for _ in range(args.runs):
                for variant, run in variants.items():
                    times[variant].append(_timed(lambda run=run, argv=argv: run(argv)))
            medians = {variant: statistics.median(values) for variant, values in times.items()}
            line = ", ".join(f"{variant} {seconds * 1000:.0f} ms" for variant, seconds in medians.items())
            print(f"{name}: median per run: {line}")
            sandbox = medians["sandbox"]
            print(f"  overhead of the sandbox: {(sandbox - medians['plain']) * 1000:.0f} ms per run")
            if old is not None:
                print(
                    f"  sandbox / old sandbox: {sandbox / medians['old sandbox']:.2f}x "
                    f"(old overhead {(medians['old sandbox'] - medians['plain']) * 1000:.0f} ms)"
                )


def _tier2(old, runs: int) -> None:
    """Tier-2 wall time per candidate with each sandbox, alternating; the harness reaches the
    sandbox through ``judge.run_sandboxed``."""
    from cuset_core.verify.execution import judge
    from cuset_core.verify.result import Tier
    from cuset_core.verify.run import verify
    from cuset_core.verify.settings import VerifySettings

    problem = (DEMO / "problems" / "02_relu.py").read_text()
    answer = (DEMO / "solutions" / "02_relu.py").read_text()
    settings = VerifySettings(tier=Tier.CPU)
    sandboxes = {"sandbox": judge.run_sandboxed, "old sandbox": old.run_sandboxed}
    times: dict[str, list[float]] = {name: [] for name in sandboxes}
    for index in range(runs + 1):  # the first round warms the preludes and the page cache
        for name, run in sandboxes.items():
            judge.run_sandboxed = run
            start = time.perf_counter()
            result = verify(problem, answer, settings, use_cache=False)
            if index:
                times[name].append(time.perf_counter() - start)
            assert result.passed, (name, result.reason)
    judge.run_sandboxed = sandboxes["sandbox"]
    new, before = statistics.median(times["sandbox"]), statistics.median(times["old sandbox"])
    print(
        f"tier 2, ReLU demo solution: median {new:.2f} s (sandbox) vs {before:.2f} s (old sandbox): {new / before:.2f}x"
    )


if __name__ == "__main__":
    main()
