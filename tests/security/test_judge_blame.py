"""A hostile candidate cannot make the judge blame itself (issue 23). Each test fails if its
attack works: malformed, oversized or hostile outputs, reports and messages of the candidate
are the candidate's verdict (``runtime_error`` or ``value_mismatch``), never ``internal_error``
or ``unsupported``; its text is quoted as its own; inputs are drawn under a seed the judge
picks per run, some of them wider than ``randn``, so neither a table of answers nor a kernel
that only works in randn's range passes.

The judge runs for real against a stub in place of the sandboxed sides (``_run_side``): the
stub writes the files a candidate process could have written, so these run in well under a
second. The two tests marked slow run real candidates on tier 2 (g++, seconds each).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from attacks import HONEST, PROBLEM, WRONG_KERNEL, in_forward
from safetensors.torch import save

from cuset_core.verify import cpu
from cuset_core.verify.candidate import parse_candidate
from cuset_core.verify.cpu import harness
from cuset_core.verify.cpu.build import toolchain
from cuset_core.verify.cpu.claims import unsupported_confirmer
from cuset_core.verify.cpu.sizes import hardcoded_sizes, size_bearing_code
from cuset_core.verify.execution import harness_side, judge
from cuset_core.verify.execution.contracts import (
    INPUTS_FILE,
    OUTPUTS_FILE,
    REASON_CHARS,
    REPORT_FILE,
    SEED_LIMIT,
    CandidateJob,
    CpuJob,
    ReferenceDetails,
    ReferenceReport,
)
from cuset_core.verify.execution.harness_side import trial_outputs
from cuset_core.verify.execution.judge import compare_outputs
from cuset_core.verify.execution.tier_run import ReferenceRun, TierSpec
from cuset_core.verify.execution.transfer import _encode, load_values, save_values
from cuset_core.verify.result import Tier, Verdict, VerifyResult
from cuset_core.verify.sandbox import SandboxOutcome
from cuset_core.verify.settings import SandboxLimits, VerifySettings

SETTINGS = VerifySettings(tier=Tier.CPU, seeds=3)
SPEC = TierSpec(Tier.CPU, "stub", SandboxLimits(), lambda folder: {})
CANDIDATE = parse_candidate(HONEST)
JOB = CpuJob(
    kind="python",
    seeds=3,
    reduce_sizes=False,
    max_elements=1 << 20,
    preludes=[],
    include_dirs=[],
    library_dirs=[],
)
EXPECTED = [[torch.arange(4.0) + trial] for trial in range(3)]  # what the stub reference computed
WRONG = [[torch.arange(4.0) + trial + 1] for trial in range(3)]
PASSING = {"verdict": "pass", "launches": {"relu_kernel": 3}}
EXITED = SandboxOutcome(0, "", "", 0.1, False, None, None)


def outputs(trials: list[list[Any]]) -> bytes:
    """The outputs file an honest candidate side writes for ``trials``."""
    tensors: dict[str, Any] = {}
    layout = {"trials": _encode(trials, "trials", tensors)}
    return save(tensors, metadata={"cuset": json.dumps(layout)})


def raw_outputs(layout: Any) -> bytes:
    """An outputs file with any layout (JSON text, or a value to write as JSON) a hostile candidate
    may put into the metadata."""
    text = layout if isinstance(layout, str) else json.dumps(layout)
    return save({"x": torch.zeros(4)}, metadata={"cuset": text})


def judge_files(monkeypatch, tmp_path: Path, report: bytes | None, produced: bytes | None) -> VerifyResult:
    """The judge's verdict on a candidate side that left ``report`` and ``produced`` (None: no file)."""

    def candidate_side(spec: TierSpec, side: str, folder: Path, job: Any) -> SandboxOutcome:
        assert side == "candidate" and job.input_seed is None  # the candidate never learns the seed
        for name, data in ((REPORT_FILE, report), (OUTPUTS_FILE, produced)):
            if data is not None:
                (folder / name).write_bytes(data)
        return EXITED

    monkeypatch.setattr(judge, "_run_side", candidate_side)
    reference = ReferenceRun(b"", EXPECTED, ReferenceReport(verdict=Verdict.PASS), 1234)
    result, _ = judge.run_candidate(SPEC, tmp_path, CANDIDATE, reference, JOB, SETTINGS)
    return result


