"""Tier 3 (GPU): the pure checks of the harness, the no-GPU answer, and (with a GPU) real runs."""

from __future__ import annotations

import types
from pathlib import Path

import pytest
import torch

from cuset_core.verify import gpu
from cuset_core.verify.candidate import kernel_names, parse_candidate
from cuset_core.verify.execution import judge
from cuset_core.verify.execution.contracts import (
    REASON_CHARS,
    REFERENCE_FILE,
    WIDE_SCALE,
    CandidateReport,
    Decided,
    GpuJob,
    ReferenceDetails,
    ReferenceReport,
)
from cuset_core.verify.execution.harness_side import aliased_pairs, candidate_factory, flatten_outputs
from cuset_core.verify.execution.judge import compare_outputs, compare_trials, looks_cached
from cuset_core.verify.execution.tier_run import ReferenceRun, TierSpec
from cuset_core.verify.execution.transfer import load_values
from cuset_core.verify.gpu import harness as gpu_harness
from cuset_core.verify.gpu.harness import classify_kernels, timing_stats
from cuset_core.verify.result import Tier, Verdict
from cuset_core.verify.sandbox import SandboxOutcome
from cuset_core.verify.settings import SandboxLimits, VerifySettings

PASSED_REFERENCE = ReferenceReport(verdict=Verdict.PASS)

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "cuset_core" / "demo"

CUDA = r"""
__global__ void __launch_bounds__(256) scale_kernel(const float* x, float* y, int n) { }
template <typename T>
__global__ void add_kernel(const T* a, T* b) { }
static __global__ void relu_kernel(float* x) { }
__device__ float helper(float v) { return v; }
"""


def test_kernel_names_lists_every_global_function_once():
    assert kernel_names(CUDA + CUDA) == ["scale_kernel", "add_kernel", "relu_kernel"]


def test_classify_kernels_finds_the_candidates_kernel_among_library_ones():
    events = [
        "void scale_kernel(float const*, float*, int)",
        "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>(int, ...)",
        "ampere_sgemm_128x64_nn",
    ]
    custom, library = classify_kernels(events, ["scale_kernel", "relu_kernel"])
    assert custom == ["void scale_kernel(float const*, float*, int)"]
    assert library == events[1:]


def test_classify_kernels_rejects_only_aten_and_cublas_kernels():
    events = ["void at::native::reduce_kernel<512, 1>(...)", "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n"]
    assert classify_kernels(events, ["my_kernel"]) == ([], events)


def test_classify_kernels_without_known_names_counts_non_library_kernels():
    events = ["void generated_kernel_0(float*)", "void at::native::elementwise_kernel<128, 2>(...)"]
    assert classify_kernels(events, []) == (["void generated_kernel_0(float*)"], [events[1]])


def test_timing_stats_summarises_milliseconds():
    stats = timing_stats([1.0, 2.0, 3.0, 6.0])
    assert (stats.mean, stats.median, stats.min, stats.max, stats.n) == (3.0, 2.5, 1.0, 6.0, 4)
    assert stats.std == pytest.approx(1.8708287)


def test_timing_stats_needs_a_sample():
    with pytest.raises(ValueError):
        timing_stats([])


def test_an_output_that_is_a_view_of_an_input_is_aliased():
    x, y = torch.zeros(8), torch.zeros(8)
    assert aliased_pairs([x[2:4]], [y, x]) == [(0, 1)]
    assert aliased_pairs([x.clone()], [y, x]) == []
    assert aliased_pairs([x.view(2, 4), 3], [x]) == [(0, 0)]


def test_an_output_that_does_not_change_with_the_inputs_looks_cached():
    a, b = torch.ones(3), torch.zeros(3)
    assert looks_cached([a], [b], [a], [a.clone()])
    assert not looks_cached([a], [b], [a], [b])
    assert not looks_cached([a], [a.clone()], [a], [a])  # reference constant too: nothing to see


def test_compare_outputs_reports_shape_then_values():
    ref = [torch.zeros(2, 3)]
    v0 = VerifySettings(tolerance_profile="v0").tolerance
    assert compare_outputs(ref, [torch.zeros(3, 2)], v0).verdict is Verdict.SHAPE_MISMATCH
    assert compare_outputs(ref, [torch.zeros(2, 3), torch.zeros(1)], v0).verdict is Verdict.SHAPE_MISMATCH
    mismatch = compare_outputs(ref, [torch.full((2, 3), 0.5)], v0)
    assert (mismatch.verdict, mismatch.max_abs_diff, mismatch.mean_abs_diff) == ("value_mismatch", 0.5, 0.5)
    ok = compare_outputs(ref, [torch.full((2, 3), 0.005)], v0)
    assert (ok.verdict, ok.max_abs_diff) == (Verdict.PASS, pytest.approx(0.005))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float64])
