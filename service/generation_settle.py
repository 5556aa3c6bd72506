"""How a ``/v1/generate`` request moves on once an attempt is decoded or verified: its first
pass, its repairs, done (``next_steps``), applied to the locked row (``settle``, ``finish``); the
repairs it appends are sent to be decoded after the commit (``decode_repairs``).

An *attempt* is one decoded answer: the ``n`` samples drawn for the request (round 0), and the
repairs, each the model's answer to a follow-up turn showing it the previous attempt's error
(round r repairs the attempt of round r - 1 named by ``repair_of``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy.orm import Session

from cuset_core.generation.prompts import repairable
from db.generation_rows import save_samples
from db.generations import GenerationRequest, GenerationSample, GenerationTimings, usage_of
from db.models import Generation
from db.settings import Settings
from db.statuses import GenerationStatus
from service.dispatch import send_generate_repair


@dataclass
class NextSteps:
    """What a verified request does next, decided from its attempts (see ``next_steps``)."""

    cancel: list[int] = field(default_factory=list)  # attempts that will never be decoded or verified
    repairs: list[GenerationSample] = field(default_factory=list)  # new attempts to append and decode
    finished: bool = False
    chosen: int | None = None


def chosen_attempt(samples: list[GenerationSample]) -> int | None:
    """The index of the attempt the request answers with: the first that passed, else None."""
    return next((s.index for s in samples if s.passed), None)


def next_steps(request: GenerationRequest, samples: list[GenerationSample], decoding: bool) -> NextSteps:
    """Decide what follows once an attempt was decoded or verified.

    With ``stop_at_first_pass`` a passing attempt finishes the request and cancels every attempt
    not yet settled. Otherwise each failed attempt (``repairable``: the core's rule, shared with ``cuset eval``) of a round below
    ``repair_rounds`` gets one repair attempt, and the request finishes when the drawn samples are
    all decoded (``decoding`` False) and every attempt is settled with no repair left to start.
    """
    chosen = chosen_attempt(samples)
    if request.stop_at_first_pass and chosen is not None:
        return NextSteps(cancel=[s.index for s in samples if not s.settled], finished=True, chosen=chosen)
    repaired = {s.repair_of for s in samples if s.repair_of is not None}
    repairs: list[GenerationSample] = []
    for failed in samples:
        if (
            failed.verification is not None
            and repairable(failed.verification)
            and failed.round < request.repair_rounds
            and failed.index not in repaired
        ):
            index = len(samples) + len(repairs)
            repairs.append(
                GenerationSample(
                    index=index, prompt_index=failed.prompt_index, round=failed.round + 1, repair_of=failed.index
                )
            )
    finished = not decoding and not repairs and all(s.settled for s in samples)
    return NextSteps(repairs=repairs, finished=finished, chosen=chosen)


def finish(row: Generation, now: float, samples: list[GenerationSample] | None = None) -> None:
    """Mark a verified request succeeded, with its queue, generation, verification and total time.

    A request the first passing attempt ends while later attempts are still to be decoded has no
    ``decoded_at``: its verification time is then the attempts' own verification times, and its
    generation time the rest of the time since decoding started."""
    timings = row.timings or GenerationTimings()
    if timings.decoded_at is not None:
        timings = timings.model_copy(update={"verify_s": round(now - timings.decoded_at, 4)})
    elif timings.started_at is not None:
        verified = [s.verification for s in samples or [] if s.verification is not None]
        verify_s = sum(result.timings_s.get("total", 0.0) for result in verified)
        timings = timings.model_copy(
            update={
                "queue_s": round(timings.started_at - row.created_at, 4),
                "verify_s": round(verify_s, 4),
                "generate_s": round(max(0.0, now - timings.started_at - verify_s), 4),
            }
        )
    timings = timings.model_copy(update={"total_s": round(now - row.created_at, 4)})
    row.timings, row.status, row.finished_at = timings, GenerationStatus.SUCCEEDED, now


def settle(
    session: Session, row: Generation, request: GenerationRequest, samples: list[GenerationSample], now: float
) -> NextSteps:
    """Apply ``next_steps`` to the locked ``row`` holding ``samples`` (changed by the caller, who
    names them all in ``samples``): store them, cancel, append repair attempts, finish. The caller
    enqueues the repairs' decoding after the transaction commits. A row still ``running`` is still
    decoding its drawn samples."""
    steps = next_steps(request, samples, decoding=row.status == GenerationStatus.RUNNING)
    for index in steps.cancel:
        samples[index].cancelled = True
    samples.extend(steps.repairs)
    save_samples(session, row.id, samples)
    row.usage = usage_of(samples)
    if steps.finished:
        finish(row, now, samples)
    return steps


def decode_repairs(settings: Settings, generation_id: str, repairs: list[GenerationSample]) -> None:
    """Send the repair attempts ``settle`` appended to ``cuset.generate_repair`` (after the commit)."""
    for repair in repairs:
        send_generate_repair(settings, generation_id, repair.index)
