"""Requests and responses of ``/v1/completions``, ``/v1/chat/completions`` (OpenAI shapes) and
``/v1/generate`` (ours: kernels with their verification). Token counts are tokens of the served
model's tokenizer; times are seconds."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from cuset_core.verify.policy import Policy
from cuset_core.verify.result import VerifyResult
from db.generations import Usage, VerifyTier


class Decoding(BaseModel):
    """Decoding settings every inference request shares (``max_tokens`` is checked against the
    server's ceiling by the router, so the error can name the configured limit)."""

    # OpenAI clients send fields we do not serve (user, logprobs, ...): they are ignored.
    model_config = ConfigDict(extra="ignore")

    model: str
    temperature: float = Field(1.0, ge=0, le=2, description="0 decodes greedily")
    top_p: float = Field(1.0, gt=0, le=1)
    n: int = Field(1, ge=1, description="samples per prompt")
    seed: int | None = Field(None, description="sampling seed; requests with a seed are never batched")
    stream: bool = False
    stop: str | list[str] | None = Field(None, description="text that ends a sample (not included)")

    def stop_list(self) -> list[str]:
        if self.stop is None:
            return []
        return [s for s in ([self.stop] if isinstance(self.stop, str) else self.stop) if s]


class StreamOptions(BaseModel):
    include_usage: bool = False


class CompletionRequest(Decoding):
    """Raw-text continuation: the prompt is fed to the model as is, with no chat template."""

    prompt: str | list[str]
    max_tokens: int = Field(16, ge=1)
    stream_options: StreamOptions | None = None

    def prompts(self) -> list[str]:
        return [self.prompt] if isinstance(self.prompt, str) else list(self.prompt)


class ContentPart(BaseModel):
    """One part of a message's content (OpenAI's content parts); only text parts are read, the
    others (images, audio, files) are accepted and dropped."""

    model_config = ConfigDict(extra="ignore")

    type: str = Field(description='"text" is read; other kinds are dropped')
    text: str | None = None


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "user", "assistant", "developer", "tool"]
    content: str | list[ContentPart] | None = None

    def text(self) -> str:
        """The message's text; content parts other than text are not supported and dropped."""
        if self.content is None or isinstance(self.content, str):
            return self.content or ""
        return "".join(part.text or "" for part in self.content if part.type == "text")


class ChatCompletionRequest(Decoding):
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1, description="the newer name of max_tokens")
    stream_options: StreamOptions | None = None

    def token_limit(self, default: int) -> int:
        return self.max_completion_tokens or self.max_tokens or default

    def chat(self) -> list[dict[str, str]]:
        return [{"role": "system" if m.role == "developer" else m.role, "content": m.text()} for m in self.messages]


class GenerateRequest(Decoding):
    """A KernelBench ``problem`` (rendered with ``prompt_style``) or a raw user ``prompt``.

    By default the problem is rendered in the style the model was tuned with, when it is an adapter
    that recorded it, else ``compact`` (the prompt this project's tuning uses).
    """

    problem: str | None = Field(None, description="KernelBench-format Python: class Model, get_inputs, get_init_inputs")
    prompt: str | None = Field(None, description="a user message sent as is")
    prompt_style: Literal["kernelbench", "compact"] | None = Field(
        None, description="default: the style the model was tuned with (an adapter records it), else compact"
    )
    temperature: float = Field(0.0, ge=0, le=2)
    max_tokens: int = Field(1024, ge=1)
    verify: VerifyTier = "none"
    policy: Policy = Field(
        "kernels",
        description="tier 2's data-flow policy: kernels (only the candidate's kernels compute during forward, no "
        "device data reaches the host) or mixed (torch may compute on the device too, KernelBench's rule)",
    )
    best_of: int | None = Field(
        None, ge=1, description="candidates to draw and verify for one answer (instead of n); needs verify"
    )
    stop_at_first_pass: bool = Field(
        False, description="end the request at the first attempt that passes verification; needs verify"
    )
    repair_rounds: int = Field(
        0,
        ge=0,
        description="times a failing sample is sent back with its verifier error to fix; needs verify. "
        "Every attempt, repairs included, must finish within the server's generation timeout",
    )

    @model_validator(mode="after")
    def _one_input(self) -> GenerateRequest:
        if (self.problem is None) == (self.prompt is None):
            raise ValueError("give exactly one of problem and prompt")
        return self


class CompletionChoice(BaseModel):
    index: int
    text: str
    logprobs: None = None
    finish_reason: str | None


class CompletionResponse(BaseModel):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str


class ChatChoice(BaseModel):
    index: int
    message: AssistantMessage
    logprobs: None = None
    finish_reason: str | None


class ChatCompletionResponse(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage


class GeneratedSample(BaseModel):
    """One attempt: a drawn sample (round 0) or a repair of a failed attempt (round >= 1)."""

    index: int
    text: str
    code: str = Field(description="the first fenced code block of text (all of text when unfenced)")
    finish_reason: str | None
    verification: VerifyResult | None = Field(None, description="the verifier's verdict; null when not verified")
    round: int = Field(0, description="0 for a drawn sample, r for the r-th repair of one")
    repair_of: int | None = Field(None, description="index of the failed attempt this one repairs")
    cancelled: bool = Field(False, description="never decoded or verified: another attempt passed first")


class GenerateTimings(BaseModel):
    queue_s: float | None = None
    generate_s: float | None = None
    verify_s: float | None = None
    total_s: float | None = None
    batch_size: int | None = Field(None, description="requests decoded together with this one (itself included)")


class GenerateResponse(BaseModel):
    id: str
    object: Literal["generation"] = "generation"
    created: int
    model: str
    samples: list[GeneratedSample] = Field(description="every attempt: the drawn samples, then repairs as they came")
    chosen: int | None = Field(None, description="index of the first attempt that passed verification; null if none")
    usage: Usage
    timings: GenerateTimings
