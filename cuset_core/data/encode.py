"""Turn a record into token ids and labels that supervise only the assistant answer.

The conversation is rendered to text first (with the tokenizer's chat template, or a plain
fallback for tokenizers without one) and tokenised with character offsets, so the analysis can
map CUDA-sensitive character spans of the answer to token positions in the same sequence.
"""

from __future__ import annotations

from dataclasses import dataclass

from cuset_core.data.records import Record

IGNORE_INDEX = -100  # label of positions that carry no loss (the transformers convention)


@dataclass(frozen=True)
class EncodedRecord:
    """A tokenised record; the three lists have one entry per token.

    ``labels`` equals ``input_ids`` on the answer tokens and its end-of-turn token and is
    ``IGNORE_INDEX`` elsewhere. ``offsets`` are half-open character spans of each token in
    ``text``; ``answer_start``/``answer_end`` delimit the answer in ``text``. When the record is
    truncated the lists stop at ``max_tokens`` while ``text`` stays whole.
    """

    input_ids: list[int]
    labels: list[int]
    offsets: list[tuple[int, int]]
    text: str
    answer_start: int
    answer_end: int
    truncated: bool = False

    @property
    def supervised(self) -> int:
        """Number of tokens that carry loss."""
        return sum(label != IGNORE_INDEX for label in self.labels)


def render_chat(record: Record, tokenizer) -> tuple[str, int]:
    """The full conversation as text and the character offset where the answer starts in it."""
    messages = [m.model_dump() for m in record.messages]
    if getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(messages, tokenize=False)
        prefix = tokenizer.apply_chat_template(messages[:-1], tokenize=False, add_generation_prompt=True)
    else:
        prefix = _plain_prompt(messages[:-1])
        text = prefix + record.answer + (tokenizer.eos_token or "")
    if text.startswith(prefix) and text.startswith(record.answer, len(prefix)):
        return text, len(prefix)
    # Templates that reshape the prefix (e.g. drop or merge turns) still embed the answer as is.
    start = text.rfind(record.answer)
    if start < 0:
        raise ValueError(f"line {record.line}: the chat template alters the answer text")
    return text, start


def encode_record(record: Record, tokenizer, max_tokens: int | None = None) -> EncodedRecord:
    """Tokenise ``record`` (a fast tokenizer is needed for offsets); keep at most ``max_tokens``."""
    text, answer_start = render_chat(record, tokenizer)
    answer_end = answer_start + len(record.answer)
    encoding = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    input_ids: list[int] = list(encoding["input_ids"])
    offsets = [(int(a), int(b)) for a, b in encoding["offset_mapping"]]
    end_of_turn = _end_of_turn_ids(tokenizer)
    labels = _answer_labels(input_ids, offsets, answer_start, answer_end, end_of_turn)
    truncated = max_tokens is not None and len(input_ids) > max_tokens
    if truncated:
        input_ids, labels = input_ids[:max_tokens], labels[:max_tokens]
        offsets = offsets[:max_tokens]
    return EncodedRecord(input_ids, labels, offsets, text, answer_start, answer_end, truncated)


def _answer_labels(
    input_ids: list[int],
    offsets: list[tuple[int, int]],
    answer_start: int,
    answer_end: int,
    end_of_turn: set[int],
) -> list[int]:
    """Labels for the tokens overlapping ``[answer_start, answer_end)`` plus the end-of-turn
    token right after the answer (so the model learns to stop)."""
    labels = [IGNORE_INDEX] * len(input_ids)
    last = -1
    for i, (start, end) in enumerate(offsets):
        if start < answer_end and end > answer_start:
            labels[i] = input_ids[i]
            last = i
    following = last + 1
    if 0 < following < len(input_ids) and input_ids[following] in end_of_turn:
        labels[following] = input_ids[following]
    return labels


def _end_of_turn_ids(tokenizer) -> set[int]:
    """Token ids that end an assistant turn: EOS and the tokenizer's special tokens."""
    ids = set(getattr(tokenizer, "all_special_ids", []) or [])
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    return ids


def _plain_prompt(messages: list[dict]) -> str:
    """A template-free rendering for tokenizers without a chat template."""
    turns = "".join(f"### {m['role'].capitalize()}\n{m['content']}\n\n" for m in messages)
    return turns + "### Assistant\n"
