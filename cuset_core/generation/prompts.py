"""Prompts for kernel generation: a full one-shot prompt, a compact one, the follow-up turn of a
repair round, and the way back.

A *problem* is KernelBench-format Python: ``class Model``, ``get_inputs()`` and
``get_init_inputs()``. The one-shot prompt teaches the answer format with a small worked example
of our own; the compact prompt states the format in one paragraph, which saves about a thousand
tokens per training sample. ``reference_from_question`` recovers the problem from either prompt
(or from a KernelBench question), so datasets can be re-prompted.
"""

from __future__ import annotations

import ast
import re
from typing import Literal

from cuset_core.analysis.extract import first_code_block
from cuset_core.verify.result import Verdict, VerifyResult

PromptStyle = Literal["kernelbench", "compact"]

_EXAMPLE_PROBLEM = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, alpha: float) -> None:
        super().__init__()
        self.alpha = alpha

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.alpha * torch.relu(x)


def get_inputs():
    return [torch.randn(4096)]


def get_init_inputs():
    return [0.5]"""

_EXAMPLE_SOLUTION = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

scaled_relu_cuda = r"""
#include <torch/extension.h>

__global__ void scaled_relu_kernel(const float* __restrict__ x, float* __restrict__ y,
                                   float alpha, long n) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i];
        y[i] = v > 0.0f ? alpha * v : 0.0f;
    }
}

torch::Tensor scaled_relu(torch::Tensor x, double alpha) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32, "x: float32 CUDA tensor");
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    long n = xc.numel();
    int threads = 256;
    int blocks = (int)((n + threads - 1) / threads);
    scaled_relu_kernel<<<blocks, threads>>>(xc.data_ptr<float>(), y.data_ptr<float>(),
                                            (float)alpha, n);
    return y;
}
"""

scaled_relu_cpp = "torch::Tensor scaled_relu(torch::Tensor x, double alpha);"

scaled_relu_ext = load_inline(
    name="scaled_relu_ext",
    cpp_sources=scaled_relu_cpp,
    cuda_sources=scaled_relu_cuda,
    functions=["scaled_relu"],
)


class ModelNew(nn.Module):
    def __init__(self, alpha: float) -> None:
        super().__init__()
        self.alpha = alpha

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return scaled_relu_ext.scaled_relu(x, self.alpha)'''

_TASK = (
    "Rewrite the PyTorch model below as `ModelNew`, replacing its operators with custom CUDA "
    "kernels built by `torch.utils.cpp_extension.load_inline`. Keep the constructor and "
    "`forward` signatures of `Model`; the result must match `Model` numerically."
)

_RULES = (
    "Answer with a single ```python code block holding the complete module: imports, the CUDA "
    "and C++ sources, the `load_inline` call and `class ModelNew`. No tests, no explanations, "
    "no fallback to the PyTorch operators."
)

_KERNELBENCH_TEMPLATE = """You are an expert CUDA engineer. {task}

You decide which operators to replace: one, several, or all of them fused into a single kernel.
Changing the algorithm is allowed (an online softmax, a tiled matmul, a warp-level reduction)
as long as the outputs stay the same.

Worked example. For this model:

```python
{example_problem}
```

a good answer is:

```python
{example_solution}
```

Now the model to rewrite:

```python
{problem}
```

{rules}
"""

_COMPACT_INSTRUCTION = (
    "Write `ModelNew`: this PyTorch `Model` with custom CUDA kernels via `load_inline`, "
    "same signatures and results. Reply with one ```python block."
)

_COMPACT_TEMPLATE = """{instruction}