def test_an_output_of_another_dtype_is_a_value_mismatch_however_close_its_values(dtype):
    # KernelBench's torch.allclose refuses to compare them; a cast would let a float32 problem be
    # answered in half precision, within the looser tolerance of nothing.
    ref = [torch.zeros(2, 3)]
    result = compare_outputs(ref, [torch.zeros(2, 3, dtype=dtype)], VerifySettings().tolerance)
    assert result.verdict is Verdict.VALUE_MISMATCH
    assert result.reason == f"output 0: expected dtype torch.float32, got {dtype}"


def test_tolerances_follow_the_output_dtype_as_kernelbench_does_now():
    kernelbench = VerifySettings().tolerance
    assert [kernelbench(name) for name in ("float32", "float64", "float16", "bfloat16")] == [
        (1e-4, 1e-4),
        (1e-4, 1e-4),
        (1e-2, 1e-2),
        (1e-2, 1e-2),
    ]
    assert VerifySettings(tolerance_profile="v0").tolerance("float32") == (1e-2, 1e-2)
    assert VerifySettings(atol=1e-3).tolerance("float16") == (1e-3, 1e-2)  # an explicit value overrides the profile


def test_a_kernel_that_drops_one_of_4096_summed_terms_fails_in_fp32_and_passes_only_under_v0():
    terms = torch.rand(4096, generator=torch.Generator().manual_seed(0), dtype=torch.float64)  # sum about 2048
    expected = terms.sum().float().reshape(1)
    dropped = terms.max()  # the kernel's slip: the largest term left out, about 1/2048 of the sum
    skipped = (terms.sum() - dropped).float().reshape(1)
    assert 1e-4 < float(dropped / terms.sum()) < 1e-2
    assert compare_outputs([expected], [skipped], VerifySettings().tolerance).verdict is Verdict.VALUE_MISMATCH
    assert (
        compare_outputs([expected], [skipped], VerifySettings(tolerance_profile="v0").tolerance).verdict is Verdict.PASS
    )
    # the same slip in fp16 is within KernelBench's 1e-2 for half precision
    assert compare_outputs([expected.half()], [skipped.half()], VerifySettings().tolerance).verdict is Verdict.PASS


def test_flatten_outputs_unpacks_nested_tuples():
    a, b, c = torch.zeros(1), torch.ones(1), torch.ones(2)
    assert flatten_outputs((a, [b, c])) == [a, b, c]
    assert flatten_outputs(a) == [a]


def test_gpu_limits_raise_only_what_a_gpu_job_needs():
    limits = gpu.gpu_limits(SandboxLimits(wall_s=10, file_size_mb=7))
    assert (limits.wall_s, limits.cpu_s, limits.max_processes, limits.file_size_mb) == (900.0, 1800, 512, 7)
    assert (limits.memory_mb, limits.address_space_mb) == (16 << 10, 1 << 30)


def test_the_job_names_the_candidates_kernels():
    candidate = parse_candidate((DEMO / "solutions" / "02_relu.py").read_text())
    settings = VerifySettings(seeds=2, timing_trials=7, compile_baseline=True)
    assert gpu.gpu_job(candidate, settings) == GpuJob(
        kind="python",
        seeds=2,
        input_seed=settings.input_seed,
        timing_trials=7,
        compile_baseline=True,
        kernel_names=["relu_kernel"],
        gpu_memory_mb=SandboxLimits().gpu_memory_mb,
    )


SPEC = TierSpec(Tier.GPU, gpu.HARNESS_MODULE, SandboxLimits(), lambda folder: {})


