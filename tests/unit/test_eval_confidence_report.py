"""The confidence report: its judges and the paper's finding on hand-made records, the forward pass
against a direct computation, and `cuset confidence-report` end to end."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from pydantic import ValidationError
from typer.testing import CliRunner

from cuset_core.analysis.categories import Category
from cuset_core.cli import app
from cuset_core.evaluation.confidence_report import (
    FINDING_LABEL,
    SCHEMA,
    RecordConfidence,
    RegionInfo,
    ReportSettings,
    gold_nll,
    group_stats,
    judge_stats,
    region_scores,
    render_markdown,
    summarize,
)

S, IX, B = Category.SYNC, Category.INDEXING, Category.BOUNDS_GUARD


def settings(**overrides) -> ReportSettings:
    return ReportSettings(data="d.jsonl", out="out", **overrides)


def nll(*p: float) -> list[float]:
    return [-math.log(value) for value in p]


def two_records() -> list[RecordConfidence]:
    first = RecordConfidence(
        line=1,
        nll=nll(0.95, 0.2, 0.4, 0.99, 0.6),
        top1=[True, False, True, True, True],
        category=[IX, B, B, None, None],
        region=[0, 1, 1, -1, -1],
        regions={0: RegionInfo("declaration", IX, "int i = threadIdx.x;"), 1: RegionInfo("if_header", B, "if (i < n)")},
    )
    second = RecordConfidence(
        line=7,
        nll=nll(1.0, 0.3),
        top1=[True, False],
        category=[S, None],
        region=[0, -1],
        regions={0: RegionInfo("statement", S, "__syncthreads();")},
    )
    return [first, second]


def test_gold_nll_is_minus_the_log_softmax_of_the_gold_token():
    logits = torch.tensor([[2.0, 0.0, -1.0], [0.0, 0.0, 0.0]])
    values = gold_nll(logits, torch.tensor([0, 2]))
    expected = -torch.log_softmax(logits, dim=-1)[[0, 1], [0, 2]]
    assert torch.allclose(values, expected)
    assert values[1].item() == pytest.approx(math.log(3))


def test_judges_score_region_tokens_by_region_category():
    # Regions: line 1 indexing {0.95 hit}, line 1 bounds_guard {0.2 miss, 0.4 hit}, line 7 sync {1.0 hit}.
    judges = judge_stats(two_records())
    overall = judges["all"]
    assert (overall["regions"], overall["tokens"]) == (3, 4)
    assert overall["nll"] == pytest.approx(-(math.log(0.95) + math.log(0.2) + math.log(0.4) + math.log(1.0)) / 4)
    assert overall["top1_accuracy"] == pytest.approx(3 / 4)
    assert overall["region_exact_match"] == pytest.approx(2 / 3)  # the bounds guard has a miss
    assert overall["mean_p"] == pytest.approx((0.95 + 0.2 + 0.4 + 1.0) / 4)
    guard = judges["bounds_guard"]
    assert (guard["regions"], guard["tokens"], guard["top1_accuracy"], guard["region_exact_match"]) == (1, 2, 0.5, 0.0)
    assert guard["nll"] == pytest.approx(-(math.log(0.2) + math.log(0.4)) / 2)
    assert judges["sync"]["nll"] == pytest.approx(0.0)
    assert judges["warp"] == {
        "regions": 0,
        "tokens": 0,
        "nll": None,
        "top1_accuracy": None,
        "region_exact_match": None,
        "mean_p": None,
    }


def test_a_region_token_counts_under_its_region_category_not_its_span_category():
    # A unit-extent region: an indexing statement whose arithmetic tokens carry no span category.
    record = RecordConfidence(
        line=1,
        nll=nll(0.5, 0.25),
        top1=[True, True],
        category=[IX, None],
        region=[0, 0],
        regions={0: RegionInfo("statement", IX, "out[i] = 2 * x[i];")},
    )
    judges = judge_stats([record])
    assert (judges["indexing"]["tokens"], judges["indexing"]["region_exact_match"]) == (2, 1.0)
    assert judges["indexing"]["nll"] == pytest.approx((math.log(2) + math.log(4)) / 2)


def test_group_stats_counts_shares_against_thresholds():
    stats = group_stats(np.array([0.95, 0.9, 0.5, 0.2]), high=0.9, low=0.5)
    assert stats == {"tokens": 4, "mean_p": pytest.approx(0.6375), "share_high": 0.5, "share_low": 0.25}
    assert group_stats(np.array([]), 0.9, 0.5) == {"tokens": 0, "mean_p": None, "share_high": None, "share_low": None}


def test_regions_are_scored_by_the_mean_p_of_their_tokens_lowest_first():
    scored = region_scores(two_records())
    assert [(r["line"], r["text"], r["tokens"]) for r in scored] == [
        (1, "if (i < n)", 2),
        (1, "int i = threadIdx.x;", 1),
        (7, "__syncthreads();", 1),
    ]
    assert scored[0]["mean_p"] == pytest.approx(0.3)
    assert scored[0]["nll"] == pytest.approx(-(math.log(0.2) + math.log(0.4)) / 2)
    assert [r["exact_match"] for r in scored] == [False, True, True]
    assert (scored[0]["kind"], scored[0]["category"]) == ("if_header", "bounds_guard")


def test_summary_separates_sensitive_and_non_sensitive_tokens():
    summary = summarize(two_records(), settings(bins=4, top_regions=2))
    assert summary["schema"] == SCHEMA
    assert summary["records"] == 2
    assert summary["judges"]["groups"] == judge_stats(two_records())
    assert summary["judges"]["labels"]["mean_p"].startswith(FINDING_LABEL)
    assert summary["tokens"] == {"supervised": 7, "sensitive": 4, "sensitive_share": pytest.approx(4 / 7)}
    groups = summary["groups"]
    assert groups["sensitive"] == {"tokens": 4, "mean_p": pytest.approx(0.6375), "share_high": 0.5, "share_low": 0.5}
    assert groups["non_sensitive"]["tokens"] == 3
    assert groups["non_sensitive"]["mean_p"] == pytest.approx((0.99 + 0.6 + 0.3) / 3)
    assert groups["bounds_guard"]["mean_p"] == pytest.approx(0.3)
    assert groups["warp"]["tokens"] == 0
    # one of three regions is below low=0.5 and it holds 2 of the 4 sensitive tokens
    assert summary["regions"] == {
        "count": 3,
        "low_confidence": 1,
        "low_confidence_share": pytest.approx(1 / 3),
        "sensitive_tokens_in_low_confidence_regions": 0.5,
    }
    assert summary["histogram"]["edges"] == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert summary["histogram"]["counts"]["sensitive"] == [1, 1, 0, 2]
    assert summary["histogram"]["counts"]["non_sensitive"] == [0, 1, 1, 1]
    assert [r["text"] for r in summary["lowest_regions"]] == ["if (i < n)", "int i = threadIdx.x;"]


def test_markdown_leads_with_the_judges_and_labels_mean_p_as_the_finding():
    text = render_markdown(summarize(two_records(), settings()))
    judges = text.index("## Judges")
    assert judges < text.index("## The paper's finding")
    assert (
        f"| category | regions | tokens | mean NLL | top-1 accuracy | region exact match | mean p ({FINDING_LABEL}) |"
        in text
    )
    assert "| all | 3 | 4 | 0.644 | 0.750 | 0.667 | 0.637 |" in text
    assert "| warp |" not in text[judges : text.index("## The paper's finding")]  # empty categories left out
    assert "| sensitive | 4 | 0.637 | 0.500 | 0.500 |" in text
    assert "| 1 | if_header | bounds_guard | 0.300 | 1.263 | no | 2 | `if (i < n)` |" in text


def test_an_empty_summary_has_no_numbers_to_divide():
    summary = summarize([], settings())
    assert summary["tokens"] == {"supervised": 0, "sensitive": 0, "sensitive_share": None}
    assert summary["regions"]["low_confidence_share"] is None
    assert summary["judges"]["groups"]["all"]["nll"] is None
    assert "n/a" in render_markdown(summary)


def test_thresholds_must_be_ordered():
    with pytest.raises(ValidationError, match="low"):
        settings(high=0.4, low=0.6)


ANSWER = '''```python
import torch
from torch.utils.cpp_extension import load_inline

cuda_src = """
__global__ void scale_kernel(const float* x, float* y, float s, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = s * x[i];
}
torch::Tensor scale(torch::Tensor x, double s) {
    auto y = torch::empty_like(x);
    int n = x.numel();
    scale_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), (float)s, n);
    return y;
}
"""
ext = load_inline(name="scale", cpp_sources="torch::Tensor scale(torch::Tensor x, double s);",
                  cuda_sources=cuda_src, functions=["scale"])

class ModelNew(torch.nn.Module):
    def forward(self, x):
        return ext.scale(x, 2.0)
```'''


def test_confidence_report_end_to_end(tiny_model_dir, tmp_path):
    rows = [
        {
            "messages": [
                {"role": "user", "content": f"Scale a tensor by {k} with CUDA."},
                {"role": "assistant", "content": ANSWER},
            ]
        }
        for k in (2, 3, 4)
    ]
    rows.append({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "no kernel"}]})
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    out = tmp_path / "report"
    result = CliRunner().invoke(
        app,
        ["confidence-report", "--model", str(tiny_model_dir), "--data", str(data), "--limit", "2", "--out", str(out)],
    )
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == ["confidence.png", "report.json", "report.md"]
    report = json.loads((out / "report.json").read_text())
    assert report["records"] == 2
    assert 0 < report["tokens"]["sensitive"] < report["tokens"]["supervised"]
    groups = report["groups"]
    assert groups["sensitive"]["tokens"] + groups["non_sensitive"]["tokens"] == report["tokens"]["supervised"]
    # a random model is unsure of everything
    assert groups["all"]["mean_p"] < 0.01
    assert {r["line"] for r in report["lowest_regions"]} <= {1, 2}
    assert report["regions"]["count"] > 0
    assert (out / "confidence.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "2 records" in result.output
    assert not math.isnan(groups["indexing"]["mean_p"])
    judged = report["judges"]["groups"]["all"]
    # a random model over a 49k vocabulary: NLL near log(49152) = 10.8, almost never the argmax
    assert judged["tokens"] > 0 and 5.0 < judged["nll"] < 20.0
    assert judged["top1_accuracy"] < 0.1 and judged["region_exact_match"] < 0.1
    assert "NLL" in result.output and "not a judge" in result.output


def test_confidence_report_rejects_a_missing_data_file(tmp_path):
    result = CliRunner().invoke(
        app, ["confidence-report", "--data", str(tmp_path / "none.jsonl"), "--out", str(tmp_path)]
    )
    assert result.exit_code == 2
    assert result.output.strip() == f"error: --data: file not found: {tmp_path / 'none.jsonl'}"


def test_confidence_report_rejects_an_unknown_model(tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text("")
    result = CliRunner().invoke(
        app, ["confidence-report", "--model", str(tmp_path / "nope"), "--data", str(data), "--out", str(tmp_path)]
    )
    assert result.exit_code == 2
    assert result.output.startswith("error: --model: model not found")


def test_record_confidence_matches_a_full_softmax(tiny_model_dir, tokenizer):
    from cuset_core.data import Record, encode_record
    from cuset_core.evaluation.confidence_report import record_confidence
    from cuset_core.models import load_model

    model, _ = load_model(str(tiny_model_dir))
    record = Record(
        messages=[{"role": "user", "content": "Scale x."}, {"role": "assistant", "content": ANSWER}], line=3
    )
    encoded = encode_record(record, tokenizer)
    result = record_confidence(model, encoded, ANSWER, record.line)

    with torch.no_grad():
        probs = torch.softmax(model(input_ids=torch.tensor([encoded.input_ids])).logits[0], dim=-1)
    supervised = [t for t, label in enumerate(encoded.labels) if label != -100]
    expected = [probs[t - 1, encoded.input_ids[t]].item() for t in supervised]
    argmax = [probs[t - 1].argmax().item() == encoded.input_ids[t] for t in supervised]
    assert result.line == 3
    assert result.p == pytest.approx(expected, rel=1e-4)
    assert result.nll == pytest.approx([-math.log(value) for value in expected], rel=1e-4)
    assert result.top1 == argmax
    assert len(result.category) == len(result.region) == len(supervised)
    assert sum(c is not None for c in result.category) > 0
    assert all((c is None) == (r == -1) for c, r in zip(result.category, result.region))
