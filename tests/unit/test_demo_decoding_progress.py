"""`cuset demo`'s kernel step shows what the decoding has written so far (issue 50, item 9): a
greedy answer takes minutes on a CPU, and a silent step reads as a stalled one."""

from io import StringIO

from rich.console import Console

from cuset_core.cli.demo import DecodingProgress


def test_in_a_log_it_writes_a_plain_line_at_most_every_interval():
    out = StringIO()
    with DecodingProgress(Console(file=out, force_terminal=False), every_s=0.0) as shown:
        assert shown.update("```cuda\n__global__ void k() {}\n")
        assert shown.update("```cuda\n__global__ void k() {}\n```\n")
    lines = out.getvalue().splitlines()
    assert [line.split(" after ")[0] for line in lines] == [
        "decoding: 2 lines, 31 characters",
        "decoding: 3 lines, 35 characters",
    ]
    assert all(line.endswith(" s") for line in lines)


def test_in_a_log_nothing_is_written_before_the_interval_has_passed():
    out = StringIO()
    with DecodingProgress(Console(file=out, force_terminal=False), every_s=3600.0) as shown:
        shown.update("some text")
    assert out.getvalue() == ""


def test_on_a_terminal_the_live_line_says_what_was_decoded_and_leaves_nothing_behind():
    out = StringIO()
    with DecodingProgress(Console(file=out, force_terminal=True, width=100), every_s=0.0) as shown:
        shown.update("line one\nline two")
        assert shown.bar.tasks[0].description == "decoding: 2 lines, 17 characters"
    assert "after" not in out.getvalue()  # no plain lines on a terminal


def test_the_shown_decoding_writes_the_answer_greedy_generation_writes(tiny_model_dir):
    from cuset_core.generation.prompts import build_messages, render_prompt
    from cuset_core.generation.sampling import generate, stream_decode
    from cuset_core.models import load_model

    model, tokenizer = load_model(tiny_model_dir)
    messages = build_messages("import torch\n", "compact")
    out = StringIO()
    with DecodingProgress(Console(file=out, force_terminal=False), every_s=0.0) as shown:
        streamed = stream_decode(
            model, tokenizer, render_prompt(tokenizer, messages), on_text=shown.update, max_new_tokens=12
        )
    [[batched]] = generate(model, tokenizer, [messages], max_new_tokens=12)
    assert streamed is not None and streamed.text == batched.text
    assert out.getvalue().startswith("decoding: ")