def test_a_side_that_left_no_report_is_a_timeout_or_runtime_error():
    timed_out = SandboxOutcome(None, "", "", 901.0, True, 9, "wall")
    crashed = SandboxOutcome(-6, "", "CUDA error: an illegal memory access", 3.0, False, 6, None)
    assert judge._without_report(SPEC, "candidate", timed_out).verdict is Verdict.TIMEOUT
    result = judge._without_report(SPEC, "candidate", crashed)
    assert (result.verdict, result.tier) == (Verdict.RUNTIME_ERROR, Tier.GPU)
    assert "illegal memory access" in result.log
    # the reference is the problem's code, not the candidate's: its crash is not the model's failure
    assert judge._without_report(SPEC, "reference", crashed).verdict is Verdict.INTERNAL_ERROR
    slow_reference = judge._without_report(SPEC, "reference", timed_out)
    assert (slow_reference.verdict, slow_reference.unsupported_feature) == (Verdict.UNSUPPORTED, "reference too slow")


def test_a_cpu_runtime_abort_is_quoted_as_the_candidate_process_message():
    aborted = SandboxOutcome(-6, "", "x = 1\ncuset runtime: out-of-bounds read in add_kernel\n", 2.0, False, 6, None)
    cpu_spec = TierSpec(Tier.CPU, "m", SandboxLimits(), lambda folder: {})
    result = judge._without_report(cpu_spec, "candidate", aborted)
    assert (result.verdict, result.tier, result.tiers_run) == (Verdict.RUNTIME_ERROR, Tier.CPU, [Tier.CPU])
    assert result.reason == (
        "CPU candidate process killed by signal SIGABRT without a result "
        '(candidate\'s message: "cuset runtime: out-of-bounds read in add_kernel")'
    )


def test_the_judge_passes_matching_trials_with_the_launch_counts():
    expected = [[torch.ones(3)], [torch.zeros(3)]]
    reference = ReferenceRun(b"", expected, PASSED_REFERENCE)
    report = CandidateReport(verdict="pass", launches={"k": 2})
    result = compare_trials(SPEC, reference, [[torch.ones(3)], [torch.zeros(3)]], report, VerifySettings())
    assert (result.verdict, result.trials, result.launches, result.max_abs_diff) == (Verdict.PASS, 2, {"k": 2}, 0.0)
    wrong = compare_trials(SPEC, reference, [[torch.ones(3)], [torch.ones(3)]], report, VerifySettings())
    assert (wrong.verdict, wrong.reason) == (
        Verdict.RUNTIME_ERROR,
        "anti-hacking: the output did not change when the inputs did",
    )
    short = compare_trials(SPEC, reference, [[torch.ones(3)]], report, VerifySettings())
    assert short.reason == "the candidate side handed back a malformed set of trials"


def test_a_side_reports_a_failure_but_never_a_pass_the_judge_did_not_see():
    report = ReferenceReport(verdict=Verdict.PASS, reason="trust me" * 10_000)
    forged = judge._from_report(SPEC, report, {Verdict.INTERNAL_ERROR}, Verdict.INTERNAL_ERROR)
    assert forged.verdict is Verdict.INTERNAL_ERROR and len(forged.reason) <= REASON_CHARS


def test_without_a_gpu_tier_3_is_unsupported_with_the_reason(monkeypatch):
    monkeypatch.setattr(gpu, "gpu_available", lambda: False)
    candidate = parse_candidate((DEMO / "solutions" / "02_relu.py").read_text())
    result = gpu.run_gpu_tier("problem", candidate, VerifySettings(tier=Tier.GPU))
    assert (result.verdict, result.tier, result.unsupported_feature) == (Verdict.UNSUPPORTED, Tier.GPU, "gpu")
    assert result.reason == "no CUDA GPU on this machine"


def test_the_device_memory_cap_is_a_share_of_the_device_at_most_all_of_it():
    assert gpu_harness.memory_fraction(16384, 64 << 30) == 0.25
    assert gpu_harness.memory_fraction(16384, 8 << 30) == 1.0


@pytest.mark.gpu
def test_a_candidate_past_the_device_memory_cap_is_a_runtime_error():
    problem = (DEMO / "problems" / "02_relu.py").read_text()
    greedy = (
        (DEMO / "solutions" / "02_relu.py")
        .read_text()
        .replace(
            "return relu_ext.relu_cuda(x)",
            "self.hoard = torch.empty(1 << 30, device=x.device)\n        return relu_ext.relu_cuda(x)",
        )
    )
    settings = VerifySettings(tier=Tier.GPU, timing_trials=5, limits=SandboxLimits(gpu_memory_mb=1024))
    result = gpu.run_gpu_tier(problem, parse_candidate(greedy), settings)
    assert (result.verdict, result.reason) == (
        Verdict.RUNTIME_ERROR,
        "the candidate needs more than the device memory cap of 1024 MiB",
    )


