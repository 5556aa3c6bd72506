"""Tier 2's second size in one process (issue 24): the reference side plans a second, smaller
reduction and runs it too; the candidate side runs its trials there after its report of the first
size; the judge passes a candidate only when both sizes pass, and whatever ends the second run
early is a failure there, never a kept pass.

The judge runs for real against a stub in place of the sandboxed candidate side (``_run_side``),
which writes the files a candidate process could have written; the reference side runs for real
in this process (no sandbox, no candidate): both well under a second per test.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import save

from cuset_core.demo import demo_problems
from cuset_core.verify.candidate import parse_candidate
from cuset_core.verify.cpu import cpu_job, harness, tier_limits
from cuset_core.verify.cpu.build import Toolchain
from cuset_core.verify.execution import judge
from cuset_core.verify.execution.contracts import (
    INPUTS_FILE,
    KERNELS_OFF_FILE,
    OUTPUTS_FILE,
    REFERENCE_FILE,
    REPORT_FILE,
    SECOND_KERNELS_OFF_FILE,
    SECOND_OUTPUTS_FILE,
    SECOND_REPORT_FILE,
    CandidateJob,
    CpuJob,
    ReferenceDetails,
    ReferenceReport,
)
from cuset_core.verify.execution.tier_run import ReferenceRun, TierSpec
from cuset_core.verify.execution.transfer import _encode, load_values
from cuset_core.verify.result import Tier, Verdict, VerifyResult
from cuset_core.verify.sandbox import SandboxOutcome
from cuset_core.verify.settings import SandboxLimits, VerifySettings

SETTINGS = VerifySettings(tier=Tier.CPU, seeds=2)
SPEC = TierSpec(Tier.CPU, "stub", SandboxLimits(), lambda folder: {})
CANDIDATE = parse_candidate({p.id: p for p in demo_problems()}["02_relu"].solution_code)
# 32 times tier 2's element budget: reduced, and reducible once more.
LARGE = """import torch
import torch.nn as nn

BATCH = 16
DIM = 16384 * 32


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(BATCH, DIM, device="cuda")]


def get_init_inputs():
    return []
