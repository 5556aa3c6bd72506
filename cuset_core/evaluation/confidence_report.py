"""Judging a model's grasp of CUDA-sensitive code without running it, and the paper's finding.

For every held-out record, one no-grad forward pass gives each gold answer token's negative
log-likelihood l (nats; p = exp(-l), no second softmax) and whether it is the model's argmax;
the sensitivity analysis says which tokens are sensitive, of which category, in which region.

Two sections come out of it (DESIGN.md §3):
- the judges, per region category and overall, over region tokens: mean NLL (the primary
  proxy, a proper scoring rule), teacher-forced top-1 accuracy, region exact match (share of
  regions whose every token is the argmax), and mean p, which is the paper's finding and never a
  judge (DFT maximises it directly). Functional metrics decide; these proxies only explain.
- the finding: sensitive vs non-sensitive tokens (mean p, shares above ``high`` and below
  ``low``), per span category, histograms, and the regions with the lowest mean p.

``cuset confidence-report`` writes it as ``report.json``, ``report.md`` and ``confidence.png``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from cuset_core.analysis.analyze import analyze_answer
from cuset_core.analysis.categories import Category
from cuset_core.analysis.tokens import align_tokens
from cuset_core.data import IGNORE_INDEX, encode_record
from cuset_core.evaluation.confidence_settings import ReportSettings

SCHEMA = "cuset.confidence-report/2"
OVERALL = "all"
FINDING_LABEL = "the paper's finding, not a judge"
JUDGE_LABELS = {
    "nll": "mean NLL of region tokens, nats (primary proxy: a proper scoring rule; lower is better)",
    "top1_accuracy": "teacher-forced top-1 accuracy of region tokens",
    "region_exact_match": "share of regions whose every token is the argmax",
    "mean_p": FINDING_LABEL + " (DFT maximises it directly)",
}
REPORT_JSON, REPORT_MD, REPORT_PNG = "report.json", "report.md", "confidence.png"
SENSITIVE, NON_SENSITIVE = "sensitive", "non_sensitive"


@dataclass(frozen=True)
class RegionInfo:
    """What the report shows of a region."""

    kind: str
    category: Category
    text: str


@dataclass(frozen=True)
class RecordConfidence:
    """One record's supervised tokens, as aligned lists: the gold token's NLL (nats), whether
    it is the argmax, its span category (None: not sensitive) and its region id (-1: none)."""

    line: int
    nll: list[float]
    top1: list[bool]
    category: list[Category | None]
    region: list[int]
    regions: dict[int, RegionInfo]

    @property
    def p(self) -> list[float]:
        """The gold tokens' probabilities, exp(-nll)."""
        return [math.exp(-value) for value in self.nll]


