"""Candidate texts and helpers shared by the verification tests."""

from __future__ import annotations

import time

KERNEL = '''
cuda_src = """
#include <torch/extension.h>
__global__ void relu_kernel(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;
}
torch::Tensor relu_cuda(torch::Tensor x) {
    auto y = torch::empty_like(x);
    int n = x.numel();
    relu_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""
cpp_src = "torch::Tensor relu_cuda(torch::Tensor x);"
'''

GOOD = (
    "import torch\nimport torch.nn as nn\nfrom torch.utils.cpp_extension import load_inline\n"
    + KERNEL
    + """
ext = load_inline(name="relu", cpp_sources=cpp_src, cuda_sources=cuda_src, functions=["relu_cuda"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.ext = ext

    def forward(self, x):
        return self.ext.relu_cuda(x.contiguous())
"""
)


def fenced(code: str, prose: str = "Here is the kernel.\n\n") -> str:
    return f"{prose}```python\n{code}```\n"


def line_of(text: str, needle: str) -> int:
    return text[: text.index(needle)].count("\n") + 1


def eventually(condition, seconds: float) -> bool:
    """Whether ``condition()`` holds within ``seconds`` (polled): a loaded machine is slow to
    start and to tear down a sandbox, and a fixed sleep would make the test flaky."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True