```python
{problem}
```
"""

_MODEL_CLASS = re.compile(r"^class\s+Model\b", re.MULTILINE)


def kernelbench_prompt(problem_code: str) -> str:
    """The full one-shot prompt: task, rules and a worked ``load_inline`` example."""
    return _KERNELBENCH_TEMPLATE.format(
        task=_TASK,
        example_problem=_EXAMPLE_PROBLEM,
        example_solution=_EXAMPLE_SOLUTION,
        problem=problem_code.strip("\n"),
        rules=_RULES,
    )


def compact_prompt(problem_code: str) -> str:
    """A one-line instruction followed by the problem (a few dozen tokens of overhead)."""
    return _COMPACT_TEMPLATE.format(instruction=_COMPACT_INSTRUCTION, problem=problem_code.strip("\n"))


def prompt_for(problem_code: str, style: PromptStyle) -> str:
    """The user prompt for ``problem_code`` in the given style."""
    if style == "kernelbench":
        return kernelbench_prompt(problem_code)
    if style == "compact":
        return compact_prompt(problem_code)
    raise ValueError(f"unknown prompt style {style!r} (expected 'kernelbench' or 'compact')")


def build_messages(problem_code: str, style: PromptStyle) -> list[dict]:
    """Chat messages for generation; the same shape training records have (one user turn)."""
    return [{"role": "user", "content": prompt_for(problem_code, style)}]


def reference_from_question(question: str) -> str | None:
    """The reference architecture (``class Model`` ... ``get_init_inputs``) inside a prompt.

    It is the last fenced block that defines ``class Model`` (one-shot prompts show an example
    model first). Text without fences counts when it is itself Python defining ``class Model``.
    Returns None when there is no such code.
    """
    candidates = [code for code in _fenced_blocks(question) if _MODEL_CLASS.search(code)]
    if candidates:
        return candidates[-1].strip("\n").rstrip()
    if _MODEL_CLASS.search(question) and _parses(question):
        return question.strip("\n").rstrip()
    return None


def _fenced_blocks(text: str) -> list[str]:
    """Bodies of all fenced blocks of ``text``, in order."""
    blocks: list[str] = []
    position = 0
    while (block := first_code_block(text[position:])) is not None:
        blocks.append(block.code)
        body_end = position + block.start + len(block.code)
        # Skip the closing fence line, which would otherwise read as the next opening fence.
        newline = text.find("\n", body_end)
        if not block.closed or newline < 0:
            break
        position = newline + 1
    return blocks


def _parses(code: str) -> bool:
    try:
        ast.parse(code)
    except (SyntaxError, ValueError):
        return False
    return True


# Verdicts that blame the candidate, so a repair turn can help; unsupported and internal_error
# are the verifier's limits, and showing them to the model would not fix anything.
REPAIRABLE = frozenset(Verdict) - {Verdict.PASS, Verdict.UNSUPPORTED, Verdict.INTERNAL_ERROR}


def repairable(result: VerifyResult) -> bool:
    """Whether a verified attempt failed in a way a repair round can address (``REPAIRABLE``)."""
    return result.verdict in REPAIRABLE


REPAIR_ERROR_CHARS = 2000
"""At most this many characters of verifier output go into a repair prompt (the first errors
explain the rest, and a small model's context is short)."""

_REPAIR_TEMPLATE = """Your answer failed verification: {verdict}.

{error}

Fix it. Reply with the complete corrected module in one ```python block."""


def failure_report(result: VerifyResult, max_chars: int = REPAIR_ERROR_CHARS) -> str:
    """What the verifier said about a failed candidate, as plain text for the model: the reason,
    then the compiler's error diagnostics (``line N: message``), then the log, cut to ``max_chars``."""
    lines = [result.reason] if result.reason else []
    lines += [
        f"line {d.line}: {d.message}" if d.line else d.message for d in result.diagnostics if d.severity == "error"
    ]
    if result.log:
        lines.append(result.log)
    return "\n".join(lines)[:max_chars].rstrip() or "(the verifier gave no details)"


def repair_messages(messages: list[dict], answer: str, result: VerifyResult) -> list[dict]:
    """The follow-up conversation of a repair round: the original turns, the failed ``answer`` as
    the assistant's turn, and a user turn with the verifier's verdict and error asking for a fix.

    Only the latest failed answer is shown, so the prompt stays one answer long however many
    rounds came before."""
    feedback = _REPAIR_TEMPLATE.format(verdict=result.verdict.value.replace("_", " "), error=failure_report(result))
    return [*messages, {"role": "assistant", "content": answer}, {"role": "user", "content": feedback}]


def render_prompt(tokenizer, messages: list[dict]) -> str:
    """A conversation as the model's prompt text, ending where the assistant's answer starts."""
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
