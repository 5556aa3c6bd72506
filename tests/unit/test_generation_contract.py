"""The typed contract of a Generation row (db/generations.py): old rows still read, what follows
a verified attempt (service/generation_settle.py: first pass, repairs, done), token usage, and
the repair turn's prompt."""

from __future__ import annotations

from typing import get_args

from cuset_core.generation.prompts import REPAIR_ERROR_CHARS, build_messages, failure_report, repair_messages
from cuset_core.verify.result import Diagnostic, Tier, Verdict, VerifyResult
from db.confidence_scores import ConfidenceRequest
from db.generations import GenerationRequest, GenerationSample, Usage, VerifyTier, usage_of
from db.models import Generation
from service.generation_settle import next_steps

PROBLEM = "import torch\nclass Model(torch.nn.Module):\n    pass\n"


def result(verdict: Verdict, **fields) -> VerifyResult:
    return VerifyResult(verdict=verdict, tier=Tier.COMPILE, **fields)


def attempt(index: int, verdict: Verdict | None = None, **fields) -> GenerationSample:
    verification = None if verdict is None else result(verdict)
    return GenerationSample(
        index=index, text=f"answer {index}", finish_reason="stop", verification=verification, **fields
    )


def test_a_request_verifies_up_to_one_of_the_verifier_s_tiers_or_none():
    assert get_args(VerifyTier) == ("none", *Tier)


def test_rows_stored_before_the_contract_still_read():
    # The shapes rows had before best-of-n and repairs existed (and the sandbox probe's minimal row).
    old_request = {"spec": "tiny", "form": "chat", "prompts": [[{"role": "user", "content": "hi"}]], "n": 2}
    old_request |= {"temperature": 0.0, "top_p": 1.0, "seed": None, "stop": [], "stream": False, "max_tokens": 8}
    old_samples = [
        {
            "index": 0,
            "prompt_index": 0,
            "text": "x",
            "finish_reason": "stop",
            "prompt_tokens": 5,
            "completion_tokens": 1,
        },
        {
            "index": 1,
            "text": "y",
            "finish_reason": "length",
            "code": "y",
            "verification": {"verdict": "pass", "tier": "static"},
        },
    ]

    request = Generation.__table__.c.request.type.process_result_value(old_request, None)
    samples = [GenerationSample.model_validate(sample) for sample in old_samples]

    assert request.n == 2 and request.verify == "none" and request.repair_rounds == 0 and not request.stop_at_first_pass
    assert GenerationRequest.model_validate({"problem": PROBLEM, "verify": "cpu", "n": 1}).problem == PROBLEM
    assert [s.round for s in samples] == [0, 0] and samples[0].code is None and not samples[0].cancelled
    assert samples[1].passed and samples[1].verification.verdict is Verdict.PASS


def test_a_confidence_rows_request_reads_back_as_one_and_no_other_kinds_does():
    column = Generation.__table__.c.request.type
    stored = {"file_id": "file-1", "n": 3, "model": "tiny", "spec": "tiny"}

    assert column.process_result_value(stored, None) == ConfidenceRequest(
        file_id="file-1", n=3, model="tiny", spec="tiny"
    )
    assert isinstance(column.process_result_value({"spec": "tiny", "n": 3}, None), GenerationRequest)


def test_a_sample_survives_the_round_trip_through_json():
    sample = attempt(3, Verdict.COMPILE_ERROR, round=2, repair_of=1)

    assert GenerationSample.model_validate(sample.model_dump(mode="json")) == sample


def test_the_first_pass_ends_a_first_pass_request_and_cancels_what_is_not_settled():
    request = GenerationRequest(n=4, verify="compile", stop_at_first_pass=True, repair_rounds=2)
    samples = [attempt(0, Verdict.COMPILE_ERROR), attempt(1, Verdict.PASS), attempt(2), GenerationSample(index=3)]

    steps = next_steps(request, samples, decoding=True)

    assert steps.finished and steps.chosen == 1
    assert steps.cancel == [2, 3]
    assert steps.repairs == []  # nothing is repaired once the request has its kernel


