"""Compare tuning runs from their progress JSONL: a Markdown table and loss/kept-ratio curves.

    python scripts/compare_runs.py RUN_DIR [RUN_DIR ...] --out DIR

Each RUN_DIR is a `cuset tune --output` folder (it holds progress.jsonl). Writes
DIR/comparison.md and DIR/curves.png.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

CURVES = (("loss", "objective loss"), ("ce", "plain cross-entropy"), ("kept_ratio", "kept-token ratio"))


def read_progress(run_dir: Path) -> list[dict]:
    """The progress lines of one run, in step order."""
    lines = (run_dir / "progress.jsonl").read_text().splitlines()
    rows = [json.loads(line) for line in lines if line.strip()]
    return [row for row in rows if row.get("type") == "progress"]


def summary(rows: list[dict], tail: int = 5) -> dict:
    """First and last-``tail``-steps mean of CE, mean kept ratio and throughput of one run."""
    last = rows[-tail:]
    return {
        "steps": rows[-1]["step"],
        "ce_first": rows[0]["ce"],
        "ce_last": statistics.fmean(row["ce"] for row in last),
        "kept_ratio": statistics.fmean(row["kept_ratio"] for row in rows),
        "p_sensitive_last": statistics.fmean(row.get("p_sensitive_mean") or 0.0 for row in last),
        "tokens_per_s": statistics.median(row["tokens_per_s"] for row in rows if row.get("tokens_per_s")),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    runs = {run.name: read_progress(run) for run in args.runs}

    lines = [
        "| run | steps | CE first step | CE last 5 steps | mean kept ratio | p(sensitive) last 5 | tokens/s |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, rows in runs.items():
        s = summary(rows)
        lines.append(
            f"| {name} | {s['steps']} | {s['ce_first']:.4f} | {s['ce_last']:.4f} | {s['kept_ratio']:.3f} "
            f"| {s['p_sensitive_last']:.3f} | {s['tokens_per_s']:.1f} |"
        )
    (args.out / "comparison.md").write_text("\n".join(lines) + "\n")

    figure, axes = plt.subplots(1, len(CURVES), figsize=(5 * len(CURVES), 3.6))
    for axis, (key, title) in zip(axes, CURVES):
        for name, rows in runs.items():
            axis.plot([row["step"] for row in rows], [row[key] for row in rows], label=name)
        axis.set_title(title)
        axis.set_xlabel("step")
        axis.grid(alpha=0.3)
    axes[0].legend()
    figure.tight_layout()
    figure.savefig(args.out / "curves.png", dpi=110)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
