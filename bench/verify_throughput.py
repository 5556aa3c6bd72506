"""Median seconds per candidate for verification tiers 1 (compile) and 2 (CPU), cold and cached.

Usage (from the repository root):

    .venv/bin/python bench/verify_throughput.py [--problems 8] [--tiers compile cpu] [--shared-data 10]
        [--parts cold bridge_vs_aten warm_vs_cold overlap_vs_serial std_on_demand shared_reference] [--pause 3]

The fixed set is the first ``--problems`` demo problems with their reference solutions. Per
tier: one untimed verification of another demo problem first (one-time setup such as a
precompiled header; its time is reported as ``setup_s``), then every candidate *cold* (result
cache disabled, so every stage runs in fresh folders), then every candidate again into an empty
cache folder (untimed, it fills the cache) and once more *cached*. Prints one JSON line.
Targets: tier 1 <= 1 s and tier 2 <= 10 s per candidate cold, cached about 0.

``bridge_vs_aten`` times tier 2 side by side, candidate by candidate in one run: each one cold
as tier 2 ran before its speed work (ATen's headers, ``torch_bridge=False``, and tier 2 after
tier 1, ``overlap_tiers=False``) and then as it runs now (the torch bridge, tier 2 while tier 1
compiles, its sides started ahead by a ``WarmSides`` as a worker or an eval holds one), on the
demo solutions and on ``--shared-data`` correct level-1 kernels
of ``../shared/data/sakana_labelled_kernels.jsonl`` (skipped when that file is absent), with
``--pause`` seconds before every check of either arm (a worker's next request). Targets: the
ratio of medians (now / before) at most 0.4, and now at most 4 s. ``warm_vs_cold`` times checks
as they run now back to back, without a pause: all starting their own sides, then all taking
warm ones (whose replacements then import torch beside the next check: the least they gain).
``overlap_vs_serial`` isolates the overlap: the same candidates on the bridge with tier 2 after
tier 1 and during it.

``std_on_demand`` times tier 1 the same way: each candidate compiled with every standard header
the light stand-in can include (``std_on_demand=False``, as tier 1 ran before) and then with only
those its code names first. Target: a median of at most 1 s.

``shared_reference`` times what an eval pays per sample: ``--samples`` answers to each of the
first four problems verified at tier 2, problem by problem, first each with a reference run of its
own (as every check ran before) and then as one batch sharing a ``ReferencePool``, and prints the
ratio of the mean seconds per sample (shared / own).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from cuset_core.demo import demo_problems  # noqa: E402
from cuset_core.verify.execution.reference_pool import ReferencePool  # noqa: E402
from cuset_core.verify.execution.tier_run import WarmSides  # noqa: E402
from cuset_core.verify.result import Tier  # noqa: E402
from cuset_core.verify.run import verify  # noqa: E402
from cuset_core.verify.settings import VerifySettings  # noqa: E402

TARGET_TIER1_S = 1.0
TARGET_COLD_S = {Tier.COMPILE: TARGET_TIER1_S, Tier.CPU: 10.0}
TARGET_BRIDGE_RATIO = 0.4
TARGET_TIER2_S = 4.0
SHARED_DATA = REPO.parent / "shared" / "data" / "sakana_labelled_kernels.jsonl"


def shared_level1(count: int) -> list[tuple[str, str]]:
    """(problem, kernel) of the first ``count`` correct level-1 kernels of the shared data set."""
    if count <= 0 or not SHARED_DATA.is_file():
        return []
    rows = [json.loads(line) for line in SHARED_DATA.read_text().splitlines() if line.strip()]
    chosen = [row for row in rows if row.get("Level_ID") == 1 and row.get("Correct")][:count]
    return [(row["PyTorch_Code_Module"], row["CUDA_Code"]) for row in chosen]


def side_by_side(
    pairs: list[tuple[str, str]],
    before: VerifySettings,
    after: VerifySettings,
    warm_after: bool = False,
    pause_s: float = 0.0,
) -> dict:
    """Tier 2 cold under ``before`` and ``after``, alternating per candidate; medians and their ratio.

    With ``warm_after``, the ``after`` checks take their sides from one :class:`WarmSides`, as a
    caller verifying one candidate after another does; ``pause_s`` seconds pass before every check
    of either arm (the warm sides start in the pause after the check that took theirs, so they
    never slow a timed check down)."""
    seconds: dict[bool, list[float]] = {False: [], True: []}
    verdicts: dict[bool, list[str]] = {False: [], True: []}
    with WarmSides() as warm:
        for pair in pairs:
            for now, settings in ((False, before), (True, after)):
                time.sleep(pause_s)
                start = time.perf_counter()
                result = verify(*pair, settings, use_cache=False, warm=warm if now and warm_after else None)
                seconds[now].append(time.perf_counter() - start)
                verdicts[now].append(result.verdict.value)
        taken = warm.taken
    then, now = statistics.median(seconds[False]), statistics.median(seconds[True])
    figures = {
        "candidates": len(pairs),
        "before_median_s": round(then, 3),
        "after_median_s": round(now, 3),
        "ratio": round(now / then, 3),
        "same_verdicts": verdicts[False] == verdicts[True],
        "verdicts": {v: verdicts[True].count(v) for v in sorted(set(verdicts[True]))},
    }
    if warm_after:
        figures.update(pause_s=pause_s, warm_sides_taken=taken)
    return figures


def bridge_vs_aten(pairs: list[tuple[str, str]], pause_s: float) -> dict:
    """Tier 2 cold as it ran before its speed work and as it runs now (see the module docstring)."""
    before = VerifySettings(tier=Tier.CPU, torch_bridge=False, device_boundary=False, overlap_tiers=False)
    figures = side_by_side(pairs, before, VerifySettings(tier=Tier.CPU), warm_after=True, pause_s=pause_s)
    return {
        **figures,
        "target_ratio": TARGET_BRIDGE_RATIO,
        "meets_target": figures["ratio"] <= TARGET_BRIDGE_RATIO,
        "target_after_s": TARGET_TIER2_S,
        "meets_after_target": figures["after_median_s"] <= TARGET_TIER2_S,
    }


def warm_vs_cold(pairs: list[tuple[str, str]]) -> dict:
    """Tier 2 as it runs now, checks back to back with no pause: every candidate starting its own
    sides (before), then every candidate again taking them from one :class:`WarmSides` (after).
    Not alternated: a warm check's replacements import torch during the check that follows it,
    which would slow a cold check there. The least warm sides gain (an eval's verifying stage)."""
    settings = VerifySettings(tier=Tier.CPU)
    seconds: dict[bool, list[float]] = {False: [], True: []}
    verdicts: dict[bool, list[str]] = {False: [], True: []}
    with WarmSides() as warm:
        for now in (False, True):
            for pair in pairs:
                start = time.perf_counter()
                result = verify(*pair, settings, use_cache=False, warm=warm if now else None)
                seconds[now].append(time.perf_counter() - start)
                verdicts[now].append(result.verdict.value)
        taken = warm.taken
    then, now = statistics.median(seconds[False]), statistics.median(seconds[True])
    return {
        "candidates": len(pairs),
        "before_median_s": round(then, 3),
        "after_median_s": round(now, 3),
        "ratio": round(now / then, 3),
        "before_total_s": round(sum(seconds[False]), 1),
        "after_total_s": round(sum(seconds[True]), 1),
        "same_verdicts": verdicts[False] == verdicts[True],
        "warm_sides_taken": taken,
    }


def overlap_vs_serial(pairs: list[tuple[str, str]]) -> dict:
    """Tier 2 cold on the bridge after tier 1 (before) and while tier 1 compiles (after)."""
    return side_by_side(pairs, VerifySettings(tier=Tier.CPU, overlap_tiers=False), VerifySettings(tier=Tier.CPU))


def std_on_demand(pairs: list[tuple[str, str]]) -> dict:
    """Tier 1 cold with every standard header (before) and with those the code names first (after)."""
    before = VerifySettings(tier=Tier.COMPILE, std_on_demand=False)
    figures = side_by_side(pairs, before, VerifySettings(tier=Tier.COMPILE))
    return {**figures, "target_after_s": TARGET_TIER1_S, "meets_target": figures["after_median_s"] <= TARGET_TIER1_S}


def _machine_busy_s() -> float:
    """CPU seconds the whole machine has been busy (``/proc/stat``: every state but idle and iowait),
    summed over its cores. The sandboxed sides are not this process's waited children (bwrap's PID
    namespace reaps them), so their time is read here; run the bench on an otherwise idle machine."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def shared_reference(pairs: list[tuple[str, str]], samples: int) -> dict:
    """Tier 2 cold per sample, ``samples`` per problem: each with its own reference run, then one
    batch per problem sharing a pool, side by side problem by problem. Wall seconds (one check at
    a time: the reference side overlaps the build, so sharing saves less here) and the machine's
    busy CPU seconds (what several checks side by side, an eval's workers, share)."""
    settings = VerifySettings(tier=Tier.CPU)
    seconds: dict[bool, list[float]] = {False: [], True: []}
    cpu: dict[bool, list[float]] = {False: [], True: []}
    verdicts: list[str] = []
    failures: list[str] = []
    for problem, solution in pairs:
        for shared in (False, True):
            pool = ReferencePool() if shared else None
            for _ in range(samples):
                start, cpu_start = time.perf_counter(), _machine_busy_s()
                result = verify(problem, solution, settings, use_cache=False, references=pool)
                seconds[shared].append(time.perf_counter() - start)
                cpu[shared].append(_machine_busy_s() - cpu_start)
                verdicts.append(result.verdict.value)
                if result.verdict.value != "pass":
                    failures.append(f"{result.verdict.value}: {result.reason} {result.log[-600:]}")
    own, shared = statistics.mean(seconds[False]), statistics.mean(seconds[True])
    own_cpu, shared_cpu = statistics.mean(cpu[False]), statistics.mean(cpu[True])
    return {
        "problems": len(pairs),
        "samples_per_problem": samples,
        "own_reference_mean_s": round(own, 3),
        "shared_reference_mean_s": round(shared, 3),
        "ratio": round(shared / own, 3),
        "own_reference_busy_cpu_s": round(own_cpu, 3),
        "shared_reference_busy_cpu_s": round(shared_cpu, 3),
        "cpu_ratio": round(shared_cpu / own_cpu, 3),
        "verdicts": {v: verdicts.count(v) for v in sorted(set(verdicts))},
        "failures": failures,
    }


def timed_pass(
    pairs: list[tuple[str, str]], settings: VerifySettings, cache_dir: Path | None
) -> tuple[list[float], list[str]]:
    """Seconds and verdict per (problem, solution) pair, one after another; no cache when None."""
    seconds, verdicts = [], []
    for problem, solution in pairs:
        start = time.perf_counter()
        result = verify(problem, solution, settings, cache_dir=cache_dir, use_cache=cache_dir is not None)
        seconds.append(time.perf_counter() - start)
        verdicts.append(result.verdict.value)
    return seconds, verdicts


def bench_tier(tier: Tier, pairs: list[tuple[str, str]], setup_pair: tuple[str, str]) -> dict:
    """Setup, cold and cached figures of one tier."""
    settings = VerifySettings(tier=tier)
    start = time.perf_counter()
    verify(*setup_pair, settings, use_cache=False)
    setup_s = time.perf_counter() - start
    cold, verdicts = timed_pass(pairs, settings, None)
    with tempfile.TemporaryDirectory(prefix="cuset-bench-cache-") as folder:
        timed_pass(pairs, settings, Path(folder))
        cached, _ = timed_pass(pairs, settings, Path(folder))
    cold_median = statistics.median(cold)
    return {
        "setup_s": round(setup_s, 3),
        "cold_median_s": round(cold_median, 3),
        "cold_max_s": round(max(cold), 3),
        "cached_median_s": round(statistics.median(cached), 4),
        "target_cold_s": TARGET_COLD_S[tier],
        "meets_target": cold_median <= TARGET_COLD_S[tier],
        "verdicts": {v: verdicts.count(v) for v in sorted(set(verdicts))},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", type=int, default=8, help="how many demo problems to time")
    parser.add_argument("--tiers", nargs="+", choices=["compile", "cpu"], default=["compile", "cpu"])
    parser.add_argument("--shared-data", type=int, default=10, help="correct level-1 kernels of ../shared/data to add")
    parser.add_argument("--samples", type=int, default=4, help="answers per problem in shared_reference")
    parser.add_argument(
        "--pause", type=float, default=3.0, help="seconds before every check of bridge_vs_aten (both arms)"
    )
    parts = ("cold", "bridge_vs_aten", "warm_vs_cold", "overlap_vs_serial", "std_on_demand", "shared_reference")
    parser.add_argument("--parts", nargs="+", choices=parts, default=list(parts), help="which figures to measure")
    args = parser.parse_args()
    problems = demo_problems()
    if len(problems) < args.problems + 1:
        print(f"error: the demo set has {len(problems)} problems, need {args.problems + 1}", file=sys.stderr)
        return 2
    pairs = [(p.problem_code, p.solution_code) for p in problems[: args.problems]]
    setup_pair = (problems[args.problems].problem_code, problems[args.problems].solution_code)
    # Other work on the machine inflates every figure; the load average says how much there was.
    figures = {"candidates": len(pairs), "cpus": os.cpu_count(), "load_1min_before": os.getloadavg()[0]}
    for name in args.tiers if "cold" in args.parts else ():
        tier = Tier(name)
        figures[f"tier{tier.rank}_{tier.value}"] = bench_tier(tier, pairs, setup_pair)
    if "compile" in args.tiers and "std_on_demand" in args.parts:
        figures["std_on_demand"] = std_on_demand(pairs + shared_level1(args.shared_data))
    if "cpu" in args.tiers:
        level1 = pairs + shared_level1(args.shared_data)
        if "bridge_vs_aten" in args.parts:
            figures["bridge_vs_aten"] = bridge_vs_aten(level1, args.pause)
        if "warm_vs_cold" in args.parts:
            figures["warm_vs_cold"] = warm_vs_cold(level1)
        if "overlap_vs_serial" in args.parts:
            figures["overlap_vs_serial"] = overlap_vs_serial(level1)
        if "shared_reference" in args.parts:
            figures["shared_reference"] = shared_reference(pairs[:4], args.samples)
    figures["load_1min_after"] = os.getloadavg()[0]
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