def test_without_first_pass_stopping_every_sample_is_verified_before_the_end():
    request = GenerationRequest(n=3, verify="compile")
    samples = [attempt(0, Verdict.PASS), attempt(1), attempt(2, Verdict.VALUE_MISMATCH)]

    assert not next_steps(request, samples, decoding=False).finished
    samples[1].verification = result(Verdict.RUNTIME_ERROR)
    steps = next_steps(request, samples, decoding=False)
    assert steps.finished and steps.chosen == 0 and steps.cancel == []


def test_a_request_still_decoding_its_samples_does_not_finish():
    request = GenerationRequest(n=2, verify="static")

    assert not next_steps(request, [attempt(0, Verdict.STATIC_REJECT)], decoding=True).finished


def test_a_failed_attempt_gets_one_repair_per_round_up_to_the_limit():
    request = GenerationRequest(n=2, verify="compile", repair_rounds=2)
    samples = [attempt(0, Verdict.COMPILE_ERROR), attempt(1, Verdict.PASS)]

    first = next_steps(request, samples, decoding=False)
    assert [(r.index, r.round, r.repair_of) for r in first.repairs] == [(2, 1, 0)]
    assert not first.finished
    samples += first.repairs
    assert next_steps(request, samples, decoding=False).repairs == []  # one repair per failed attempt

    samples[2] = attempt(2, Verdict.RUNTIME_ERROR, round=1, repair_of=0)
    second = next_steps(request, samples, decoding=False)
    assert [(r.index, r.round, r.repair_of) for r in second.repairs] == [(3, 2, 2)]
    samples += second.repairs

    samples[3] = attempt(3, Verdict.VALUE_MISMATCH, round=2, repair_of=2)
    last = next_steps(request, samples, decoding=False)
    assert last.repairs == [] and last.finished and last.chosen == 1


def test_verifier_faults_are_not_sent_back_to_the_model():
    request = GenerationRequest(n=2, verify="cpu", repair_rounds=3)
    samples = [attempt(0, Verdict.INTERNAL_ERROR), attempt(1, Verdict.UNSUPPORTED)]

    steps = next_steps(request, samples, decoding=False)

    assert steps.repairs == [] and steps.finished and steps.chosen is None


def test_usage_counts_the_shared_prompt_once_and_every_repair_prompt():
    samples = [
        GenerationSample(index=0, prompt_tokens=100, completion_tokens=10),
        GenerationSample(index=1, prompt_tokens=100, completion_tokens=20),
        GenerationSample(index=2, prompt_tokens=150, completion_tokens=30, round=1, repair_of=0),
    ]

    assert usage_of(samples) == Usage(prompt_tokens=250, completion_tokens=60, total_tokens=310)


def test_the_repair_turn_shows_the_failed_answer_and_the_compiler_error():
    messages = build_messages(PROBLEM, "compact")
    failed = result(
        Verdict.COMPILE_ERROR,
        reason="nvcc failed",
        diagnostics=[
            Diagnostic(severity="error", message='identifier "threadIdx_x" is undefined', line=12),
            Diagnostic(severity="warning", message="unused variable", line=3),
        ],
        log='kernel.cu(12): error: identifier "threadIdx_x" is undefined',
    )

    follow_up = repair_messages(messages, "```python\nbroken\n```", failed)

    assert follow_up[:-2] == messages  # the problem as first asked
    assert follow_up[-2] == {"role": "assistant", "content": "```python\nbroken\n```"}
    assert follow_up[-1]["role"] == "user"
    feedback = follow_up[-1]["content"]
    assert "compile error" in feedback and "nvcc failed" in feedback
    assert 'line 12: identifier "threadIdx_x" is undefined' in feedback
    assert "unused variable" not in feedback  # warnings are not what failed it
    assert "Fix it" in feedback


def test_the_error_shown_to_the_model_is_cut_to_a_bounded_size():
    report = failure_report(result(Verdict.RUNTIME_ERROR, reason="crashed", log="x" * 50_000))

    assert report.startswith("crashed\n") and len(report) == REPAIR_ERROR_CHARS
    assert failure_report(result(Verdict.TIMEOUT)) == "(the verifier gave no details)"
