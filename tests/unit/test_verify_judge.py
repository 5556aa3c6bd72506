"""The judge's pieces, without a compiler: data across processes, untrusted file reads, the
run-time fallback monitor and the size-reduction rules."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch
from pydantic import ValidationError

from cuset_core.verify.cpu.sizes import ORIGINAL_SIZE_FACTOR, hardcoded_sizes, original_fits
from cuset_core.verify.execution.contracts import (
    BuildDetails,
    BuildReport,
    CandidateJob,
    CandidateReport,
    CpuJob,
    GpuJob,
    Outcome,
    PrebuiltLibrary,
    ReferenceDetails,
    ReferenceReport,
    trial_seeds,
)
from cuset_core.verify.execution.fallback import FallbackMonitor
from cuset_core.verify.execution.harness_side import read_job, write_report
from cuset_core.verify.execution.transfer import (
    UntrustedFileError,
    load_values,
    read_report,
    read_untrusted,
    save_values,
)
from cuset_core.verify.result import Verdict

ROOT = Path(__file__).resolve().parents[2]
CPU_JOB = CpuJob(
    kind="python",
    seeds=3,
    input_seed=1000,
    reduce_sizes=True,
    max_elements=1 << 20,
    preludes=["preludes/light"],
    include_dirs=["torch/include"],
    library_dirs=["torch/lib"],
)


def test_the_candidate_sides_job_reads_back_as_written_with_the_reference_hand_over(tmp_path):
    handed = CandidateJob(overrides={"N": 64}, constants={"N": 4096})
    prebuilt = [PrebuiltLibrary(module="ext_0", digest="ab" * 32, file="ext_0.so")]
    job = CPU_JOB.model_copy(update={"candidate": "candidate.py", "handed": handed, "prebuilt": prebuilt})
    (tmp_path / "job.json").write_text(job.model_dump_json())
    side, read, workdir = read_job(["candidate", str(tmp_path / "job.json")], CpuJob)
    assert (side, read, workdir) == ("candidate", job, tmp_path.resolve())
    assert read.candidate_file() == "candidate.py" and trial_seeds(read) == [1000, 1001, 1002]
    with pytest.raises(ValueError, match="names no candidate file"):
        CPU_JOB.candidate_file()


def test_a_job_with_a_field_its_tier_does_not_know_is_refused(tmp_path):
    (tmp_path / "job.json").write_text(json.dumps({**CPU_JOB.model_dump(), "timing_trials": 4}))
    with pytest.raises(ValidationError, match="timing_trials"):
        read_job(["reference", str(tmp_path / "job.json")], CpuJob)
    with pytest.raises(ValidationError, match="gpu_memory_mb"):
        read_job(["reference", str(tmp_path / "job.json")], GpuJob)


def test_the_reference_sides_details_reach_the_judge_typed(tmp_path):
    details = ReferenceDetails(
        note="sizes reduced: N=4096->64",
        original_fits=True,
        original_elements=4096,
        wide_trials=[1],
        candidate_job=CandidateJob(overrides={"N": 64}, constants={"N": 4096}),
    )
    write_report(tmp_path, Outcome(Verdict.PASS, details=details))
    assert read_report(tmp_path, ReferenceReport) == ReferenceReport(verdict=Verdict.PASS, details=details)


def test_the_build_sides_libraries_reach_the_judge_typed(tmp_path):
    built = [PrebuiltLibrary(module="ext_0", digest="ab" * 32, file="ext_0.so")]
    write_report(tmp_path, Outcome(Verdict.PASS, timings_s={"prebuild": 1.5}, details=BuildDetails(built=built)))
    report = read_report(tmp_path, BuildReport)
    assert report is not None and report.details.built == built and report.timings_s == {"prebuild": 1.5}


def test_a_side_that_reports_no_details_gets_the_defaults(tmp_path):
    write_report(tmp_path, Outcome(Verdict.UNSUPPORTED, "too large", unsupported_feature="problem too large"))
    report = read_report(tmp_path, ReferenceReport)
    assert report is not None and report.details == ReferenceDetails() and not report.details.original_fits


def test_a_malformed_hand_over_in_the_reference_report_is_refused_with_the_field(tmp_path):
    (tmp_path / "report.json").write_text(
        json.dumps({"verdict": "pass", "details": {"candidate_job": {"overrides": {"N": "a lot"}}}})
    )
    with pytest.raises(UntrustedFileError, match=r"not a valid report \(field details\)"):
        read_report(tmp_path, ReferenceReport)


def test_a_verdict_reaches_the_report_as_its_plain_string(tmp_path):
    write_report(tmp_path, Outcome(Verdict.STATIC_REJECT, "trial 1: fallback"))
    assert json.loads((tmp_path / "report.json").read_text())["verdict"] == "static_reject"
    report = read_report(tmp_path, CandidateReport)
    assert report is not None and report.verdict == "static_reject"


def test_values_cross_processes_as_safetensors_with_their_structure(tmp_path):
    groups = {
        "init": [3, 0.5, (4, 1, 1), None, torch.float16],
        "trials": [[torch.arange(6.0).reshape(2, 3), 7], [torch.ones(2, dtype=torch.int64), True]],
        "layout": {"names": ["conv.weight"], "attrs": {"eps": 1e-5}},
    }
    save_values(tmp_path / "v.safetensors", groups)
    data = (tmp_path / "v.safetensors").read_bytes()
    assert b"pickle" not in data and data[8:9] == b"{"  # a JSON header, then raw tensor bytes
    loaded = load_values(data)
    assert loaded["init"] == [3, 0.5, (4, 1, 1), None, torch.float16]
    assert torch.equal(loaded["trials"][0][0], groups["trials"][0][0]) and loaded["trials"][0][1] == 7
    assert torch.equal(loaded["trials"][1][0], torch.ones(2, dtype=torch.int64))
    assert loaded["layout"] == {"names": ["conv.weight"], "attrs": {"eps": 1e-5}}


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\xff" * 8 + b"{}",
        b"\x02\x00\x00\x00\x00\x00\x00\x00{}",
        b"\x10\x00\x00\x00\x00\x00\x00\x00" + b'{"a": 1}        ',
    ],
)
def test_malformed_tensor_files_are_rejected(data):
    with pytest.raises(UntrustedFileError):
        load_values(data)


def test_the_judge_reads_only_regular_files_under_the_cap(tmp_path):
    secret = tmp_path / "secret.json"
    secret.write_text('{"verdict": "pass"}')
    side = tmp_path / "side"
    side.mkdir()
    (side / "ok.bin").write_bytes(b"12345")
    assert read_untrusted(side, "ok.bin", 5) == b"12345"
    assert read_untrusted(side, "absent.bin", 5) is None
    with pytest.raises(UntrustedFileError, match="over the cap"):
        read_untrusted(side, "ok.bin", 4)
    (side / "report.json").symlink_to(secret)
    with pytest.raises(UntrustedFileError, match="symbolic link"):
        read_report(side, CandidateReport)
    os.mkfifo(side / "fifo.bin")  # nobody writes it: a blocking open would hang the judge
    with pytest.raises(UntrustedFileError, match="not a regular file"):
        read_untrusted(side, "fifo.bin", 5)


def test_a_side_folder_replaced_by_a_symlink_is_refused(tmp_path):
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "report.json").write_text('{"verdict": "pass"}')
    (tmp_path / "side").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(UntrustedFileError, match="cannot be opened as a folder"):
        read_report(tmp_path / "side", CandidateReport)


def test_a_report_that_is_not_a_json_object_is_refused(tmp_path):
    (tmp_path / "report.json").write_text("[1, 2]")
    with pytest.raises(UntrustedFileError, match="not a JSON object"):
        read_report(tmp_path, ReferenceReport)


# ---------------------------------------------------------------- the fallback monitor


def _extension(monitor: FallbackMonitor) -> types.ModuleType:
    """A stand-in for a built extension: ``scale`` returns a new tensor, ``fill`` writes in place."""
    fake = types.ModuleType("fake_ext")
    fake.scale = lambda x: torch.from_numpy(x.detach().numpy() * 2)

    def fill(x, out):
        out.numpy()[...] = x.detach().numpy() * 2  # through the raw memory, as a kernel writes

    fake.fill = fill
    return monitor.wrap_extension(fake)


def _run(forward) -> tuple[FallbackMonitor, str | None]:
    monitor = FallbackMonitor()
    ext = _extension(monitor)
    x, w = torch.randn(4, 4), torch.randn(4, 4)
    with monitor:
        out = forward(ext, x, w)
    return monitor, monitor.fallback_reason([out])


def test_the_monitor_loads_no_torch_dynamo():
    # torch wraps a dispatch mode's handler in a dynamo guard whose first call imports
    # torch._dynamo (1.3 CPU-s of every candidate side's first trial); the monitor opts out.
    probe = (
        "import sys, torch\n"
        "from cuset_core.verify.execution.fallback import FallbackMonitor\n"
        "monitor, x = FallbackMonitor(), torch.randn(4)\n"
        "with monitor:\n"
        "    x.clone().sum()\n"
        "print('torch._dynamo' in sys.modules, sum(monitor.compute_ops.values()))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["False", "1"]  # and it still saw the sum


def test_outputs_made_by_the_kernels_pass_even_through_views_copies_and_follow_up_ops():
    for forward in (
        lambda ext, x, w: ext.scale(x),
        lambda ext, x, w: ext.scale(x).view(2, 8).t().contiguous(),
        lambda ext, x, w: torch.relu(ext.scale(x @ w)) + 1,  # torch around the kernel is fine
    ):
        monitor, reason = _run(forward)
        assert reason is None
    assert monitor.extension_calls == 1 and monitor.compute_ops == {"add": 1, "mm": 1, "relu": 1}


def test_a_kernel_writing_into_a_preallocated_output_counts():
    def forward(ext, x, w):
        out = torch.empty_like(x)
        ext.fill(x, out)
        return out

    assert _run(forward)[1] is None


@pytest.mark.parametrize(
    "forward",
    [
        lambda ext, x, w: (ext.scale(x), x @ w)[1],  # launches its kernel, discards it, returns torch's
        lambda ext, x, w: (ext.scale(x), x * 2)[1],
        lambda ext, x, w: (ext.scale(x), torch.zeros_like(x) + x.mm(w))[1],
    ],
)
def test_an_output_computed_by_torch_instead_of_the_kernels_is_a_fallback(forward):
    monitor, reason = _run(forward)
    assert reason is not None and reason.startswith("run-time fallback: output 0 was computed by torch ops")
    assert "1 custom-extension calls" in reason


def test_a_forward_that_never_calls_its_extension_is_a_fallback():
    assert _run(lambda ext, x, w: torch.relu(x))[1].startswith("run-time fallback: forward never called")


# ---------------------------------------------------------------- size reduction rules


def test_original_sizes_run_only_when_they_fit_the_budget():
    assert original_fits(ORIGINAL_SIZE_FACTOR * 1000, 1000)
    assert not original_fits(ORIGINAL_SIZE_FACTOR * 1000 + 1, 1000)
    assert not original_fits(None, 1000)


def test_a_candidate_hard_codes_sizes_when_an_original_value_appears_as_a_number():
    constants, overrides = {"N": 4096, "batch": 16, "dim": 512}, {"N": 1024, "dim": 256}
    assert hardcoded_sizes("#define N 4096\nint x = 40960; float y = 512.0f;", constants, overrides) == ["N=4096"]
    assert hardcoded_sizes("int n = x.numel();", constants, overrides) == []


def test_an_op_the_candidate_registered_with_the_dispatcher_counts_as_its_kernel():
    library = torch.library.Library("cuset_test_ops", "DEF")
    library.define("double_it(Tensor x) -> Tensor")
    library.impl("double_it", lambda x: torch.from_numpy(x.detach().numpy() * 2), "CPU")
    monitor, reason = _run(lambda ext, x, w: torch.ops.cuset_test_ops.double_it(x))
    assert reason is None and monitor.extension_calls == 1
    # its inputs are not the kernel's work: torch compute on them afterwards is still a fallback
    _, reason = _run(lambda ext, x, w: (torch.ops.cuset_test_ops.double_it(x), x * 2)[1])
    assert reason.startswith("run-time fallback: output 0 was computed by torch ops")