@pytest.mark.gpu
def test_a_demo_solution_passes_on_the_gpu_with_a_speedup():
    problem = (DEMO / "problems" / "02_relu.py").read_text()
    candidate = parse_candidate((DEMO / "solutions" / "02_relu.py").read_text())
    result = gpu.run_gpu_tier(problem, candidate, VerifySettings(tier=Tier.GPU, timing_trials=20))
    assert result.verdict is Verdict.PASS, result.reason + result.log
    assert result.speedup is not None and result.speedup > 0
    assert result.launches.get("relu_kernel", 0) >= 1


@pytest.mark.gpu
def test_a_torch_fallback_on_the_gpu_is_rejected_at_run_time():
    problem = (DEMO / "problems" / "02_relu.py").read_text()
    fallback = (
        (DEMO / "solutions" / "02_relu.py")
        .read_text()
        .replace("return relu_ext.relu_cuda(x)", "relu_ext.relu_cuda(x)\n        return torch.relu(x)")
    )
    result = gpu.run_gpu_tier(problem, parse_candidate(fallback), VerifySettings(tier=Tier.GPU, timing_trials=5))
    assert result.verdict is Verdict.STATIC_REJECT
    assert 'message: "trial 1: run-time fallback: output 0 was computed by torch ops' in result.reason


# ---------------------------------------------------------------- both sides, CUDA stood in by CPU

RELU_PROBLEM = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)

def get_inputs():
    return [torch.randn(64)]

def get_init_inputs():
    return []