"""
JOB = CpuJob(kind="python", seeds=2, reduce_sizes=True, max_elements=64, preludes=[], include_dirs=[], library_dirs=[])
FIRST = [[torch.arange(8.0) + trial] for trial in range(2)]
SECOND = [[torch.arange(4.0) - trial] for trial in range(2)]
HANDED = CandidateJob(overrides={"DIM": 8}, constants={"DIM": 4096}, second_overrides={"DIM": 4})
PASSING = {"verdict": "pass", "launches": {"rowsum_kernel": 2}}
EXITED = SandboxOutcome(0, "", "", 0.1, False, None, None)
TIMED_OUT = SandboxOutcome(None, "", "", 180.0, True, None, "wall")


def outputs(trials: list[list[Any]]) -> bytes:
    """The outputs file an honest candidate side writes for ``trials``."""
    tensors: dict[str, Any] = {}
    layout = {"trials": _encode(trials, "trials", tensors)}
    return save(tensors, metadata={"cuset": json.dumps(layout)})


def judged(
    monkeypatch, tmp_path: Path, files: dict[str, bytes], ended: SandboxOutcome = EXITED, spec: TierSpec = SPEC
) -> VerifyResult:
    """The judge's verdict on a candidate side that left ``files`` and ended as ``ended``, against a
    reference with both sizes."""

    def candidate_side(spec: TierSpec, side: str, folder: Path, job: Any) -> SandboxOutcome:
        for name, data in files.items():
            (folder / name).write_bytes(data)
        return ended

    monkeypatch.setattr(judge, "_run_side", candidate_side)
    report = ReferenceReport(verdict=Verdict.PASS, details=ReferenceDetails(candidate_job=HANDED))
    reference = ReferenceRun(b"", FIRST, report, 100, SECOND)
    result, _ = judge.run_candidate(spec, tmp_path, CANDIDATE, reference, JOB, SETTINGS)
    return result


FIRST_SIZE = {REPORT_FILE: json.dumps(PASSING).encode(), OUTPUTS_FILE: outputs(FIRST)}


def test_a_candidate_right_at_both_sizes_passes_with_the_second_sizes_time(monkeypatch, tmp_path):
    second = {SECOND_REPORT_FILE: json.dumps({**PASSING, "timings_s": {"run": 0.5}}).encode()}
    result = judged(monkeypatch, tmp_path, {**FIRST_SIZE, **second, SECOND_OUTPUTS_FILE: outputs(SECOND)})
    assert result.verdict is Verdict.PASS, result.reason
    assert result.timings_s["second_size_run"] == 0.5


def test_a_candidate_wrong_at_the_second_size_fails_and_the_reason_names_both_sizes(monkeypatch, tmp_path):
    wrong = [[trial[0] + 1] for trial in SECOND]
    second = {SECOND_REPORT_FILE: json.dumps(PASSING).encode(), SECOND_OUTPUTS_FILE: outputs(wrong)}
    result = judged(monkeypatch, tmp_path, {**FIRST_SIZE, **second})
    assert result.verdict is Verdict.VALUE_MISMATCH
    # The second size's trials follow the first size's seeds (100, 101).
    assert result.reason.startswith("at the sizes DIM=4: trial 1 (seed 102): ")
    assert result.reason.endswith("; it passed at the sizes DIM=8")


@pytest.mark.parametrize("ended", [TIMED_OUT, EXITED], ids=["timed out", "exited"])
def test_a_candidate_that_stops_before_its_second_report_does_not_keep_its_pass(monkeypatch, tmp_path, ended):
    result = judged(monkeypatch, tmp_path, FIRST_SIZE, ended)
    assert result.verdict is (Verdict.TIMEOUT if ended.timed_out else Verdict.RUNTIME_ERROR), result.reason
    assert result.reason.startswith("at the sizes DIM=4: ")


def test_a_failure_the_candidate_side_reports_at_the_second_size_is_quoted_as_its_own(monkeypatch, tmp_path):
    failed = {"verdict": "runtime_error", "reason": "trial 2: launch failed: too many threads"}
    result = judged(monkeypatch, tmp_path, {**FIRST_SIZE, SECOND_REPORT_FILE: json.dumps(failed).encode()})
    assert result.verdict is Verdict.RUNTIME_ERROR
    assert 'candidate\'s message: "trial 2: launch failed: too many threads"' in result.reason


def test_outputs_at_the_second_size_without_a_launch_there_are_no_kernels_work(monkeypatch, tmp_path):
    second = {SECOND_REPORT_FILE: json.dumps({"verdict": "pass"}).encode(), SECOND_OUTPUTS_FILE: outputs(SECOND)}
    result = judged(monkeypatch, tmp_path, {**FIRST_SIZE, **second})
    assert result.verdict is Verdict.RUNTIME_ERROR
    assert "no custom kernel ran" in result.reason


def test_a_reference_without_a_second_size_judges_the_first_alone(monkeypatch, tmp_path):
    def candidate_side(spec: TierSpec, side: str, folder: Path, job: Any) -> SandboxOutcome:
        for name, data in FIRST_SIZE.items():
            (folder / name).write_bytes(data)
        return EXITED

    monkeypatch.setattr(judge, "_run_side", candidate_side)
    reference = ReferenceRun(b"", FIRST, ReferenceReport(verdict=Verdict.PASS), 100)
    result, _ = judge.run_candidate(SPEC, tmp_path, CANDIDATE, reference, JOB, SETTINGS)
    assert result.verdict is Verdict.PASS
    assert not any(name.startswith("second_size_") for name in result.timings_s)


# ---------------------------------------------------------------- the reference side plans it


def reference_job(settings: VerifySettings) -> CpuJob:
    """Tier 2's job for the reference side under ``settings`` (input seed 7; no real preludes)."""
    return cpu_job("python", settings, (Path("bridge-none"),), Toolchain((), ())).model_copy(update={"input_seed": 7})


def reference_side(tmp_path: Path, problem: str, job: CpuJob) -> tuple[ReferenceDetails, dict, dict]:
    """Run tier 2's reference side here on ``problem`` (tests that call it use ``reference_side_in_this_process``);
    its details, inputs and expected outputs."""
    (tmp_path / "problem.py").write_text(problem)
    outcome = harness.reference_side(job, tmp_path, {})
    assert isinstance(outcome.details, ReferenceDetails)
    inputs = load_values((tmp_path / INPUTS_FILE).read_bytes())
    expected = load_values((tmp_path / REFERENCE_FILE).read_bytes())
    return outcome.details, inputs, expected


