"""Compacted answers: the same program in fewer tokens (comments, redundant includes and build
chatter removed), still a working kernel."""

from __future__ import annotations

import ast

import pytest

from cuset_core.analysis.sources import find_kernel_sources
from cuset_core.data.compact import compact_answer
from cuset_core.demo import demo_problems
from cuset_core.verify.result import Tier, Verdict
from cuset_core.verify.run import verify
from cuset_core.verify.settings import SandboxLimits, VerifySettings

PROBLEMS = {problem.id: problem for problem in demo_problems()}

ANSWER = '''Here is the kernel.

```python
import torch  # the framework
from torch.utils.cpp_extension import load_inline

# The CUDA side.
source = """
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <cuda_fp16.h>
/* A block comment
   over two lines. */
__global__ void k(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;  // one thread per element
    if (i < n) y[i] = x[i] * 2.0f;  // "quotes" stay in code: "//" is not a comment here
}
torch::Tensor run(torch::Tensor x) {
    auto y = torch::empty_like(x);
    const char* tag = "// not a comment";
    k<<<(x.numel() + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
    return y;
}
"""

ext = load_inline(name="ext", cpp_sources="torch::Tensor run(torch::Tensor x);", cuda_sources=source,
                  functions=["run"], extra_cflags=[""], verbose=True)


class ModelNew(torch.nn.Module):
    def forward(self, x):
        return ext.run(x)  # launch
```
That is all.'''


def test_comments_redundant_includes_and_build_chatter_are_removed():
    compacted = compact_answer(ANSWER)
    for gone in (
        "# the framework",
        "# The CUDA side.",
        "A block comment",
        "// one thread",
        "# launch",
        "#include <cuda_runtime.h>",
        "verbose=True",
        'extra_cflags=[""]',
    ):
        assert gone not in compacted
    for kept in (
        "#include <torch/extension.h>",
        "#include <cuda_fp16.h>",
        'const char* tag = "// not a comment";',
        'functions=["run"]',
        "Here is the kernel.",
        "That is all.",
        "if (i < n) y[i] = x[i] * 2.0f;",
    ):
        assert kept in compacted


def test_the_compacted_code_parses_and_keeps_its_kernel_sources():
    compacted = compact_answer(ANSWER)
    sources = find_kernel_sources(compacted)
    ast.parse(sources.code)
    assert sources.has_kernel
    assert "__global__ void k(const float* x, float* y, int n) {" in sources.cuda
    assert "\n\n\n" not in sources.code  # no runs of blank lines left behind


def test_a_removed_comment_line_leaves_no_blank_line():
    compacted = compact_answer(ANSWER)
    assert '"""\n#include <torch/extension.h>\n#include <cuda_fp16.h>\n__global__' in compacted


def test_answers_that_do_not_parse_are_left_as_they_are():
    broken = "```python\ndef broken(:\n    pass  # comment\n```"
    assert compact_answer(broken) == broken
    assert compact_answer("no code at all") == "no code at all"


def test_compaction_is_idempotent_and_shortens_every_demo_solution():
    for problem in PROBLEMS.values():
        answer = f"```python\n{problem.solution_code}```"
        once = compact_answer(answer)
        assert compact_answer(once) == once, problem.id
        assert len(once) <= len(answer), problem.id
        ast.parse(find_kernel_sources(once).code)


@pytest.mark.slow
# One of each shape of code: a plain elementwise kernel, a shared-memory reduction, a tiled matmul.
@pytest.mark.parametrize("pid", ("03_gelu", "26_matmul_tiled"))  # elementwise, and shared memory
def test_compacted_demo_solutions_still_pass_tier_2(pid, tmp_path):
    problem = PROBLEMS[pid]
    compacted = compact_answer(f"```python\n{problem.solution_code}```")
    assert compacted != f"```python\n{problem.solution_code}```"  # something was removed
    settings = VerifySettings(tier=Tier.CPU, limits=SandboxLimits(wall_s=180, cpu_s=180))
    result = verify(problem.problem_code, compacted, settings, cache_dir=tmp_path)
    assert (result.verdict, result.tier) == (Verdict.PASS, Tier.CPU), result.reason