"""

CANDIDATES = {
    "right": "return ext.relu(x)",
    "wrong": "return ext.relu(x) * 2",
    "in_place_on_input": "return ext.relu_(x)",
    "cached": "self.memo = ext.relu(x) if self.memo is None else self.memo\n        return self.memo",
    "tf32": "torch.backends.cuda.matmul.allow_tf32 = True\n        return ext.relu(x)",
    "crash": "raise RuntimeError('CUDA error: an illegal memory access was encountered')",
    "fallback": "ext.relu(x)\n        return torch.relu(x)",
}


def candidate_file(body: str) -> str:
    return (
        "import torch\nimport torch.nn as nn\nfrom torch.utils.cpp_extension import load_inline\n\n"
        "ext = load_inline(name='relu_ext', cpp_sources='', functions=['relu', 'relu_'])\n\n"
        "class ModelNew(nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n        self.memo = None\n\n"
        f"    def forward(self, x):\n        {body}\n"
    )


def _relu_in_place(x):
    return x.clamp_(min=0)


@pytest.fixture
def cpu_protocol(monkeypatch, tmp_path):
    """Run both sides of the harness in this process on the CPU, then judge: the extension build,
    CUDA sync, profiler and timing replaced by stand-ins."""
    from torch.utils import cpp_extension

    from cuset_core.verify.gpu import harness as gpu_harness

    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(
        cpp_extension, "load_inline", lambda **kwargs: types.SimpleNamespace(relu=torch.relu, relu_=_relu_in_place)
    )
    monkeypatch.setattr(gpu_harness, "_profile_candidate", lambda *args: ({"relu_kernel": 1}, 1.0))
    monkeypatch.setattr(gpu_harness, "_l2_flusher", lambda device: lambda: None)
    monkeypatch.setattr(gpu_harness, "_time_calls", lambda model, sets, trials, flush: [2.0] * trials)
    saved = (torch.backends.cudnn.allow_tf32, torch.get_float32_matmul_precision())

    def run(name: str):
        reference_dir, candidate_dir = tmp_path / name / "reference", tmp_path / name / "candidate"
        reference_dir.mkdir(parents=True)
        candidate_dir.mkdir()
        (reference_dir / "problem.py").write_text(RELU_PROBLEM)
        (candidate_dir / "candidate.py").write_text(candidate_file(CANDIDATES[name]))
        job = GpuJob(
            candidate="candidate.py",
            kind="python",
            seeds=3,
            input_seed=1000,
            timing_trials=4,
            kernel_names=["relu_kernel"],
            gpu_memory_mb=1024,
        )
        try:
            reference = gpu_harness.reference_side(job, reference_dir, torch.device("cpu"), {})
            (candidate_dir / "inputs.safetensors").write_bytes((reference_dir / "inputs.safetensors").read_bytes())
            job = job.model_copy(update={"handed": reference.details.candidate_job})
            outcome = gpu_harness.candidate_side(job, candidate_dir, torch.device("cpu"), {})
        except gpu_harness.Decided as decided:
            return decided.outcome.verdict, decided.outcome.reason
        finally:
            torch.backends.cudnn.allow_tf32 = saved[0]
            torch.set_float32_matmul_precision(saved[1])
        expected = load_values((reference_dir / REFERENCE_FILE).read_bytes())["trials"]
        produced = load_values((candidate_dir / "outputs.safetensors").read_bytes())["trials"]
        report = CandidateReport(verdict="pass", launches=outcome.launches)
        report_of_reference = ReferenceReport(verdict="pass", details=reference.details)
        reference_run = ReferenceRun(b"", expected, report_of_reference, 1000)
        judged = compare_trials(SPEC, reference_run, produced, report, VerifySettings())
        assert (reference.reference_ms, outcome.runtime_ms) == (2.0, 2.0)
        return judged.verdict.value, judged.reason

    return run


def test_both_sides_pass_a_right_candidate(cpu_protocol):
    assert cpu_protocol("right") == ("pass", "3 trials within tolerance")


def test_the_judge_reports_the_first_wrong_trial(cpu_protocol):
    verdict, reason = cpu_protocol("wrong")
    assert verdict == "value_mismatch" and reason.startswith("trial 1 (seed 1000): output 0: max abs diff")


@pytest.mark.parametrize(
    ("name", "verdict", "reason"),
    [
        ("in_place_on_input", "runtime_error", "anti-hacking: output 0 shares memory with input 0"),
        ("cached", "runtime_error", "anti-hacking: the output did not change when the inputs did"),
        ("tf32", "runtime_error", "anti-hacking: the candidate changed TF32 settings to (True, False, 'high')"),
        ("crash", "runtime_error", "candidate forward failed: CUDA error: an illegal memory access was encountered"),
        (
            "fallback",
            "static_reject",
            "trial 1: run-time fallback: output 0 was computed by torch ops, not by the "
            "custom kernels (1 custom-extension calls, aten compute ops: relu x1)",
        ),
    ],
)
def test_hacks_and_crashes_are_rejected(cpu_protocol, name, verdict, reason):
    assert cpu_protocol(name) == (verdict, reason)


def test_the_harness_runs_in_the_sandbox_and_reports_back(monkeypatch):
    """The parent believes a GPU is there; the sandboxed harness finds none and says so."""
    monkeypatch.setattr(gpu, "gpu_available", lambda: True)
    candidate = parse_candidate((DEMO / "solutions" / "02_relu.py").read_text())
    result = gpu.run_gpu_tier(RELU_PROBLEM, candidate, VerifySettings(tier=Tier.GPU))
    assert (result.verdict, result.unsupported_feature, result.reason) == (
        Verdict.UNSUPPORTED,
        "gpu",
        "no CUDA GPU on this machine",
    ), result.log
    assert result.timings_s["gpu_total"] > 0


# ---------------------------------------------------------------- the candidate factory both tiers use

CU_SOURCE = """
torch::Tensor forward(torch::Tensor x) { return x; }
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "relu"); }
"""


def _module(name: str, code: str) -> types.ModuleType:
    module = types.ModuleType(name)
    exec(code, module.__dict__)  # noqa: S102 - the test's own code
    return module


def test_the_factory_binds_a_cu_forward_to_the_shipped_reference_weights():
    from cuset_core.verify.execution.binding import ReferenceLayout

    layout = ReferenceLayout(tensor_names=[], init_names=[], attrs={})
    extension = types.SimpleNamespace(forward=lambda x: torch.relu(x) * 3)
    model = candidate_factory("cu", extension, [], CU_SOURCE, 1, (layout, {}))()
    assert torch.equal(model(torch.tensor([-1.0, 2.0])), torch.tensor([0.0, 6.0]))


def test_the_factory_turns_a_missing_or_crashing_model_new_into_a_runtime_error():
    with pytest.raises(Decided) as missing:
        candidate_factory("python", _module("empty", ""), [], "", 1)
    assert (missing.value.outcome.verdict, missing.value.outcome.reason) == (
        "runtime_error",
        "the candidate defines no ModelNew",
    )
    crashing = _module("crashing", "class ModelNew:\n    def __init__(self):\n        raise ValueError('bad size')\n")
    with pytest.raises(Decided) as crashed:
        candidate_factory("python", crashing, [], "", 1)()
    assert (crashed.value.outcome.verdict, crashed.value.outcome.reason) == (
        "runtime_error",
        "constructing ModelNew failed: bad size",
    )


def test_speed_fields_over_eager_and_torch_compile():
    fields = judge.speed_fields(reference_ms=3.0, compile_ms=1.5, runtime_ms=1.2)
    assert (fields["speedup"], fields["compile_speedup"]) == (pytest.approx(2.5), pytest.approx(1.25))
    assert fields["speed_note"] == "1.2000 ms vs eager 3.0000 ms (speedup 2.50x), vs torch.compile 1.5000 ms (1.25x)"
    eager_only = judge.speed_fields(reference_ms=3.0, compile_ms=None, runtime_ms=1.2)
    assert "compile_speedup" not in eager_only and eager_only["compile_ms"] is None
    assert "speedup" not in judge.speed_fields(reference_ms=3.0, compile_ms=1.5, runtime_ms=None)


def test_a_failed_torch_compile_baseline_is_a_note_never_a_verdict():
    details = ReferenceDetails(compile_error="inductor: unsupported op")
    speed = judge._speed(ReferenceReport(verdict="pass", reference_ms=2.0, details=details), 1.0)
    assert (speed["speedup"], speed["compile_ms"]) == (2.0, None)
    assert speed["speed_note"].endswith("; no torch.compile baseline: inductor: unsupported op")


def test_the_reference_side_times_eager_then_torch_compile_and_draws_inputs_from_input_seed(monkeypatch, tmp_path):
    """Trial i draws under input_seed + i; trial 1 is a wide trial: the same draw, scaled."""
    from cuset_core.verify.gpu import harness as gpu_harness

    timed = []

    def time_calls(model, sets, trials, flush):
        timed.append(model)
        return [4.0] * trials if len(timed) == 1 else [1.0, 3.0] * (trials // 2)

    monkeypatch.setattr(gpu_harness, "_time_calls", time_calls)
    monkeypatch.setattr(gpu_harness, "_l2_flusher", lambda device: lambda: None)
    monkeypatch.setattr(gpu_harness, "_set_tf32_off", lambda: None)  # process-wide state other tests see
    job = GpuJob(kind="python", seeds=2, input_seed=7, timing_trials=4, compile_baseline=True, gpu_memory_mb=1024)

    def reference(folder: str, **changes):
        workdir = tmp_path / folder
        workdir.mkdir()
        (workdir / "problem.py").write_text(RELU_PROBLEM)
        outcome = gpu_harness.reference_side(job.model_copy(update=changes), workdir, torch.device("cpu"), {})
        return outcome, load_values((workdir / "inputs.safetensors").read_bytes())["trials"]

    outcome, inputs = reference("a")
    assert outcome.reference_ms == 4.0 and outcome.details.compile_timing.mean == 2.0
    assert isinstance(timed[1], torch._dynamo.eval_frame.OptimizedModule) and timed[1]._orig_mod is timed[0]
    torch.manual_seed(8)
    assert torch.equal(inputs[1][0], torch.randn_like(inputs[1][0]) * WIDE_SCALE)  # trial 1 under input_seed + 1
    assert outcome.details.wide_trials == [1]
    _, again = reference("b")
    _, other = reference("c", input_seed=8, compile_baseline=False)
    assert torch.equal(again[0][0], inputs[0][0]) and torch.equal(other[0][0] * WIDE_SCALE, inputs[1][0])
    assert len(timed) == 5  # eager + compile twice, then eager only


def test_the_harness_builds_and_caches_only_inside_its_work_folder(tmp_path):
    env = gpu.gpu_env(tmp_path)
    assert [env[name] for name in ("TORCH_EXTENSIONS_DIR", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")] == [
        str(tmp_path / "torch_extensions"),
        str(tmp_path / "inductor"),
        str(tmp_path / "triton"),
    ]


@pytest.mark.parametrize("side", ["reference", "candidate"])
def test_each_side_is_handed_a_cuda_device_with_its_index(monkeypatch, side):
    # torch.cuda.set_per_process_memory_fraction refuses a bare "cuda" device; on the H200 check
    # every candidate once failed at run time that way, honest ones too.
    handed = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    for name in ("reference_side", "candidate_side"):
        monkeypatch.setattr(gpu_harness, name, lambda job, workdir, device, timings: handed.append(device))
    gpu_harness.side_main(side, None, Path("."), {})
    assert handed == [torch.device("cuda", 0)]
    assert handed[0].index == 0
