"""Decoding ends after the line that closes the answer's first fenced code block: the text rule,
the stopping criterion step by step on real token ids, and the cut of a finished row."""

from __future__ import annotations

import pytest
import torch

from cuset_core.analysis.extract import closing_fence_end
from cuset_core.generation.fence_stop import FenceStop, fence_cut
from cuset_core.generation.sampling import completion_from_tokens

ANSWER = "Here is the kernel.\n```python\nimport torch\nx = 1\n```\nIt adds two vectors and then some more words."
CLOSED = ANSWER[: ANSWER.index("It adds")]


@pytest.mark.parametrize(
    ("text", "end"),
    [
        (ANSWER, len(CLOSED)),
        ("```python\nx = 1\n```", None),  # the closing line may still go on
        ("```python\nx = 1\n```py\n", None),  # a line with a tag does not close a block
        ("```python\nx = 1\n", None),
        ("no code at all\n", None),
        ("~~~\nx\n~~~  \nafter", len("~~~\nx\n~~~  \n")),
    ],
)
def test_a_block_is_closed_once_its_closing_fence_line_has_ended(text, end):
    assert closing_fence_end(text) == end


def test_the_criterion_stops_a_watched_row_at_the_token_ending_the_closing_fence(tokenizer):
    prompt = tokenizer.encode("Write a kernel.", add_special_tokens=False)
    answer = tokenizer.encode(ANSWER, add_special_tokens=False)
    closing = fence_cut(answer, tokenizer)
    criterion = FenceStop(tokenizer, len(prompt), watched=[True, False])

    stopped_at = []
    for step in range(1, len(answer) + 1):
        row = torch.tensor(prompt + answer[:step])
        stops = criterion(torch.stack([row, row]), torch.zeros(2, 8))
        assert not stops[1], "an unwatched row is never stopped by the fence"
        if stops[0]:
            stopped_at.append(step)

    assert stopped_at and stopped_at[0] == closing
    assert tokenizer.decode(answer[:closing]) == CLOSED
    assert closing < len(answer), "the words after the block are the tokens saved"


def test_a_finished_row_is_cut_after_its_closing_fence_and_counted_to_there(tokenizer):
    answer = tokenizer.encode(ANSWER, add_special_tokens=False)
    pad = tokenizer.pad_token_id
    row = answer[: fence_cut(answer, tokenizer)] + [pad, pad]  # generate() pads a stopped row

    cut = completion_from_tokens(row, 5, {tokenizer.eos_token_id}, tokenizer, stop_at_fence=True)
    whole = completion_from_tokens(answer, 5, {tokenizer.eos_token_id}, tokenizer)

    assert (cut.text, cut.finish_reason, cut.completion_tokens) == (CLOSED, "stop", fence_cut(answer, tokenizer))
    assert (whole.text, whole.finish_reason, whole.completion_tokens) == (ANSWER, "length", len(answer))


def test_an_answer_that_never_closes_its_block_runs_on(tokenizer):
    unclosed = tokenizer.encode("```python\nimport torch\nx = 1\n", add_special_tokens=False)
    assert fence_cut(unclosed, tokenizer) is None
    done = completion_from_tokens(unclosed, 0, set(), tokenizer, stop_at_fence=True)
    assert done.finish_reason == "length" and done.completion_tokens == len(unclosed)


class _Script:
    """Makes a tiny model's next-token choice follow a script per batch row while in use: a real
    ``model.generate`` loop (padding, per-row stopping) over answers known in advance. ``steps``
    counts the decoding steps taken."""

    def __init__(self, model, scripts: list[list[int]]) -> None:
        self.model, self.scripts, self.steps = model, scripts, 0
        self._forward = model.forward

    def __enter__(self) -> _Script:
        self.model.forward = self._scripted
        return self

    def __exit__(self, *exc) -> None:
        del self.model.forward  # the class's own forward again

    def _scripted(self, *args, **kwargs):
        out = self._forward(*args, **kwargs)
        logits = torch.full_like(out.logits, -1e4)
        for row, script in enumerate(self.scripts):
            logits[row, -1, script[min(self.steps, len(script) - 1)]] = 0.0
        self.steps += 1
        out.logits = logits
        return out


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    from cuset_core.models import load_model

    return load_model(tiny_model_dir)


def test_a_batch_stops_decoding_once_every_fenced_row_has_closed_its_block(tiny):
    from cuset_core.generation.sampling import generate

    model, tokenizer = tiny
    answers = [ANSWER, "```python\ny = 2\n```\nA long explanation follows here, token after token."]
    scripts = [tokenizer.encode(a, add_special_tokens=False) for a in answers]
    conversations = [[{"role": "user", "content": "Write a kernel."}], [{"role": "user", "content": "Another."}]]

    with _Script(model, scripts) as script:
        fenced = generate(model, tokenizer, conversations, max_new_tokens=60, stop_at_fence=True)
    with _Script(model, scripts) as unfenced_script:
        mixed = generate(model, tokenizer, conversations, max_new_tokens=60, stop_at_fence=[True, False])

    cuts = [fence_cut(s, tokenizer) for s in scripts]
    assert [[g.text for g in row] for row in fenced] == [[CLOSED], ["```python\ny = 2\n```\n"]]
    assert [row[0].completion_tokens for row in fenced] == cuts
    assert script.steps == max(cuts), "decoding ended when the last fenced row closed its block"
    assert mixed[0][0].text == CLOSED and mixed[0][0].finish_reason == "stop"
    assert mixed[1][0].text.startswith(answers[1]) and mixed[1][0].finish_reason == "length"
    assert unfenced_script.steps == 60
