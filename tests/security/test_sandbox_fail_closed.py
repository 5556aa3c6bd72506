"""Where the sandbox cannot isolate candidates, tiers 1-3 refuse with a clear reason and run
nothing, unless the operator opted out explicitly (CUSET_SANDBOX_ALLOW_UNISOLATED=1)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cuset_core.verify import sandbox
from cuset_core.verify.result import Tier, Verdict
from cuset_core.verify.run import verify
from cuset_core.verify.sandbox import IsolationUnavailable, run_sandboxed
from cuset_core.verify.settings import SandboxLimits, SandboxSettings, VerifySettings

sys.path.insert(0, str(Path(__file__).parents[1] / "unit"))
from verify_cases import GOOD, fenced  # noqa: E402

PROBLEM = (
    "import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def forward(self, x):\n"
    "        return torch.relu(x)\n\ndef get_inputs():\n    return [torch.randn(64)]\n\n"
    "def get_init_inputs():\n    return []\n"
)
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def no_isolation(monkeypatch):
    """This machine as one where bwrap cannot set up a sandbox (e.g. a non-root container
    without user namespaces); the operator has not opted out."""
    monkeypatch.setattr(sandbox, "isolation", lambda: sandbox.Isolation(False, "user namespaces are disabled"))
    monkeypatch.delenv("CUSET_SANDBOX_ALLOW_UNISOLATED", raising=False)


def test_the_sandbox_refuses_to_run_anything_unisolated(no_isolation, tmp_path):
    marker = tmp_path / "ran"
    with pytest.raises(IsolationUnavailable, match="user namespaces are disabled"):
        run_sandboxed(["touch", str(marker)], workdir=tmp_path, limits=SandboxLimits())
    assert not marker.exists()


@pytest.mark.parametrize("tier", [Tier.COMPILE, Tier.CPU, Tier.GPU], ids=["tier1", "tier2", "tier3"])
def test_tiers_1_to_3_refuse_with_the_reason_and_the_refusal_is_not_cached(no_isolation, tmp_path, tier):
    settings = VerifySettings(tier=tier)
    first = verify(PROBLEM, fenced(GOOD), settings, cache_dir=tmp_path)
    assert first.verdict is not Verdict.PASS
    assert first.reason.startswith("refused: the verification sandbox cannot isolate candidates on this machine")
    assert "user namespaces are disabled" in first.reason and "CUSET_SANDBOX_ALLOW_UNISOLATED" in first.reason
    assert first.tier in (Tier.COMPILE, Tier.CPU) and first.tier_verdicts[Tier.STATIC] is Verdict.PASS
    assert not verify(PROBLEM, fenced(GOOD), settings, cache_dir=tmp_path).cached


def test_tier_0_still_answers_without_isolation(no_isolation, tmp_path):
    result = verify(PROBLEM, fenced(GOOD), VerifySettings(tier=Tier.STATIC), cache_dir=tmp_path)
    assert result.verdict is Verdict.PASS


def test_an_explicit_opt_out_runs_unisolated_and_says_so(no_isolation, tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("CUSET_SANDBOX_ALLOW_UNISOLATED", "1")
    outcome = run_sandboxed(["sh", "-c", "echo ran"], workdir=tmp_path, limits=SandboxLimits())
    assert outcome.stdout == "ran\n"
    assert not {"pid_ns", "net_ns", "min_root", "non_root", "seccomp"} & set(outcome.isolation)
    with caplog.at_level("WARNING"):
        sandbox.log_isolation(SandboxSettings())
    assert "WITHOUT isolation" in caplog.text


def test_without_bwrap_the_probe_finds_no_isolation_and_the_refusal_names_it(tmp_path):
    """A real probe, in a process (as an unprivileged user when this runs as root) whose PATH
    has no bwrap."""
    code = "from cuset_core.verify.sandbox import refusal; print(refusal())"
    env = {"PATH": str(tmp_path), "PYTHONPATH": str(REPO), "HOME": str(tmp_path)}
    command = [sys.executable, "-c", code]
    if os.geteuid() == 0:
        command = ["/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--", *command]
        os.chmod(tmp_path, 0o755)
    done = subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    unreadable = ("Permission denied", "error while loading shared libraries")  # the venv, or its interpreter's lib
    if done.returncode != 0 and any(sign in done.stderr for sign in unreadable):
        pytest.skip(f"the interpreter is not usable by the unprivileged user here: {done.stderr.strip()[:200]}")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("refused: the verification sandbox cannot isolate candidates on this machine")
    assert "bubblewrap (bwrap) is not installed" in done.stdout
