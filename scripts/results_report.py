"""Build docs/results.md's generated sections and plots from experiments/comparison.

    .venv/bin/python scripts/results_report.py [--size small] [--out docs/results]

Reads every finished run of one size (``experiments/comparison/<size>/<method>-s<seed>/``:
progress.jsonl and eval/results.json; ``base/eval``; ``confidence/*/report.json``; the knob
sweep's ``sweep/<variant>-s<seed>/`` and ``sweep/judge/*/report.json``), writes
``<out>/<size>_curves.png`` (loss, plain CE and kept ratio per step) and copies of the
confidence histograms, and puts the tables into ``--doc`` between the markers
``<!-- generated:<size>:begin -->`` and ``<!-- generated:<size>:end -->`` (the prose around
them is written by hand), or into ``<out>/<size>_tables.md`` when the doc has no such markers.
Numbers come only from runs whose files exist; runs not done show as "not run".
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import sys
from collections import Counter, defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from run_comparison import METHODS, SWEEP_MAX_TOKENS, SWEEP_RECORDS_PER_PROBLEM  # noqa: E402

METRICS = ("compile@1", "compile@2", "cpu_correct@1", "cpu_correct@2")
CURVES = (("loss", "objective loss"), ("ce", "plain cross-entropy"), ("kept_ratio", "kept-token ratio"))

# Which CUDA construct a compiler or runtime message is about; first match wins. The
# categories follow DESIGN.md §3's sensitivity categories, plus the non-CUDA causes.
FAILURE_PATTERNS = (
    ("thread/block indexing", r"threadIdx|blockIdx|blockDim|gridDim|warpSize"),
    ("launch configuration", r"<<<|>>>|dim3|kernel launch|too many resources|invalid configuration"),
    ("memory spaces", r"__shared__|__constant__|__restrict__|shared memory"),
    ("synchronisation", r"__syncthreads|__syncwarp|__threadfence"),
    ("warp primitives", r"__shfl|__ballot|__any_sync|__all_sync"),
    ("atomics", r"atomic"),
    ("execution-space qualifiers", r"__global__|__device__|__host__|calling a __host__|execution space"),
    (
        "PyTorch binding",
        r"torch::|at::|data_ptr|TORCH_CHECK|AT_DISPATCH|PYBIND11|load_inline|functions=|"
        r"pybind|cpp_sources|cuda_sources|Tensor|ModelNew|forward\(",
    ),
    ("memory API", r"cudaMalloc|cudaMemcpy|cudaFree|cudaMemset"),
    (
        "C++ syntax/types",
        r"expected|undefined|undeclared|identifier|no matching|no instance|cannot convert|"
        r"incomplete type|redefinition|syntax|declared|argument",
    ),
)


def load_json(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.is_file() else None


def load_eval(eval_dir: Path) -> dict | None:
    """An eval's results.json; answers generated outside `cuset eval` (answers.jsonl, the GPU
    path) lend their samples the finish reason and token count that `--answers` does not keep."""
    results = load_json(eval_dir / "results.json")
    answers = eval_dir / "answers.jsonl"
    if results and answers.is_file():
        seen: Counter = Counter()
        facts = {}
        for line in answers.read_text().splitlines():
            row = json.loads(line)
            facts[(row["problem_id"], seen[row["problem_id"]])] = row
            seen[row["problem_id"]] += 1
        for sample in results["samples"]:
            row = facts.get((sample["problem_id"], sample["index"]), {})
            sample["finish_reason"] = sample.get("finish_reason") or row.get("finish_reason")
            sample["completion_tokens"] = sample.get("completion_tokens") or row.get("completion_tokens")
    return results


def metrics_of(aggregate: dict) -> dict[str, float]:
    """An eval's metrics by name: results written before the greedy sample was drawn apart have
    one flat map (sample 0 greedy, mixed into pass@k); later ones a greedy block, shown as
    ``greedy compile@1``, and pass@k from i.i.d. samples under the plain names."""
    if "metrics" in aggregate:
        return aggregate["metrics"]
    greedy = (aggregate.get("greedy") or {}).get("metrics", {})
    return {
        **{f"greedy {name}": value for name, value in greedy.items()},
        **(aggregate.get("sampled") or {}).get("metrics", {}),
    }


def progress_rows(run_dir: Path, log: str = "progress.jsonl") -> list[dict]:
    """The progress lines of a finished run, deduplicated by step (a resumed run logs again)."""
    path = run_dir / log
    if not path.is_file():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    by_step = {row["step"]: row for row in rows if row.get("type") == "progress"}
    return [by_step[step] for step in sorted(by_step)]


def finished(run_dir: Path) -> bool:
    path = run_dir / "progress.jsonl"
    return path.is_file() and '"type": "done"' in path.read_text()


def spread(values: list[float]) -> str:
    """``mean`` for one value, ``mean ± half-range (n)`` for several."""
    if not values:
        return "-"
    mean = statistics.fmean(values)
    if len(values) == 1:
        return f"{mean:.3f}"
    return f"{mean:.3f} ± {(max(values) - min(values)) / 2:.3f} (n={len(values)})"


# Static-tier rejections (tier 0, before nvcc): what the answer lacks, from the verdict's reason.
STATIC_PATTERNS = (
    ("Python syntax", r"does not parse"),
    ("no load_inline call", r"no load_inline"),
    ("no ModelNew class", r"ModelNew"),
    ("no CUDA kernel", r"__global__|no kernel|kernel"),
    ("PyTorch binding", r"load_inline|cuda_sources|cpp_sources|functions"),
)


def classify(sample: dict) -> str:
    """The failure category of one failed sample (see STATIC_PATTERNS and FAILURE_PATTERNS);
    answers cut at max_new_tokens are marked, since that alone can explain a syntax error."""
    result = sample["result"]
    verdict = result["verdict"]
    cut = " (cut at max_new_tokens)" if sample.get("finish_reason") == "length" else ""
    if verdict == "no_code":
        return "no code block" + cut
    if verdict == "static_reject":
        reason = result.get("reason", "")
        name = next((name for name, pattern in STATIC_PATTERNS if re.search(pattern, reason)), "other static")
        return f"static: {name}{cut}"
    if verdict == "compile_error":
        errors = [d["message"] for d in result.get("diagnostics", []) if d.get("severity") == "error"]
        text = "\n".join(errors) or result.get("reason", "") + "\n" + result.get("log", "")
        name = next((name for name, pattern in FAILURE_PATTERNS if re.search(pattern, text)), "other")
        return f"compile: {name}{cut}"
    return verdict + cut


def collect(size_dir: Path) -> dict:
    """Everything the tables need: per run evals and progress, per method lists over seeds."""
    runs: dict[str, dict] = {}
    base = load_eval(size_dir / "base" / "eval")
    if base:
        runs["base"] = {
            "method": "base",
            "seed": None,
            "eval": base,
            "progress": [],
            "confidence": load_json(size_dir / "confidence" / "base" / "report.json"),
        }
    for run_dir in sorted(size_dir.glob("*-s[0-9]*")):
        method, seed = run_dir.name.rsplit("-s", 1)
        runs[run_dir.name] = {
            "method": method,
            "seed": int(seed),
            "trained": finished(run_dir),
            "eval": load_eval(run_dir / "eval"),
            "progress": progress_rows(run_dir),
            "confidence": load_json(size_dir / "confidence" / run_dir.name / "report.json"),
        }
    return runs


def metrics_table(runs: dict) -> list[str]:
    by_method: dict[str, list[dict]] = defaultdict(list)
    for run in runs.values():
        if run["eval"]:
            by_method[run["method"]].append(run)
    lines = [
        "| model | seeds | " + " | ".join(METRICS) + " | held-out sensitive mean p | samples | verdicts (all seeds) |",
        "|---|---|" + "---|" * (len(METRICS) + 3),
    ]
    for method in ("base", *METHODS):
        done = by_method.get(method, [])
        if not done:
            lines.append(f"| {method} | - | " + " | ".join("not run" for _ in METRICS) + " | - | - | - |")
            continue
        seeds = ",".join("-" if r["seed"] is None else str(r["seed"]) for r in done)
        cells = [spread([metrics_of(r["eval"]["aggregate"]).get(m, 0.0) for r in done]) for m in METRICS]
        cells.append(spread([r["confidence"]["groups"]["sensitive"]["mean_p"] for r in done if r.get("confidence")]))
        verdicts: Counter = Counter()
        for r in done:
            verdicts.update(r["eval"]["aggregate"]["verdicts"])
        samples = sum(r["eval"]["aggregate"]["samples"] for r in done)
        shown = ", ".join(f"{v} {c}" for v, c in verdicts.most_common())
        lines.append(f"| {method} | {seeds} | " + " | ".join(cells) + f" | {samples} | {shown} |")
    return lines


def run_order(name: str) -> tuple:
    """base, then the objectives in METHODS order, seeds ascending."""
    method, _, seed = name.rpartition("-s")
    return (METHODS.index(method) if method in METHODS else -1, int(seed) if seed.isdigit() else 0)


def training_table(runs: dict) -> list[str]:
    lines = [
        "| run | steps | tokens | CE first step | CE last 5 steps | mean kept ratio | "
        "mean low-conf. region share | max sample weight | tokens/s (median) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, run in sorted(runs.items(), key=lambda item: run_order(item[0])):
        rows = run["progress"]
        if not rows:
            continue
        last = rows[-5:]
        state = "" if run.get("trained") else " (unfinished)"
        tokens = rows[-1].get("trained_tokens", 0)
        lines.append(
            f"| {name}{state} | {rows[-1]['step']} | {tokens} | {rows[0]['ce']:.4f} | "
            f"{statistics.fmean(r['ce'] for r in last):.4f} | {statistics.fmean(r['kept_ratio'] for r in rows):.3f} | "
            f"{statistics.fmean(r.get('low_conf_region_share') or 0.0 for r in rows):.3f} | "
            f"{max(r.get('weight_max') or 1.0 for r in rows):.3f} | "
            f"{statistics.median(r['tokens_per_s'] for r in rows if r.get('tokens_per_s')):.1f} |"
        )
    return lines


def failure_table(runs: dict) -> list[str]:
    """Failed samples per category and method (all seeds pooled), plus truncation counts."""
    counts: dict[str, Counter] = defaultdict(Counter)
    truncated: Counter = Counter()
    totals: Counter = Counter()
    for run in runs.values():
        if not run["eval"]:
            continue
        for sample in run["eval"]["samples"]:
            totals[run["method"]] += 1
            truncated[run["method"]] += sample.get("finish_reason") == "length"
            if sample["result"]["verdict"] != "pass":
                counts[run["method"]][classify(sample)] += 1
    methods = [m for m in ("base", *METHODS) if totals[m]]
    categories = sorted(
        {c for counter in counts.values() for c in counter}, key=lambda c: -sum(counts[m][c] for m in methods)
    )
    lines = ["| failure category | " + " | ".join(methods) + " |", "|---|" + "---|" * len(methods)]
    for category in categories:
        lines.append(f"| {category} | " + " | ".join(str(counts[m][category]) for m in methods) + " |")
    lines.append("| **samples** | " + " | ".join(str(totals[m]) for m in methods) + " |")
    lines.append("| of which hit max_new_tokens | " + " | ".join(str(truncated[m]) for m in methods) + " |")
    return lines


# What a kernel answer needs, as regexes over the raw answer: shows how far each model got.
CONSTRUCTS = (
    ("```python block", r"```python"),
    ("class ModelNew", r"class\s+ModelNew"),
    ("load_inline", r"load_inline\s*\("),
    ("__global__ kernel", r"__global__\s+void"),
    ("thread indexing", r"blockIdx\.x\s*\*\s*blockDim\.x|threadIdx\.x"),
    ("bounds guard", r"if\s*\(\s*\w+\s*<\s*\w+"),
    ("<<<launch>>>", r"<<<[^>]+>>>"),
    ("data_ptr<T>()", r"data_ptr<\w+>\(\)"),
    ("functions=[...]", r"functions\s*=\s*\["),
)


def constructs_table(runs: dict) -> list[str]:
    """Share of answers that contain each construct a kernel answer needs, per method."""
    answers: dict[str, list[str]] = defaultdict(list)
    for run in runs.values():
        if run["eval"]:
            answers[run["method"]] += [sample["answer"] for sample in run["eval"]["samples"]]
    methods = [m for m in ("base", *METHODS) if answers[m]]
    lines = ["| construct (share of answers) | " + " | ".join(methods) + " |", "|---|" + "---|" * len(methods)]
    for name, pattern in CONSTRUCTS:
        shares = [sum(bool(re.search(pattern, a)) for a in answers[m]) / len(answers[m]) for m in methods]
        lines.append(f"| {name} | " + " | ".join(f"{share:.2f}" for share in shares) + " |")
    return lines


def first_errors(runs: dict, per_method: int = 3) -> list[str]:
    """A few compiler errors per method, verbatim (first error line of each failed sample)."""
    lines = []
    for name, run in runs.items():
        if not run["eval"]:
            continue
        shown = 0
        for sample in run["eval"]["samples"]:
            errors = [d for d in sample["result"].get("diagnostics", []) if d.get("severity") == "error"]
            if sample["result"]["verdict"] == "compile_error" and errors and shown < per_method:
                message = errors[0]["message"].replace("|", "\\|").replace("`", "'")[:140]
                lines.append(f"- {name} {sample['problem_id']}#{sample['index']}: `{message}`")
                shown += 1
    return lines


def confidence_section(size_dir: Path, out: Path, size: str, link_base: Path) -> list[str]:
    """One row per model (held-out records, same for all), then the lowest-confidence regions
    and histograms of the base model and the first CuSeT run."""
    reports = {d.name: load_json(d / "report.json") for d in (size_dir / "confidence").glob("*")}
    reports = {name: r for name, r in sorted(reports.items(), key=lambda i: run_order(i[0])) if r}
    if not reports:
        return ["No confidence report yet."]
    high, low = next(iter(reports.values()))["thresholds"].values()
    lines = [
        f"| model | records | sensitive share | sensitive mean p | sensitive p >= {high} | sensitive p < {low} "
        f"| non-sensitive mean p | non-sensitive p >= {high} | regions with mean p < {low} "
        "| sensitive tokens in them |",
        "|---|" + "---|" * 9,
    ]
    for name, r in reports.items():
        sens, non = r["groups"]["sensitive"], r["groups"]["non_sensitive"]
        cells = [
            r["tokens"]["sensitive_share"],
            sens["mean_p"],
            sens["share_high"],
            sens["share_low"],
            non["mean_p"],
            non["share_high"],
            r["regions"]["low_confidence_share"],
            r["regions"]["sensitive_tokens_in_low_confidence_regions"],
        ]
        lines.append(
            f"| {name} | {r['records']} | " + " | ".join("-" if c is None else f"{c:.3f}" for c in cells) + " |"
        )
    cuset = next((name for name in reports if name.startswith("cuset-s")), None)
    for name in [n for n in ("base", cuset) if n in reports]:
        report = reports[name]
        lines += [
            "",
            f"Lowest-confidence regions, `{name}`:",
            "",
            "| category | kind | mean p | text |",
            "|---|---|---|---|",
        ]
        for region in report["lowest_regions"][:6]:
            text = " ".join(region["text"].split())[:90].replace("|", "\\|").replace("`", "'")
            lines.append(f"| {region['category']} | {region['kind']} | {region['mean_p']:.3f} | `{text}` |")
        png = size_dir / "confidence" / name / "confidence.png"
        if png.is_file():
            target = out / f"{size}_confidence_{name}.png"
            shutil.copyfile(png, target)
            lines += ["", f"![confidence histogram, {name}]({os.path.relpath(target, link_base)})"]
    return lines


SWEEP_CATEGORIES = ("indexing", "bounds_guard", "sync", "launch", "binding")


def sweep_order(name: str) -> tuple:
    """base, the sft and default-cuset runs the variants are compared with, then the variants."""
    return (name != "base", not name.startswith("sft-"), not name.startswith("cuset-"), name)


def sweep_section(size_dir: Path) -> list[str]:
    """The knob sweep: each model's confidence on the sweep subset's held-out records (its
    judge), next to its method knobs and training figures. Higher sensitive mean p is better."""
    judges = {d.name: load_json(d / "report.json") for d in sorted((size_dir / "sweep" / "judge").glob("*"))}
    judges = {name: report for name, report in judges.items() if report}
    if not judges:
        return ["The sweep has not run yet (`scripts/run_comparison.py --size SIZE --sweep`)."]
    first = next(iter(judges.values()))
    high, low = first["thresholds"].values()
    lines = [
        f"Judge: `cuset confidence-report` on {first['records']} held-out records of the sweep "
        f"subset's problems (`runs/comparison-data/confidence_sweep.jsonl`, up to {SWEEP_RECORDS_PER_PROBLEM} "
        f"per problem, <= {SWEEP_MAX_TOKENS:,} tokens); {first['tokens']['sensitive']} of {first['tokens']['supervised']} "
        "answer tokens are CUDA-sensitive.",
        "",
        "| model | method knobs | sensitive mean p | sensitive p < " + f"{low} | sensitive p >= {high} | "
        f"non-sensitive mean p | regions with mean p < {low} | CE last 5 train steps | mean kept ratio | "
        "mean low-conf. region share | max sample weight |",
        "|---|---|" + "---|" * 9,
    ]
    for name in sorted(judges, key=sweep_order):
        report = judges[name]
        run_dir = size_dir / name if (size_dir / name).is_dir() else size_dir / "sweep" / name
        config = load_json(run_dir / "job_base.json") or {}
        method = config.get("method", {"type": "base model" if name == "base" else "(no job_base.json)"})
        knobs = ", ".join(f"{k}={v}" for k, v in method.items() if k != "type") or "defaults"
        rows = progress_rows(run_dir) if name != "base" else []
        train = ["-"] * 4
        if rows:
            train = [
                f"{statistics.fmean(r['ce'] for r in rows[-5:]):.4f}",
                f"{statistics.fmean(r['kept_ratio'] for r in rows):.3f}",
                f"{statistics.fmean(r.get('low_conf_region_share') or 0.0 for r in rows):.3f}",
                f"{max(r.get('weight_max') or 1.0 for r in rows):.3f}",
            ]
        sens, non = report["groups"]["sensitive"], report["groups"]["non_sensitive"]
        lines.append(
            f"| {name} | {method['type']}: {knobs} | {sens['mean_p']:.4f} | {sens['share_low']:.3f} | "
            f"{sens['share_high']:.3f} | {non['mean_p']:.4f} | "
            f"{report['regions']['low_confidence_share']:.3f} | " + " | ".join(train) + " |"
        )
    evals = {d: load_eval(d / "eval") for d in sorted((size_dir / "sweep").glob("*-s[0-9]*"))}
    picked = {run_dir: result for run_dir, result in evals.items() if result}
    if picked:
        lines += [
            "",
            "The sweep's pick, evaluated on the reported problems like every run above:",
            "",
            "| model | " + " | ".join(METRICS) + " | held-out sensitive mean p | verdicts |",
            "|---|" + "---|" * (len(METRICS) + 2),
        ]
        for run_dir, result in picked.items():
            aggregate = result["aggregate"]
            held_out = load_json(run_dir / "confidence" / "report.json")
            p = f"{held_out['groups']['sensitive']['mean_p']:.3f}" if held_out else "-"
            verdicts = ", ".join(f"{v} {c}" for v, c in Counter(aggregate["verdicts"]).most_common())
            lines.append(
                f"| {run_dir.name} | "
                + " | ".join(f"{metrics_of(aggregate).get(m, 0.0):.3f}" for m in METRICS)
                + f" | {p} | {verdicts} |"
            )
    lines += [
        "",
        "Sensitive mean p by category on the same records:",
        "",
        "| model | " + " | ".join(SWEEP_CATEGORIES) + " |",
        "|---|" + "---|" * len(SWEEP_CATEGORIES),
    ]
    for name in sorted(judges, key=sweep_order):
        groups = judges[name]["groups"]
        lines.append(
            f"| {name} | "
            + " | ".join(
                f"{groups[c]['mean_p']:.3f}" if groups.get(c, {}).get("tokens") else "-" for c in SWEEP_CATEGORIES
            )
            + " |"
        )
    return lines


def plot_curves(runs: dict, path: Path, curves=CURVES, order=run_order) -> bool:
    """One panel per (progress key, title) of ``curves``, one line per run (seed 0 solid, others
    dashed) in ``order`` of the run names; a key a run does not log is left blank."""
    trained = {name: run["progress"] for name, run in runs.items() if run["progress"]}
    if not trained:
        return False
    figure, axes = plt.subplots(1, len(curves), figsize=(5.2 * len(curves), 3.8))
    for axis, (key, title) in zip(axes, curves):
        for name, rows in sorted(trained.items(), key=lambda item: order(item[0])):
            style = "-" if name.endswith("-s0") else "--"
            values = [float("nan") if r.get(key) is None else r[key] for r in rows]
            axis.plot([r["step"] for r in rows], values, style, label=name, linewidth=1.2)
        axis.set_title(title)
        axis.set_xlabel("optimizer step")
        axis.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="small")
    parser.add_argument("--experiments", type=Path, default=ROOT / "experiments" / "comparison")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "results")
    parser.add_argument(
        "--doc",
        type=Path,
        default=ROOT / "docs" / "results.md",
        help="document whose generated block for this size is replaced",
    )
    args = parser.parse_args()
    size_dir = args.experiments / args.size
    args.out.mkdir(parents=True, exist_ok=True)
    runs = collect(size_dir)
    # Image links are relative to the document that shows the tables.
    in_doc = args.doc.is_file() and f"<!-- generated:{args.size}:begin -->" in args.doc.read_text()
    link_base = args.doc.parent if in_doc else args.out
    status = load_json(size_dir / "status.json") or {}
    curves = args.out / f"{args.size}_curves.png"
    sections = [
        f"<!-- generated by scripts/results_report.py --size {args.size}; do not edit by hand -->",
        "",
        "### Evaluation (reported validation subset)",
        "",
        *metrics_table(runs),
        "",
        "### Training",
        "",
        *training_table(runs),
    ]
    if plot_curves(runs, curves):
        sections += ["", f"![loss, plain CE and kept ratio per step]({os.path.relpath(curves, link_base)})"]
    sections += [
        "",
        "### Failures by category (all seeds pooled)",
        "",
        *failure_table(runs),
        "",
        "Constructs present in the answers (all samples, all seeds):",
        "",
        *constructs_table(runs),
        "",
        "First compiler error of some failing samples:",
        "",
        *(first_errors(runs) or ["- none: no sample reached nvcc and failed there"]),
    ]
    sections += [
        "",
        "### Confidence report (validation records)",
        "",
        *confidence_section(size_dir, args.out, args.size, link_base),
    ]
    sections += ["", "### Knob sweep (sweep subset; never the reported problems)", "", *sweep_section(size_dir)]
    sections += ["", "### Run status", "", "| stage | state | last recorded |", "|---|---|---|"]
    sections += [f"| {k} | {v['state']} | {v['time']} |" for k, v in status.items()]
    if in_doc:
        insert(args.doc, args.size, "\n".join(sections))
    else:
        target = args.out / f"{args.size}_tables.md"
        target.write_text("\n".join(sections) + "\n")
        print(f"wrote {target}")


def insert(doc: Path, size: str, body: str) -> None:
    """Replace the text between ``<!-- generated:SIZE:begin -->`` and ``...:end -->`` in ``doc``
    (the prose around it is written by hand)."""
    begin, end = f"<!-- generated:{size}:begin -->", f"<!-- generated:{size}:end -->"
    text = doc.read_text()
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    doc.write_text(head + begin + "\n" + body + "\n" + end + tail)
    print(f"updated {doc}")


if __name__ == "__main__":
    main()
