"""``/v1/completions``, ``/v1/chat/completions`` (OpenAI shapes, SSE streaming) and
``/v1/generate`` (kernels from a KernelBench problem, optionally verified).

Every request becomes a Generation row plus a ``cuset.generate`` message; the answer is read
back from the row (api/streaming.py): awaited whole, or streamed as server-sent events (through
sse-starlette) from the text deltas and changes the worker publishes while it decodes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from sqlalchemy.orm import Session
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.concurrency import run_in_threadpool

from api.context import check_context
from api.deps import OwnerDep, SessionDep, SettingsDep
from api.errors import APIError, bad_request
from api.routers.models import model_spec
from api.schemas.inference import (
    AssistantMessage,
    ChatChoice,
    ChatCompletionRequest,
    ChatCompletionResponse,
    CompletionChoice,
    CompletionRequest,
    CompletionResponse,
    Decoding,
    GeneratedSample,
    GenerateRequest,
    GenerateResponse,
    GenerateTimings,
    Usage,
)
from api.streaming import DONE, Snapshot, failure_error, follow, sse, wait_answer
from cuset_core.evaluation.problem_check import problem_issues
from cuset_core.generation.prompts import PromptStyle, build_messages
from cuset_core.models import recorded_prompt_style
from db.generations import GenerationRequest, GenerationSample, GenerationTimings
from db.ids import new_id
from db.models import Generation
from db.settings import Settings
from db.statuses import GenerationKind, GenerationStatus
from service.dispatch import send_generate
from service.engine_routing import engine_route_for
from service.generation_settle import chosen_attempt

router = APIRouter(tags=["inference"])

CHAT_DEFAULT_MAX_TOKENS = 512
PING_S = 15  # keep-alive comment period of a silent event stream
START_FIELDS = {"index", "round", "repair_of"}
DONE_FIELDS = {"index", "text", "code", "finish_reason"}


def _check_limits(settings: Settings, max_tokens: int, n: int) -> None:
    if max_tokens > settings.max_generation_tokens:
        raise bad_request(
            f"max_tokens is {max_tokens}; this server allows at most {settings.max_generation_tokens}.",
            param="max_tokens",
        )
    if n > settings.max_samples_per_request:
        raise bad_request(
            f"n is {n}; this server allows at most {settings.max_samples_per_request} samples per request.", param="n"
        )


def _decoding(body: Decoding, max_tokens: int) -> dict[str, Any]:
    """The request fields every inference request fills from its decoding settings."""
    return {
        "n": body.n,
        "temperature": body.temperature,
        "top_p": body.top_p,
        "seed": body.seed,
        "stop": body.stop_list(),
        "stream": body.stream,
        "max_tokens": max_tokens,
    }


def _submit(
    session: Session,
    settings: Settings,
    owner: str,
    model: str,
    kind: GenerationKind,
    request: GenerationRequest,
    spec: str | None = None,
) -> Snapshot:
    """Create the queued row and enqueue its decoding (by the worker, or the engine serving the
    model); the row as created. ``spec``: the model's spec when the caller resolved it already."""
    spec = spec or model_spec(session, settings, owner, model)
    engine = engine_route_for(session, settings, owner, model)
    row = Generation(
        id=new_id("gen"),
        owner=owner,
        model=model,
        kind=kind,
        request=request.model_copy(update={"spec": spec, "engine": engine}),
        status=GenerationStatus.QUEUED,
    )
    session.add(row)
    session.commit()
    send_generate(settings, row.id)
    return Snapshot(row.id, row.model, GenerationStatus(row.status), [], None, None, None, row.created_at)


def _usage(snapshot: Snapshot) -> Usage:
    return snapshot.usage or Usage(prompt_tokens=0, completion_tokens=0, total_tokens=0)


def _error_body(error: APIError) -> dict:
    return {"error": {"message": error.message, "type": "server_error", "param": error.param, "code": error.code}}


def _event_stream(events: AsyncIterator[ServerSentEvent]) -> EventSourceResponse:
    # sse-starlette sends a comment line as a keep-alive while a long decode is silent; "\n"
    # ends lines as this API always has (clients accept either).
    return EventSourceResponse(events, sep="\n", ping=PING_S)


