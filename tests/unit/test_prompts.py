"""Prompts: the one-shot and compact styles, and recovering the problem from a prompt."""

import pytest

from cuset_core.generation.prompts import (
    build_messages,
    compact_prompt,
    kernelbench_prompt,
    reference_from_question,
)

PROBLEM = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=self.dim)


def get_inputs():
    return [torch.randn(16, 1024)]


def get_init_inputs():
    return [1]"""


def test_the_kernelbench_prompt_shows_a_worked_example_then_the_problem():
    prompt = kernelbench_prompt(PROBLEM)
    assert "load_inline" in prompt and "__global__" in prompt and "class ModelNew" in prompt
    assert prompt.index("scaled_relu_kernel") < prompt.index("torch.softmax")
    assert f"```python\n{PROBLEM}\n```" in prompt


def test_the_compact_prompt_is_the_problem_and_one_instruction(tokenizer):
    prompt = compact_prompt(PROBLEM)
    assert prompt.endswith(f"```python\n{PROBLEM}\n```\n")
    overhead = len(tokenizer(prompt)["input_ids"]) - len(tokenizer(PROBLEM)["input_ids"])
    full_overhead = len(tokenizer(kernelbench_prompt(PROBLEM))["input_ids"]) - len(tokenizer(PROBLEM)["input_ids"])
    assert overhead <= 60
    assert full_overhead >= 10 * overhead


@pytest.mark.parametrize("build", [kernelbench_prompt, compact_prompt])
def test_the_problem_comes_back_out_of_either_prompt(build):
    assert reference_from_question(build(PROBLEM)) == PROBLEM
    assert reference_from_question(build("\n" + PROBLEM + "\n\n")) == PROBLEM


def test_a_bare_problem_file_is_its_own_reference():
    assert reference_from_question(PROBLEM + "\n") == PROBLEM


def test_text_without_a_model_class_has_no_reference():
    assert reference_from_question("Write a CUDA softmax.\n```python\nx = 1\n```") is None
    assert reference_from_question("Please rewrite class Model for speed") is None


def test_messages_for_generation_are_one_user_turn_in_the_chosen_style():
    assert build_messages(PROBLEM, "compact") == [{"role": "user", "content": compact_prompt(PROBLEM)}]
    assert build_messages(PROBLEM, "kernelbench")[0]["content"] == kernelbench_prompt(PROBLEM)


def test_an_unknown_style_is_refused():
    with pytest.raises(ValueError, match="unknown prompt style 'long'"):
        build_messages(PROBLEM, "long")