def report(**fields: Any) -> bytes:
    return json.dumps({**PASSING, **fields}).encode()


def assert_candidates(result: VerifyResult, verdict: Verdict = Verdict.RUNTIME_ERROR) -> None:
    assert result.verdict is verdict, (result.verdict, result.reason, result.log[-2000:])
    assert len(result.reason) <= REASON_CHARS


# ---------------------------------------------------------------- (a)-(d): data the judge cannot read


def test_a_deeply_nested_report_is_the_candidates_runtime_error(monkeypatch, tmp_path):
    nested = b'{"verdict": "pass", "details": ' + b"[" * 30_000 + b"]" * 30_000 + b"}"
    result = judge_files(monkeypatch, tmp_path, nested, outputs(WRONG))
    assert_candidates(result)
    assert result.reason == "the candidate's output is rejected: report.json is not a valid report"


def test_float8_outputs_from_the_second_trial_on_are_a_value_mismatch(monkeypatch, tmp_path):
    float8 = [EXPECTED[0], [EXPECTED[1][0].to(torch.float8_e4m3fn)], [EXPECTED[2][0].to(torch.float8_e4m3fn)]]
    result = judge_files(monkeypatch, tmp_path, report(), outputs(float8))
    assert_candidates(result, Verdict.VALUE_MISMATCH)
    assert result.reason == "trial 2 (seed 1235): output 0: expected dtype torch.float32, got torch.float8_e4m3fn"


@pytest.mark.parametrize(
    "layout",
    [
        pytest.param({"trials": {"t": ["x"]}}, id="a tensor named by a list"),
        pytest.param({"trials": {"list": [{"t": {"x": 1}}]}}, id="a tensor named by an object"),
        pytest.param({"trials": {"list": [{"t": "x", "v": 1}]}}, id="an entry of two kinds"),
        pytest.param({"trials": {"list": [["t", "x"]]}}, id="an entry that is a list"),
        pytest.param({"trials": {"dict": {"0": {"list": [{"t": "x"}]}}}}, id="trials that are a dict"),
        pytest.param({"trials": {"v": 3}}, id="trials that are a number"),
        pytest.param([{"t": "x"}], id="a layout that is a list"),
        pytest.param({"trials": {"list": [{"dtype": "__class__"}, {"repr": 5}]}}, id="values of the wrong type"),
    ],
)
def test_a_malformed_outputs_layout_is_the_candidates_runtime_error(monkeypatch, tmp_path, layout):
    assert_candidates(judge_files(monkeypatch, tmp_path, report(), raw_outputs(layout)))


def test_a_deeply_nested_outputs_layout_is_the_candidates_runtime_error(monkeypatch, tmp_path):
    nested = '{"trials": ' + '{"list": [' * 3000 + '{"t": "x"}' + "]}" * 3000 + "}"
    assert_candidates(judge_files(monkeypatch, tmp_path, report(), raw_outputs(nested)))


@pytest.mark.parametrize(
    "fields",
    [
        pytest.param({"timings_s": {"run": 10**400}}, id="a 400-digit timing"),
        pytest.param({"launches": {"relu_kernel": 10**400}}, id="a 400-digit launch count"),
        pytest.param({"timings_s": {"run": float("nan")}}, id="a NaN timing"),
        pytest.param({"timings_s": {"run": float("inf")}}, id="an infinite timing"),
        pytest.param({"runtime_ms": 1e308 * 10}, id="an infinite runtime"),
        pytest.param({"timings_s": {"run": 1e300}}, id="a huge timing"),
        pytest.param({"launches": {"relu_kernel": -1}}, id="a negative launch count"),
        pytest.param({"launches": {f"k{i}": 1 for i in range(1000)}}, id="a thousand kernels"),
        pytest.param({"reason": ["not", "text"]}, id="a reason that is a list"),
    ],
)
def test_numbers_out_of_bounds_in_the_report_are_the_candidates_runtime_error(monkeypatch, tmp_path, fields):
    raw = json.dumps({**PASSING, **fields}).encode()  # NaN and Infinity as Python's json writes them
    result = judge_files(monkeypatch, tmp_path, raw, outputs(WRONG))
    assert_candidates(result)
    assert result.reason.startswith("the candidate's output is rejected: report.json is not a valid report (field ")