async def _openai_events(
    settings: Settings, created: Snapshot, chat: bool, include_usage: bool
) -> AsyncIterator[ServerSentEvent]:
    """OpenAI stream chunks: per choice a role delta (chat), text deltas, a finish_reason chunk;
    an optional usage chunk; then ``[DONE]``."""
    base = {
        "id": created.id,
        "object": "chat.completion.chunk" if chat else "text_completion",
        "created": int(created.created_at),
        "model": created.model,
    }

    def chunk(index: int, text: str | None = None, finish: str | None = None, role: bool = False) -> ServerSentEvent:
        if chat:
            delta = {"role": "assistant", "content": ""} if role else {} if text is None else {"content": text}
            choice = {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}
        else:
            choice = {"index": index, "text": text or "", "logprobs": None, "finish_reason": finish}
        return sse(base | {"choices": [choice]})

    sent: dict[int, str] = {}
    finished: set[int] = set()
    try:
        async for snapshot in follow(settings, created.id):
            if snapshot.status == GenerationStatus.FAILED:
                yield sse(_error_body(failure_error(snapshot)))
                break
            for sample in snapshot.samples:
                index, text = sample.index, sample.text
                if index not in sent:
                    sent[index] = ""
                    if chat:
                        yield chunk(index, role=True)
                if len(text) > len(sent[index]) and text.startswith(sent[index]):
                    yield chunk(index, text[len(sent[index]) :])
                    sent[index] = text
                if sample.finish_reason and index not in finished:
                    finished.add(index)
                    yield chunk(index, finish=sample.finish_reason)
            if snapshot.status == GenerationStatus.SUCCEEDED and include_usage:
                yield sse(base | {"choices": [], "usage": _usage(snapshot).model_dump()})
    except APIError as error:
        yield sse(_error_body(error))
    yield DONE


@router.post("/completions", response_model=CompletionResponse)
async def create_completion(
    body: CompletionRequest, http: Request, session: SessionDep, settings: SettingsDep, owner: OwnerDep
):
    """Continue raw text prompts (no chat template)."""
    _check_limits(settings, body.max_tokens, body.n)
    prompts = body.prompts()
    if not prompts:
        raise bad_request("prompt must hold at least one text.", param="prompt")
    request = GenerationRequest(**_decoding(body, body.max_tokens), form="raw", prompts=prompts)
    spec = await run_in_threadpool(model_spec, session, settings, owner, body.model)
    await run_in_threadpool(check_context, settings, spec, prompts, body.max_tokens, "prompt")
    created = await run_in_threadpool(
        _submit, session, settings, owner, body.model, GenerationKind.COMPLETION, request, spec
    )
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        return _event_stream(_openai_events(settings, created, chat=False, include_usage=include_usage))
    done = await wait_answer(settings, created.id, http.is_disconnected)
    return CompletionResponse(
        id=done.id,
        created=int(done.created_at),
        model=done.model,
        usage=_usage(done),
        choices=[CompletionChoice(index=s.index, text=s.text, finish_reason=s.finish_reason) for s in done.samples],
    )


@router.post("/chat/completions", response_model=ChatCompletionResponse)
async def create_chat_completion(
    body: ChatCompletionRequest, http: Request, session: SessionDep, settings: SettingsDep, owner: OwnerDep
):
    """Answer a conversation, rendered with the model's chat template."""
    max_tokens = body.token_limit(min(CHAT_DEFAULT_MAX_TOKENS, settings.max_generation_tokens))
    _check_limits(settings, max_tokens, body.n)
    request = GenerationRequest(**_decoding(body, max_tokens), form="chat", prompts=[body.chat()])
    spec = await run_in_threadpool(model_spec, session, settings, owner, body.model)
    await run_in_threadpool(check_context, settings, spec, request.prompts, max_tokens, "messages")
    created = await run_in_threadpool(_submit, session, settings, owner, body.model, GenerationKind.CHAT, request, spec)
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        return _event_stream(_openai_events(settings, created, chat=True, include_usage=include_usage))
    done = await wait_answer(settings, created.id, http.is_disconnected)
    return ChatCompletionResponse(
        id=done.id,
        created=int(done.created_at),
        model=done.model,
        usage=_usage(done),
        choices=[
            ChatChoice(index=s.index, message=AssistantMessage(content=s.text), finish_reason=s.finish_reason)
            for s in done.samples
        ],
    )


def _generated(sample: GenerationSample) -> GeneratedSample:
    return GeneratedSample(
        index=sample.index,
        text=sample.text,
        code=sample.code or "",
        finish_reason=sample.finish_reason,
        verification=sample.verification,
        round=sample.round,
        repair_of=sample.repair_of,
        cancelled=sample.cancelled,
    )


def _timings(snapshot: Snapshot) -> GenerateTimings:
    timings = snapshot.timings or GenerationTimings()
    return GenerateTimings(**timings.model_dump(include=set(GenerateTimings.model_fields)))


