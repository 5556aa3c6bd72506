"""Sample answers from a causal LM: batched for chat conversations, or one at a time with its
growing text shown as it is decoded (``stream_decode``).

Temperature 0 means greedy decoding. Prompts are rendered with the tokenizer's chat template
(with the generation prompt) and left-padded so a batch decodes together.

Decoding can be stopped from outside (:class:`OutsideStop`): at a ``deadline`` (a wall-time cap:
the completions in progress end there with finish_reason ``length``), or for the conversations a
caller's ``ended`` check says nobody waits for any more (a request whose client left).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import torch
from transformers import StoppingCriteria, StoppingCriteriaList

from cuset_core.generation.fence_stop import FenceStop, fence_cut
from cuset_core.generation.prompts import render_prompt

FinishReason = Literal["stop", "length"]


@dataclass(frozen=True)
class GeneratedText:
    """One completion: its text (special tokens removed), token counts, and why it ended."""

    text: str
    prompt_tokens: int
    completion_tokens: int  # generated tokens, the stop token included
    finish_reason: FinishReason


def decoding_kwargs(temperature: float, top_p: float, max_new_tokens: int) -> dict:
    """Arguments of ``model.generate`` for greedy (temperature 0) or nucleus sampling."""
    if temperature < 0 or not 0 < top_p <= 1 or max_new_tokens < 1:
        raise ValueError(
            f"expected temperature >= 0, 0 < top_p <= 1 and max_new_tokens >= 1, "
            f"got {temperature}, {top_p}, {max_new_tokens}"
        )
    if temperature == 0:
        return {"do_sample": False, "max_new_tokens": max_new_tokens}
    return {"do_sample": True, "temperature": temperature, "top_p": top_p, "max_new_tokens": max_new_tokens}


def stop_token_ids(model, tokenizer) -> set[int]:
    """Token ids that end a completion: the tokenizer's EOS and the generation config's."""
    configured = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids = set(configured if isinstance(configured, list) else [configured] if configured is not None else [])
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    return ids


@contextlib.contextmanager
def seeded(seed: int | None, device: torch.device):
    """A context in which sampling draws from ``seed`` without disturbing the caller's RNG."""
    if seed is None:
        yield
        return
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(seed)
        yield


def completion_from_tokens(
    tokens: list[int], prompt_tokens: int, stop_ids: set[int], tokenizer, *, stop_at_fence: bool = False
) -> GeneratedText:
    """Cut a generated id row at its first stop token (or, with ``stop_at_fence``, after the line
    closing its first fenced code block, if that comes first) and decode it."""
    end = next((i for i, token in enumerate(tokens) if token in stop_ids), None)
    kept = tokens if end is None else tokens[:end]
    counted = len(tokens) if end is None else end + 1
    fence = fence_cut(kept, tokenizer) if stop_at_fence else None
    if fence is not None:
        kept, counted = kept[:fence], fence
    return GeneratedText(
        text=tokenizer.decode(kept, skip_special_tokens=True),
        prompt_tokens=prompt_tokens,
        completion_tokens=counted,
        finish_reason="length" if end is None and fence is None else "stop",
    )