def test_a_400_digit_timing_is_the_candidates_runtime_error_through_the_whole_judge(
    monkeypatch, reference_side_in_this_process
):
    stub_sides(monkeypatch, lambda inputs: [torch.relu(inputs[0]) + 1], report(timings_s={"run": 10**400}))
    result = run_judge(SETTINGS)
    assert_candidates(result)
    assert result.reason == "the candidate's output is rejected: report.json is not a valid report (field timings_s)"


def test_a_judge_crash_on_candidate_data_is_the_candidates_runtime_error(monkeypatch, tmp_path):
    """Whatever else the candidate's data breaks in the judge is still its verdict, never internal_error."""

    def crash(*args: Any) -> None:
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(judge, "compare_outputs", crash)
    result = judge_files(monkeypatch, tmp_path, report(), outputs(WRONG))
    assert_candidates(result)
    assert result.reason == "the candidate's output could not be judged (RecursionError)"


# ---------------------------------------------------------------- (e), (f): the candidate's own words


def test_a_wrong_kernel_that_reports_unsupported_is_a_runtime_error(monkeypatch, tmp_path):
    claim = report(verdict="unsupported", reason="uses tensor cores (wmma/mma)", unsupported_feature="tensor cores")
    result = judge_files(monkeypatch, tmp_path, claim, outputs(WRONG))
    assert_candidates(result)
    assert result.unsupported_feature is None
    assert result.reason == (
        "the candidate claimed a feature the verifier does not find in it "
        '(candidate\'s message: "uses tensor cores (wmma/mma)")'
    )


def test_a_report_claiming_internal_error_is_the_candidates_runtime_error(monkeypatch, tmp_path):
    claim = report(verdict="internal_error", reason="the verifier crashed")
    assert_candidates(judge_files(monkeypatch, tmp_path, claim, outputs(WRONG)))


def test_only_a_missing_header_the_judge_confirms_is_unsupported():
    included = HONEST.replace(
        "#include <torch/extension.h>", "#include <torch/extension.h>\n#include <cuset_absent/x.cuh>"
    )
    assert included != HONEST
    confirm = unsupported_confirmer(parse_candidate(included), toolchain())
    assert confirm("header <cuset_absent/x.cuh>") == "header <cuset_absent/x.cuh>"
    assert confirm("header <vector>") is None  # g++ has it: a candidate's lie
    assert confirm("header <cuset_other/y.cuh>") is None  # not included by the candidate
    assert confirm("header <../../etc/passwd>") is None
    assert confirm("tensor cores (wmma/mma)") is None  # found before the candidate runs, or not at all
    commented = HONEST.replace("#include <torch/extension.h>", "#include <torch/extension.h>\n// #include <a/x.cuh>")
    assert unsupported_confirmer(parse_candidate(commented), toolchain())("header <a/x.cuh>") is None


def test_a_candidate_message_blaming_the_reference_is_quoted_as_the_candidates(monkeypatch, tmp_path):
    said = "candidate forward failed: the CPU harness failed on the reference side"
    result = judge_files(monkeypatch, tmp_path, report(verdict="runtime_error", reason=said), None)
    assert_candidates(result)
    assert result.reason == f'the candidate failed at run time (candidate\'s message: "{said}")'