async def _generate_events(settings: Settings, created: Snapshot) -> AsyncIterator[ServerSentEvent]:
    """Per attempt ``sample.start`` (its round and what it repairs), ``sample.delta``,
    ``sample.done``, then ``sample.verification`` or ``sample.cancelled``; ``generation.done``
    (usage, timings, the chosen attempt), ``[DONE]``."""
    sent: dict[int, str] = {}
    done: set[int] = set()
    settled: set[int] = set()
    try:
        async for snapshot in follow(settings, created.id):
            if snapshot.status == GenerationStatus.FAILED:
                yield sse(_error_body(failure_error(snapshot)), event="error")
                break
            samples = snapshot.samples
            for sample in samples:
                index, text = sample.index, sample.text
                if index not in sent:
                    sent[index] = ""
                    yield sse(_generated(sample).model_dump(include=START_FIELDS), event="sample.start")
                if len(text) > len(sent[index]) and text.startswith(sent[index]):
                    yield sse({"index": index, "delta": text[len(sent[index]) :]}, event="sample.delta")
                    sent[index] = text
                if sample.finish_reason and index not in done:
                    done.add(index)
                    yield sse(_generated(sample).model_dump(include=DONE_FIELDS), event="sample.done")
                if sample.settled and index not in settled:
                    settled.add(index)
                    if sample.cancelled:
                        yield sse({"index": index}, event="sample.cancelled")
                    else:
                        verified = _generated(sample).model_dump(mode="json", include={"index", "verification"})
                        yield sse(verified, event="sample.verification")
            if snapshot.status == GenerationStatus.SUCCEEDED:
                yield sse(
                    {
                        "id": snapshot.id,
                        "usage": _usage(snapshot).model_dump(),
                        "timings": _timings(snapshot).model_dump(),
                        "chosen": chosen_attempt(samples),
                    },
                    event="generation.done",
                )
    except APIError as error:
        yield sse(_error_body(error), event="error")
    yield DONE


def _generate_request(settings: Settings, body: GenerateRequest, model_style: PromptStyle | None) -> GenerationRequest:
    """The stored request of ``/v1/generate``; 400 naming the field for what this server or the
    verification settings do not allow. ``model_style``: the prompt style the model recorded."""
    style: PromptStyle = body.prompt_style or model_style or "compact"
    _check_limits(settings, body.max_tokens, body.n)
    if body.verify != "none" and body.problem is None:
        raise bad_request(
            "verify needs a problem to check the kernels against; send problem instead of prompt.", param="verify"
        )
    if body.problem is not None and (issues := problem_issues(body.problem)):
        raise bad_request(
            "problem is not a KernelBench problem: "
            + "; ".join(str(issue) for issue in issues)
            + " (send free text as prompt instead)",
            param="problem",
        )
    searching = {
        "best_of": body.best_of is not None,
        "stop_at_first_pass": body.stop_at_first_pass,
        "repair_rounds": body.repair_rounds > 0,
    }
    for field, asked in searching.items():
        if asked and body.verify == "none":
            raise bad_request(
                f"{field} needs verification to tell passing kernels from failing ones; "
                "set verify to static, compile, cpu or gpu.",
                param=field,
            )
    if body.best_of is not None:
        if body.n != 1:
            raise bad_request("best_of and n both set the number of samples; send best_of alone.", param="best_of")
        if body.best_of > settings.max_samples_per_request:
            raise bad_request(
                f"best_of is {body.best_of}; this server allows at most {settings.max_samples_per_request} "
                "samples per request.",
                param="best_of",
            )
    if body.repair_rounds > settings.max_repair_rounds:
        raise bad_request(
            f"repair_rounds is {body.repair_rounds}; this server allows at most {settings.max_repair_rounds}.",
            param="repair_rounds",
        )
    messages = (
        build_messages(body.problem, style) if body.problem is not None else [{"role": "user", "content": body.prompt}]
    )
    return GenerationRequest(
        **(_decoding(body, body.max_tokens) | {"n": body.best_of or body.n}),
        form="chat",
        prompts=[messages],
        verify=body.verify,
        policy=body.policy,
        problem=body.problem,
        prompt_style=style,
        stop_at_first_pass=body.stop_at_first_pass,
        repair_rounds=body.repair_rounds,
    )


@router.post("/generate", response_model=GenerateResponse)
async def create_generation(
    body: GenerateRequest, http: Request, session: SessionDep, settings: SettingsDep, owner: OwnerDep
):
    """Kernels for a problem (or answers to a prompt), each with its code and, when asked, its
    verification; ``stream`` sends server-sent events as samples grow and get verified. With
    verification, ``best_of`` candidates are verified as they finish, ``stop_at_first_pass`` ends
    the request at the first passing one, and ``repair_rounds`` sends a failing one back to the
    model with its error; ``samples`` then lists every attempt and ``chosen`` the passing one."""
    spec = await run_in_threadpool(model_spec, session, settings, owner, body.model)
    request = _generate_request(settings, body, recorded_prompt_style(spec))
    prompt_param = "problem" if body.problem is not None else "prompt"
    await run_in_threadpool(check_context, settings, spec, request.prompts, request.max_tokens, prompt_param)
    created = await run_in_threadpool(
        _submit, session, settings, owner, body.model, GenerationKind.GENERATE, request, spec
    )
    if body.stream:
        return _event_stream(_generate_events(settings, created))
    done = await wait_answer(settings, created.id, http.is_disconnected)
    samples = done.samples
    return GenerateResponse(
        id=done.id,
        created=int(done.created_at),
        model=done.model,
        usage=_usage(done),
        samples=[_generated(s) for s in samples],
        chosen=chosen_attempt(samples) if body.verify != "none" else None,
        timings=_timings(done),
    )
