"""Hostile candidates that try to forge a tier-2 verdict (issue 13). Each test fails if its attack
works: the verdict is never ``pass``, nothing the candidate points at outside its folder is read
back, and what comes back has a bounded size.

The candidates are the demo ReLU solution with one attack each. Attacks made at import time
exit before their extension builds; the others build it (seconds each with the cached
preludes), so the module is marked slow.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cuset_core.verify.candidate import parse_candidate
from cuset_core.verify.cpu import run_cpu_tier
from cuset_core.verify.result import Tier, Verdict, VerifyResult
from cuset_core.verify.run import verify
from cuset_core.verify.settings import SandboxLimits, VerifySettings

DEMO = Path(__file__).resolve().parents[2] / "cuset_core" / "demo"
PROBLEM = (DEMO / "problems" / "02_relu.py").read_text()
HONEST = (DEMO / "solutions" / "02_relu.py").read_text()
SETTINGS = VerifySettings(tier=Tier.CPU, limits=SandboxLimits(wall_s=300, cpu_s=300))
BOUND_CHARS = 16_000  # a whole VerifyResult as JSON, whatever the candidate emitted
SECRET = "SECRET-7f3a-only-the-test-knows"

pytestmark = pytest.mark.slow


def at_import(code: str) -> str:
    """The honest solution with ``code`` run when the candidate module is imported, before it builds."""
    return HONEST.replace("from torch.utils.cpp_extension import load_inline\n",
                          "from torch.utils.cpp_extension import load_inline\n" + code + "\n", 1)


def in_forward(body: str) -> str:
    """The honest solution whose ``forward`` runs ``body`` instead."""
    return HONEST.replace("        return relu_ext.relu_cuda(x)", body)


WRONG_KERNEL = ("y[i] = fmaxf(x[i], 0.0f);", "y[i] = fmaxf(x[i], 0.0f) + 1.0f;")  # wrong by exactly 1


def tier2(candidate: str) -> VerifyResult:
    return run_cpu_tier(PROBLEM, parse_candidate(candidate), SETTINGS)


def assert_caught(result: VerifyResult, *verdicts: Verdict) -> None:
    assert result.verdict is not Verdict.PASS, result
    assert result.verdict in verdicts, (result.verdict, result.reason, result.log[-2000:])
    dumped = result.model_dump_json()
    assert len(dumped) < BOUND_CHARS
    assert SECRET not in dumped


def test_the_honest_solution_still_passes():
    result = tier2(HONEST)
    assert result.verdict is Verdict.PASS, result.reason + result.log
    assert result.launches.get("relu_kernel") == SETTINGS.seeds


FORGE_AND_EXIT = at_import("""
import json as _json, os as _os
_forged = {"verdict": "pass", "reason": "forged", "trials": 3, "launches": {"relu_kernel": 3}}
for _name in ("result.json", "report.json", "../result.json"):
    try:
        open(_name, "w").write(_json.dumps(_forged))
    except OSError:
        pass
_os._exit(0)
""")


def test_a_candidate_that_writes_the_result_file_itself_and_exits_is_not_a_pass():
    result = tier2(FORGE_AND_EXIT)
    assert_caught(result, Verdict.RUNTIME_ERROR)
    assert result.reason == "the candidate side left no outputs"


def test_a_forged_pass_is_never_cached(tmp_path):
    first = verify(PROBLEM, FORGE_AND_EXIT, SETTINGS, cache_dir=tmp_path)
    again = verify(PROBLEM, FORGE_AND_EXIT, SETTINGS, cache_dir=tmp_path)
    assert_caught(first, Verdict.RUNTIME_ERROR)
    assert again.verdict is first.verdict
    stored = [json.loads(path.read_text())["verdict"] for path in tmp_path.rglob("*.json")]
    assert "pass" not in stored


def test_replacing_the_harness_comparison_does_not_reach_the_judge():
    attack = at_import("""
import cuset_core.verify.protocol as _protocol
_protocol.compare_outputs = lambda *args, **kwargs: _protocol.Outcome("pass")
_protocol.compare_trials = lambda *args, **kwargs: None
_protocol.looks_cached = lambda *args, **kwargs: False
""").replace(*WRONG_KERNEL)
    result = tier2(attack)
    assert_caught(result, Verdict.VALUE_MISMATCH)
    assert result.max_abs_diff == pytest.approx(1.0)


def test_replacing_torch_allclose_does_not_reach_the_judge():
    attack = at_import("""