def test_a_huge_candidate_message_is_cut_inside_its_quotes(monkeypatch, tmp_path):
    result = judge_files(monkeypatch, tmp_path, report(verdict="static_reject", reason="R" * 50_000), None)
    assert_candidates(result, Verdict.STATIC_REJECT)
    assert result.reason.startswith("the candidate's outputs did not come from its kernels (candidate's message: \"R")
    assert result.reason.endswith('…")')


# ---------------------------------------------------------------- (g): sizes in comments


def test_a_size_named_in_a_comment_or_string_is_not_a_hard_coded_size():
    constants, overrides = {"DIM": 16384}, {"DIM": 4096}
    commented = HONEST.replace("__global__", "// DIM = 16384, see the problem\n/* 16384 */ __global__", 1)
    messages = commented.replace("import torch\n", 'import torch\nNOTE = "for DIM 16384"  # 16384\n', 1)
    candidate = parse_candidate(messages)
    sources = [ext.cuda for ext in candidate.sources.extensions]
    assert hardcoded_sizes(size_bearing_code(candidate.code, "python", sources), constants, overrides) == []
    hard = parse_candidate(HONEST.replace("__global__", "#define DIM 16384\n__global__", 1))
    sources = [ext.cuda for ext in hard.sources.extensions]
    assert hardcoded_sizes(size_bearing_code(hard.code, "python", sources), constants, overrides) == ["DIM=16384"]
    assert hardcoded_sizes(size_bearing_code("int n = 16384; // 16384", "cu", []), constants, overrides) == [
        "DIM=16384"
    ]
    assert hardcoded_sizes(size_bearing_code('printf("16384"); // 16384', "cu", []), constants, overrides) == []


def test_a_wrong_kernel_commenting_the_original_size_keeps_its_failure():
    wrong = parse_candidate(HONEST.replace("__global__", "// DIM = 16384\n__global__", 1))
    reduced = VerifyResult(verdict=Verdict.VALUE_MISMATCH, tier=Tier.CPU, tiers_run=[Tier.CPU], reason="trial 1")
    handed = CandidateJob(overrides={"DIM": 4096}, constants={"DIM": 16384})
    details = ReferenceDetails(original_fits=False, candidate_job=handed)
    result = cpu._at_original_sizes(SPEC, PROBLEM, wrong, SETTINGS, JOB, reduced, details)
    assert result.verdict is Verdict.VALUE_MISMATCH


# ---------------------------------------------------------------- seeds and distributions


def stub_sides(monkeypatch, answer: Any, said: bytes = json.dumps(PASSING).encode()) -> list[int | None]:
    """Stand in for both sandboxed sides: the real tier-2 reference code in this process, and a
    candidate whose outputs are ``answer(inputs)`` and whose report is ``said`` (tests that call it
    use ``reference_side_in_this_process``). Returns the input seeds the reference got."""
    seeds: list[int | None] = []

    def side(spec: TierSpec, name: str, folder: Path, job: Any, cancel: Any = None) -> SandboxOutcome:
        if name == "reference":
            seeds.append(job.input_seed)
            harness_side.write_report(folder, harness.reference_side(job, folder, {}))
        else:
            assert job.input_seed is None
            trials = load_values((folder / INPUTS_FILE).read_bytes())["trials"]
            save_values(folder / OUTPUTS_FILE, {"trials": [answer(inputs) for inputs in trials]})
            (folder / REPORT_FILE).write_bytes(said)
        return EXITED

    monkeypatch.setattr(judge, "_run_side", side)
    return seeds


def run_judge(settings: VerifySettings) -> VerifyResult:
    job = JOB.model_copy(update={"input_seed": settings.input_seed})
    return judge.judge(SPEC, PROBLEM, CANDIDATE, settings, job)[0]


def table_of_answers() -> list[list[Any]]:
    """What a candidate could have computed in advance: the outputs for the public seed 1000."""
    with torch.no_grad():
        data = harness.run_reference(PROBLEM, {}, "python", [1000, 1001, 1002])
    return data["outputs"]


