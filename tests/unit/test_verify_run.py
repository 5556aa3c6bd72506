"""The verify pipeline: tiers in order, merged evidence, the cache, and `cuset verify`."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner
from verify_cases import GOOD, fenced, line_of

from cuset_core.cli import app
from cuset_core.verify import run as run_module
from cuset_core.verify.result import Tier, Verdict, VerifyResult
from cuset_core.verify.run import verify
from cuset_core.verify.settings import SandboxLimits, VerifySettings

PROBLEM = """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(1024)]


def get_init_inputs():
    return []
"""
STATIC = VerifySettings(tier=Tier.STATIC)
COMPILE = VerifySettings(tier=Tier.COMPILE)
BROKEN = GOOD.replace("if (i < n) y[i] = x[i]", "if (i < n) y[i] = undefined_name[i]")


def test_a_static_reject_stops_the_pipeline(tmp_path):
    result = verify(PROBLEM, "no code here", VerifySettings(), cache_dir=tmp_path)
    assert (result.verdict, result.tier, result.tiers_run) == (Verdict.NO_CODE, Tier.STATIC, [Tier.STATIC])
    assert result.tier_verdicts == {Tier.STATIC: Verdict.NO_CODE}
    assert set(result.timings_s) == {"static", "total"}


def test_static_tier_only_passes_a_good_candidate(tmp_path):
    result = verify(PROBLEM, fenced(GOOD), STATIC, cache_dir=tmp_path)
    assert (result.verdict, result.tier, result.tiers_run) == (Verdict.PASS, Tier.STATIC, [Tier.STATIC])
    assert result.tier_verdicts == {Tier.STATIC: Verdict.PASS}


@pytest.mark.nvcc
def test_compile_tier_passes_with_resources(tmp_path):
    started: list[Tier] = []
    result = verify(PROBLEM, fenced(GOOD), COMPILE, cache_dir=tmp_path, on_tier=started.append)
    assert started == [Tier.STATIC, Tier.COMPILE]  # what `cuset verify`'s progress bar shows
    assert (result.verdict, result.tier, result.tiers_run) == (Verdict.PASS, Tier.COMPILE, [Tier.STATIC, Tier.COMPILE])
    assert result.tier_verdicts == {Tier.STATIC: Verdict.PASS, Tier.COMPILE: Verdict.PASS}
    assert [r.kernel for r in result.resources] == ["relu_kernel(float const*, float*, int)"]
    assert result.timings_s["compile"] > 0


@pytest.mark.nvcc
def test_a_compile_error_is_the_verdict_with_the_candidate_line(tmp_path):
    text = fenced(BROKEN)
    result = verify(PROBLEM, text, VerifySettings(), cache_dir=tmp_path)
    line = line_of(text, "    if (i < n) y[i] = undefined_name")
    assert (result.verdict, result.tier) == (Verdict.COMPILE_ERROR, Tier.COMPILE)
    assert result.tier_verdicts == {Tier.STATIC: Verdict.PASS, Tier.COMPILE: Verdict.COMPILE_ERROR}
    assert result.reason == f'line {line}: identifier "undefined_name" is undefined'
    assert "undefined_name" in result.log


@pytest.mark.nvcc
def test_a_cache_hit_is_marked_and_fast(tmp_path):
    start = time.monotonic()
    first = verify(PROBLEM, fenced(GOOD), COMPILE, cache_dir=tmp_path)
    middle = time.monotonic()
    second = verify(PROBLEM, fenced(GOOD), COMPILE, cache_dir=tmp_path)
    # Side by side rather than against a clock: the hit skips nvcc, so it is many times faster.
    assert time.monotonic() - middle < (middle - start) / 5
    assert (first.cached, second.cached) == (False, True)
    assert second.model_copy(update={"cached": False}) == first


def test_the_cache_key_covers_settings_and_can_be_bypassed(tmp_path):
    verify(PROBLEM, fenced(GOOD), STATIC, cache_dir=tmp_path)
    assert verify(PROBLEM, fenced(GOOD), STATIC, cache_dir=tmp_path).cached
    for change in ({"seeds": 3}, {"input_seed": 7}, {"tolerance_profile": "v0"}, {"atol": 1e-3}):
        assert not verify(PROBLEM, fenced(GOOD), STATIC.model_copy(update=change), cache_dir=tmp_path).cached
    assert not verify(PROBLEM, fenced(GOOD), STATIC, cache_dir=tmp_path, use_cache=False).cached


def _fake_tier(verdict: Verdict, tier: Tier):
    def run_tier(problem_code, candidate, settings, **options):
        return VerifyResult(
            verdict=verdict,
            tier=tier,
            tiers_run=[tier],
            reason=f"fake {tier.value}",
            timings_s={f"{tier.value}_run": 0.5},
            max_abs_diff=0.25,
        )

    return lambda: run_tier


def _skip_compile(monkeypatch):
    """Let the candidate through tier 1 untouched (these tests are about the later tiers)."""
    monkeypatch.setattr(run_module, "_compile_tier", lambda candidate, settings, before: (before, False))


def test_later_tiers_merge_with_earlier_evidence(tmp_path, monkeypatch):
    monkeypatch.setattr(run_module, "nvcc_path", lambda: None)  # tier 1 says it cannot run
    monkeypatch.setattr(run_module, "_cpu_runner", _fake_tier(Verdict.VALUE_MISMATCH, Tier.CPU))
    result = verify(PROBLEM, fenced(GOOD), VerifySettings(tier=Tier.CPU), cache_dir=tmp_path)
    assert (result.verdict, result.tier, result.max_abs_diff) == (Verdict.VALUE_MISMATCH, Tier.CPU, 0.25)
    assert result.tiers_run == [Tier.STATIC, Tier.COMPILE, Tier.CPU]
    assert result.tier_verdicts == {
        Tier.STATIC: Verdict.PASS,
        Tier.COMPILE: Verdict.UNSUPPORTED,
        Tier.CPU: Verdict.VALUE_MISMATCH,
    }
    assert {"static", "cpu", "cpu_run", "total"} <= set(result.timings_s)
    assert "needs nvcc, which is not on PATH" in result.diagnostics[-1].message


def test_without_nvcc_the_cpu_tier_still_decides_and_nothing_is_cached(tmp_path, monkeypatch):
    monkeypatch.setattr(run_module, "nvcc_path", lambda: None)
    monkeypatch.setattr(run_module, "_cpu_runner", _fake_tier(Verdict.PASS, Tier.CPU))
    result = verify(PROBLEM, fenced(GOOD), VerifySettings(tier=Tier.CPU), cache_dir=tmp_path)
    assert (result.verdict, result.tier) == (Verdict.PASS, Tier.CPU)
    assert result.tier_verdicts[Tier.COMPILE] is Verdict.UNSUPPORTED
    assert not list(tmp_path.rglob("*.json"))  # once nvcc is installed, the same answer gets tier 1


def test_unsupported_on_cpu_lets_the_gpu_tier_decide(tmp_path, monkeypatch):
    _skip_compile(monkeypatch)
    monkeypatch.setattr(run_module, "_cpu_runner", _fake_tier(Verdict.UNSUPPORTED, Tier.CPU))
    monkeypatch.setattr(run_module, "_gpu_runner", _fake_tier(Verdict.PASS, Tier.GPU))
    result = verify(PROBLEM, fenced(GOOD), VerifySettings(tier=Tier.GPU), cache_dir=tmp_path)
    assert (result.verdict, result.tiers_run) == (Verdict.PASS, [Tier.STATIC, Tier.CPU, Tier.GPU])
    assert result.tier_verdicts == {Tier.STATIC: Verdict.PASS, Tier.CPU: Verdict.UNSUPPORTED, Tier.GPU: Verdict.PASS}


def test_tier_verdicts_survive_the_cache_as_json_keyed_by_tier(tmp_path, monkeypatch):
    _skip_compile(monkeypatch)
    monkeypatch.setattr(run_module, "_cpu_runner", _fake_tier(Verdict.UNSUPPORTED, Tier.CPU))
    monkeypatch.setattr(run_module, "_gpu_runner", _fake_tier(Verdict.VALUE_MISMATCH, Tier.GPU))
    first = verify(PROBLEM, fenced(GOOD), VerifySettings(tier=Tier.GPU), cache_dir=tmp_path)
    second = verify(PROBLEM, fenced(GOOD), VerifySettings(tier=Tier.GPU), cache_dir=tmp_path)
    assert second.cached and second.tier_verdicts == first.tier_verdicts
    assert first.model_dump(mode="json")["tier_verdicts"] == {
        "static": "pass",
        "cpu": "unsupported",
        "gpu": "value_mismatch",
    }


def test_a_verifier_crash_is_an_internal_error_and_not_cached(tmp_path, monkeypatch):
    def broken():
        raise ImportError("tier 2 is not installed")

    _skip_compile(monkeypatch)
    monkeypatch.setattr(run_module, "_cpu_runner", broken)
    result = verify(PROBLEM, fenced(GOOD), VerifySettings(), cache_dir=tmp_path)
    expected = (Verdict.INTERNAL_ERROR, Tier.CPU, "internal error in tier cpu")
    assert (result.verdict, result.tier, result.reason) == expected
    assert result.tier_verdicts == {Tier.STATIC: Verdict.PASS, Tier.CPU: Verdict.INTERNAL_ERROR}
    assert "ImportError: tier 2 is not installed" in result.log
    assert not list(tmp_path.rglob("*.json"))


def _write(tmp_path: Path, text: str, name: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_cli_json_output_and_exit_codes(tmp_path):
    problem = _write(tmp_path, PROBLEM, "problem.py")
    good = _write(tmp_path, fenced(GOOD), "answer.md")
    bad = _write(tmp_path, "no code", "bad.md")
    runner = CliRunner()
    ok = runner.invoke(app, ["verify", str(problem), str(good), "--tier", "static", "--json", "--no-cache"])
    assert ok.exit_code == 0, ok.output
    data = json.loads(ok.output)
    assert (data["verdict"], data["tier"], data["tiers_run"], data["cached"]) == ("pass", "static", ["static"], False)
    assert data["tier_verdicts"] == {"static": "pass"}
    assert set(data) == set(VerifyResult.model_fields) | set(VerifyResult.model_computed_fields)
    rejected = runner.invoke(app, ["verify", str(problem), str(bad), "--tier", "static", "--no-cache"])
    assert rejected.exit_code == 1
    assert rejected.output.startswith("no_code at tier static: ")


def test_cli_bad_usage_exits_2_with_one_line(tmp_path):
    problem = _write(tmp_path, PROBLEM, "problem.py")
    runner = CliRunner()
    missing = runner.invoke(app, ["verify", str(problem), str(tmp_path / "nope.py")])
    assert missing.exit_code == 2
    assert "CANDIDATE" in missing.output and "Traceback" not in missing.output
    arch = runner.invoke(app, ["verify", str(problem), str(problem), "--arch", "ampere"])
    assert arch.exit_code == 2
    assert "--arch" in arch.output
    tier = runner.invoke(app, ["verify", str(problem), str(problem), "--tier", "fastest"])
    assert tier.exit_code == 2


@pytest.mark.nvcc
def test_a_compiler_past_the_wall_clock_limit_is_a_timeout(tmp_path):
    settings = VerifySettings(tier=Tier.COMPILE, limits=SandboxLimits(wall_s=0.05))
    result = verify(PROBLEM, fenced(GOOD), settings, cache_dir=tmp_path)
    assert (result.verdict, result.tier) == (Verdict.TIMEOUT, Tier.COMPILE)
    assert "wall-clock limit" in result.reason


def test_compile_tier_without_nvcc_is_unsupported_with_the_reason_and_not_cached(tmp_path, monkeypatch):
    monkeypatch.setattr(run_module, "nvcc_path", lambda: None)
    result = verify(PROBLEM, fenced(GOOD), COMPILE, cache_dir=tmp_path)
    assert (result.verdict, result.tier, result.unsupported_feature) == (Verdict.UNSUPPORTED, Tier.COMPILE, "nvcc")
    assert result.reason == "tier 1 (compile) needs nvcc, which is not on PATH: install the CUDA toolkit"
    assert not list(tmp_path.rglob("*.json"))


def test_a_crash_while_reading_the_candidate_is_an_internal_error_when_the_canary_crashes_too(tmp_path, monkeypatch):
    import cuset_core.verify.candidate as candidate_module

    def explode(text):
        raise RecursionError("maximum recursion depth exceeded")

    # The analysis itself is broken (the canary's reading fails too): the verifier's fault.
    monkeypatch.setattr(run_module, "parse_candidate", explode)
    monkeypatch.setattr(candidate_module, "parse_candidate", explode)
    result = verify(PROBLEM, fenced(GOOD), STATIC, cache_dir=tmp_path)
    assert (result.verdict, result.tier, result.tiers_run) == (Verdict.INTERNAL_ERROR, Tier.STATIC, [Tier.STATIC])
    assert "RecursionError" in result.log


def test_an_internal_error_reported_by_a_tier_is_never_cached(tmp_path, monkeypatch):
    _skip_compile(monkeypatch)
    monkeypatch.setattr(run_module, "_cpu_runner", _fake_tier(Verdict.INTERNAL_ERROR, Tier.CPU))
    first = verify(PROBLEM, fenced(GOOD), VerifySettings(), cache_dir=tmp_path)
    second = verify(PROBLEM, fenced(GOOD), VerifySettings(), cache_dir=tmp_path)
    assert (first.verdict, second.verdict, second.cached) == (Verdict.INTERNAL_ERROR, Verdict.INTERNAL_ERROR, False)
    assert not list(tmp_path.rglob("*.json"))


def test_a_huge_reason_or_log_comes_back_cut_to_a_fixed_size(tmp_path, monkeypatch):
    def flooding():
        return lambda problem, candidate, settings, **options: VerifyResult(
            verdict=Verdict.RUNTIME_ERROR,
            tier=Tier.CPU,
            tiers_run=[Tier.CPU],
            reason="r" * (20 << 20),
            log="l" * (20 << 20),
        )

    _skip_compile(monkeypatch)
    monkeypatch.setattr(run_module, "_cpu_runner", flooding)
    result = verify(PROBLEM, fenced(GOOD), VerifySettings(), use_cache=False)
    assert len(result.reason) <= run_module.REASON_CHARS and len(result.log) <= run_module.LOG_CHARS
    assert len(result.model_dump_json()) < 16_000
