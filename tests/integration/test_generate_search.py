"""Verified best-of-n and repair on /v1/generate, end to end: the API writes the row, a real
Celery worker decodes with the tiny random model and verifies on its cpu queue.

The random model never writes a passing kernel, so runs through the model check the failing
path (every attempt verified, failures repaired up to the rounds asked, the error shown to the
model). The first-pass path is checked on a row holding known answers (a demo solution passes
the static tier), as the sandbox probe seeds its row."""

from __future__ import annotations

import json
import time

import pytest

from cuset_core.demo import demo_problems
from cuset_core.generation.prompts import build_messages, render_prompt, repair_messages
from cuset_core.verify.result import Tier, Verdict, VerifyResult
from db.generation_rows import load_samples, locked_generation
from db.generations import GenerationRequest, GenerationSample
from db.models import Generation
from db.session import session_scope
from service.dispatch import send_generate, send_verify_sample
from service.generation_settle import settle
from tests.integration.job_support import decoded_generation, insert_generation, stored_samples
from tests.integration.test_inference import stream
from tests.real_service import wait_for

PROBLEM = demo_problems()[0]


def prompt_tokens(tokenizer, messages: list[dict]) -> int:
    return len(tokenizer(render_prompt(tokenizer, messages), add_special_tokens=False)["input_ids"])


def test_failing_samples_are_repaired_with_their_error_until_the_rounds_run_out(
    client, worker, tokenizer, service_settings
):
    response = client.post(
        "/v1/generate",
        json={
            "model": "tiny",
            "problem": PROBLEM.problem_code,
            "max_tokens": 12,
            "temperature": 1.0,
            "best_of": 2,
            "verify": "static",
            "repair_rounds": 2,
        },
    )

    assert response.status_code == 200, response.text
    body = response.json()
    attempts = body["samples"]
    # Two drawn samples, each failing and repaired twice: 2 + 2 * 2 attempts, all verified.
    assert len(attempts) == 6
    assert (
        sorted((a["round"], a["repair_of"] is None) for a in attempts)
        == [(0, True)] * 2 + [(1, False)] * 2 + [(2, False)] * 2
    )
    assert all(not a["cancelled"] and not VerifyResult.model_validate(a["verification"]).passed for a in attempts)
    assert body["chosen"] is None
    by_index = {a["index"]: a for a in attempts}
    stored = _samples(service_settings, body["id"])
    for repair in (a for a in attempts if a["round"] > 0):
        failed = by_index[repair["repair_of"]]
        assert failed["round"] == repair["round"] - 1
        # The repair was decoded from the follow-up turn: the problem, the failed answer and its error.
        follow_up = repair_messages(
            build_messages(PROBLEM.problem_code, "compact"),
            failed["text"],
            VerifyResult.model_validate(failed["verification"]),
        )
        assert failed["verification"]["reason"] in follow_up[-1]["content"]
        assert repair["text"] and repair["finish_reason"]
        assert stored[repair["index"]].prompt_tokens == prompt_tokens(tokenizer, follow_up)
    usage = body["usage"]
    assert usage["completion_tokens"] == sum(s.completion_tokens for s in stored)
    assert usage["prompt_tokens"] > 4 * prompt_tokens(tokenizer, build_messages(PROBLEM.problem_code, "compact"))


def test_a_streamed_first_pass_search_shows_every_attempt_and_its_verdict(client, worker):
    events = stream(
        client,
        "/v1/generate",
        {
            "model": "tiny",
            "problem": PROBLEM.problem_code,
            "max_tokens": 12,
            "temperature": 1.0,
            "best_of": 2,
            "stop_at_first_pass": True,
            "repair_rounds": 1,
            "verify": "static",
            "stream": True,
        },
    )

    assert events[-1] == (None, "[DONE]")
    payloads = [(name, json.loads(data)) for name, data in events[:-1]]
    starts = [data for name, data in payloads if name == "sample.start"]
    verdicts = {
        data["index"]: data["verification"]["verdict"] for name, data in payloads if name == "sample.verification"
    }
    assert [(s["index"], s["round"]) for s in sorted(starts, key=lambda s: s["index"])] == [
        (0, 0),
        (1, 0),
        (2, 1),
        (3, 1),
    ]
    assert {s["repair_of"] for s in starts if s["round"] == 1} == {0, 1}
    assert sorted(verdicts) == [0, 1, 2, 3] and "pass" not in verdicts.values()
    names = [name for name, _ in payloads]
    # Sample 0 is verified as soon as it is decoded: its verdict may come before sample 1 is done.
    assert names.index("sample.verification") > names.index("sample.done")
    assert names[-1] == "generation.done" and payloads[-1][1]["chosen"] is None


def _seeded_row(settings, answers: list[str], stop_at_first_pass: bool) -> str:
    """A /v1/generate row whose drawn samples are ``answers``, decoded and waiting for verification."""
    return decoded_generation(
        settings.resolved_database_url,
        settings.base_models["tiny"],
        answers,
        stop_at_first_pass=stop_at_first_pass,
        repair_rounds=1,
    )


def _row(settings, generation_id: str) -> Generation:
    with session_scope(settings.resolved_database_url) as session:
        return session.get(Generation, generation_id)


def _samples(settings, generation_id: str) -> list[GenerationSample]:
    return stored_samples(settings.resolved_database_url, generation_id)


SOLVED = f"```python\n{PROBLEM.solution_code}\n```"


