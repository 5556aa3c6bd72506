"""How a streaming follower merges the row it read with the events published since: each
character once, gaps filled from the row, final and verified attempts kept."""

from __future__ import annotations

from api.streaming import Following, Snapshot, merged_sample, with_delta
from cuset_core.verify.result import Tier, Verdict, VerifyResult
from db.generations import GenerationSample
from service.generation_events import GenerationEvent


def snapshot(status: str, *texts: str) -> Snapshot:
    samples = [GenerationSample(index=i, text=t) for i, t in enumerate(texts)]
    return Snapshot("gen-1", "tiny", status, samples, None, None, None, 0.0)


def delta(offset: int, text: str, index: int = 0) -> GenerationEvent:
    return GenerationEvent(index=index, offset=offset, delta=text)


def text_of(view: Following, index: int = 0) -> str:
    return view.snapshot.samples[index].text


def test_a_delta_extends_the_text_once_even_when_repeated_or_overlapping():
    sample = GenerationSample(index=0, text="Hello")

    assert with_delta(sample, 5, " world").text == "Hello world"
    assert with_delta(sample, 3, "lo world").text == "Hello world"
    assert with_delta(sample, 0, "Hel") is sample
    assert with_delta(sample, 6, "world") is None  # a gap


def test_a_finished_attempt_ignores_late_deltas_and_keeps_its_final_text():
    finished = GenerationSample(index=0, text="Hi.", finish_reason="stop")

    assert with_delta(finished, 3, " more") is finished
    assert merged_sample(finished, GenerationSample(index=0, text="Hi. more")).text == "Hi."


def test_the_final_text_replaces_a_partial_one_even_when_it_does_not_continue_it():
    partial = GenerationSample(index=0, text="a  b")
    final = GenerationSample(index=0, text="a b c", finish_reason="length", completion_tokens=3)

    merged = merged_sample(partial, final)

    assert merged.text == "a b c" and merged.finish_reason == "length" and merged.completion_tokens == 3


def test_a_verdict_or_a_cancellation_once_known_stays():
    verified = GenerationSample(
        index=0,
        text="x",
        finish_reason="stop",
        verification=VerifyResult(verdict=Verdict.COMPILE_ERROR, tier=Tier.COMPILE),
    )
    stale = GenerationSample(index=0, text="x", finish_reason="stop")

    assert merged_sample(verified, stale).verification == verified.verification
    assert merged_sample(GenerationSample(index=0, cancelled=True), stale).cancelled


def test_deltas_past_the_text_wait_for_the_row_then_continue_without_repeats():
    view = Following(snapshot("running", "Once"))

    assert not view.with_event(delta(11, " time"))  # " upon a" was published before we joined
    assert view.wants_row(GenerationEvent(row=True))
    assert view.with_row(snapshot("running", "Once upon a"))
    assert text_of(view) == "Once upon a time"
    view.with_event(delta(11, " time there"))  # overlaps what it has
    assert text_of(view) == "Once upon a time there"
    assert not view.waiting


def test_a_row_event_is_not_read_when_nothing_is_missing():
    view = Following(snapshot("running", "Once"))

    view.with_event(delta(4, " upon"))

    assert not view.wants_row(GenerationEvent(row=True))
    assert view.wants_row(GenerationEvent(status="succeeded"))


def test_attempts_and_status_come_from_events_and_never_step_back():
    view = Following(snapshot("queued"))

    view.with_event(GenerationEvent(samples=[GenerationSample(index=0), GenerationSample(index=1)], status="running"))
    view.with_event(delta(0, "ab", index=1))
    view.with_row(snapshot("queued", "", ""))  # a stale read

    assert view.snapshot.status == "running"
    assert [s.text for s in view.snapshot.samples] == ["", "ab"]
