"""A model served elsewhere behind an OpenAI-compatible API (vLLM, SGLang, TGI, llama.cpp server,
this project's own ``/v1``): the ``openai:URL#NAME`` model spec of ``cuset eval``.

``URL`` is the API's base URL as the ``openai`` client takes it (``http://host:8000/v1``) and
``NAME`` the served model's id; answers come from ``POST URL/chat/completions`` with the same
chat messages the in-process path renders.
"""

from __future__ import annotations

import json
from collections.abc import Generator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx

OPENAI_PREFIX = "openai:"
DEFAULT_TIMEOUT_S = 600.0  # one request: n answers of up to max_tokens each
MAX_SINGLE_REQUESTS = 8  # answers asked for at once, one request each, when an engine lacks n
# Engines (base URLs) seen refusing n > 1, or answering with fewer choices: per process, so each
# worker pays for the discovery once and then asks one answer per request straight away.
_LACKS_N: set[str] = set()


class EndpointError(ValueError):
    """The endpoint refused or failed a request; one line says which and why. ``url`` is the
    request's URL and ``status`` the HTTP status it answered (None: it was not reached, or it
    broke off)."""

    def __init__(self, message: str, *, url: str | None = None, status: int | None = None) -> None:
        super().__init__(message)
        self.url, self.status = url, status


@dataclass(frozen=True)
class Endpoint:
    """Where a served model answers: the API's base URL, the model's id there, and whether it
    honours ``n`` (several choices per request; llama.cpp's server and some TGI builds do not)."""

    base_url: str
    model: str
    supports_n: bool = True


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
    order; ``EndpointError`` when the endpoint cannot be reached or answers with an error.

    An engine without ``n`` (``supports_n`` off, or seen refusing ``n > 1`` with a 4xx or
    answering with fewer choices) is asked the missing answers one request each, up to
    ``MAX_SINGLE_REQUESTS`` at once, answer j with seed ``seed + j`` so they differ."""
    decoding = {"temperature": temperature, "top_p": top_p, "max_tokens": max_tokens}
    answers: list[EndpointAnswer] = []
    tried_n = n == 1 or (endpoint.supports_n and endpoint.base_url not in _LACKS_N)
    if tried_n:
        try:
            answers = _chat_request(client, endpoint, messages, decoding | {"n": n, "seed": seed})
        except EndpointError as exc:
            if n == 1 or not _refuses_n(exc.status):
                raise
        if len(answers) == n:
            return answers
    missing = range(len(answers), n)
    with ThreadPoolExecutor(max_workers=min(len(missing), MAX_SINGLE_REQUESTS)) as pool:
        singles = list(
            pool.map(
                lambda j: _chat_request(
                    client, endpoint, messages, decoding | {"n": 1, "seed": None if seed is None else seed + j}
                )[0],
                missing,
            )
        )
    if tried_n:  # the answers alone came back: it is n the engine lacks, not the request it refused
        _LACKS_N.add(endpoint.base_url)
    return answers + singles


def _refuses_n(status: int | None) -> bool:
    """Whether an error status may be an engine's refusal of ``n > 1``: a client error other than
    those that say nothing about the request's fields (key, model, rate)."""
    return status is not None and 400 <= status < 500 and status not in (401, 403, 404, 429)


def _chat_request(
    client: httpx.Client, endpoint: Endpoint, messages: list[dict], decoding: dict
) -> list[EndpointAnswer]:
    """One ``chat/completions`` request with ``decoding`` (n, seed, temperature, top_p,
    max_tokens): the choices it returned, in order (at most n; fewer when the engine ignores n)."""
    n = decoding["n"]
    body = {"model": endpoint.model, "messages": messages, **decoding}
    url = f"{endpoint.base_url}/chat/completions"
    try:
        response = client.post(url, json=body)
    except httpx.HTTPError as exc:
        raise EndpointError(f"model: cannot reach {url}: {_connection_error(exc)}", url=url) from None
    if response.status_code != 200:
        raise EndpointError(
            f"model: {url} answered {response.status_code}: {_error_message(response)}",
            url=url,
            status=response.status_code,
        )
    try:
        data = response.json()
        choices = sorted(data["choices"], key=lambda choice: choice["index"])
        answers = [(choice["message"]["content"] or "", choice.get("finish_reason")) for choice in choices]
    except (ValueError, KeyError, TypeError) as exc:
        raise EndpointError(
            f"model: {url} answered 200 without chat completion choices ({exc!r})", url=url, status=200
        ) from None
    if not answers or len(answers) > n:
        raise EndpointError(f"model: {url} returned {len(answers)} choices for n={n}", url=url, status=200)
    usage = data.get("usage") or {}
    prompt_tokens = usage.get("prompt_tokens")
    completion_tokens = usage.get("completion_tokens") if len(answers) == 1 else None
    return [EndpointAnswer(text, prompt_tokens, completion_tokens, finish) for text, finish in answers]


def _connection_error(exc: httpx.HTTPError) -> str:
    """What went wrong on the wire: the error's class (ConnectError, ReadTimeout, ...) and text."""
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


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
) -> Generator[EndpointDelta, None, None]:
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
                raise EndpointError(
                    f"model: {url} answered {response.status_code}: {_error_message(response)}",
                    url=url,
                    status=response.status_code,
                )
            for line in response.iter_lines():
                if not line.startswith("data:"):
                    continue  # blank separators, comments, event names
                data = line.removeprefix("data:").strip()
                if data == "[DONE]":
                    return
                yield _delta(url, data, chat)
    except httpx.HTTPError as exc:
        raise EndpointError(f"model: cannot reach {url}: {_connection_error(exc)}", url=url) from None


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
