"""The typed contract of a Generation row (shared by api/ and worker/): what the API asks for
(``GenerationRequest``, the row's ``request`` JSON), what the workers write back per attempt
(``GenerationSample``, one ``GenerationSampleRow`` each: ``load_samples``, ``save_samples``), and
how a verified request moves on (``next_steps``: first pass, repairs, done).

Both sides write with ``model_dump(mode="json")`` and read with ``model_validate``. Fields added
after rows were first stored have defaults, so old rows still read. Confidence rows
(``kind == "confidence"``) keep a request of their own and their answer in ``confidence``; they
are not read here.

An *attempt* is one decoded answer: the ``n`` samples drawn for the request (round 0), and the
repairs, each the model's answer to a follow-up turn showing it the previous attempt's error
(round r repairs the attempt of round r - 1 named by ``repair_of``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, Field
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from cuset_core.generation.prompts import repairable
from cuset_core.verify.policy import Policy
from cuset_core.verify.result import VerifyResult
from db.dispatch import send_generate_repair
from db.model_specs import EngineRoute
from db.models import Generation, GenerationSampleRow
from db.settings import Settings
from db.statuses import GenerationStatus

# The tier a generated kernel is verified up to: "none", or a value of the verifier's ``Tier``
# (a test keeps the two lists equal). A Literal rather than ``Tier | Literal["none"]``, so that a
# wrong value's error names the field alone.
VerifyTier = Literal["none", "static", "compile", "cpu", "gpu"]


class GenerationRequest(BaseModel):
    """The row's ``request``: model spec, prompts and decoding settings; for ``/v1/generate`` also
    what to verify and how to search (first pass, repairs). Token counts are of the model's
    tokenizer."""

    spec: str = Field("", description="cuset_core model spec of the served model")
    engine: EngineRoute | None = Field(None, description="the engine that decodes it; None: the worker decodes")
    form: Literal["chat", "raw"] = Field("chat", description="chat: prompts are message lists; raw: texts")
    prompts: list[Any] = Field(default_factory=list)
    n: int = Field(1, ge=1, description="samples per prompt (for best-of-n: the candidates)")
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = Field(16, ge=1)
    seed: int | None = None
    stop: list[str] = Field(default_factory=list)
    stream: bool = False
    verify: VerifyTier = "none"
    policy: Policy = Field("kernels", description="tier 2's data-flow policy (cuset_core.verify.policy)")
    problem: str | None = None
    prompt_style: str = "compact"
    stop_at_first_pass: bool = Field(False, description="the first passing attempt ends the request")
    repair_rounds: int = Field(0, ge=0, description="follow-up turns a failing sample may get")

    @property
    def sequential(self) -> bool:
        """Decoded one sample after another (not batched): to stream, or to stop at a first pass."""
        return self.stream or self.stop_at_first_pass


class GenerationSample(BaseModel):
    """One attempt, as its ``GenerationSampleRow`` stores it (index = its position among the
    attempts)."""

    index: int
    prompt_index: int = 0
    text: str = Field("", description="the answer so far while decoding, the whole answer once finish_reason is set")
    finish_reason: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    code: str | None = Field(None, description="/v1/generate: the extracted code of text")
    verification: VerifyResult | None = None
    round: int = Field(0, description="0 for a drawn sample, r for the r-th repair of one")
    repair_of: int | None = Field(None, description="index of the failed attempt this one repairs")
    cancelled: bool = Field(False, description="not decoded or verified: another attempt passed first")

    @property
    def passed(self) -> bool:
        return self.verification is not None and self.verification.passed

    @property
    def settled(self) -> bool:
        """Verified or cancelled: nothing more will happen to this attempt itself."""
        return self.verification is not None or self.cancelled


def read_samples(raw: list[dict] | None) -> list[GenerationSample]:
    """Attempts as a follower's snapshot or an event carries them (JSON)."""
    return [GenerationSample.model_validate(sample) for sample in raw or []]


def dump_samples(samples: list[GenerationSample]) -> list[dict]:
    return [sample.model_dump(mode="json") for sample in samples]


_SAMPLE_FIELDS = tuple(GenerationSample.model_fields)


def load_samples(session: Session, generation_id: str) -> list[GenerationSample]:
    """Every attempt of the generation, by index (``GenerationSampleRow`` rows)."""
    rows = session.scalars(
        select(GenerationSampleRow)
        .where(GenerationSampleRow.generation_id == generation_id)
        .order_by(GenerationSampleRow.index)
        .execution_options(populate_existing=True)
    )
    return [GenerationSample.model_validate({name: getattr(row, name) for name in _SAMPLE_FIELDS}) for row in rows]


def save_samples(session: Session, generation_id: str, samples: list[GenerationSample]) -> None:
    """Write ``samples`` (some or all attempts) into their rows, adding the rows that are new."""
    if not samples:
        return
    stored = {
        row.index: row
        for row in session.scalars(
            select(GenerationSampleRow).where(
                GenerationSampleRow.generation_id == generation_id,
                GenerationSampleRow.index.in_([sample.index for sample in samples]),
            )
        )
    }
    for sample in samples:
        row = stored.get(sample.index)
        if row is None:
            row = GenerationSampleRow(generation_id=generation_id, index=sample.index)
            session.add(row)
        for name in _SAMPLE_FIELDS:
            setattr(row, name, getattr(sample, name))


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
    repairs = []
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


def usage_of(samples: list[GenerationSample]) -> dict[str, int]:
    """Token usage of a request: each drawn prompt once (its samples share it), each repair's own
    follow-up prompt, and every completion."""
    drawn: dict[int, int] = {}
    for sample in samples:
        if sample.round == 0:  # an attempt cancelled before its decoding counts 0: the decoded one says
            drawn[sample.prompt_index] = max(drawn.get(sample.prompt_index, 0), sample.prompt_tokens)
    prompt_tokens = sum(drawn.values()) + sum(s.prompt_tokens for s in samples if s.round > 0)
    completion_tokens = sum(s.completion_tokens for s in samples)
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def locked_generation(session: Session, generation_id: str) -> Generation | None:
    """The row, locked for the rest of the transaction (``SELECT ... FOR UPDATE``)."""
    if session.get_bind().dialect.name == "sqlite":
        # SQLite has no row locks: a no-op write takes the database's write lock first, so the
        # read below sees every committed update and nobody writes until this transaction ends.
        session.execute(update(Generation).where(Generation.id == generation_id).values(status=Generation.status))
    return session.scalars(
        select(Generation)
        .where(Generation.id == generation_id)
        .with_for_update()
        .execution_options(populate_existing=True)
    ).one_or_none()


def finish(row: Generation, now: float, samples: list[GenerationSample] | None = None) -> None:
    """Mark a verified request succeeded, with its queue, generation, verification and total time.

    A request the first passing attempt ends while later attempts are still to be decoded has no
    ``decoded_at``: its verification time is then the attempts' own verification times, and its
    generation time the rest of the time since decoding started."""
    timings = dict(row.timings or {})
    if "decoded_at" in timings:
        timings["verify_s"] = round(now - timings["decoded_at"], 4)
    elif "started_at" in timings:
        verified = [s.verification for s in samples or [] if s.verification is not None]
        verify_s = sum(result.timings_s.get("total", 0.0) for result in verified)
        timings["queue_s"] = round(timings["started_at"] - row.created_at, 4)
        timings["verify_s"] = round(verify_s, 4)
        timings["generate_s"] = round(max(0.0, now - timings["started_at"] - verify_s), 4)
    timings["total_s"] = round(now - row.created_at, 4)
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
