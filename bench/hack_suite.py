"""The hostile-candidate suite against tier 2: caught/total and seconds per candidate, this design
(judge apart from the candidate) against the previous one (one harness process that wrote the
verdict), side by side in one run.

Usage (from the repository root):

    .venv/bin/python bench/hack_suite.py [--legacy-rev b61eeeb | --legacy-tree PATH] [--repeat 3]

The previous design is a checkout of ``--legacy-rev`` (default: the last commit before issue 13's
judge; made with ``git worktree add --detach`` in a temporary folder and removed afterwards), or
an existing checkout given as ``--legacy-tree``. Every candidate runs through ``run_cpu_tier`` of
each design in a fresh interpreter (``PYTHONPATH`` set to that tree), the two designs alternating,
after one untimed warm-up per design (precompiled preludes). ``--repeat`` runs the honest demo
solution that many times per design for the time ratio (target: now / before <= 1.3; issue 13's
judge was held to 1.2 against b61eeeb). ``--legacy-rev 13b4ed2`` compares with tier 2 before the
device boundary became the default. An attack is
caught when the verdict is not ``pass``, the hidden file's secret is not in the result and the
result's JSON stays under 16 000 characters.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "security"))

from attacks import HONEST, PROBLEM, SECRET, suite  # noqa: E402

BOUND_CHARS = 16_000
TARGET_RATIO = 1.3  # issue 23: an honest check behind the device boundary at most 1.3x one before it
DEFAULT_LEGACY_REV = "b61eeeb"  # tier 2 as it was before issue 13 (one sandboxed harness, result.json)
RUNNER = """
import json, sys, time
from cuset_core.verify.candidate import parse_candidate
from cuset_core.verify.cpu import run_cpu_tier
from cuset_core.verify.result import Tier
from cuset_core.verify.settings import SandboxLimits, VerifySettings
problem, candidate = (open(path).read() for path in sys.argv[1:3])
settings = VerifySettings(tier=Tier.CPU, limits=SandboxLimits(wall_s=300, cpu_s=300))
clock = time.perf_counter()
result = run_cpu_tier(problem, parse_candidate(candidate), settings)
seconds = time.perf_counter() - clock
print(json.dumps({"seconds": seconds, "result": result.model_dump_json()}))
"""


def run_once(tree: Path, problem: Path, candidate_text: str, scratch: Path) -> dict:
    """Verdict, seconds and result size of one tier-2 check by the code in ``tree``."""
    candidate = scratch / "candidate.py"
    candidate.write_text(candidate_text)
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", RUNNER, str(problem), str(candidate)],
        env=env,
        cwd=scratch,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    if done.returncode != 0:
        return {
            "verdict": "bench error",
            "seconds": float("nan"),
            "chars": 0,
            "leak": False,
            "reason": done.stderr[-300:],
        }
    line = json.loads(done.stdout.strip().splitlines()[-1])
    result = json.loads(line["result"])
    return {
        "verdict": result["verdict"],
        "seconds": line["seconds"],
        "chars": len(line["result"]),
        "leak": SECRET in line["result"],
        "reason": result["reason"][:120],
    }


def caught(outcome: dict) -> bool:
    return outcome["verdict"] not in ("pass", "bench error") and not outcome["leak"] and outcome["chars"] < BOUND_CHARS


def legacy_checkout(rev: str, folder: Path) -> Path:
    tree = folder / "legacy"
    subprocess.run(
        ["git", "-C", str(REPO), "worktree", "add", "--detach", str(tree), rev], check=True, capture_output=True
    )
    return tree


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--legacy-rev", default=DEFAULT_LEGACY_REV)
    parser.add_argument("--legacy-tree", type=Path, help="an existing checkout of the previous design")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs of the honest solution per design")
    parser.add_argument("--only", nargs="*", help="substrings of the attack names to run (default: all)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cuset-hack-suite-") as folder:
        scratch = Path(folder)
        legacy = args.legacy_tree.resolve() if args.legacy_tree else legacy_checkout(args.legacy_rev, scratch)
        try:
            report(REPO, legacy, scratch, args.repeat, args.only, str(args.legacy_tree or args.legacy_rev))
        finally:
            if not args.legacy_tree:
                subprocess.run(
                    ["git", "-C", str(REPO), "worktree", "remove", "--force", str(legacy)], capture_output=True
                )


def report(new: Path, legacy: Path, scratch: Path, repeat: int, only: list[str] | None, before: str) -> None:
    designs = {"before": legacy, "now": new}
    problem = scratch / "problem.py"
    problem.write_text(PROBLEM)
    hidden = scratch / "hidden.json"
    hidden.write_text(json.dumps({"verdict": "pass", "reason": SECRET}))
    for tree in designs.values():  # warm-up: preludes, page cache
        run_once(tree, problem, HONEST, scratch)
    honest: dict[str, list[float]] = {name: [] for name in designs}
    for index in range(repeat):
        order = list(designs) if index % 2 == 0 else list(reversed(designs))
        for name in order:
            outcome = run_once(designs[name], problem, HONEST, scratch)
            honest[name].append(outcome["seconds"])
            print(f"honest demo relu  {name:8s} {outcome['verdict']:14s} {outcome['seconds']:6.1f} s", flush=True)
    attacks = [a for a in suite(hidden) if not only or any(part in a.name for part in only)]
    totals = {name: 0 for name in designs}
    print(f"\n| attack | before ({before}) | now (this tree) | seconds (before / now) |\n|---|---|---|---|")
    for index, attack in enumerate(attacks):
        order = list(designs) if index % 2 == 0 else list(reversed(designs))
        outcomes = {name: run_once(designs[name], problem, attack.candidate, scratch) for name in order}
        for name, outcome in outcomes.items():
            totals[name] += caught(outcome)

        def cell(outcome: dict) -> str:
            return f"{'caught' if caught(outcome) else 'NOT CAUGHT'}: {outcome['verdict']}"

        print(
            f"| {attack.name} | {cell(outcomes['before'])} | {cell(outcomes['now'])} | "
            f"{outcomes['before']['seconds']:.1f} / {outcomes['now']['seconds']:.1f} |",
            flush=True,
        )
    medians = {name: statistics.median(times) for name, times in honest.items()}
    print(
        json.dumps(
            {
                "caught": {name: f"{totals[name]}/{len(attacks)}" for name in designs},
                "honest_median_s": {name: round(value, 2) for name, value in medians.items()},
                "time_ratio_now_over_before": round(medians["now"] / medians["before"], 3),
                "target_ratio": TARGET_RATIO,
            }
        )
    )


if __name__ == "__main__":
    main()
