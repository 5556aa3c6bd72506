"""How often each verification tier agrees with the GPU verdict on the labelled Sakana kernels.

Usage (from the repository root):

    .venv/bin/python scripts/fidelity.py --tier compile                 # all 102 kernels
    .venv/bin/python scripts/fidelity.py --tier cpu --limit 30 --workers 2

Each kernel (a standalone ``.cu`` torch extension, ``CUDA_Code``) is verified against its
problem (``PyTorch_Code_Module``) up to ``--tier``; one run at tier T also decides every
cheaper tier (tiers run in order and stop at the first failure). Per tier the table counts
correct kernels accepted, incorrect kernels rejected, and ``unsupported`` ones separately; the
list after it names every incorrect kernel the highest tier accepted, with the GPU's reason.
``--limit N`` takes kernels round-robin over (level, label) so a partial run stays balanced.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from itertools import zip_longest
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from cuset_core.evaluation.metrics import passed_mixed, passed_tier  # noqa: E402
from cuset_core.verify.result import Tier, Verdict, VerifyResult  # noqa: E402
from cuset_core.verify.run import verify  # noqa: E402
from cuset_core.verify.settings import VerifySettings  # noqa: E402

DEFAULT_DATA = REPO.parent / "shared" / "data" / "sakana_labelled_kernels.jsonl"


def load_rows(path: Path) -> list[dict]:
    """The labelled kernels, with their line number as ``row``."""
    rows = []
    for line_no, line in enumerate(path.read_text().splitlines(), start=1):
        if line.strip():
            rows.append(json.loads(line) | {"row": line_no})
    return rows


def balanced(rows: list[dict], limit: int | None) -> list[dict]:
    """Rows interleaved over (level, label) groups, cut to ``limit``."""
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        groups.setdefault((row["Level_ID"], bool(row["Correct"])), []).append(row)
    order = [row for batch in zip_longest(*groups.values()) for row in batch if row is not None]
    return order[:limit] if limit else order


def gpu_reason(row: dict) -> str:
    """One line on why the GPU run failed: its error message, or the value difference."""
    error = row.get("Error") or ""
    final = re.findall(r"Error testing CUDA kernel: (.*)", error)
    if final and "Error building extension" not in final[-1]:
        return final[-1].strip()[:160]
    compiler = re.findall(r"(?:error:|ptxas error\s*:)\s*(.*)", error)
    if compiler:
        return f"build failed: {compiler[0].strip()[:140]}"
    if row.get("Max_Diff") is not None:
        return f"wrong values (max diff {row['Max_Diff']})"
    return "failed (no log)"


def tier_outcome(result: VerifyResult, tier: Tier) -> str:
    """``accepted``, ``rejected`` or ``unsupported`` for ``tier``, read off a deeper run."""
    if passed_tier(result, tier):
        return "accepted"
    if result.tier_verdicts.get(tier, result.verdict if result.tier is tier else None) is Verdict.UNSUPPORTED:
        return "unsupported"
    return "rejected"


def table(rows: list[dict], results: list[VerifyResult], top: Tier) -> str:
    """Markdown table: per tier, agreement with the GPU label."""
    lines = [
        "| tier | correct accepted | correct rejected | correct unsupported | incorrect rejected "
        "| incorrect accepted | incorrect unsupported | correct pass rate (supported) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for tier in [t for t in Tier if t.rank <= top.rank]:
        counts = {(label, outcome): 0 for label in (True, False) for outcome in ("accepted", "rejected", "unsupported")}
        for row, result in zip(rows, results):
            counts[(bool(row["Correct"]), tier_outcome(result, tier))] += 1
        supported = counts[(True, "accepted")] + counts[(True, "rejected")]
        rate = f"{counts[(True, 'accepted')] / supported:.1%}" if supported else "-"
        lines.append(
            f"| {tier.value} | {counts[(True, 'accepted')]} | {counts[(True, 'rejected')]} "
            f"| {counts[(True, 'unsupported')]} | {counts[(False, 'rejected')]} | {counts[(False, 'accepted')]} "
            f"| {counts[(False, 'unsupported')]} | {rate} |"
        )
    return "\n".join(lines)


def details(rows: list[dict], results: list[VerifyResult], top: Tier) -> str:
    """Lists: incorrect kernels the top tier accepted, correct ones it rejected, unsupported features."""
    lines = [f"Incorrect kernels accepted by tier `{top.value}` (GPU reason):"]
    wrongly_passed = [(r, res) for r, res in zip(rows, results) if not r["Correct"] and passed_tier(res, top)]
    lines += [
        f"- row {r['row']} (level {r['Level_ID']}, {r['Kernel_Name']}): {gpu_reason(r)}" for r, _ in wrongly_passed
    ] or ["- none"]
    lines += ["", f"Correct kernels rejected by tier `{top.value}`:"]
    rejected = [(r, res) for r, res in zip(rows, results) if r["Correct"] and tier_outcome(res, top) == "rejected"]
    lines += [
        f"- row {r['row']} (level {r['Level_ID']}, {r['Kernel_Name']}): {res.verdict.value} at "
        f"{res.tier.value}: {res.reason[:160]}"
        for r, res in rejected
    ] or ["- none"]
    unsupported = sorted({res.unsupported_feature or "?" for res in results if res.verdict is Verdict.UNSUPPORTED})
    lines += ["", f"Unsupported features seen: {', '.join(unsupported) or 'none'}"]
    return "\n".join(lines)


def policy_summary(rows: list[dict], results: list[VerifyResult], policy: str) -> str:
    """Correct and incorrect kernels the CPU tier passed under the run's policy and, from the same
    checks, under ``mixed`` (a ``kernels`` run says of each refusal whether mixed would pass it)."""
    correct = [res for row, res in zip(rows, results) if row["Correct"]]
    incorrect = [res for row, res in zip(rows, results) if not row["Correct"]]

    def share(passed: int, of: int) -> str:
        return f"{passed}/{of} ({passed / of:.1%})" if of else "0/0"

    lines = []
    for name, passed in ((policy, lambda r: passed_tier(r, Tier.CPU)), ("mixed", passed_mixed)):
        if name == "mixed" and policy == "mixed":
            continue
        lines.append(
            f"- policy {name}: correct kernels passed {share(sum(map(passed, correct)), len(correct))}, "
            f"incorrect kernels passed {sum(map(passed, incorrect))}/{len(incorrect)}"
        )
    refused = [res for res in correct if res.policy and res.reason.startswith("policy ")]
    operators = Counter(name for res in refused for name in res.torch_ops)
    if refused:
        named = ", ".join(f"{name} in {n}" for name, n in operators.most_common(12)) or "transfers only"
        lines.append(f"- correct kernels the policy refused: {len(refused)}; torch operators among them: {named}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tier", choices=[t.value for t in Tier], default="compile")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--limit", type=int, default=None, help="verify this many kernels (balanced)")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--cache-dir", type=Path, default=None, help="verification cache (default: the user's)")
    parser.add_argument("--no-cache", action="store_true", help="verify every kernel afresh")
    parser.add_argument(
        "--tolerance-profile",
        choices=["kernelbench", "v0"],
        default="kernelbench",
        help="kernelbench: fp32 1e-4, fp16/bf16 1e-2 (default); v0: 1e-2 for every dtype",
    )
    parser.add_argument("--rows-out", type=Path, default=None, help="write per-kernel results (JSONL)")
    parser.add_argument(
        "--device-boundary",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="tier 2 behind the device boundary (VerifySettings.device_boundary, the default); "
        "--no-device-boundary: in one process, as before",
    )
    parser.add_argument(
        "--policy",
        choices=["kernels", "mixed"],
        default="kernels",
        help="tier 2's data-flow policy (a kernels run also reports what mixed passes, from the same checks)",
    )
    args = parser.parse_args()
    if not args.data.is_file():
        print(f"error: data file not found: {args.data}", file=sys.stderr)
        return 2
    top = Tier(args.tier)
    rows = balanced(load_rows(args.data), args.limit)
    settings = VerifySettings(
        tier=top, tolerance_profile=args.tolerance_profile, device_boundary=args.device_boundary, policy=args.policy
    )
    start = time.perf_counter()
    done = 0

    def check(row: dict) -> VerifyResult:
        nonlocal done
        result = verify(
            row["PyTorch_Code_Module"],
            row["CUDA_Code"],
            settings,
            cache_dir=args.cache_dir,
            use_cache=not args.no_cache,
        )
        done += 1
        print(
            f"[{done}/{len(rows)}] row {row['row']} label={row['Correct']} -> {result.verdict.value} "
            f"({result.tier.value}) {result.reason[:100]}",
            file=sys.stderr,
            flush=True,
        )
        return result

    with ThreadPoolExecutor(max_workers=args.workers) as pool:
        results = list(pool.map(check, rows))
    elapsed = time.perf_counter() - start
    if args.rows_out:
        with args.rows_out.open("w") as handle:
            for row, result in zip(rows, results):
                handle.write(
                    json.dumps(
                        {
                            "row": row["row"],
                            "level": row["Level_ID"],
                            "correct": row["Correct"],
                            "gpu_reason": None if row["Correct"] else gpu_reason(row),
                            "result": result.model_dump(mode="json"),
                        }
                    )
                    + "\n"
                )
    print(
        f"Tier `{top.value}` on {len(rows)} kernels ({sum(bool(r['Correct']) for r in rows)} correct), "
        f"{elapsed:.0f} s wall, {args.workers} worker(s).\n"
    )
    print(table(rows, results, top))
    print()
    print(details(rows, results, top))
    if top.rank >= Tier.CPU.rank:
        print("\nBy data-flow policy (tier cpu):\n" + policy_summary(rows, results, args.policy))
    built = Counter(prelude for result in results for prelude in result.built_with.values())
    if built:
        print("\nTier 2 built the extensions with: " + ", ".join(f"{n} {name}" for name, n in built.most_common()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
