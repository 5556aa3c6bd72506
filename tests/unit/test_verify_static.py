"""Tier 0 rejects what cannot be a working custom kernel, by AST alone, with candidate lines."""

from __future__ import annotations

import json

import pytest
from verify_cases import GOOD, KERNEL, fenced, line_of  # noqa: F401  (shared candidates)

from cuset_core.verify.candidate import parse_candidate
from cuset_core.verify.result import Tier, Verdict
from cuset_core.verify.source.static import check_static, static_warnings


def verdict(text: str):
    return check_static(parse_candidate(text))


def test_a_proper_candidate_passes_fenced_or_as_a_file():
    assert verdict(fenced(GOOD)) is None
    assert verdict(GOOD) is None


@pytest.mark.parametrize("text", ["", "   \n", "I cannot write this kernel, sorry.", "Sorry", "```python\n```"])
def test_no_code(text):
    result = verdict(text)
    assert (result.verdict, result.tier, result.tiers_run) == (Verdict.NO_CODE, Tier.STATIC, [Tier.STATIC])


def test_python_that_does_not_parse_is_rejected_at_its_line_in_the_answer():
    broken = GOOD.replace("def forward(self, x):", "def forward(self, x)")
    text = fenced(broken)
    result = verdict(text)
    assert result.verdict is Verdict.STATIC_REJECT
    assert result.diagnostics[0].line == line_of(text, "def forward(self, x)")
    assert "does not parse" in result.reason


def test_missing_model_new():
    result = verdict(fenced(GOOD.replace("class ModelNew", "class Fast")))
    assert (result.verdict, result.reason) == (Verdict.STATIC_REJECT, "no class ModelNew")


def test_no_load_inline():
    code = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x.relu()\n"
    result = verdict(fenced(code))
    assert result.verdict is Verdict.STATIC_REJECT
    assert result.reason == "no load_inline call: nothing is compiled"
    assert result.diagnostics[0].line == 5  # prose, blank, fence, import, class


def test_no_global_kernel():
    code = GOOD.replace("__global__ void", "void")
    text = fenced(code)
    result = verdict(text)
    assert result.reason == "no __global__ kernel in the load_inline sources"
    assert result.diagnostics[0].line == line_of(text, "ext = load_inline")


def test_unresolvable_sources():
    code = GOOD.replace("cuda_sources=cuda_src", "cuda_sources=open('k.cu').read()")
    result = verdict(fenced(code))
    assert result.verdict is Verdict.STATIC_REJECT
    assert result.reason.startswith("cannot resolve the kernel sources statically")


def test_try_except_fallback_around_the_kernel_call():
    code = GOOD.replace(
        "        return self.ext.relu_cuda(x.contiguous())",
        "        try:\n            return self.ext.relu_cuda(x)\n"
        "        except RuntimeError:\n            return torch.relu(x)",
    )
    text = fenced(code)
    result = verdict(text)
    assert result.verdict is Verdict.STATIC_REJECT
    assert "try/except" in result.reason
    assert result.diagnostics[0].line == line_of(text, "        try:")


def test_try_except_that_reraises_is_not_a_fallback():
    code = GOOD.replace(
        'ext = load_inline(name="relu", cpp_sources=cpp_src, cuda_sources=cuda_src, functions=["relu_cuda"])',
        "try:\n    "
        'ext = load_inline(name="relu", cpp_sources=cpp_src, cuda_sources=cuda_src, functions=["relu_cuda"])\n'
        "except Exception as exc:\n    raise RuntimeError('build failed') from exc",
    )
    assert verdict(fenced(code)) is None


def test_torch_doing_the_work_in_forward():
    code = GOOD.replace("return self.ext.relu_cuda(x.contiguous())", "return torch.nn.functional.relu(x)")
    text = fenced(code)
    result = verdict(text)
    assert result.verdict is Verdict.STATIC_REJECT
    assert result.reason == (
        "ModelNew.forward never calls the compiled extension; torch does the work "
        f"(torch.nn.functional.relu on line {line_of(text, 'return torch.nn')})"
    )


def test_calling_the_reference_model():
    code = GOOD.replace("        self.ext = ext\n", "        self.ext = ext\n        self.ref = Model()\n").replace(
        "return self.ext.relu_cuda(x.contiguous())", "return self.ext.relu_cuda(x) + 0 * self.ref(x)"
    )
    result = verdict(fenced(code))
    assert result.verdict is Verdict.STATIC_REJECT
    assert "calls the reference Model" in result.reason


