"""Encoded records supervise exactly the answer (and its end of turn) inside the chat template."""

from cuset_core.data import IGNORE_INDEX, Message, Record, encode_record
from cuset_core.data.encode import render_chat

ANSWER = "```cuda\n__global__ void k(float* x) { x[threadIdx.x] = 0.0f; }\n```"


def record(*prompt: Message) -> Record:
    return Record(messages=[*prompt, Message(role="assistant", content=ANSWER)], line=1)


USER = Message(role="user", content="Write a kernel that zeroes a block.")


def supervised_ids(encoded) -> list[int]:
    return [label for label in encoded.labels if label != IGNORE_INDEX]


def test_labels_cover_exactly_the_answer_and_the_end_of_turn(tokenizer):
    encoded = encode_record(record(USER), tokenizer)
    assert tokenizer.decode(supervised_ids(encoded)) == ANSWER + "<|im_end|>"
    supervised = [i for i, label in enumerate(encoded.labels) if label != IGNORE_INDEX]
    assert supervised == list(range(supervised[0], supervised[-1] + 1))  # one contiguous run
    assert encoded.offsets[supervised[0]][0] == encoded.answer_start
    assert encoded.offsets[supervised[-2]][1] == encoded.answer_end
    assert [encoded.labels[i] for i in supervised] == [encoded.input_ids[i] for i in supervised]


def test_answer_start_points_at_the_answer_inside_the_chat_template(tokenizer):
    encoded = encode_record(record(Message(role="system", content="Be terse."), USER), tokenizer)
    assert encoded.text[encoded.answer_start : encoded.answer_end] == ANSWER
    assert encoded.text.startswith("<|im_start|>system\nBe terse.<|im_end|>")
    assert encoded.text[: encoded.answer_start].endswith("<|im_start|>assistant\n")


def test_offsets_are_character_spans_of_each_token_in_the_text(tokenizer):
    encoded = encode_record(record(USER), tokenizer)
    assert len(encoded.offsets) == len(encoded.input_ids) == len(encoded.labels)
    rebuilt = "".join(encoded.text[a:b] for a, b in encoded.offsets)
    assert rebuilt == encoded.text
    assert tokenizer(rebuilt, add_special_tokens=False)["input_ids"] == encoded.input_ids


def test_only_the_last_assistant_turn_is_supervised(tokenizer):
    earlier = [USER, Message(role="assistant", content="An earlier reply."), USER]
    encoded = encode_record(record(*earlier), tokenizer)
    assert tokenizer.decode(supervised_ids(encoded)) == ANSWER + "<|im_end|>"


def test_truncation_keeps_the_first_max_tokens(tokenizer):
    full = encode_record(record(USER), tokenizer)
    cut = encode_record(record(USER), tokenizer, max_tokens=len(full.input_ids) - 5)
    assert cut.truncated and not full.truncated
    assert cut.input_ids == full.input_ids[:-5]
    assert cut.labels == full.labels[:-5]
    assert cut.text == full.text


class NoTemplate:
    """Wraps a tokenizer and hides its chat template, like a base model's tokenizer."""

    chat_template = None

    def __init__(self, inner):
        self.inner = inner

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def __call__(self, *args, **kwargs):
        return self.inner(*args, **kwargs)


def test_tokenizers_without_a_chat_template_get_a_plain_rendering(tokenizer):
    plain = NoTemplate(tokenizer)
    text, start = render_chat(record(USER), plain)
    assert text == f"### User\n{USER.content}\n\n### Assistant\n{ANSWER}<|im_end|>"
    assert text[start:].startswith(ANSWER)
    encoded = encode_record(record(USER), plain)
    assert tokenizer.decode(supervised_ids(encoded)) == ANSWER + "<|im_end|>"
