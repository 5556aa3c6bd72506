"""A verifier that cannot run tier 2 on its machine stops an eval, a best-of-n request and the
demo at once, naming the cause and the fix, instead of reading as the model's failure sample after
sample (issue 50, item 1)."""

from __future__ import annotations

import pytest

from cuset_core.evaluation.decoding import Answer
from cuset_core.evaluation.problems import Problem
from cuset_core.evaluation.scoring import score_attempt
from cuset_core.verify import readiness
from cuset_core.verify.result import Tier, Verdict, VerifyResult
from cuset_core.verify.settings import VerifySettings

BROKEN_TIER_2 = VerifyResult(verdict=Verdict.INTERNAL_ERROR, tier=Tier.CPU, reason="the candidate side exited 127")


@pytest.fixture
def python_the_sandbox_cannot_run(monkeypatch):
    """Tier 2's probe run for real, in the sandbox, with an interpreter that is not there."""
    real = readiness.probe_tier2
    monkeypatch.setattr(readiness, "probe_tier2", lambda: real(python="/nonexistent/venv/bin/python"))
    monkeypatch.setattr(readiness, "_last", {})


@pytest.mark.slow
def test_an_internal_error_of_tier_2_with_a_failing_probe_stops_naming_the_cause_and_the_fix(
    python_the_sandbox_cannot_run,
):
    with pytest.raises(readiness.VerifierBroken) as broken:
        readiness.stop_if_broken(BROKEN_TIER_2)
    message = str(broken.value)
    assert "the verifier is broken on this machine" in message and "/nonexistent/venv/bin/python" in message
    assert "docs/deploy.md" in message


def test_a_models_failure_or_another_tiers_internal_error_never_asks_the_probe(monkeypatch):
    def probe() -> readiness.Readiness:
        raise AssertionError("the probe must not run")

    monkeypatch.setattr(readiness, "tier2_readiness", probe)
    readiness.stop_if_broken(VerifyResult(verdict=Verdict.VALUE_MISMATCH, tier=Tier.CPU))
    readiness.stop_if_broken(VerifyResult(verdict=Verdict.INTERNAL_ERROR, tier=Tier.COMPILE))


def test_an_internal_error_on_a_working_machine_is_the_problems_and_the_eval_goes_on(monkeypatch):
    monkeypatch.setattr(readiness, "tier2_readiness", lambda: readiness.Readiness(True))
    readiness.stop_if_broken(BROKEN_TIER_2)  # a problem whose own reference fails, say


@pytest.mark.slow
def test_an_eval_stops_at_its_first_sample_when_tier_2_cannot_run(python_the_sandbox_cannot_run, monkeypatch):
    import cuset_core.evaluation.scoring as scoring

    monkeypatch.setattr(scoring, "verify", lambda *args, **kwargs: BROKEN_TIER_2)
    problem = Problem(id="p", code="class Model: pass")
    with pytest.raises(readiness.VerifierBroken):
        score_attempt(problem, 0, Answer(answer="x"), VerifySettings(), None, False)