def test_the_first_passing_kernel_ends_the_request_and_what_is_left_never_starts(service_settings, worker):
    generation_id = _seeded_row(service_settings, ["no kernel here", SOLVED, "nor here"], stop_at_first_pass=True)

    send_verify_sample(service_settings, generation_id, 1, gpu=False)
    row = wait_for(
        lambda: (r := _row(service_settings, generation_id)).status in ("succeeded", "failed") and r,
        what="the passing sample to end the request",
    )

    assert row.status == "succeeded", row.error
    samples = _samples(service_settings, generation_id)
    assert samples[1].passed and samples[1].verification.verdict == "pass"
    assert [(s.cancelled, s.verification) for s in (samples[0], samples[2])] == [(True, None), (True, None)]
    assert len(samples) == 3  # no repair is started for a request that has its kernel
    # A verification message arriving after the end finds nothing to do.
    send_verify_sample(service_settings, generation_id, 0, gpu=False)
    send_verify_sample(service_settings, generation_id, 1, gpu=False)  # a redelivery
    marker = _seeded_row(service_settings, ["no kernel here"], stop_at_first_pass=True)
    send_verify_sample(service_settings, marker, 0, gpu=False)  # queued after them on the same queue
    wait_for(lambda: _samples(service_settings, marker)[0].verification, what="the later message")
    after = _row(service_settings, generation_id)
    assert _samples(service_settings, generation_id) == samples and after.finished_at == row.finished_at


def test_without_first_pass_stopping_every_sample_is_verified_and_the_pass_chosen(service_settings, worker):
    generation_id = _seeded_row(service_settings, [SOLVED, "no kernel here"], stop_at_first_pass=False)

    for index in (0, 1):
        send_verify_sample(service_settings, generation_id, index, gpu=False)
    row = wait_for(
        lambda: (r := _row(service_settings, generation_id)).status in ("succeeded", "failed") and r,
        timeout=120,
        what="both samples and the repair to be verified",
    )

    assert row.status == "succeeded", row.error
    samples = _samples(service_settings, generation_id)
    assert [s.verification.verdict for s in samples] == ["pass", "no_code", samples[2].verification.verdict]
    assert (samples[2].round, samples[2].repair_of) == (1, 1)  # the failing one was repaired, the pass was not
    assert not any(s.cancelled for s in samples)


def _record_a_pass(settings, generation_id: str, index: int) -> list[GenerationSample]:
    """Record that attempt ``index`` passed, as the verify task records a result: under the row
    lock, followed by ``settle``; returns the attempts as they were at that moment."""
    with session_scope(settings.resolved_database_url) as session:
        row = locked_generation(session, generation_id)
        samples = load_samples(session, generation_id)
        before = [sample.model_copy() for sample in samples]
        samples[index].verification = VerifyResult(verdict=Verdict.PASS, tier=Tier.STATIC, reason="a known answer")
        settle(session, row, GenerationRequest.model_validate(row.request), samples, time.time())
    return before


def test_a_pass_while_later_samples_are_decoded_stops_the_decoding(service_settings, worker):
    request = GenerationRequest(
        spec=service_settings.base_models["tiny"],
        prompts=[build_messages(PROBLEM.problem_code, "compact")],
        n=3,
        temperature=1.0,
        max_tokens=128,
        verify="static",
        problem=PROBLEM.problem_code,
        stop_at_first_pass=True,
    )
    generation_id = insert_generation(service_settings.resolved_database_url, request.model_dump(mode="json"))
    send_generate(service_settings, generation_id)

    def first_sample_done():
        samples = _samples(service_settings, generation_id)
        return samples and samples[0].finish_reason

    # Sample 1 is being decoded now, as a rule; on a loaded machine it may have finished too.
    wait_for(first_sample_done, timeout=180, interval=0.02, what="sample 0 to be decoded")
    at_the_pass = _record_a_pass(service_settings, generation_id, 0)
    row = wait_for(
        lambda: (r := _row(service_settings, generation_id)).timings and r.timings.generate_s is not None and r,
        what="the decoding task to end",
    )

    assert row.status == "succeeded" and row.error is None
    samples = _samples(service_settings, generation_id)
    assert samples[0].passed
    finished = [sample.index for sample in at_the_pass if sample.finish_reason is not None]
    assert finished and finished == list(range(len(finished))) and len(finished) < 3, finished
    stopped, never_started = samples[len(finished)], samples[len(finished) + 1 :]
    assert stopped.cancelled and stopped.finish_reason is None  # stopped mid-answer, or before it
    assert stopped.completion_tokens < request.max_tokens  # counted as far as it was decoded
    assert all(s.cancelled and s.text == "" and s.completion_tokens == 0 for s in never_started)
    # Usage says what was decoded: the finished attempts and the part of the stopped one.
    decoded = sum(samples[index].completion_tokens for index in finished) + stopped.completion_tokens
    assert row.usage.completion_tokens == decoded


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"best_of": 2}, "best_of"),
        ({"stop_at_first_pass": True}, "stop_at_first_pass"),
        ({"repair_rounds": 1}, "repair_rounds"),
        ({"verify": "static", "best_of": 10**3}, "best_of"),
        ({"verify": "static", "best_of": 2, "n": 2}, "best_of"),
        ({"verify": "static", "repair_rounds": 99}, "repair_rounds"),
    ],
)
def test_search_settings_the_server_cannot_honour_are_400s_naming_the_field(client, body, param):
    response = client.post("/v1/generate", json={"model": "tiny", "problem": PROBLEM.problem_code} | body)

    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param and error["type"] == "invalid_request_error" and param in error["message"]


@pytest.mark.parametrize("body", [{"best_of": 0}, {"repair_rounds": -1}])
def test_search_settings_out_of_range_are_400s_naming_the_field(client, body):
    response = client.post("/v1/generate", json={"model": "tiny", "problem": PROBLEM.problem_code} | body)

    assert response.status_code == 400
    assert response.json()["error"]["param"] == next(iter(body))
