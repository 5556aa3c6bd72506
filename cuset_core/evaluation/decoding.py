"""Answers from a model: one greedy answer per problem when asked, drawn apart, and ``samples``
i.i.d. answers at ``temperature``, a batch of problems at a time, from a model loaded in this
process (:func:`model_decoder`) or any OpenAI-compatible endpoint (:func:`endpoint_decoder`,
``openai:URL#NAME``). Both are a :data:`Decode`."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from cuset_core.evaluation.config import EvalConfig
from cuset_core.evaluation.inputs import EvalInputError
from cuset_core.evaluation.problems import Problem
from cuset_core.generation.endpoint import is_endpoint_spec, parse_endpoint


class EvalEngineError(EvalInputError):
    """The endpoint that decodes the eval failed a request: ``url`` is the request's URL and
    ``status`` the HTTP status it answered (None: it could not be reached, or broke off)."""

    def __init__(self, message: str, *, url: str | None, status: int | None) -> None:
        super().__init__(message)
        self.url, self.status = url, status


@dataclass(frozen=True)
class Answer:
    """One answer to score: its text, whether it is the greedy one, and generation facts."""

    answer: str
    greedy: bool = False
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    finish_reason: str | None = None


Conversation = list[dict]


@dataclass(frozen=True)
class Run:
    """One decoding run: ``n`` answers per conversation at ``temperature`` (0: greedy)."""

    greedy: bool
    n: int
    temperature: float
    top_p: float

    def sampling(self) -> dict[str, Any]:
        return dict(n=self.n, temperature=self.temperature, top_p=self.top_p)


# The answers to each conversation of a batch, in order, for one run (``seed``: the run's seed).
Decode = Callable[[list[Conversation], Run, int], list[list[Answer]]]


def _runs(config: EvalConfig) -> list[Run]:
    """The decoding runs per problem, greedy first."""
    runs: list[Run] = []
    if config.greedy:
        runs.append(repair_run(config, greedy=True))
    if config.samples:
        runs.append(Run(False, config.samples, config.temperature, config.top_p))
    return runs


def repair_run(config: EvalConfig, *, greedy: bool) -> Run:
    """One answer per conversation, greedy or at the i.i.d. samples' temperature."""
    return Run(True, 1, 0.0, 1.0) if greedy else Run(False, 1, config.temperature, config.top_p)


def model_decoder(model, tokenizer, config: EvalConfig) -> Decode:
    """Answers from a model loaded in this process, one ``sampling.generate`` batch per call."""
    from cuset_core.generation.sampling import generate

    def decode(conversations: list[Conversation], run: Run, seed: int) -> list[list[Answer]]:
        generated = generate(
            model, tokenizer, conversations, max_new_tokens=config.max_new_tokens, seed=seed, **run.sampling()
        )
        return [
            [Answer(g.text, run.greedy, g.prompt_tokens, g.completion_tokens, g.finish_reason) for g in texts]
            for texts in generated
        ]

    return decode


def _model(config: EvalConfig) -> str:
    """The model answers are drawn from (an eval of given answers has none to draw from)."""
    if config.model is None:
        raise EvalInputError("model: answers are drawn from a model; give model")
    return config.model


@contextmanager
def decoder_for(config: EvalConfig, api_key: str | None) -> Iterator[Decode]:
    """The configured model's ``Decode``: the model loaded for this run, or an ``openai:``
    endpoint (:func:`endpoint_decoder`)."""
    spec = _model(config)
    if is_endpoint_spec(spec):
        with endpoint_decoder(config, api_key) as decode:
            yield decode
        return
    from cuset_core.models import load_model, place_for_inference, resolve_dtype

    model, tokenizer = load_model(spec, resolve_dtype(config.dtype))
    # generation dominates an eval's time; the GPU is what it is for
    yield model_decoder(place_for_inference(model), tokenizer, config)


@contextmanager
def endpoint_decoder(config: EvalConfig, api_key: str | None, *, supports_n: bool = True) -> Iterator[Decode]:
    """Answers from the ``openai:`` endpoint that ``config.model`` names: one chat request per
    conversation, ``batch_size`` requests in flight (``supports_n`` off: one per answer, see
    ``chat_answers``); ``EvalEngineError`` naming the URL and the status when a request fails."""
    import httpx

    from cuset_core.generation.endpoint import DEFAULT_TIMEOUT_S, EndpointError, chat_answers

    endpoint = replace(parse_endpoint(_model(config)), supports_n=supports_n)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    with (
        httpx.Client(headers=headers, timeout=DEFAULT_TIMEOUT_S) as client,
        ThreadPoolExecutor(max_workers=config.batch_size) as pool,
    ):

        def decode(conversations: list[Conversation], run: Run, seed: int) -> list[list[Answer]]:
            futures = [
                pool.submit(
                    chat_answers, client, endpoint, m, max_tokens=config.max_new_tokens, seed=seed, **run.sampling()
                )
                for m in conversations
            ]
            try:
                replies = [future.result() for future in futures]
            except EndpointError as exc:
                for future in futures:
                    future.cancel()
                raise EvalEngineError(str(exc), url=exc.url, status=exc.status) from None
            return [
                [Answer(a.text, run.greedy, a.prompt_tokens, a.completion_tokens, a.finish_reason) for a in answers]
                for answers in replies
            ]

        yield decode


def answers_for(decode: Decode, config: EvalConfig, problems: list[Problem]) -> dict[str, list[Answer]]:
    """Per problem, the greedy answer (when ``config.greedy``) then ``config.samples`` i.i.d.
    answers at ``config.temperature``, in one batch over ``problems`` (callers pass
    ``config.batch_size`` problems at a time, in set order, so seeds match run to run)."""
    from cuset_core.generation.prompts import build_messages

    out: dict[str, list[Answer]] = {p.id: [] for p in problems}
    messages = [build_messages(p.code, config.style) for p in problems]
    for run in _runs(config):
        for problem, answers in zip(problems, decode(messages, run, config.seed)):
            out[problem.id].extend(answers)
    return out