def test_the_reference_side_runs_a_second_smaller_reduction_under_the_following_seeds(
    tmp_path, reference_side_in_this_process
):
    job = reference_job(SETTINGS)
    assert job.second_max_elements == SETTINGS.max_elements // 2
    details, inputs, expected = reference_side(tmp_path, LARGE, job)

    first, second = details.candidate_job.overrides, details.candidate_job.second_overrides
    assert second and second != first
    drawn = inputs["second"]["trials"][0][0]
    assert drawn.numel() < inputs["trials"][0][0].numel()
    assert len(expected["second_trials"]) == len(expected["trials"]) == SETTINGS.seeds
    assert details.second_wide_trials == details.wide_trials == [1]
    torch.manual_seed(7 + SETTINGS.seeds)  # its trials draw under the seeds after the first size's
    assert torch.equal(drawn, torch.randn(drawn.shape))
    assert torch.equal(expected["second_trials"][0][0], torch.relu(drawn))
    assert "checked again at " in details.note


def test_one_size_only_when_the_settings_say_so_or_nothing_shrinks(tmp_path, reference_side_in_this_process):
    one_size = SETTINGS.model_copy(update={"second_size": False})
    job = reference_job(one_size)
    assert job.second_max_elements is None
    (tmp_path / "a").mkdir()
    details, inputs, expected = reference_side(tmp_path / "a", LARGE, job)
    assert not details.candidate_job.second_overrides and "second" not in inputs and "second_trials" not in expected
    assert tier_limits(one_size) == one_size.limits

    small = LARGE.replace("DIM = 16384 * 32", "DIM = 64")  # fits as written: nothing to reduce
    job = reference_job(SETTINGS)
    (tmp_path / "b").mkdir()
    details, inputs, _ = reference_side(tmp_path / "b", small, job)
    assert not details.candidate_job.overrides and not details.candidate_job.second_overrides
    assert "second" not in inputs


def test_the_sides_get_half_as_much_time_again_for_the_second_size():
    limits = tier_limits(SETTINGS)
    assert (limits.wall_s, limits.cpu_s) == (SETTINGS.limits.wall_s * 1.5, SETTINGS.limits.cpu_s * 1.5)
    assert limits.memory_mb == SETTINGS.limits.memory_mb


def test_outputs_at_the_second_size_that_match_without_the_kernels_are_a_fallback(monkeypatch, tmp_path):
    # A kernel run at the first reduction only (worked out from the problem's text), torch at any other size.
    tensors: dict[str, Any] = {}
    layout = {"trials": _encode([SECOND[0]], "trials", tensors)}
    without_kernels = save(tensors, metadata={"cuset": json.dumps(layout)})
    second = {
        SECOND_REPORT_FILE: json.dumps(PASSING).encode(),
        SECOND_OUTPUTS_FILE: outputs(SECOND),
        SECOND_KERNELS_OFF_FILE: without_kernels,
        KERNELS_OFF_FILE: outputs([[torch.full((8,), float("nan"))]]),  # the first size's kernels mattered
    }
    with_kernels_off = TierSpec(Tier.CPU, "stub", SandboxLimits(), lambda folder: {}, kernels_off=True)
    result = judged(monkeypatch, tmp_path, {**FIRST_SIZE, **second}, spec=with_kernels_off)
    assert result.verdict is Verdict.STATIC_REJECT
    assert result.reason.startswith("at the sizes DIM=4: run-time fallback: trial 1 (seed 102): output 0 matches")


MATMUL = """import torch
import torch.nn as nn

N = 2048


class Model(nn.Module):
    def forward(self, A, B):
        return torch.matmul(A, B)


def get_inputs():
    return [torch.randn(N, N), torch.randn(N, N)]


def get_init_inputs():
    return []
"""


def test_a_second_size_is_another_size_even_where_half_the_budget_gives_the_first_back(
    tmp_path, reference_side_in_this_process
):
    # N=256 holds 2 x 65,536 input elements: within 2^18 and within half of it too.
    assert harness.size_overrides(MATMUL, SETTINGS.max_elements) == {"N": 256}
    assert harness.size_overrides(MATMUL, SETTINGS.max_elements // 2) == {"N": 256}
    details, inputs, _ = reference_side(tmp_path, MATMUL, reference_job(SETTINGS))
    assert details.candidate_job.overrides == {"N": 256}
    assert details.candidate_job.second_overrides == {"N": 128}
    assert inputs["second"]["trials"][0][0].shape == (128, 128)
