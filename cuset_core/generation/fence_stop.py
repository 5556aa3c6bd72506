"""Stop decoding an answer once its first fenced code block is closed.

The prompts ask for one fenced code block and only the first block is scored
(:mod:`.extract`), so every token after the line that closes it is wasted decoding. The check
runs only when a row's newest token holds a newline (a closing fence line is complete only then),
and it decodes that row's generated tokens again, which costs little beside a decoding step.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import StoppingCriteria

from cuset_core.analysis.extract import closing_fence_end


class _NewlineTokens:
    """Which token ids decode to text holding a newline, looked up once per id."""

    def __init__(self, tokenizer) -> None:
        self._tokenizer = tokenizer
        self._known: dict[int, bool] = {}

    def __contains__(self, token: int) -> bool:
        if token not in self._known:
            self._known[token] = "\n" in self._tokenizer.decode([token])
        return self._known[token]


def fence_cut(tokens: Sequence[int], tokenizer) -> int | None:
    """How many leading ``tokens`` it takes to close the first fenced code block (its closing
    line with the newline that ends it), or None when they never close one."""
    if closing_fence_end(tokenizer.decode(tokens, skip_special_tokens=True)) is None:
        return None
    newlines = _NewlineTokens(tokenizer)
    for end, token in enumerate(tokens, start=1):
        if (
            token in newlines
            and closing_fence_end(tokenizer.decode(tokens[:end], skip_special_tokens=True)) is not None
        ):
            return end
    return None


class FenceStop(StoppingCriteria):
    """A ``model.generate`` stopping criterion: a watched row stops once the first fenced code
    block of its generated text is closed. ``watched[i]`` says whether row i of the batch (after
    ``num_return_sequences`` expansion) stops so; ``prompt_width`` is the (padded) prompt length
    in tokens, where generated tokens begin."""

    def __init__(self, tokenizer, prompt_width: int, watched: Sequence[bool]) -> None:
        self._tokenizer, self._width, self._watched = tokenizer, prompt_width, list(watched)
        self._newlines = _NewlineTokens(tokenizer)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs) -> torch.Tensor:
        closed = [
            watched
            and input_ids.shape[1] > self._width
            and int(row[-1]) in self._newlines
            and closing_fence_end(self._tokenizer.decode(row[self._width :], skip_special_tokens=True)) is not None
            for watched, row in zip(self._watched, input_ids)
        ]
        return torch.tensor(closed, dtype=torch.bool, device=input_ids.device)