def test_glue_passes_and_torch_ops_next_to_the_kernel_are_warnings():
    code = GOOD.replace(
        "return self.ext.relu_cuda(x.contiguous())",
        "y = torch.empty_like(x).view(-1)\n        n = x.size(0)\n"
        "        return torch.matmul(self.ext.relu_cuda(x.reshape(n, -1)), y)",
    )
    candidate = parse_candidate(fenced(code))
    assert check_static(candidate) is None
    warnings = [d.message for d in static_warnings(candidate)]
    assert warnings == ["torch op torch.matmul runs next to the kernel in forward"]


def test_kernel_reached_through_a_helper_and_an_autograd_function():
    code = GOOD.replace(
        "class ModelNew(nn.Module):",
        "def run(x):\n    return ext.relu_cuda(x)\n\n\nclass Op(torch.autograd.Function):\n"
        "    @staticmethod\n    def forward(ctx, x):\n        return run(x)\n\n\nclass ModelNew(nn.Module):",
    ).replace("return self.ext.relu_cuda(x.contiguous())", "return Op.apply(x)")
    assert verdict(fenced(code)) is None


def test_cu_candidate_needs_a_kernel_and_a_binding():
    cu = KERNEL.split('"""')[1] + '\nPYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &relu_cuda); }\n'
    assert verdict(f"```cpp\n{cu}```") is None
    result = verdict(f"```cpp\n{cu.replace('PYBIND11_MODULE', 'MODULE')}```")
    assert result.reason == "no PYBIND11_MODULE: the extension binds nothing"


@pytest.mark.parametrize(
    "allocation",
    [
        "float* tmp; cudaMalloc(&tmp, 4096);",
        "void* tmp; cudaMallocManaged(&tmp, 4096);",
        "CUdeviceptr tmp; cuMemAlloc_v2(&tmp, 4096);",
        'auto alloc = dlsym(RTLD_DEFAULT, "cudaMal" "loc");',
        "#define ALLOC(a, b) a##b\nfloat* tmp; ALLOC(cudaMal, loc)(&tmp, 4096);",
    ],
)
def test_device_memory_outside_torchs_allocator_is_rejected(allocation):
    # Tier 3 caps device memory through torch's allocator; a raw allocation would escape the cap.
    code = GOOD.replace("auto y = torch::empty_like(x);", f"auto y = torch::empty_like(x);\n    {allocation}")
    assert code != GOOD
    result = verdict(fenced(code))
    assert result.verdict is Verdict.STATIC_REJECT
    assert result.reason.startswith("the kernel source uses ") and "torch::empty" in result.reason
    cu = KERNEL.split('"""')[1].replace(
        "auto y = torch::empty_like(x);", f"auto y = torch::empty_like(x);\n{allocation}"
    )
    cu += '\nPYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &relu_cuda); }\n'
    assert verdict(f"```cpp\n{cu}```").verdict is Verdict.STATIC_REJECT


def test_result_is_json_serialisable():
    result = verdict(fenced(GOOD.replace("class ModelNew", "class Fast")))
    assert json.loads(json.dumps(result.model_dump(mode="json")))["verdict"] == "static_reject"


@pytest.mark.shared_data
def test_gpu_correct_kernelbench_answers_with_kernels_mostly_pass(shared_data):
    import pyarrow.parquet as pq

    answers = pq.read_table(shared_data / "kernelbench_sft_train.parquet", columns=["answer"]).column(0).to_pylist()
    with_kernel = [a for a in answers if "__global__" in a][:300]
    rejected = [verdict(a) for a in with_kernel]
    reasons = [r.reason for r in rejected if r is not None]
    # GPU-correct answers are rejected only when forward never uses the kernel (a torch rewrite).
    unexpected = [r for r in reasons if "never calls the compiled extension" not in r]
    assert len(unexpected) <= 3, unexpected


def test_super_forward_is_a_reference_call_only_in_a_model_new_that_subclasses_model():
    inherits = GOOD.replace("class ModelNew(nn.Module):", "class ModelNew(Model):").replace(
        "return self.ext.relu_cuda(x.contiguous())", "return self.ext.relu_cuda(super().forward(x))"
    )
    assert "calls the reference Model" in verdict(fenced(inherits)).reason
    submodule = (
        GOOD.replace(
            "class ModelNew(nn.Module):",
            "class Scaled(nn.Linear):\n    def forward(self, x):\n        return super().forward(x)\n\n\n"
            "class ModelNew(nn.Module):",
        )
        .replace("        self.ext = ext\n", "        self.ext = ext\n        self.fc = Scaled(4, 4)\n")
        .replace("return self.ext.relu_cuda(x.contiguous())", "return self.ext.relu_cuda(self.fc(x))")
    )
    assert verdict(fenced(submodule)) is None
