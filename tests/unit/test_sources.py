"""Finding CUDA sources in answers, and mapping them back to the answer's characters."""

from cuset_core.analysis.extract import first_code_block
from cuset_core.analysis.sources import find_kernel_sources

PY_ANSWER = '''Here is my kernel.
```python
import torch
from torch.utils.cpp_extension import load_inline

HEADER = "#include <torch/extension.h>\\n"
body = r"""
__global__ void scale(const float* x, float* y, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i];
}
"""
cuda_src = HEADER + body
ext = load_inline(name="scale_ext", cpp_sources="torch::Tensor scale(torch::Tensor x);",
                  cuda_sources=cuda_src, functions=["scale"])
```
Done.'''


def test_first_code_block_reports_where_the_body_starts():
    block = first_code_block("intro\n```python\nx = 1\n```\n")
    assert block.language == "python"
    assert block.code == "x = 1\n"
    assert block.closed


def test_unclosed_block_runs_to_the_end():
    block = first_code_block("```cuda\n__global__ void k() {}\n")
    assert block.code == "__global__ void k() {}\n"
    assert not block.closed


def test_load_inline_sources_resolve_through_names_and_concatenation():
    sources = find_kernel_sources(PY_ANSWER)
    assert sources.language == "python"
    (ext,) = sources.extensions
    assert ext.name == "scale_ext"
    assert ext.functions == ("scale",)
    assert ext.cuda.startswith("#include <torch/extension.h>\n\n__global__ void scale")
    assert ext.cpp == "torch::Tensor scale(torch::Tensor x);"
    assert sources.has_kernel


def test_every_resolved_character_maps_back_to_the_same_answer_character():
    sources = find_kernel_sources(PY_ANSWER)
    (ext,) = sources.extensions
    start = ext.cuda.index("blockIdx.x")
    (span,) = ext.cuda_map.span_to_answer(start, start + len("blockIdx.x"))
    assert PY_ANSWER[span[0] : span[1]] == "blockIdx.x"
    # An escaped "\n" in a plain literal maps to its backslash.
    newline = ext.cuda.index("\n")
    assert PY_ANSWER[ext.cuda_map.to_answer(newline)] == "\\"


def test_cu_answer_is_its_own_source():
    answer = "```cuda\n#include <torch/extension.h>\n__global__ void k(float* a) { a[threadIdx.x] = 0; }\n```"
    sources = find_kernel_sources(answer)
    assert sources.language == "cu"
    (ext,) = sources.extensions
    i = ext.cuda.index("threadIdx")
    assert answer[ext.cuda_map.to_answer(i) :].startswith("threadIdx")


def test_broken_python_is_reported_not_raised():
    sources = find_kernel_sources("```python\ndef f(:\n```")
    assert sources.extensions == ()
    assert sources.syntax_error.startswith("line 1")


def test_sources_built_at_run_time_are_listed_as_unresolved():
    answer = "```python\nsrc = open('k.cu').read()\next = load_inline(name='x', cpp_sources='', cuda_sources=src)\n```"
    sources = find_kernel_sources(answer)
    assert sources.unresolved == ("open('k.cu').read()",)
    assert not sources.has_kernel


def test_join_and_f_strings_resolve_through_names():
    answer = (
        "```python\n"
        'a = "__global__ void k1() {}"\n'
        'b = "__global__ void k2() {}"\n'
        'both = "\\n".join([a, b])\n'
        'src = f"#include <cuda.h>\\n{both}"\n'
        "ext = load_inline(name='x', cpp_sources='', cuda_sources=src)\n"
        "```"
    )
    (ext,) = find_kernel_sources(answer).extensions
    assert ext.cuda == "#include <cuda.h>\n__global__ void k1() {}\n__global__ void k2() {}"
    k2 = ext.cuda.index("k2")
    assert answer[ext.cuda_map.to_answer(k2) :].startswith("k2")


def test_unfenced_cuda_without_includes_is_cuda():
    sources = find_kernel_sources("__global__ void k(float* a) { a[0] = 1; }\n")
    assert sources.language == "cu"


def test_truncated_python_still_yields_its_kernel_strings():
    answer = '```python\nimport torch\nsrc = """\n__global__ void k(float* a) {\n  a[threadIdx.x] = 0;\n'
    sources = find_kernel_sources(answer)
    assert sources.syntax_error is not None
    (ext,) = sources.extensions
    i = ext.cuda.index("threadIdx")
    assert answer[ext.cuda_map.to_answer(i) :].startswith("threadIdx.x")


def test_keyword_values_span_the_argument_expression():
    (ext,) = find_kernel_sources(PY_ANSWER).extensions
    spans = {name: PY_ANSWER[start:end] for name, start, end in ext.keyword_values}
    assert spans["functions"] == '["scale"]'
    assert spans["cuda_sources"] == "cuda_src"


def test_an_extension_name_given_by_position_through_a_name_resolves_and_one_built_at_run_time_is_none():
    named = PY_ANSWER.replace('load_inline(name="scale_ext", ', "load_inline(EXT_NAME, ").replace(
        "cuda_src = ", 'EXT_NAME = "scale_ext"\ncuda_src = '
    )
    (ext,) = find_kernel_sources(named).extensions
    assert ext.name == "scale_ext"
    built = PY_ANSWER.replace('load_inline(name="scale_ext", ', 'load_inline(f"scale_{id(body)}", ')
    (ext,) = find_kernel_sources(built).extensions
    assert ext.name is None and ext.functions == ("scale",)