def test_a_table_of_answers_for_a_known_seed_does_not_pass(monkeypatch, reference_side_in_this_process):
    table = table_of_answers()
    answers = iter(table)
    seeds = stub_sides(monkeypatch, lambda inputs: next(answers))
    result = run_judge(SETTINGS)
    assert result.verdict is Verdict.VALUE_MISMATCH, result.reason
    assert seeds[0] is not None and seeds[0] != 1000 and f"(seed {seeds[0]}" in result.reason
    answers = iter(table)  # the same table against the public seed: the attack the drawn seed stops
    assert run_judge(SETTINGS.model_copy(update={"input_seed": 1000})).verdict is Verdict.PASS


def test_every_run_draws_its_own_seed_and_an_explicit_one_reproduces(monkeypatch, reference_side_in_this_process):
    seeds = stub_sides(monkeypatch, lambda inputs: [torch.relu(inputs[0])])
    for settings in (SETTINGS, SETTINGS, SETTINGS.model_copy(update={"input_seed": 7})):
        assert run_judge(settings).verdict is Verdict.PASS
    assert seeds[0] != seeds[1] and seeds[2] == 7
    assert all(0 <= seed < SEED_LIMIT for seed in seeds)
    assert VerifySettings().input_seed is None  # so the cache key holds no drawn seed


def test_a_kernel_that_clamps_to_randns_range_fails_on_the_wide_trial(monkeypatch, reference_side_in_this_process):
    stub_sides(monkeypatch, lambda inputs: [torch.relu(inputs[0]).clamp(max=6.0)])
    result = run_judge(SETTINGS)
    assert result.verdict is Verdict.VALUE_MISMATCH, result.reason
    assert result.reason.startswith("trial 2 (seed ") and ", inputs x4): output 0" in result.reason


def test_a_wide_trial_falls_back_to_plain_inputs_where_the_reference_overflows():
    x = [torch.tensor([0.5, 3.0])]
    inputs, outputs, wide = trial_outputs(x, lambda values: [torch.exp(values[0] * 25)], wide=True)
    assert not wide and inputs is x and torch.isfinite(outputs[0]).all()
    inputs, outputs, wide = trial_outputs(x, lambda values: [torch.relu(values[0])], wide=True)
    assert wide and torch.equal(inputs[0], x[0] * 4) and torch.equal(outputs[0], x[0] * 4)


# ---------------------------------------------------------------- end to end on tier 2


@pytest.mark.slow
def test_a_real_candidate_raising_an_error_that_blames_the_reference_is_quoted():
    blaming = in_forward('        raise RuntimeError("the CPU harness failed on the reference side")')
    result = cpu.run_cpu_tier(PROBLEM, parse_candidate(blaming), SETTINGS)
    assert result.verdict is Verdict.RUNTIME_ERROR, (result.reason, result.log[-2000:])
    assert result.reason.startswith("the candidate failed at run time (candidate's message: \"")
    assert "the CPU harness failed on the reference side" in result.reason


@pytest.mark.slow
def test_a_real_kernel_that_clamps_inputs_fails_on_tier_2():
    clamping = HONEST.replace(WRONG_KERNEL[0], "y[i] = fminf(fmaxf(x[i], 0.0f), 6.0f);")
    assert clamping != HONEST
    result = cpu.run_cpu_tier(PROBLEM, parse_candidate(clamping), SETTINGS)
    assert result.verdict is Verdict.VALUE_MISMATCH, (result.reason, result.log[-2000:])
    assert ", inputs x4): output 0" in result.reason


# A candidate right only at the reduced size, which anyone can work out from the problem's text,
# three ways: its kernel compares the element count, its Python compares the input's shape, or its
# kernel compares the grid the binding launched (the binding's own arithmetic on the size).
def _special_cased_in_the_kernel(n: int, blocks: int) -> str:
    return HONEST.replace(WRONG_KERNEL[0], f"y[i] = n == {n} ? fmaxf(x[i], 0.0f) : x[i];")


