"""`cuset eval` results files built from verdicts, for tests that read them back."""

from __future__ import annotations

import json
from pathlib import Path

from cuset_core.evaluation.config import EvalConfig
from cuset_core.evaluation.metrics import aggregate, problem_row
from cuset_core.evaluation.runner import EvalReport
from cuset_core.evaluation.scoring import SampleRecord
from cuset_core.verify.result import Tier, Verdict, VerifyResult

PASS = VerifyResult(verdict=Verdict.PASS, tier=Tier.CPU)
WRONG = VerifyResult(verdict=Verdict.VALUE_MISMATCH, tier=Tier.CPU)  # compiled, not cpu-correct
BROKEN = VerifyResult(verdict=Verdict.COMPILE_ERROR, tier=Tier.COMPILE)


def results_file(
    scored: dict[str, tuple[VerifyResult | None, list[VerifyResult]]], k_values: tuple[int, ...] = (1, 2)
) -> dict:
    """A results.json's content as `cuset eval` writes it: problem -> (greedy result, i.i.d.
    results), pass@k for ``k_values``."""
    rows = [problem_row(pid, sampled, greedy) for pid, (greedy, sampled) in scored.items()]
    samples = [
        SampleRecord(problem_id=pid, index=i, greedy=greedy is not None and i == 0, answer="...", result=result)
        for pid, (greedy, sampled) in scored.items()
        for i, result in enumerate(([greedy] if greedy else []) + sampled)
    ]
    report = EvalReport(
        config=EvalConfig(model="m", problems="p", tier=Tier.CPU, samples=max(k_values)),
        aggregate=aggregate(rows, Tier.CPU, list(k_values)),
        problems=rows,
        samples=samples,
        elapsed_s=1.0,
    )
    return report.model_dump(mode="json")


def write_results(
    path: Path, scored: dict[str, tuple[VerifyResult | None, list[VerifyResult]]], k_values: tuple[int, ...] = (1, 2)
) -> Path:
    """``results_file`` written to ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results_file(scored, k_values)))
    return path