@torch.no_grad()
def generate(
    model,
    tokenizer,
    messages_batch: list[list[dict]],
    *,
    n: int = 1,
    temperature: float = 0.0,
    top_p: float = 1.0,
    max_new_tokens: int = 512,
    seed: int | None = None,
    stop_at_fence: bool | Sequence[bool] = False,
    deadline: float | None = None,
    ended: Callable[[], Sequence[bool]] | None = None,
    check_every_s: float = 0.5,
) -> list[list[GeneratedText]]:
    """``n`` completions for each conversation, in input order: result[i][j] is sample j of
    conversation i. Greedy decoding (temperature 0) runs once and repeats its answer n times.
    ``stop_at_fence`` (for every conversation, or one flag each) ends a completion after the line
    closing its first fenced code block (:mod:`.fence_stop`). Past ``deadline`` (a
    ``time.monotonic()`` value) every completion still decoding ends with finish_reason
    ``length``; ``ended`` (asked every ``check_every_s``) gives one flag per conversation, True
    for those whose completions are not wanted any more: they stop there, the others go on."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if not messages_batch:
        return []
    fenced = [stop_at_fence] * len(messages_batch) if isinstance(stop_at_fence, bool) else list(stop_at_fence)
    if len(fenced) != len(messages_batch):
        raise ValueError(f"stop_at_fence has {len(fenced)} flags for {len(messages_batch)} conversations")
    kwargs = decoding_kwargs(temperature, top_p, max_new_tokens)
    device = next(model.parameters()).device
    prompts = [render_prompt(tokenizer, messages) for messages in messages_batch]
    encoded = tokenizer(prompts, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False)
    encoded = {key: value.to(device) for key, value in encoded.items()}
    per_prompt = n if kwargs["do_sample"] else 1
    width = encoded["input_ids"].shape[1]
    criteria = StoppingCriteriaList()
    if any(fenced):
        criteria.append(FenceStop(tokenizer, width, [flag for flag in fenced for _ in range(per_prompt)]))
    outside = OutsideStop(width, per_prompt, deadline=deadline, ended=ended, every_s=check_every_s)
    if deadline is not None or ended is not None:
        criteria.append(outside)
    was_training = model.training
    model.eval()
    with seeded(seed, device):
        output = model.generate(
            **encoded,
            **kwargs,
            num_return_sequences=per_prompt,
            stopping_criteria=criteria,
            pad_token_id=tokenizer.pad_token_id,
        )
    model.train(was_training)
    prompt_lengths = encoded["attention_mask"].sum(dim=1).tolist()
    stop_ids = stop_token_ids(model, tokenizer)
    # A row stopped from outside is padded after its last token: cut it there.
    rows = [row[: outside.stopped_at.get(k, len(row))] for k, row in enumerate(output[:, width:].tolist())]
    results = []
    for i, prompt_tokens in enumerate(prompt_lengths):
        samples = [
            completion_from_tokens(
                rows[i * per_prompt + j], prompt_tokens, stop_ids, tokenizer, stop_at_fence=fenced[i]
            )
            for j in range(per_prompt)
        ]
        results.append(samples * (n // per_prompt))
    return results


def stream_decode(
    model,
    tokenizer,
    prompt: str,
    *,
    on_text: Callable[[str], bool],
    temperature: float = 0.0,
    top_p: float = 1.0,
    max_new_tokens: int = 512,
    seed: int | None = None,
    stop_at_fence: bool = False,
    every_s: float = 0.0,
    deadline: float | None = None,
    on_stopped: Callable[[int, int], None] | None = None,
) -> GeneratedText | None:
    """Decode one completion of ``prompt`` (a rendered prompt: see :func:`cuset_core.generation.prompts.render_prompt`), handing
    ``on_text`` the text decoded so far (stopped at a stop token, without a half-decoded character
    at its end) at most every ``every_s`` seconds, in this thread. ``on_text`` answering False stops
    decoding at the next step, and the result is None; else the finished completion, cut as
    :func:`completion_from_tokens` cuts it (past ``deadline``, a ``time.monotonic()`` value, it
    ends there with finish_reason ``length``). When ``on_text`` stopped it, ``on_stopped`` (if
    given) gets the prompt's tokens and the tokens decoded until then, so usage can say what was
    decoded."""
    kwargs = decoding_kwargs(temperature, top_p, max_new_tokens)
    stop_ids = stop_token_ids(model, tokenizer)
    device = next(model.parameters()).device
    encoded = tokenizer([prompt], return_tensors="pt", add_special_tokens=False).to(device)
    width = encoded["input_ids"].shape[1]
    watcher = _TextWatcher(tokenizer, width, stop_ids, on_text, every_s)
    criteria = StoppingCriteriaList([watcher])
    if stop_at_fence:
        criteria.append(FenceStop(tokenizer, width, [True]))
    if deadline is not None:
        criteria.append(OutsideStop(width, 1, deadline=deadline))
    model.eval()
    with torch.no_grad(), seeded(seed, device):
        output = model.generate(**encoded, **kwargs, stopping_criteria=criteria, pad_token_id=tokenizer.pad_token_id)
    if watcher.stopped:
        if on_stopped is not None:
            on_stopped(width, output.shape[1] - width)
        return None
    return completion_from_tokens(output[0, width:].tolist(), width, stop_ids, tokenizer, stop_at_fence=stop_at_fence)


class _TextWatcher(StoppingCriteria):
    """Shows the growing text of one completion to ``on_text`` after decoding steps, and stops
    decoding once it answers False (a stopping criterion sees every step's ids, so no streamer
    thread is needed)."""

    def __init__(
        self, tokenizer, width: int, stop_ids: set[int], on_text: Callable[[str], bool], every_s: float
    ) -> None:
        self._tokenizer, self._width, self._stop_ids = tokenizer, width, stop_ids
        self._on_text, self._every_s = on_text, every_s
        self._last = time.monotonic()
        self.stopped = False

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs) -> torch.Tensor:
        if not self.stopped and time.monotonic() - self._last >= self._every_s:
            self._last = time.monotonic()
            tokens = input_ids[0, self._width :].tolist()
            text = completion_from_tokens(tokens, 0, self._stop_ids, self._tokenizer).text.rstrip("\ufffd")
            self.stopped = not self._on_text(text)
        return torch.full((input_ids.shape[0],), self.stopped, dtype=torch.bool, device=input_ids.device)


class OutsideStop(StoppingCriteria):
    """Stops rows of a batch for reasons outside the text: every row once ``time.monotonic()``
    passes ``deadline``, and the rows of each conversation that ``ended()`` (asked at most every
    ``every_s`` seconds, one flag per conversation; rows ``per_prompt`` to a conversation) marks.
    ``stopped_at`` maps each stopped row to the count of tokens it had decoded then (transformers
    pads a stopped row from there on)."""

    def __init__(
        self,
        width: int,
        per_prompt: int,
        *,
        deadline: float | None = None,
        ended: Callable[[], Sequence[bool]] | None = None,
        every_s: float = 0.5,
    ) -> None:
        self._width, self._per_prompt = width, per_prompt
        self._deadline, self._ended, self._every_s = deadline, ended, every_s
        self._last = time.monotonic()
        self.stopped_at: dict[int, int] = {}
        self.timed_out = False

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs) -> torch.Tensor:
        now = time.monotonic()
        rows = input_ids.shape[0]
        decoded = input_ids.shape[1] - self._width
        if self._deadline is not None and now >= self._deadline and not self.timed_out:
            self.timed_out = True
            for row in range(rows):
                self.stopped_at.setdefault(row, decoded)
        if self._ended is not None and now - self._last >= self._every_s:
            self._last = now
            for conversation, gone in enumerate(self._ended()):
                if gone:
                    for row in range(conversation * self._per_prompt, (conversation + 1) * self._per_prompt):
                        self.stopped_at.setdefault(row, decoded)
        done = [row in self.stopped_at for row in range(rows)]
        return torch.tensor(done, dtype=torch.bool, device=input_ids.device)
