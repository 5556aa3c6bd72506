"""Usage and timings of a /v1/generate request, also when the first passing attempt ends it early."""

from __future__ import annotations

from cuset_core.verify.result import Tier, Verdict, VerifyResult
from db.generations import GenerationSample, GenerationTimings, Usage, usage_of
from db.models import Generation
from service.generation_settle import finish


def verified(verdict: Verdict, seconds: float) -> VerifyResult:
    return VerifyResult(verdict=verdict, tier=Tier.CPU, timings_s={"total": seconds})


def test_a_prompt_is_counted_once_even_when_its_later_attempts_were_cancelled_undecoded():
    samples = [
        GenerationSample(index=0, prompt_index=0, prompt_tokens=120, completion_tokens=30),
        GenerationSample(index=1, prompt_index=0, cancelled=True),  # never decoded: 0 tokens
    ]
    assert usage_of(samples) == Usage(prompt_tokens=120, completion_tokens=30, total_tokens=150)


def test_a_request_ended_by_its_first_pass_before_decoding_finished_has_every_timing():
    row = Generation(created_at=100.0, timings=GenerationTimings(started_at=101.5))
    samples = [
        GenerationSample(index=0, prompt_tokens=10, verification=verified(Verdict.VALUE_MISMATCH, 2.0)),
        GenerationSample(index=1, prompt_tokens=10, verification=verified(Verdict.PASS, 3.0)),
        GenerationSample(index=2, cancelled=True),
    ]
    finish(row, 110.0, samples)
    assert row.status == "succeeded" and row.finished_at == 110.0
    assert row.timings.model_dump(include={"queue_s", "generate_s", "verify_s", "total_s"}) == {
        "queue_s": 1.5,
        "generate_s": 3.5,  # 8.5 s since decoding started, 5 s of it verifying
        "verify_s": 5.0,
        "total_s": 10.0,
    }


def test_a_request_decoded_in_full_keeps_its_decoding_times():
    row = Generation(
        created_at=100.0,
        timings=GenerationTimings(started_at=101.0, queue_s=1.0, generate_s=4.0, decoded_at=105.0),
    )
    finish(row, 108.0, [])
    assert (row.timings.queue_s, row.timings.generate_s, row.timings.verify_s) == (1.0, 4.0, 3.0)
