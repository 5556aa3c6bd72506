"""Hostile candidates that try to forge a tier-2 verdict (issue 13). Each test fails if its attack
works: the verdict is never ``pass``, nothing the candidate points at outside its folder is read
back, and what comes back has a bounded size.

The candidates (``attacks.py``) are the demo ReLU solution with one attack each. Attacks made at
import time exit before their extension builds; the others build it (seconds each with the
cached preludes, minutes on a loaded machine), so the module is marked slow.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from attacks import (
    FORGE_AND_EXIT,
    HONEST,
    HUGE_REASON,
    HUGE_REPORT,
    OUTPUTS_OF_ITS_OWN,
    PROBLEM,
    REFERENCE_THROUGH_SYS_MODULES,
    REPLACE_ALLCLOSE,
    REPLACE_COMPARISON,
    REWRITE_AT_EXIT,
    SECRET,
    TORCH_EXPRESSION,
    forged_report_then,
    symlink_to,
)

from cuset_core.paths import CorePaths
from cuset_core.verify.candidate import parse_candidate
from cuset_core.verify.cpu import run_cpu_tier
from cuset_core.verify.execution.library_cache import LibraryCache
from cuset_core.verify.execution.reference_pool import ReferencePool
from cuset_core.verify.result import Tier, Verdict, VerifyResult
from cuset_core.verify.run import verify
from cuset_core.verify.settings import SandboxLimits, VerifySettings

# The checks this suite tests decide under the mixed policy; under kernels (the default) the
# device process refuses each attack's torch compute or transfer first (test_data_flow_policy.py).
SETTINGS = VerifySettings(tier=Tier.CPU, policy="mixed", limits=SandboxLimits(wall_s=300, cpu_s=300))
# Without the device boundary the judged files are the candidate process's to write: the judge's
# reading of them is tested there (behind the boundary the device process writes them).
ONE_PROCESS = SETTINGS.model_copy(update={"device_boundary": False})
BOUND_CHARS = 16_000  # a whole VerifyResult as JSON, whatever the candidate emitted

pytestmark = pytest.mark.slow


# The attacks are one batch, as an eval's samples of a problem are: one reference run.
REFERENCES = ReferencePool()


def tier2(candidate: str, settings: VerifySettings = SETTINGS) -> VerifyResult:
    # Most attacks wrap the same kernel: the library cache compiles it once for all of them.
    libraries = LibraryCache(CorePaths().cpu_libraries)
    return run_cpu_tier(PROBLEM, parse_candidate(candidate), settings, libraries, REFERENCES)


def assert_caught(result: VerifyResult, verdict: Verdict) -> None:
    assert result.verdict is not Verdict.PASS, result
    assert result.verdict is verdict, (result.verdict, result.reason, result.log[-2000:])
    dumped = result.model_dump_json()
    assert len(dumped) < BOUND_CHARS
    assert SECRET not in dumped


@pytest.fixture
def hidden_file(tmp_path) -> Path:
    secret = tmp_path / "hidden.json"
    secret.write_text(json.dumps({"verdict": "pass", "reason": SECRET, "trials": 3}))
    return secret


def test_the_honest_solution_still_passes():
    result = tier2(HONEST)
    assert result.verdict is Verdict.PASS, result.reason + result.log
    assert result.launches.get("relu_kernel") == SETTINGS.seeds


def test_a_candidate_that_writes_the_result_file_itself_and_exits_is_not_a_pass():
    # The device process writes the judged files once the host is gone: the forged ones are not read.
    result = tier2(FORGE_AND_EXIT)
    assert_caught(result, Verdict.RUNTIME_ERROR)
    assert "host process ended (before it named every trial's outputs) after 0 of" in result.reason, result.reason
    assert tier2(FORGE_AND_EXIT, ONE_PROCESS).reason == "the candidate side left no outputs"


def test_a_forged_pass_is_never_cached(tmp_path):
    first = verify(PROBLEM, FORGE_AND_EXIT, SETTINGS, cache_dir=tmp_path)
    again = verify(PROBLEM, FORGE_AND_EXIT, SETTINGS, cache_dir=tmp_path)
    assert_caught(first, Verdict.RUNTIME_ERROR)
    assert again.verdict is first.verdict
    stored = [json.loads(path.read_text())["verdict"] for path in tmp_path.rglob("*.json")]
    assert stored and "pass" not in stored


def test_replacing_the_harness_comparison_does_not_reach_the_judge():
    result = tier2(REPLACE_COMPARISON)
    assert_caught(result, Verdict.VALUE_MISMATCH)
    assert result.max_abs_diff == pytest.approx(1.0)


def test_replacing_torch_allclose_does_not_reach_the_judge():
    assert_caught(tier2(REPLACE_ALLCLOSE), Verdict.VALUE_MISMATCH)


def test_launching_the_kernel_then_returning_a_torch_expression_is_a_run_time_fallback():
    result = tier2(TORCH_EXPRESSION)
    assert_caught(result, Verdict.STATIC_REJECT)
    assert "output 0 matches the reference with the candidate's kernels disabled" in result.reason, result.reason


def test_outputs_rewritten_by_an_exit_hook_after_the_harness_wrote_them_are_not_judged():
    # The harness leaves with os._exit once its report is written: no hook of the candidate's runs.
    assert_caught(tier2(REWRITE_AT_EXIT), Verdict.VALUE_MISMATCH)


def test_outputs_the_candidate_computes_and_writes_itself_are_not_a_pass():
    # The inputs file is gone from its folder, and the files it writes are never judged.
    assert tier2(OUTPUTS_OF_ITS_OWN).verdict is not Verdict.PASS


def test_the_reference_model_is_not_reachable_from_the_candidate():
    result = tier2(REFERENCE_THROUGH_SYS_MODULES)
    assert_caught(result, Verdict.RUNTIME_ERROR)
    assert result.reason == (
        "the candidate failed at run time "
        '(candidate\'s message: "candidate forward failed: no reference: modules=0 files=[]")'
    )


# Without the device boundary, two layers refuse a link or a FIFO: the sandbox copies back regular files only (so the judge
# finds no file), and the judge opens what it finds with O_NOFOLLOW as a regular file
# (tests/unit/test_verify_judge.py). Either way nothing behind the link is read.
NOT_ACCEPTED = ("is a symbolic link", "is not a regular file", "without a result", "left no outputs")


def test_a_report_replaced_by_a_symlink_to_a_hidden_file_is_not_followed(hidden_file):
    result = tier2(symlink_to(hidden_file, "report.json", "result.json"), ONE_PROCESS)
    assert_caught(result, Verdict.RUNTIME_ERROR)
    assert any(words in result.reason for words in NOT_ACCEPTED), result.reason


def test_outputs_replaced_by_a_symlink_to_a_hidden_file_are_not_followed(hidden_file):
    result = tier2(forged_report_then(f"_os.symlink({str(hidden_file)!r}, 'outputs.safetensors')"), ONE_PROCESS)
    assert_caught(result, Verdict.RUNTIME_ERROR)
    assert any(words in result.reason for words in NOT_ACCEPTED), result.reason


def test_outputs_replaced_by_a_fifo_nobody_writes_do_not_hang_the_judge():
    result = tier2(forged_report_then("_os.mkfifo('outputs.safetensors')"), ONE_PROCESS)
    assert_caught(result, Verdict.RUNTIME_ERROR)
    assert any(words in result.reason for words in NOT_ACCEPTED), result.reason


def test_oversized_outputs_are_refused_unread():
    result = tier2(forged_report_then("open('outputs.safetensors', 'wb').truncate(64 << 20)"), ONE_PROCESS)
    assert_caught(result, Verdict.RUNTIME_ERROR)
    assert "over the cap" in result.reason


def test_a_20_mib_reason_comes_back_as_a_few_kb():
    result = tier2(HUGE_REASON)
    assert_caught(result, Verdict.RUNTIME_ERROR)
    assert result.reason.startswith(
        "the candidate failed at run time (candidate's message: \"importing the candidate failed: RRRR"
    )
    assert len(result.reason) <= 600 and len(result.log) <= 4000


def test_a_20_mib_report_written_by_the_candidate_is_refused_unread():
    result = tier2(HUGE_REPORT, ONE_PROCESS)
    assert_caught(result, Verdict.RUNTIME_ERROR)
    assert "report.json holds" in result.reason and "over the cap" in result.reason


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("candidate", "verdict"),
    [
        (FORGE_AND_EXIT, Verdict.RUNTIME_ERROR),
        (REPLACE_COMPARISON, Verdict.VALUE_MISMATCH),
        (TORCH_EXPRESSION, Verdict.STATIC_REJECT),
        (REFERENCE_THROUGH_SYS_MODULES, Verdict.RUNTIME_ERROR),
    ],
)
def test_tier_3_judges_apart_from_the_candidate_too(candidate, verdict):
    from cuset_core.verify.gpu import run_gpu_tier

    result = run_gpu_tier(PROBLEM, parse_candidate(candidate), VerifySettings(tier=Tier.GPU, timing_trials=5))
    assert_caught(result, verdict)