def _special_cased_in_python(n: int, blocks: int) -> str:
    return in_forward(f"        return relu_ext.relu_cuda(x if x.numel() == {n} else x.abs())")


def _special_cased_by_the_grid(n: int, blocks: int) -> str:
    return HONEST.replace(WRONG_KERNEL[0], f"y[i] = gridDim.x == {blocks} ? fmaxf(x[i], 0.0f) : x[i];")


@pytest.mark.slow
@pytest.mark.parametrize(
    "special_case",
    [_special_cased_in_the_kernel, _special_cased_in_python, _special_cased_by_the_grid],
    ids=["kernel compares n", "python compares the shape", "kernel compares the grid"],
)
def test_a_kernel_right_only_at_the_reduced_size_fails_at_a_second_size(special_case):
    # 32 times tier 2's budget: too large to run as written, so reduced.
    large = PROBLEM.replace("DIM = 16384", "DIM = 16384 * 32")
    reduced = harness.size_overrides(large, SETTINGS.max_elements)
    n = reduced.get("BATCH", 16) * reduced["DIM"]
    blocks = min((n + 255) // 256, 4096)  # what the demo binding launches for n elements
    assert blocks < 4096, "the grid must differ at the second size for the grid variant to mean anything"
    special_cased = special_case(n, blocks)
    assert special_cased != HONEST

    # Under mixed, so that the Python variant's torch abs is allowed and the second size decides
    # (under kernels the policy refuses that abs first).
    mixed = SETTINGS.model_copy(update={"policy": "mixed"})
    result = cpu.run_cpu_tier(large, parse_candidate(special_cased), mixed)

    assert result.verdict is Verdict.VALUE_MISMATCH, (result.reason, result.log[-2000:])
    assert f"it passed at the sizes DIM={reduced['DIM']}" in result.reason
    assert any(name.startswith("second_size_") for name in result.timings_s)


@pytest.mark.slow
def test_one_reduced_size_alone_lets_a_special_cased_kernel_through():
    """Why the second size exists: what a single reduction let through. (Honest kernels pass at both
    sizes: the reduced matmuls of test_verify_cpu_shared, say.)"""
    large = PROBLEM.replace("DIM = 16384", "DIM = 16384 * 32")
    reduced = harness.size_overrides(large, SETTINGS.max_elements)
    n = reduced.get("BATCH", 16) * reduced["DIM"]
    one_size = SETTINGS.model_copy(update={"second_size": False})
    result = cpu.run_cpu_tier(large, parse_candidate(_special_cased_in_the_kernel(n, 0)), one_size)
    assert result.verdict is Verdict.PASS, (result.reason, result.log[-2000:])


def test_a_wide_trials_absolute_tolerance_grows_with_its_outputs_and_catches_a_clamp_all_the_same():
    """A matmul of inputs x4 has outputs x16: an honest kernel's rounding near a zero output grows
    with them and must not be blamed, while a clamped output is off by far more than the scaled atol."""
    plain, wide = [torch.tensor([1.0, -2.0, 0.0])], [torch.tensor([16.0, -32.0, 0.0])]
    wide_report = ReferenceReport(verdict=Verdict.PASS, details=ReferenceDetails(wide_trials=[1]))
    reference = ReferenceRun(b"", [plain, wide], wide_report, 7)
    atol, rtol = SETTINGS.tolerance("float32")
    assert reference.tolerance(0, SETTINGS)("float32") == (atol, rtol)
    assert reference.tolerance(1, SETTINGS)("float32") == (16 * atol, rtol)
    rounding = [torch.tensor([16.0, -32.0, 7e-4])]
    assert compare_outputs(wide, rounding, reference.tolerance(1, SETTINGS)).verdict is Verdict.PASS
    assert compare_outputs(wide, rounding, SETTINGS.tolerance).verdict is Verdict.VALUE_MISMATCH
    clamped = [torch.tensor([6.0, -6.0, 0.0])]
    assert compare_outputs(wide, clamped, reference.tolerance(1, SETTINGS)).verdict is Verdict.VALUE_MISMATCH
