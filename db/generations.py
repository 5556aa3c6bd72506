"""The typed contract of a Generation row (shared by api/ and worker/): what the API asks for
(``GenerationRequest``, the row's ``request``), what the workers write back per attempt
(``GenerationSample``, one ``GenerationSampleRow`` each) and for the whole request (``Usage``,
``GenerationTimings``). ``db.generation_rows`` reads and writes the rows; how a verified
request moves on (first pass, repairs, done) is service/generation_settle.py's.

The columns hold these types (``TypedJSON``). Fields added after rows were first stored have
defaults, so old rows still read. Confidence rows (``kind == "confidence"``) keep a request of
their own (``ConfidenceRequest``) and their answer in ``confidence``; they are not read here.

An *attempt* is one decoded answer: the ``n`` samples drawn for the request (round 0), and the
repairs, each the model's answer to a follow-up turn showing it the previous attempt's error
(round r repairs the attempt of round r - 1 named by ``repair_of``).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from cuset_core.verify.policy import Policy
from cuset_core.verify.result import VerifyResult
from db.engine_routes import EngineRoute

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


class Usage(BaseModel):
    """Tokens a request used, as OpenAI counts them (the row's ``usage``)."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class GenerationTimings(BaseModel):
    """Where a request's time went, in seconds (the row's ``timings``), and the instants (Unix
    seconds) the later figures are measured from. None: not (yet) measured."""

    queue_s: float | None = Field(None, description="from creation to the start of decoding")
    generate_s: float | None = Field(None, description="decoding")
    verify_s: float | None = Field(None, description="verification after decoding")
    confidence_s: float | None = Field(None, description="measuring a confidence request")
    total_s: float | None = Field(None, description="from creation to the end")
    batch_size: int | None = Field(None, description="requests decoded together with this one (itself included)")
    started_at: float | None = Field(None, description="decoding began")
    decoded_at: float | None = Field(None, description="every drawn sample was decoded")

    def but_earlier(self, earlier: GenerationTimings | None) -> GenerationTimings:
        """These timings, where ``earlier`` (the row's) has not measured the same figure already."""
        return self if earlier is None else self.model_copy(update=earlier.model_dump(exclude_none=True))


def usage_of(samples: list[GenerationSample]) -> Usage:
    """Token usage of a request: each drawn prompt once (its samples share it), each repair's own
    follow-up prompt, and every completion."""
    drawn: dict[int, int] = {}
    for sample in samples:
        if sample.round == 0:  # an attempt cancelled before its decoding counts 0: the decoded one says
            drawn[sample.prompt_index] = max(drawn.get(sample.prompt_index, 0), sample.prompt_tokens)
    prompt_tokens = sum(drawn.values()) + sum(s.prompt_tokens for s in samples if s.round > 0)
    completion_tokens = sum(s.completion_tokens for s in samples)
    return Usage(
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        total_tokens=prompt_tokens + completion_tokens,
    )