torch.allclose = lambda *args, **kwargs: True
torch.equal = lambda *args, **kwargs: True
torch.Tensor.allclose = lambda *args, **kwargs: True
""").replace(*WRONG_KERNEL)
    assert_caught(tier2(attack), Verdict.VALUE_MISMATCH)


def test_launching_the_kernel_then_returning_a_torch_expression_is_a_run_time_fallback():
    attack = in_forward("        relu_ext.relu_cuda(x)\n        return (x + x.abs()) * 0.5")
    result = tier2(attack)
    assert_caught(result, Verdict.STATIC_REJECT)
    assert result.reason.startswith("trial 1: run-time fallback: output 0 was computed by torch ops")
    assert "abs" in result.reason and "1 custom-extension calls" in result.reason


def test_the_reference_model_is_not_reachable_from_the_candidate():
    attack = in_forward("""        import sys, pathlib
        relu_ext.relu_cuda(x)
        found = [m for m in list(sys.modules.values()) if hasattr(m, "Model") and hasattr(m, "get_inputs")]
        if found:
            return found[0].Model()(x)
        files = sorted(str(p) for p in pathlib.Path.cwd().parent.rglob("problem.py"))
        raise RuntimeError(f"no reference: modules={len(found)} files={files}")""")
    result = tier2(attack)
    assert_caught(result, Verdict.RUNTIME_ERROR)
    assert result.reason == "candidate forward failed: no reference: modules=0 files=[]"


@pytest.fixture
def hidden_file(tmp_path) -> Path:
    secret = tmp_path / "hidden.json"
    secret.write_text(json.dumps({"verdict": "pass", "reason": SECRET, "trials": 3}))
    return secret


def test_a_report_replaced_by_a_symlink_to_a_hidden_file_is_not_followed(hidden_file):
    attack = at_import(f"""
import os as _os
_os.symlink({str(hidden_file)!r}, "report.json")
_os._exit(0)
""")
    result = tier2(attack)
    assert_caught(result, Verdict.RUNTIME_ERROR)
    assert result.reason == "the candidate's output is rejected: report.json is a symbolic link, not a regular file"


def test_outputs_replaced_by_a_symlink_to_a_hidden_file_are_not_followed(hidden_file):
    attack = at_import(f"""
import json as _json, os as _os
open("report.json", "w").write(_json.dumps({{"verdict": "pass"}}))
_os.symlink({str(hidden_file)!r}, "outputs.safetensors")
_os._exit(0)
""")
    result = tier2(attack)
    assert_caught(result, Verdict.RUNTIME_ERROR)
    assert "outputs.safetensors is a symbolic link" in result.reason


def test_outputs_replaced_by_a_fifo_nobody_writes_do_not_hang_the_judge():
    attack = at_import("""
import json as _json, os as _os
open("report.json", "w").write(_json.dumps({"verdict": "pass"}))
_os.mkfifo("outputs.safetensors")
_os._exit(0)
""")
    result = tier2(attack)
    assert_caught(result, Verdict.RUNTIME_ERROR)
    assert "outputs.safetensors is not a regular file" in result.reason


def test_oversized_outputs_are_refused_unread():
    attack = at_import("""
import json as _json, os as _os
open("report.json", "w").write(_json.dumps({"verdict": "pass"}))
with open("outputs.safetensors", "wb") as _f:
    _f.truncate(64 << 20)  # sparse: far more than the reference's outputs
_os._exit(0)
""")
    result = tier2(attack)
    assert_caught(result, Verdict.RUNTIME_ERROR)
    assert "over the cap" in result.reason


def test_a_20_mib_reason_comes_back_as_a_few_kb():
    attack = at_import("""
import sys as _sys
_sys.stderr.write("L" * (20 << 20))
raise RuntimeError("R" * (20 << 20))
""")
    result = tier2(attack)
    assert_caught(result, Verdict.RUNTIME_ERROR)
    assert result.reason.startswith("importing the candidate failed: RRRR")
    assert len(result.reason) <= 600 and len(result.log) <= 4000


def test_a_20_mib_report_written_by_the_candidate_is_refused_unread():
    attack = at_import("""
import json as _json, os as _os
open("report.json", "w").write(_json.dumps({"verdict": "runtime_error", "reason": "R" * (20 << 20)}))
_os._exit(0)
""")
    result = tier2(attack)
    assert_caught(result, Verdict.RUNTIME_ERROR)
    assert "report.json holds" in result.reason and "over the cap" in result.reason
