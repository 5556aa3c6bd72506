"""A model served elsewhere behind an OpenAI-compatible API (vLLM, SGLang, TGI, llama.cpp server,
this project's own ``/v1``): the ``openai:URL#NAME`` model spec of ``cuset eval``.

``URL`` is the API's base URL as the ``openai`` client takes it (``http://host:8000/v1``) and
``NAME`` the served model's id; answers come from ``POST URL/chat/completions`` with the same
chat messages the in-process path renders.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx

OPENAI_PREFIX = "openai:"
DEFAULT_TIMEOUT_S = 600.0  # one request: n answers of up to max_tokens each


class EndpointError(ValueError):
    """The endpoint refused or failed a request; one line says which and why."""


@dataclass(frozen=True)
class Endpoint:
    """Where a served model answers: the API's base URL and the model's id there."""

    base_url: str
    model: str


@dataclass(frozen=True)
class EndpointAnswer:
    """One choice of a chat completion. Token counts come from the response's ``usage``, which
    covers the whole request: ``completion_tokens`` is known per answer only when n is 1."""

    text: str
    prompt_tokens: int | None
    completion_tokens: int | None
    finish_reason: str | None


def is_endpoint_spec(spec: str) -> bool:
    """Whether a model spec names an OpenAI-compatible endpoint (``openai:...``)."""
    return spec.startswith(OPENAI_PREFIX)


def parse_endpoint(spec: str) -> Endpoint:
    """``openai:URL#NAME`` as an ``Endpoint``; ValueError saying what is wrong otherwise."""
    body = spec.removeprefix(OPENAI_PREFIX)
    url, hash_sign, name = body.rpartition("#")
    expected = "expected openai:URL#NAME, e.g. openai:http://127.0.0.1:8000/v1#my-model"
    if not hash_sign or not name.strip() or not url:
        raise ValueError(f"model: {spec!r}: {expected}")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"model: {spec!r}: the URL must be http(s)://host[:port]/path; {expected}")
    return Endpoint(base_url=url.rstrip("/"), model=name.strip())


def chat_answers(
    client: httpx.Client,
    endpoint: Endpoint,
    messages: list[dict],
    *,
    n: int,
    temperature: float,
    top_p: float,
    max_tokens: int,
    seed: int | None,
) -> list[EndpointAnswer]:
    """``n`` answers to one chat conversation from ``endpoint`` (temperature 0: greedy), in choice
    order; ``EndpointError`` when the endpoint cannot be reached or answers with an error."""
    body = {
        "model": endpoint.model,
        "messages": messages,
        "n": n,
        "temperature": temperature,
        "top_p": top_p,
        "max_tokens": max_tokens,
        "seed": seed,
    }
    url = f"{endpoint.base_url}/chat/completions"
    try:
        response = client.post(url, json=body)
    except httpx.HTTPError as exc:
        raise EndpointError(f"model: cannot reach {url}: {exc}") from None
    if response.status_code != 200:
        raise EndpointError(f"model: {url} answered {response.status_code}: {_error_message(response)}")
    try:
        data = response.json()
        choices = sorted(data["choices"], key=lambda choice: choice["index"])
        answers = [(choice["message"]["content"] or "", choice.get("finish_reason")) for choice in choices]
    except (ValueError, KeyError, TypeError) as exc:
        raise EndpointError(f"model: {url} answered 200 without chat completion choices ({exc!r})") from None
    if len(answers) != n:
        raise EndpointError(f"model: {url} returned {len(answers)} choices for n={n}")
    usage = data.get("usage") or {}
    prompt_tokens = usage.get("prompt_tokens")
    completion_tokens = usage.get("completion_tokens") if n == 1 else None
    return [EndpointAnswer(text, prompt_tokens, completion_tokens, finish) for text, finish in answers]


@dataclass(frozen=True)
class EndpointDelta:
    """One streamed piece of a single answer: new text, and at the end why it ended; the token
    counts arrive with the usage chunk (``stream_options.include_usage``), if the server sends it."""

    text: str = ""
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


def stream_answer(
    client: httpx.Client,
    endpoint: Endpoint,
    prompt: list[dict] | str,
    *,
    temperature: float,
    top_p: float,
    max_tokens: int,
    seed: int | None,
    stop: list[str] | None = None,
) -> Iterator[EndpointDelta]:
    """One answer to ``prompt`` (a chat conversation, or a text for ``/completions``) streamed from
    ``endpoint`` as it is decoded. Closing the iterator early closes the connection, which tells
    the engine to stop decoding. ``EndpointError`` when the endpoint fails or sends an error."""
    chat = not isinstance(prompt, str)
    body = {
        "model": endpoint.model,
        ("messages" if chat else "prompt"): prompt,
        "temperature": temperature,
        "top_p": top_p,
        "max_tokens": max_tokens,
        "seed": seed,
        "stop": stop or None,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    body = {name: value for name, value in body.items() if value is not None}  # unset: the engine's default
    url = f"{endpoint.base_url}/{'chat/completions' if chat else 'completions'}"
    try:
        with client.stream("POST", url, json=body) as response:
            if response.status_code != 200:
                response.read()
                raise EndpointError(f"model: {url} answered {response.status_code}: {_error_message(response)}")
            for line in response.iter_lines():
                if not line.startswith("data:"):
                    continue  # blank separators, comments, event names
                data = line.removeprefix("data:").strip()
                if data == "[DONE]":
                    return
                yield _delta(url, data, chat)
    except httpx.HTTPError as exc:
        raise EndpointError(f"model: cannot reach {url}: {exc}") from None


def _delta(url: str, data: str, chat: bool) -> EndpointDelta:
    """One SSE ``data`` payload of an OpenAI stream as a delta of choice 0."""
    try:
        chunk = json.loads(data)
        error = chunk.get("error")
    except (ValueError, AttributeError) as exc:
        raise EndpointError(f"model: {url} streamed a chunk that is not JSON ({exc!r})") from None
    if error:
        raise EndpointError(f"model: {url} failed while streaming: {_message_of(error)}")
    try:
        usage = chunk.get("usage") or {}
        choice = (chunk.get("choices") or [{}])[0]
        text = (choice.get("delta") or {}).get("content") if chat else choice.get("text")
        return EndpointDelta(
            text=text or "",
            finish_reason=choice.get("finish_reason"),
            prompt_tokens=usage.get("prompt_tokens"),
            completion_tokens=usage.get("completion_tokens"),
        )
    except (ValueError, AttributeError, TypeError) as exc:
        raise EndpointError(f"model: {url} streamed a chunk that is not a completion chunk ({exc!r})") from None


def _message_of(error: object) -> str:
    """The message of an OpenAI error object, else the object as text."""
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return error["message"]
    return str(error)[:300]


def _error_message(response: httpx.Response) -> str:
    """The OpenAI error shape's message, else the start of the body."""
    try:
        error = response.json().get("error")
        if error:
            return _message_of(error)
    except (ValueError, AttributeError):
        pass
    return response.text[:300] or response.reason_phrase
