"""The kernels did the work (issue 23 part 2): a candidate whose CUDA kernels compute nothing does
not pass tier 2, however its outputs were made. After its trials the candidate side runs trial 1
again with the runtime's launches running no blocks (a switch of the trusted runtime library that
nothing the candidate reads reveals); an output of that run that still matches the reference came
from host code, torch or numpy, not the device code.

Each attack test fails if its attack passes. The slow ones run real candidates on tier 2 on the
row sums of ``cpu_cases/rowsum_problem.py``; they share one extension (every variant's functions
in one source) and a library cache, so g++ runs once. The fast ones run the judge for real
against a stub in place of the sandboxed sides (``_run_side``), like ``test_judge_blame``, and
the harness's kernels-off trial with a stand-in model.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import torch
from attacks import HONEST
from safetensors.torch import save

from cuset_core.verify.candidate import parse_candidate
from cuset_core.verify.cpu import harness, run_cpu_tier
from cuset_core.verify.cpu.build import RUNTIME_DIR
from cuset_core.verify.execution import judge
from cuset_core.verify.execution.contracts import KERNELS_OFF_FILE, OUTPUTS_FILE, REPORT_FILE, CpuJob, ReferenceReport
from cuset_core.verify.execution.library_cache import LibraryCache
from cuset_core.verify.execution.reference_pool import ReferencePool
from cuset_core.verify.execution.tier_run import ReferenceRun, TierSpec
from cuset_core.verify.execution.transfer import _encode, load_values
from cuset_core.verify.result import Tier, Verdict, VerifyResult
from cuset_core.verify.sandbox import SandboxOutcome
from cuset_core.verify.settings import SandboxLimits, VerifySettings

PASSED_REFERENCE = ReferenceReport(verdict=Verdict.PASS)

PROBLEM = (Path(__file__).parents[1] / "unit" / "cpu_cases" / "rowsum_problem.py").read_text()
# The checks this suite tests decide under the mixed policy; under kernels (the default) the
# device process refuses each attack's torch compute or transfer first (test_data_flow_policy.py).
SETTINGS = VerifySettings(tier=Tier.CPU, policy="mixed", limits=SandboxLimits(wall_s=300, cpu_s=300))

# Every variant in one extension, so that all slow tests build the same library once.
CUDA = r"""
#include <torch/extension.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>
__global__ void noop_kernel(const float* x, float* out) {}
__global__ void rowsum_kernel(const float* x, float* out, int cols) {
    float total = 0.f;
    for (int j = 0; j < cols; ++j) total += x[blockIdx.x * cols + j];
    out[blockIdx.x] = total;
}
__global__ void halve_kernel(float* values, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) values[i] *= 0.5f;
}
// An honest kernel.
torch::Tensor rowsum(torch::Tensor x) {
    auto out = torch::empty({x.size(0)}, x.options());
    rowsum_kernel<<<x.size(0), 1>>>(x.data_ptr<float>(), out.data_ptr<float>(), x.size(1));
    return out;
}
// A custom epilogue after a torch op, in place.
void halve_(torch::Tensor values) {
    int n = values.numel();
    halve_kernel<<<(n + 255) / 256, 256>>>(values.data_ptr<float>(), n);
}
// A launch of a kernel that does nothing, and an output nobody wrote.
torch::Tensor launch_only(torch::Tensor x) {
    auto out = torch::empty({x.size(0)}, x.options());
    noop_kernel<<<1, 1>>>(x.data_ptr<float>(), out.data_ptr<float>());
    return out;
}
// (1) The binding computes with torch while an extension function runs.
torch::Tensor binding_sum(torch::Tensor x) {
    auto out = torch::empty({x.size(0)}, x.options());
    noop_kernel<<<1, 1>>>(x.data_ptr<float>(), out.data_ptr<float>());
    return at::sum(x, 1);
}
// (2) The host computes the sums through data_ptr; a no-op launch satisfies the launch count.
torch::Tensor host_loop(torch::Tensor x) {
    auto out = torch::empty({x.size(0)}, x.options());
    const float* in = x.data_ptr<float>();
    float* sums = out.data_ptr<float>();
    for (int r = 0; r < x.size(0); ++r) {
        double total = 0;
        for (int c = 0; c < x.size(1); ++c) total += in[r * x.size(1) + c];
        sums[r] = total;
    }
    noop_kernel<<<1, 1>>>(in, sums);
    return out;
}
// (3) Another order: the launch first, then torch in the binding writes the kernel's own output.
torch::Tensor binding_copy(torch::Tensor x) {
    auto out = torch::empty({x.size(0)}, x.options());
    noop_kernel<<<1, 1>>>(x.data_ptr<float>(), out.data_ptr<float>());
    out.copy_(x.sum(1));
    return out;
}
// (4) Another thread: the host loop runs on a C++ thread of the binding's own.
torch::Tensor thread_loop(torch::Tensor x) {
    auto out = torch::empty({x.size(0)}, x.options());
    const float* in = x.data_ptr<float>();
    float* sums = out.data_ptr<float>();
    int rows = x.size(0), cols = x.size(1);
    std::thread worker([=] {
        for (int r = 0; r < rows; ++r) {
            double total = 0;
            for (int c = 0; c < cols; ++c) total += in[r * cols + c];
            sums[r] = total;
        }
    });
    worker.join();
    noop_kernel<<<1, 1>>>(in, sums);
    return out;
}
// (5) Detecting the kernels-off run: torch's sums in the trials, garbage when the environment
// (getenv, or the process's environment block in /proc) says the kernels are off, or when a
// trial's schedule number comes round a second time (the kernels-off run repeats trial 1's).
static bool environment_says_off() {
    const char* kernels = std::getenv("CUSET_KERNELS");
    if (kernels && std::string(kernels) == "off") return true;
    FILE* file = std::fopen("/proc/self/environ", "rb");
    if (!file) return false;
    std::string block;
    char chunk[4096];
    size_t got;
    while ((got = std::fread(chunk, 1, sizeof chunk, file)) > 0) block.append(chunk, got);
    std::fclose(file);
    return block.find(std::string("CUSET_KERNELS=off")) != std::string::npos;
}
torch::Tensor env_detect(torch::Tensor x) {
    auto out = torch::empty({x.size(0)}, x.options());
    noop_kernel<<<1, 1>>>(x.data_ptr<float>(), out.data_ptr<float>());
    if (environment_says_off()) return torch::full({x.size(0)}, 7.0f, x.options());
    return at::sum(x, 1);
}
torch::Tensor schedule_detect(torch::Tensor x) {
    static std::vector<std::string> seen;
    const char* schedule = std::getenv("CUSET_SCHEDULE");
    std::string now = schedule ? schedule : "unset";
    bool again = std::find(seen.begin(), seen.end(), now) != seen.end() && now != "unset";
    seen.push_back(now);
    auto out = torch::empty({x.size(0)}, x.options());
    noop_kernel<<<1, 1>>>(x.data_ptr<float>(), out.data_ptr<float>());
    if (again) return torch::full({x.size(0)}, 7.0f, x.options());
    return at::sum(x, 1);
}
"""
FUNCTIONS = [
    "rowsum",
    "halve_",
    "launch_only",
    "binding_sum",
    "host_loop",
    "binding_copy",
    "thread_loop",
    "env_detect",
    "schedule_detect",
]
SIGNATURES = "\n".join(
    [
        "torch::Tensor rowsum(torch::Tensor x);",
        "void halve_(torch::Tensor values);",
        "torch::Tensor launch_only(torch::Tensor x);",
        "torch::Tensor binding_sum(torch::Tensor x);",
        "torch::Tensor host_loop(torch::Tensor x);",
        "torch::Tensor binding_copy(torch::Tensor x);",
        "torch::Tensor thread_loop(torch::Tensor x);",
        "torch::Tensor env_detect(torch::Tensor x);",
        "torch::Tensor schedule_detect(torch::Tensor x);",
    ]
)


def candidate(forward: str) -> str:
    """A ``ModelNew`` that builds the shared extension and runs ``forward`` (its body, indented)."""
    return f'''import threading

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

ext = load_inline(
    name="rowsum_ext", cpp_sources=r"""{SIGNATURES}""", cuda_sources=r"""{CUDA}""", functions={FUNCTIONS!r}
)


class ModelNew(nn.Module):
    def forward(self, x):
{forward}
'''


# The module's candidates are one batch, as an eval's samples of a problem are: one reference run.
REFERENCES = ReferencePool()


def tier2(forward: str, libraries: LibraryCache) -> VerifyResult:
    return run_cpu_tier(PROBLEM, parse_candidate(candidate(forward)), SETTINGS, libraries, REFERENCES)


def assert_kernels_off_fallback(result: VerifyResult) -> None:
    assert result.verdict is Verdict.STATIC_REJECT, (result.verdict, result.reason, result.log[-2000:])
    assert result.reason.startswith("run-time fallback: trial "), result.reason
    assert "with the candidate's kernels disabled" in result.reason, result.reason


def assert_host_fault(result: VerifyResult) -> None:
    """Host code touched device memory: behind the device boundary it faults, as on a GPU."""
    assert result.verdict is Verdict.RUNTIME_ERROR, (result.verdict, result.reason, result.log[-2000:])
    assert "host code read or wrote device memory (a GPU faults there too)" in result.reason, result.reason


# ---------------------------------------------------------------- real candidates (g++)


@pytest.mark.slow
def test_an_honest_kernel_still_passes(libraries):
    result = tier2("        return ext.rowsum(x)", libraries)
    assert result.verdict is Verdict.PASS, (result.verdict, result.reason, result.log[-2000:])
    assert "kernels_off" in result.timings_s  # the kernels-off trial ran, and the kernels mattered


@pytest.mark.slow
def test_a_torch_op_then_custom_kernels_that_compute_the_output_from_it_still_pass(libraries):
    # A mixed solution: torch doubles the input (not the output, nor part of it); the kernels sum
    # that and halve the sums.
    forward = "        sums = ext.rowsum(x * 2)\n        ext.halve_(sums)\n        return sums"
    result = tier2(forward, libraries)
    assert result.verdict is Verdict.PASS, (result.verdict, result.reason, result.log[-2000:])


@pytest.mark.slow
def test_torch_computing_the_output_before_an_epilogue_kernel_undoes_its_own_change_is_a_fallback(libraries):
    # torch.sum is already the answer; doubling and a kernel's halving only hide that from the
    # kernels-off run (it leaves twice the sums, a mismatch).
    forward = "        sums = torch.sum(x, 1) * 2\n        ext.halve_(sums)\n        return sums"
    result = tier2(forward, libraries)
    assert result.verdict is Verdict.STATIC_REJECT, (result.verdict, result.reason, result.log[-2000:])
    assert "torch computed on the device with the candidate's kernels disabled (aten::sum" in result.reason


@pytest.mark.slow
def test_torch_compute_inside_the_extension_binding_is_a_fallback(libraries):
    assert_kernels_off_fallback(tier2("        return ext.binding_sum(x)", libraries))


@pytest.mark.slow
def test_a_host_loop_over_data_ptr_beside_a_no_op_launch_faults(libraries):
    assert_host_fault(tier2("        return ext.host_loop(x)", libraries))


@pytest.mark.slow
def test_torch_in_the_binding_writing_the_kernels_output_after_its_launch_is_a_fallback(libraries):
    # On tier 2's torch bridge, ``out.copy_(x.sum(1))`` in C++ runs through Python's torch.
    result = tier2("        return ext.binding_copy(x)", libraries)
    assert list(result.built_with.values()) == ["bridge"]
    assert_kernels_off_fallback(result)


@pytest.mark.slow
def test_a_host_loop_on_a_cpp_thread_of_the_binding_faults(libraries):
    assert_host_fault(tier2("        return ext.thread_loop(x)", libraries))


@pytest.mark.slow
def test_a_binding_that_reads_its_environment_cannot_tell_the_kernels_off_run(libraries):
    # getenv and /proc/self/environ: the switch is in the trusted runtime library, not there.
    assert_kernels_off_fallback(tier2("        return ext.env_detect(x)", libraries))


@pytest.mark.slow
def test_a_binding_that_watches_the_trial_schedule_cannot_tell_the_kernels_off_run(libraries):
    assert_kernels_off_fallback(tier2("        return ext.schedule_detect(x)", libraries))


@pytest.mark.slow
def test_python_that_reads_its_environment_cannot_tell_the_kernels_off_run(libraries):
    # The detection one language layer up, in the model's forward; the sums come from torch in
    # the binding, out of the Python monitor's sight.
    forward = """        import os
        environ = open("/proc/self/environ", "rb").read()
        off = os.environ.get("CUSET_KERNELS") == "off" or b"CUSET_KERNELS=off" in environ
        return torch.full((x.shape[0],), 7.0) if off else ext.binding_sum(x)"""
    assert_kernels_off_fallback(tier2(forward, libraries))


@pytest.mark.slow
def test_python_that_looks_for_the_files_written_before_the_kernels_off_run_cannot_tell_it(libraries):
    # The outputs and the report are written before the kernels-off run; a candidate that looks
    # for them in its working folder, or anywhere under it, must not find the moment.
    forward = """        import glob, os
        names = ("report.json", "outputs.safetensors")
        written = [p for p in glob.glob("**/*", recursive=True) if os.path.basename(p) in names]
        return torch.full((x.shape[0],), 7.0) if written else ext.binding_sum(x)"""
    assert_kernels_off_fallback(tier2(forward, libraries))


@pytest.mark.slow
@pytest.mark.parametrize(
    "write",
    [
        "torch.sum(x, 1, out=out)",
        "out.copy_(torch.from_numpy(x.cpu().numpy().sum(1)))",
    ],
    ids=["torch out=", "numpy on the host, copied in"],
)
def test_writing_the_kernels_output_from_python_after_a_launch_is_a_fallback(libraries, write):
    forward = f"        out = ext.launch_only(x)\n        {write}\n        return out"
    result = tier2(forward, libraries)
    if "cpu()" in write:  # the copy to the host is refused first, under either policy
        assert result.verdict is Verdict.STATIC_REJECT and "device-to-host transfer" in result.reason, result.reason
    else:
        assert_kernels_off_fallback(result)


@pytest.mark.slow
def test_torch_compute_in_a_background_thread_copied_into_the_output_is_a_fallback(libraries):
    forward = """        out = ext.launch_only(x)
        worker = threading.Thread(target=lambda: out.copy_(torch.sum(x, 1)))
        worker.start()
        worker.join()
        return out"""
    assert_kernels_off_fallback(tier2(forward, libraries))


# ---------------------------------------------------------------- the judge's decision (no compiler)

SPEC = TierSpec(Tier.CPU, "stub", SandboxLimits(), lambda folder: {}, kernels_off=True)
JOB = CpuJob(
    kind="python",
    seeds=3,
    reduce_sizes=False,
    max_elements=1 << 20,
    preludes=[],
    include_dirs=[],
    library_dirs=[],
)
STUB_SETTINGS = VerifySettings(tier=Tier.CPU, seeds=3)
CANDIDATE = parse_candidate(HONEST)
EXPECTED = [[torch.arange(4.0) * (trial + 1)] for trial in range(3)]
PASSING = json.dumps({"verdict": "pass", "launches": {"relu_kernel": 3}}).encode()


def outputs(trials: list[list[Any]]) -> bytes:
    """The outputs file a candidate side writes for ``trials``."""
    tensors: dict[str, Any] = {}
    layout = {"trials": _encode(trials, "trials", tensors)}
    return save(tensors, metadata={"cuset": json.dumps(layout)})


def judged(
    monkeypatch,
    tmp_path: Path,
    kernels_off: bytes | None,
    expected: list[list[Any]] = EXPECTED,
    spec: TierSpec = SPEC,
    report: bytes = PASSING,
) -> VerifyResult:
    """The judge's verdict on a candidate side whose trials gave ``expected`` and whose
    kernels-off trial left ``kernels_off`` (None: no file)."""

    def candidate_side(spec: TierSpec, side: str, folder: Path, job: Any) -> SandboxOutcome:
        (folder / REPORT_FILE).write_bytes(report)
        (folder / OUTPUTS_FILE).write_bytes(outputs(expected))
        if kernels_off is not None:
            (folder / KERNELS_OFF_FILE).write_bytes(kernels_off)
        return SandboxOutcome(0, "", "", 0.1, False, None, None)

    monkeypatch.setattr(judge, "_run_side", candidate_side)
    reference = ReferenceRun(b"", expected, PASSED_REFERENCE, 1234)
    result, _ = judge.run_candidate(spec, tmp_path, CANDIDATE, reference, JOB, STUB_SETTINGS)
    return result


def test_outputs_that_match_without_the_kernels_are_a_fallback(monkeypatch, tmp_path):
    result = judged(monkeypatch, tmp_path, outputs([EXPECTED[0]]))
    assert result.verdict is Verdict.STATIC_REJECT, result.reason
    assert result.reason == (
        "run-time fallback: trial 1 (seed 1234): output 0 matches the reference with the candidate's kernels "
        "disabled, so its device code did not compute it"
    )
    assert result.launches == {"relu_kernel": 3}


@pytest.mark.parametrize(
    "kernels_off",
    [
        outputs([[torch.full((4,), float("nan"))]]),  # the poison of an output no kernel wrote
        outputs([[torch.zeros(4)]]),
        outputs([[EXPECTED[1][0]]]),  # another trial's values
        outputs([[EXPECTED[0][0][:3]]]),  # another shape
    ],
    ids=["poison", "zeros", "other values", "other shape"],
)
def test_a_kernels_off_replay_that_mismatches_keeps_the_pass(monkeypatch, tmp_path, kernels_off):
    result = judged(monkeypatch, tmp_path, kernels_off)
    assert result.verdict is Verdict.PASS, result.reason


@pytest.mark.parametrize(
    "kernels_off",
    [
        None,  # crashed, hung or failed without its kernels
        b"\x00" * 64,  # not a safetensors file
        outputs([[EXPECTED[0][0]], [EXPECTED[0][0]]]),  # two trials
        outputs([]),  # no trial
        save({"x": torch.zeros(4)}, metadata={"cuset": '{"trials": {"t": "missing"}}'}),  # a malformed layout
        outputs([[EXPECTED[0][0]]]) + b"\x00" * (2 << 20),  # over the cap: refused unread
    ],
    ids=["no file", "garbage", "two trials", "no trial", "malformed layout", "oversized"],
)
def test_a_kernels_off_replay_that_cannot_be_read_fails_closed(monkeypatch, tmp_path, kernels_off):
    result = judged(monkeypatch, tmp_path, kernels_off)
    assert result.verdict is Verdict.STATIC_REJECT, result.reason
    assert result.reason == "the kernels-off replay left no outputs the judge can read; a pass needs it"


def test_a_symlinked_kernels_off_file_is_not_followed_and_fails_closed(monkeypatch, tmp_path):
    hidden = tmp_path / "hidden.safetensors"
    hidden.write_bytes(outputs([EXPECTED[1]]))

    def candidate_side(spec: TierSpec, side: str, folder: Path, job: Any) -> SandboxOutcome:
        (folder / REPORT_FILE).write_bytes(PASSING)
        (folder / OUTPUTS_FILE).write_bytes(outputs(EXPECTED))
        (folder / KERNELS_OFF_FILE).symlink_to(hidden)
        return SandboxOutcome(0, "", "", 0.1, False, None, None)

    monkeypatch.setattr(judge, "_run_side", candidate_side)
    reference = ReferenceRun(b"", EXPECTED, PASSED_REFERENCE, 1234)
    result, _ = judge.run_candidate(SPEC, tmp_path, CANDIDATE, reference, JOB, STUB_SETTINGS)
    assert result.verdict is Verdict.STATIC_REJECT and "kernels-off replay" in result.reason, result.reason


def test_the_replayed_trial_is_the_one_the_file_names(monkeypatch, tmp_path):
    # The device process draws the replayed trial after the run and names it in the file: trial 3's
    # values replayed without the kernels are a fallback of trial 3, not a mismatch of trial 1's.
    tensors: dict[str, Any] = {}
    layout = {"trials": _encode([EXPECTED[2]], "trials", tensors), "trial": _encode(2, "trial", tensors)}
    replay = save(tensors, metadata={"cuset": json.dumps(layout)})
    result = judged(monkeypatch, tmp_path, replay)
    assert result.verdict is Verdict.STATIC_REJECT, result.reason
    assert result.reason.startswith("run-time fallback: trial 3 (seed 1236): output 0 matches"), result.reason


@pytest.mark.parametrize(
    "expected",
    [
        [[torch.zeros(4)] for _ in range(3)],  # all zeros
        [[torch.full((4,), 2.5)] for _ in range(3)],  # one value repeated
        [[torch.arange(4.0)] for _ in range(3)],  # the same whatever the inputs
        [[torch.empty(0)] for _ in range(3)],  # nothing to compute
        [[7] for _ in range(3)],  # not a tensor
    ],
    ids=["zeros", "a fill", "input-independent", "empty", "a number"],
)
def test_an_output_reachable_without_computing_is_not_checked(monkeypatch, tmp_path, expected):
    assert judge.outputs_to_check(ReferenceRun(b"", expected, PASSED_REFERENCE), STUB_SETTINGS, 0) == []
    result = judged(monkeypatch, tmp_path, outputs([expected[0]]), expected)
    assert result.verdict is Verdict.PASS, result.reason


def test_only_outputs_that_need_computing_are_checked_and_any_of_them_matching_is_a_fallback(monkeypatch, tmp_path):
    expected = [[torch.zeros(4), torch.arange(4.0) * (trial + 1)] for trial in range(3)]
    assert judge.outputs_to_check(ReferenceRun(b"", expected, PASSED_REFERENCE), STUB_SETTINGS, 0) == [1]
    for root in ("a", "b"):
        (tmp_path / root).mkdir()
    result = judged(monkeypatch, tmp_path / "a", outputs([[torch.zeros(4), expected[0][1]]]), expected)
    assert result.verdict is Verdict.STATIC_REJECT and "output 1 matches" in result.reason, result.reason
    nan = torch.full((4,), float("nan"))
    kept = judged(monkeypatch, tmp_path / "b", outputs([[torch.zeros(4), nan]]), expected)
    assert kept.verdict is Verdict.PASS, kept.reason


def test_a_wrong_candidate_keeps_its_own_verdict(monkeypatch, tmp_path):
    wrong = [[t + 1 for t in trial] for trial in EXPECTED]

    def candidate_side(spec: TierSpec, side: str, folder: Path, job: Any) -> SandboxOutcome:
        (folder / REPORT_FILE).write_bytes(PASSING)
        (folder / OUTPUTS_FILE).write_bytes(outputs(wrong))
        (folder / KERNELS_OFF_FILE).write_bytes(outputs([EXPECTED[0]]))
        return SandboxOutcome(0, "", "", 0.1, False, None, None)

    monkeypatch.setattr(judge, "_run_side", candidate_side)
    reference = ReferenceRun(b"", EXPECTED, PASSED_REFERENCE, 1234)
    result, _ = judge.run_candidate(SPEC, tmp_path, CANDIDATE, reference, JOB, STUB_SETTINGS)
    assert result.verdict is Verdict.VALUE_MISMATCH, result.reason


def test_a_tier_without_a_kernels_off_trial_does_not_read_one(monkeypatch, tmp_path):
    spec = TierSpec(Tier.CPU, "stub", SandboxLimits(), lambda folder: {})
    result = judged(monkeypatch, tmp_path, outputs([EXPECTED[0]]), spec=spec)
    assert result.verdict is Verdict.PASS, result.reason


# ---------------------------------------------------------------- the harness's kernels-off trial (no compiler)


@pytest.fixture(scope="module")
def runtime(tmp_path_factory) -> ctypes.CDLL:
    """The trial switches of the trusted runtime library (runtime/trial_switches.cpp), built alone."""
    library = tmp_path_factory.mktemp("runtime") / "switches.so"
    source = RUNTIME_DIR / "trial_switches.cpp"
    subprocess.run(["g++", "-shared", "-fPIC", "-O1", str(source), "-o", str(library)], check=True, timeout=120)
    return ctypes.CDLL(str(library))


class Recorder:
    """A candidate model that records the runtime's switches (kernels on, schedule) while it runs
    and what its environment says, and returns ``result``."""

    def __init__(self, runtime: ctypes.CDLL, result: Any):
        self.runtime, self.result = runtime, result
        self.seen: list[tuple[int, int]] = []
        self.environment: list[dict[str, str]] = []

    def __call__(self, *inputs: Any) -> Any:
        self.seen.append((self.runtime.cuset_kernels_on(), self.runtime.cuset_schedule()))
        self.environment.append(dict(os.environ))
        if isinstance(self.result, Exception):
            raise self.result
        return self.result


def test_the_harness_runs_trial_1_with_the_kernels_off_and_writes_its_outputs(runtime, tmp_path):
    runtime.cuset_set_kernels_on(1)
    runtime.cuset_set_schedule(4)
    before = dict(os.environ)
    model = Recorder(runtime, torch.arange(3.0))
    timings: dict[str, float] = {}
    try:
        harness._kernels_off_trial(model, [torch.ones(3)], tmp_path / KERNELS_OFF_FILE, timings, runtime)
    finally:
        runtime.cuset_set_kernels_on(1)
    assert model.seen == [(0, 0)]
    assert model.environment == [before], "nothing the candidate can read says the kernels are off"
    written = load_values((tmp_path / KERNELS_OFF_FILE).read_bytes())["trials"]
    assert torch.equal(written[0][0], torch.arange(3.0)) and "kernels_off" in timings


def test_a_candidate_that_fails_without_its_kernels_leaves_no_kernels_off_file(runtime, tmp_path):
    try:
        failing = Recorder(runtime, RuntimeError("no kernels, no data"))
        harness._kernels_off_trial(failing, [torch.ones(3)], tmp_path / KERNELS_OFF_FILE, {}, runtime)
    finally:
        runtime.cuset_set_kernels_on(1)
    assert not (tmp_path / KERNELS_OFF_FILE).exists()


def test_outputs_that_cannot_be_written_leave_no_kernels_off_file_and_no_error(runtime, tmp_path):
    def refuse(path: Path, groups: dict[str, Any]) -> None:
        raise TypeError("an output safetensors cannot hold")

    try:
        model = Recorder(runtime, torch.arange(3.0))
        harness._kernels_off_trial(model, [torch.ones(3)], tmp_path / KERNELS_OFF_FILE, {}, runtime, save=refuse)
    finally:
        runtime.cuset_set_kernels_on(1)
    assert not (tmp_path / KERNELS_OFF_FILE).exists()