def gold_nll(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """NLL of each gold token in nats: ``logits`` (n, vocab), ``targets`` (n,) -> (n,) float32 >= 0."""
    return F.cross_entropy(logits.float(), targets, reduction="none")


@torch.inference_mode()
def record_confidence(model, encoded, answer: str, line: int) -> RecordConfidence | None:
    """Forward ``encoded`` (an ``EncodedRecord`` of ``answer``) once, batch 1; None when no
    token is supervised. Only the logits of the supervised positions are materialised."""
    labels = torch.tensor(encoded.labels)
    supervised = (labels != IGNORE_INDEX).nonzero().flatten()
    if supervised.numel() == 0 or int(supervised[-1]) == 0:
        return None
    first = max(int(supervised[0]), 1)  # token 0 has no prediction
    input_ids = torch.tensor([encoded.input_ids], device=model.device)
    keep = len(encoded.input_ids) - first + 1  # logits of positions first-1 .. end
    logits = model(input_ids=input_ids, logits_to_keep=keep).logits[0, :-1]
    targets = labels[first:].to(logits.device)
    mask = targets != IGNORE_INDEX
    logits, targets = logits[mask], targets[mask]
    nll = gold_nll(logits, targets).cpu().tolist()
    top1 = (logits.argmax(dim=-1) == targets).cpu().tolist()
    positions = (mask.nonzero().flatten().cpu() + first).tolist()

    analysis = analyze_answer(answer)
    sensitivity = align_tokens(analysis, encoded.offsets, encoded.answer_start)
    regions = {r.id: RegionInfo(r.kind, r.category, answer[r.start : r.end]) for r in analysis.regions}
    return RecordConfidence(
        line=line,
        nll=nll,
        top1=top1,
        category=[sensitivity.category[t] for t in positions],
        region=[sensitivity.region[t] for t in positions],
        regions=regions,
    )


def group_stats(p: np.ndarray, high: float, low: float) -> dict:
    """Token count, mean p and the shares with p >= ``high`` and p < ``low`` (None if empty)."""
    if p.size == 0:
        return {"tokens": 0, "mean_p": None, "share_high": None, "share_low": None}
    return {
        "tokens": int(p.size),
        "mean_p": float(p.mean()),
        "share_high": float((p >= high).mean()),
        "share_low": float((p < low).mean()),
    }


def token_groups(records: Sequence[RecordConfidence]) -> dict[str, np.ndarray]:
    """p of every supervised token grouped as sensitive, non-sensitive and per category."""
    p = np.array([x for r in records for x in r.p], dtype=np.float64)
    labels = np.array([c.value if c else "" for r in records for c in r.category], dtype=object)
    groups = {"all": p, SENSITIVE: p[labels != ""], NON_SENSITIVE: p[labels == ""]}
    for category in Category:
        groups[category.value] = p[labels == category.value]
    return groups


def _region_tokens(records: Sequence[RecordConfidence]) -> dict[tuple[int, int], list[tuple[float, bool]]]:
    """(nll, is argmax) of the supervised tokens of every region, keyed by (record index, region id)."""
    tokens: dict[tuple[int, int], list[tuple[float, bool]]] = {}
    for index, record in enumerate(records):
        for nll, top1, region in zip(record.nll, record.top1, record.region):
            if region >= 0:
                tokens.setdefault((index, region), []).append((nll, top1))
    return tokens


def judge_stats(records: Sequence[RecordConfidence]) -> dict[str, dict]:
    """The judges over region tokens, overall (``"all"``) and per region category.

    A region token counts under its region's category (the dominant one of its spans), so the
    same token set underlies every metric of a row. Per row: ``regions`` and ``tokens``
    counted, ``nll`` (mean over tokens, nats), ``top1_accuracy`` (share of tokens that are the
    argmax), ``region_exact_match`` (share of regions all of whose tokens are the argmax) and
    ``mean_p`` (mean of exp(-nll) over tokens: the paper's finding, not a judge); None if empty.
    """
    by_group: dict[str, list[list[tuple[float, bool]]]] = {OVERALL: []}
    by_group.update({category.value: [] for category in Category})
    for (index, region), tokens in _region_tokens(records).items():
        by_group[OVERALL].append(tokens)
        by_group[records[index].regions[region].category.value].append(tokens)
    stats = {}
    for name, regions in by_group.items():
        nll = np.array([value for tokens in regions for value, _ in tokens], dtype=np.float64)
        top1 = np.array([hit for tokens in regions for _, hit in tokens], dtype=bool)
        empty = nll.size == 0
        stats[name] = {
            "regions": len(regions),
            "tokens": int(nll.size),
            "nll": None if empty else float(nll.mean()),
            "top1_accuracy": None if empty else float(top1.mean()),
            "region_exact_match": (
                None if empty else float(np.mean([all(hit for _, hit in tokens) for tokens in regions]))
            ),
            "mean_p": None if empty else float(np.exp(-nll).mean()),
        }
    return stats


def region_scores(records: Sequence[RecordConfidence]) -> list[dict]:
    """Every region with supervised tokens: mean p and mean NLL of its tokens, whether all are
    the argmax; lowest mean p first."""
    scored = []
    for (index, region), tokens in _region_tokens(records).items():
        record, nll = records[index], np.array([value for value, _ in tokens])
        info = record.regions[region]
        scored.append(
            {
                "line": record.line,
                "region": region,
                "kind": info.kind,
                "category": info.category.value,
                "mean_p": float(np.exp(-nll).mean()),
                "nll": float(nll.mean()),
                "exact_match": all(hit for _, hit in tokens),
                "tokens": len(tokens),
                "text": info.text,
            }
        )
    scored.sort(key=lambda item: (item["mean_p"], item["line"], item["region"]))
    return scored


def summarize(records: Sequence[RecordConfidence], settings: ReportSettings) -> dict:
    """The report's numbers (schema ``cuset.confidence-report/2``); pure. ``judges`` holds the
    proxies (see ``judge_stats``); the other keys are the paper's finding."""
    groups = token_groups(records)
    edges = np.linspace(0.0, 1.0, settings.bins + 1)
    regions = region_scores(records)
    low_regions = [r for r in regions if r["mean_p"] < settings.low]
    sensitive_tokens = int(groups[SENSITIVE].size)
    return {
        "schema": SCHEMA,
        "model": settings.model,
        "data": str(settings.data),
        "records": len(records),
        "judges": {"labels": JUDGE_LABELS, "groups": judge_stats(records)},
        "thresholds": {"high": settings.high, "low": settings.low},
        "tokens": {
            "supervised": int(groups["all"].size),
            "sensitive": sensitive_tokens,
            "sensitive_share": sensitive_tokens / groups["all"].size if groups["all"].size else None,
        },
        "groups": {name: group_stats(values, settings.high, settings.low) for name, values in groups.items()},
        "regions": {
            "count": len(regions),
            "low_confidence": len(low_regions),
            "low_confidence_share": len(low_regions) / len(regions) if regions else None,
            "sensitive_tokens_in_low_confidence_regions": (
                sum(r["tokens"] for r in low_regions) / sensitive_tokens if sensitive_tokens else None
            ),
        },
        "histogram": {
            "edges": edges.tolist(),
            "counts": {
                name: np.histogram(values, bins=edges)[0].tolist() for name, values in groups.items() if name != "all"
            },
        },
        "lowest_regions": regions[: settings.top_regions],
    }


def render_markdown(summary: dict) -> str:
    """``report.md``: the summary's tables."""
    high, low = summary["thresholds"]["high"], summary["thresholds"]["low"]
    tokens = summary["tokens"]
    lines = [
        "# CUDA-sensitive token confidence",
        "",
        f"Model `{summary['model']}` on `{summary['data']}`: {summary['records']} records, "
        f"{tokens['supervised']} supervised tokens, {tokens['sensitive']} sensitive "
        f"({_fmt(tokens['sensitive_share'])}).",
        "",
        "## Judges (region tokens, by region category)",
        "",
        "Functional metrics decide; these proxies only explain. Mean NLL is the primary proxy; "
        f"mean p is {FINDING_LABEL}.",
        "",
        f"| category | regions | tokens | mean NLL | top-1 accuracy | region exact match | mean p ({FINDING_LABEL}) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, stats in summary["judges"]["groups"].items():
        if stats["tokens"] or name == OVERALL:
            lines.append(
                f"| {name} | {stats['regions']} | {stats['tokens']} | {_fmt(stats['nll'])} | "
                f"{_fmt(stats['top1_accuracy'])} | {_fmt(stats['region_exact_match'])} | {_fmt(stats['mean_p'])} |"
            )
    lines += [
        "",
        "## The paper's finding: token confidence",
        "",
        f"| tokens | count | mean p | p >= {high} | p < {low} |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, stats in summary["groups"].items():
        lines.append(
            f"| {name} | {stats['tokens']} | {_fmt(stats['mean_p'])} | "
            f"{_fmt(stats['share_high'])} | {_fmt(stats['share_low'])} |"
        )
    regions = summary["regions"]
    lines += [
        "",
        f"Regions: {regions['count']}, of which {regions['low_confidence']} have mean p < {low} "
        f"({_fmt(regions['low_confidence_share'])}); they hold "
        f"{_fmt(regions['sensitive_tokens_in_low_confidence_regions'])} of the sensitive tokens.",
        "",
        "## Lowest-confidence regions",
        "",
        "| line | kind | category | mean p | mean NLL | exact match | tokens | text |",
        "|---:|---|---|---:|---:|---|---:|---|",
    ]
    for region in summary["lowest_regions"]:
        lines.append(
            f"| {region['line']} | {region['kind']} | {region['category']} | {region['mean_p']:.3f} | "
            f"{region['nll']:.3f} | {'yes' if region['exact_match'] else 'no'} | {region['tokens']} | "
            f"`{_one_line(region['text'])}` |"
        )
    return "\n".join(lines) + "\n"


def plot_histograms(summary: dict, path: Path) -> None:
    """``confidence.png``: share of tokens per p bin, one panel per non-empty group."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    edges = np.array(summary["histogram"]["edges"])
    panels = [(n, c) for n, c in summary["histogram"]["counts"].items() if sum(c) > 0]
    columns = 4
    rows = max(1, -(-len(panels) // columns))
    figure, axes = plt.subplots(rows, columns, figsize=(4 * columns, 3 * rows), squeeze=False)
    for axis in axes.flat[len(panels) :]:
        axis.axis("off")
    for axis, (name, counts) in zip(axes.flat, panels):
        total = sum(counts)
        stats = summary["groups"][name]
        axis.bar(
            edges[:-1],
            np.array(counts) / total,
            width=np.diff(edges),
            align="edge",
            color="tab:red" if name != NON_SENSITIVE else "tab:gray",
        )
        for threshold in summary["thresholds"].values():
            axis.axvline(threshold, color="black", linestyle=":", linewidth=1)
        axis.set_title(f"{name} (n={total}, mean p={stats['mean_p']:.2f})", fontsize=9)
        axis.set_xlim(0, 1)
        axis.set_xlabel("p(gold token)", fontsize=8)
        axis.set_ylabel("share of tokens", fontsize=8)
    figure.suptitle(f"Token confidence of {summary['model']}", fontsize=11)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def write_report(summary: dict, out: Path) -> list[Path]:
    """Write the three report files into ``out`` (created if needed); returns their paths."""
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / REPORT_JSON, out / REPORT_MD, out / REPORT_PNG]
    paths[0].write_text(json.dumps(summary, indent=2) + "\n")
    paths[1].write_text(render_markdown(summary))
    plot_histograms(summary, paths[2])
    return paths


def run_report(
    settings: ReportSettings, model, tokenizer, records, progress: Callable[[int], None] | None = None
) -> dict:
    """Measure ``records`` (``cuset_core.data.Record``) with ``model`` and summarise them."""
    model.eval()
    measured = []
    for index, record in enumerate(records):
        encoded = encode_record(record, tokenizer, settings.max_tokens)
        result = record_confidence(model, encoded, record.answer, record.line)
        if result is not None:
            measured.append(result)
        if progress is not None:
            progress(index + 1)
    return summarize(measured, settings)


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def _one_line(text: str, limit: int = 160) -> str:
    flat = " ".join(text.split()).replace("|", "\\|").replace("`", "'")
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
