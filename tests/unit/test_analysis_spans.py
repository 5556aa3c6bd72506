"""Sensitivity analysis on a suite of small kernels: which texts get which category and region."""

from __future__ import annotations

import pytest

from cuset_core.analysis.analyze import analyze_answer
from cuset_core.analysis.categories import Category
from cuset_core.analysis.spans import SCHEMA, Analysis, Region, Span
from cuset_core.demo import demo_problems


def texts(analysis: Analysis, category: Category) -> list[str]:
    return [span.text for span in analysis.spans if span.category == category]


def region_at(analysis: Analysis, answer: str, text: str) -> Region:
    """The region whose text is exactly ``text``."""
    matches = [r for r in analysis.regions if answer[r.start : r.end] == text]
    assert len(matches) == 1, [answer[r.start : r.end] for r in analysis.regions]
    return matches[0]


def region_of(analysis: Analysis, span: Span) -> Region:
    index = analysis.spans.index(span)
    return next(r for r in analysis.regions if index in r.span_indices)


def assert_consistent(analysis: Analysis, answer: str) -> None:
    """Spans quote the answer, are sorted and disjoint, and each lies in exactly one region."""
    for span in analysis.spans:
        assert answer[span.start : span.end] == span.text
    for left, right in zip(analysis.spans, analysis.spans[1:]):
        assert left.end <= right.start
    owners = sorted(i for region in analysis.regions for i in region.span_indices)
    assert owners == list(range(len(analysis.spans)))
    for region in analysis.regions:
        for i in region.span_indices:
            assert region.start <= analysis.spans[i].start < analysis.spans[i].end <= region.end


ELEMENTWISE = """#include <cuda_runtime.h>
__global__ void add(const float* a, const float* b, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        out[i] = a[i] + b[i];
    }
}
"""


def test_elementwise_kernel_has_qualifier_indexing_and_guard():
    analysis = analyze_answer(ELEMENTWISE)
    assert_consistent(analysis, ELEMENTWISE)
    assert analysis.language == "cu"
    assert analysis.parse_coverage == 1.0
    assert analysis.cuda_chars == len(ELEMENTWISE)
    assert texts(analysis, Category.QUALIFIER) == ["__global__"]
    assert texts(analysis, Category.INDEXING) == ["i", "blockIdx.x * blockDim.x + threadIdx.x", "i", "i", "i"]
    assert texts(analysis, Category.BOUNDS_GUARD) == ["i < n"]
    guard = region_at(analysis, ELEMENTWISE, "if (i < n)")
    assert (guard.kind, guard.category) == ("if_header", Category.BOUNDS_GUARD)
    signature = region_at(
        analysis, ELEMENTWISE, "__global__ void add(const float* a, const float* b, float* out, int n)"
    )
    assert (signature.kind, signature.category) == ("kernel_signature", Category.QUALIFIER)
    index = region_at(analysis, ELEMENTWISE, "int i = blockIdx.x * blockDim.x + threadIdx.x;")
    assert (index.kind, index.category) == ("declaration", Category.INDEXING)
    body = region_at(analysis, ELEMENTWISE, "out[i] = a[i] + b[i];")
    assert (body.kind, body.category) == ("statement", Category.INDEXING)


GRID_STRIDE = """```cuda
__global__ void scale(float* x, float s, int n) {
    int stride = blockDim.x * gridDim.x;
    for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < n; j += stride) x[j] *= s;
}
```
"""


def test_grid_stride_loop_header_is_one_region_with_its_guard():
    analysis = analyze_answer(GRID_STRIDE)
    assert_consistent(analysis, GRID_STRIDE)
    header = region_at(analysis, GRID_STRIDE, "for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < n; j += stride)")
    assert (header.kind, header.category) == ("loop_header", Category.BOUNDS_GUARD)
    assert [analysis.spans[i].text for i in header.span_indices] == [
        "j",
        "blockIdx.x * blockDim.x + threadIdx.x",
        "j < n",
        "j",
        "stride",
    ]
    assert "x[j] *= s;" in [GRID_STRIDE[r.start : r.end] for r in analysis.regions]


REDUCTION = """```cuda
__global__ void block_sum(const float* x, float* out, int n) {
    extern __shared__ float s[];
    unsigned int tid = threadIdx.x;
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    float sum = 0.0f;
    sum += (i < n) ? x[i] : 0.0f;
    s[tid] = sum;
    __syncthreads();
    for (unsigned int half = blockDim.x / 2; half > 0; half >>= 1) {
        if (tid < half) s[tid] += s[tid + half];
        __syncthreads();
    }
    if (tid == 0) atomicAdd(out, s[0]);
}
```
"""


def test_shared_memory_reduction():
    analysis = analyze_answer(REDUCTION)
    assert_consistent(analysis, REDUCTION)
    assert texts(analysis, Category.MEMORY_SPACE) == ["extern __shared__ float s[]"]
    assert texts(analysis, Category.SYNC) == ["__syncthreads()", "__syncthreads()"]
    assert texts(analysis, Category.ATOMIC) == ["atomicAdd(out, s[0])"]
    assert texts(analysis, Category.BOUNDS_GUARD) == ["i < n", "half > 0", "tid < half", "tid == 0"]
    # an accumulator fed from x[i] is data, not an index
    assert "sum" not in texts(analysis, Category.INDEXING)
    assert "tid + half" in texts(analysis, Category.INDEXING)
    shared = region_at(analysis, REDUCTION, "extern __shared__ float s[];")
    assert (shared.kind, shared.category) == ("declaration", Category.MEMORY_SPACE)
    ternary = region_at(analysis, REDUCTION, "sum += (i < n) ? x[i] : 0.0f;")
    assert (ternary.kind, ternary.category) == ("statement", Category.BOUNDS_GUARD)
    loop = region_at(analysis, REDUCTION, "for (unsigned int half = blockDim.x / 2; half > 0; half >>= 1)")
    assert loop.kind == "loop_header"
    assert region_at(analysis, REDUCTION, "atomicAdd(out, s[0]);").category == Category.ATOMIC


WARP = """```cuda
__device__ __forceinline__ float warp_sum(float v) {
    const unsigned mask = 0xffffffff;
    for (int offset = warpSize / 2; offset > 0; offset /= 2)
        v += __shfl_down_sync(0xffffffff, v, offset);
    unsigned any = __ballot_sync(mask, v > 0.0f);
    __syncwarp();
    return v;
}
```
"""


def test_warp_primitives_and_masks():
    analysis = analyze_answer(WARP)
    assert_consistent(analysis, WARP)
    assert texts(analysis, Category.QUALIFIER) == ["__device__", "__forceinline__"]
    assert texts(analysis, Category.WARP) == [
        "0xffffffff",
        "__shfl_down_sync(0xffffffff, v, offset)",
        "__ballot_sync(mask, v > 0.0f)",
    ]
    assert texts(analysis, Category.SYNC) == ["__syncwarp()"]
    shuffle = region_at(analysis, WARP, "v += __shfl_down_sync(0xffffffff, v, offset);")
    assert (shuffle.kind, shuffle.category) == ("statement", Category.WARP)
    signature = region_at(analysis, WARP, "__device__ __forceinline__ float warp_sum(float v)")
    assert signature.kind == "function_signature"


LAUNCH = """```cuda
torch::Tensor relu(torch::Tensor x) {
    auto out = torch::empty_like(x);
    int n = x.numel();
    const int threads = 256;
    int blocks = (n + threads - 1) / threads;
    size_t smem = threads * sizeof(float);
    relu_kernel<<<blocks, threads, smem>>>(x.data_ptr<float>(), out.data_ptr<float>(), n);
    return out;
}
```
"""


def test_launch_configuration_and_its_declarations():
    analysis = analyze_answer(LAUNCH)
    assert_consistent(analysis, LAUNCH)
    assert texts(analysis, Category.LAUNCH) == [
        "const int threads = 256",
        "int blocks = (n + threads - 1) / threads",
        "size_t smem = threads * sizeof(float)",
        "<<<blocks, threads, smem>>>",
    ]
    assert texts(analysis, Category.BINDING) == [
        "torch::Tensor",
        "torch::Tensor",
        "data_ptr<float>()",
        "data_ptr<float>()",
    ]
    launch = region_at(
        analysis,
        LAUNCH,
        "relu_kernel<<<blocks, threads, smem>>>(x.data_ptr<float>(), out.data_ptr<float>(), n);",
    )
    assert (launch.kind, launch.category) == ("launch", Category.LAUNCH)
    assert len(launch.span_indices) == 3


TILED = """```cuda
#define TILE 16
__global__ void __launch_bounds__(256) matmul(const float* __restrict__ A, const float* __restrict__ B,
                                               float* C, int M, int N, int K) {
    __shared__ float As[TILE][TILE + 1];
    int row = blockIdx.y * TILE + threadIdx.y;
    int col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.0f;
    for (int t = 0; t < (K + TILE - 1) / TILE; ++t) {
        As[threadIdx.y][threadIdx.x] = A[row * K + t * TILE + threadIdx.x];
        __syncthreads();
    }
    if (row < M && col < N) C[row * N + col] = acc;
}
void launch(const float* A, const float* B, float* C, int M, int N, int K) {
    dim3 block(TILE, TILE);
    dim3 grid((N + TILE - 1) / TILE, (M + TILE - 1) / TILE);
    matmul<<<grid, block>>>(A, B, C, M, N, K);
}
```
"""


def test_tiled_matmul_shared_tiles_dim3_and_compound_guard():
    analysis = analyze_answer(TILED)
    assert_consistent(analysis, TILED)
    assert texts(analysis, Category.QUALIFIER) == ["__global__", "__launch_bounds__(256)"]
    assert texts(analysis, Category.MEMORY_SPACE) == [
        "__restrict__",
        "__restrict__",
        "__shared__ float As[TILE][TILE + 1]",
    ]
    assert "row < M && col < N" in texts(analysis, Category.BOUNDS_GUARD)
    assert "row * K + t * TILE + threadIdx.x" in texts(analysis, Category.INDEXING)
    assert "row * N + col" in texts(analysis, Category.INDEXING)
    assert texts(analysis, Category.LAUNCH) == [
        "dim3 block(TILE, TILE)",
        "dim3 grid((N + TILE - 1) / TILE, (M + TILE - 1) / TILE)",
        "<<<grid, block>>>",
    ]
    guard = region_at(analysis, TILED, "if (row < M && col < N)")
    assert guard.category == Category.BOUNDS_GUARD


MEMORY_API = """#include <cuda_runtime.h>
__constant__ float coeffs[16];
int main() {
    float* d = nullptr;
    cudaMalloc(&d, 1024 * sizeof(float));
    cudaMemcpy(d, h, 1024 * sizeof(float), cudaMemcpyHostToDevice);
    cudaMemcpyToSymbol(coeffs, h, sizeof(coeffs));
    cudaDeviceSynchronize();
    cudaError_t err = cudaGetLastError();
    cudaFree(d);
    return 0;
}
"""


def test_runtime_memory_api_and_constant_memory():
    analysis = analyze_answer(MEMORY_API)
    assert_consistent(analysis, MEMORY_API)
    assert texts(analysis, Category.MEMORY_SPACE) == ["__constant__ float coeffs[16]"]
    assert texts(analysis, Category.MEMORY_API) == [
        "cudaMalloc(&d, 1024 * sizeof(float))",
        "cudaMemcpy(d, h, 1024 * sizeof(float), cudaMemcpyHostToDevice)",
        "cudaMemcpyToSymbol(coeffs, h, sizeof(coeffs))",
        "cudaDeviceSynchronize()",
        "cudaGetLastError()",
        "cudaFree(d)",
    ]
    error = region_at(analysis, MEMORY_API, "cudaError_t err = cudaGetLastError();")
    assert (error.kind, error.category) == ("declaration", Category.MEMORY_API)


BINDING = """```cuda
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
torch::Tensor forward(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
    auto y = torch::empty_like(x);
    auto stream = at::cuda::getCurrentCUDAStream();
    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "forward", ([&] {
        kernel<<<1, 256, 0, stream>>>(x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>());
    }));
    return y;
}
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("forward", &forward, "forward");
}
```
"""


def test_pytorch_binding():
    analysis = analyze_answer(BINDING)
    assert_consistent(analysis, BINDING)
    assert texts(analysis, Category.BINDING) == [
        "torch::Tensor",
        "forward",  # the definition of the function m.def exports
        "torch::Tensor",
        'TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor")',
        "AT_DISPATCH_FLOATING_TYPES",
        "data_ptr<scalar_t>()",
        "data_ptr<scalar_t>()",
        "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m)",
        'm.def("forward", &forward, "forward")',
    ]
    # the stream feeds the launch, so its declaration is launch configuration
    assert texts(analysis, Category.LAUNCH) == [
        "auto stream = at::cuda::getCurrentCUDAStream()",
        "<<<1, 256, 0, stream>>>",
    ]
    launch = region_at(
        analysis,
        BINDING,
        "kernel<<<1, 256, 0, stream>>>(x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>());",
    )
    assert (launch.kind, launch.category) == ("launch", Category.LAUNCH)


ALIGNED_SHARED = """```cuda
__global__ void k(float* out) {
    extern __shared__ __align__(sizeof(float)) unsigned char smem[];
    float* s = reinterpret_cast<float*>(smem);
    s[threadIdx.x] = 0.0f;
}
```
"""


def test_aligned_extern_shared_declaration_is_one_span():
    analysis = analyze_answer(ALIGNED_SHARED)
    assert_consistent(analysis, ALIGNED_SHARED)
    assert texts(analysis, Category.MEMORY_SPACE) == ["extern __shared__ __align__(sizeof(float)) unsigned char smem[]"]
    assert texts(analysis, Category.INDEXING) == ["threadIdx.x"]


PYTHON_ANSWER = '''Here is a fused kernel.

```python
import torch
from torch.utils.cpp_extension import load_inline

cuda_src = """
__global__ void add_kernel(const float* a, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + 1.0f;
}
torch::Tensor add_cuda(torch::Tensor a) {
    auto out = torch::empty_like(a);
    int n = a.numel();
    add_kernel<<<(n + 255) / 256, 256>>>(a.data_ptr<float>(), out.data_ptr<float>(), n);
    return out;
}
"""
cpp_src = "torch::Tensor add_cuda(torch::Tensor a);"

ext = load_inline(
    name="add_ext",
    cpp_sources=cpp_src,
    cuda_sources=cuda_src,
    functions=["add_cuda"],
    verbose=False,
)


class ModelNew(torch.nn.Module):
    def forward(self, a):
        return ext.add_cuda(a)
```
'''


def test_python_answer_spans_point_into_the_answer():
    analysis = analyze_answer(PYTHON_ANSWER)
    assert_consistent(analysis, PYTHON_ANSWER)
    assert analysis.language == "python"
    assert analysis.parse_coverage == 1.0
    guard = next(s for s in analysis.spans if s.category == Category.BOUNDS_GUARD)
    assert guard.text == "i < n"
    assert guard.start == PYTHON_ANSWER.index("i < n")
    assert texts(analysis, Category.LAUNCH) == ["int n = a.numel()", "<<<(n + 255) / 256, 256>>>"]
    # the cpp declaration is binding code, found inside its own string literal
    cpp_at = PYTHON_ANSWER.index('"torch::Tensor add_cuda') + 1
    assert any(s.start == cpp_at and s.text == "torch::Tensor" for s in analysis.spans)
    call_spans = [
        analysis.spans[i].text
        for region in analysis.regions
        if region.kind == "extension_call"
        for i in region.span_indices
    ]
    assert call_spans == [
        "load_inline",
        "name",
        '"add_ext"',
        "cpp_sources",
        "cuda_sources",
        "functions",
        '["add_cuda"]',
        "verbose",
    ]


def test_binding_identifiers_of_a_demo_solution_are_binding_spans():
    # A name that differs between the definition, the cpp declaration, functions=[...] or the
    # module's use breaks the build, so every occurrence the extension binds is sensitive.
    solution = next(p for p in demo_problems() if p.id == "06_sigmoid").solution_code
    analysis = analyze_answer(solution)
    assert_consistent(analysis, solution)
    binding = [s for s in analysis.spans if s.category == Category.BINDING]
    names = [s for s in binding if s.text == "sigmoid_cuda"]
    definition_at = solution.index("torch::Tensor sigmoid_cuda(torch::Tensor x) {") + len("torch::Tensor ")
    declaration_at = solution.index('"torch::Tensor sigmoid_cuda') + len('"torch::Tensor ')
    assert [s.start for s in names] == [definition_at, declaration_at]
    assert [region_of(analysis, s).kind for s in names] == ["function_signature", "declaration"]
    assert '"sigmoid_ext"' in [s.text for s in binding]
    assert '["sigmoid_cuda"]' in [s.text for s in binding]


def test_only_exported_functions_are_binding_identifiers():
    analysis = analyze_answer(PYTHON_ANSWER.replace('functions=["add_cuda"]', 'functions=["other"]'))
    assert "add_cuda" not in [s.text for s in analysis.spans]
    assert "add_kernel" not in [s.text for s in analyze_answer(PYTHON_ANSWER).spans]


ESCAPED = (
    "from torch.utils.cpp_extension import load_inline\n"
    'src = "__global__ void k(float* a) {\\n  int i = threadIdx.x +\\n      blockIdx.x * blockDim.x;\\n}"\n'
    'mod = load_inline(name="k", cpp_sources="", cuda_sources=src)\n'
)


def test_spans_across_escape_sequences_stay_whole():
    analysis = analyze_answer(ESCAPED)
    assert_consistent(analysis, ESCAPED)
    assert "threadIdx.x +\\n      blockIdx.x * blockDim.x" in texts(analysis, Category.INDEXING)


def test_truncated_kernel_is_analysed_as_far_as_it_parses():
    truncated = ELEMENTWISE[: ELEMENTWISE.index("out[i]")]
    analysis = analyze_answer(truncated)
    assert_consistent(analysis, truncated)
    assert 0.0 < analysis.parse_coverage < 1.0
    assert texts(analysis, Category.BOUNDS_GUARD) == ["i < n"]
    assert region_at(analysis, truncated, "if (i < n)").kind == "if_header"
    assert "blockIdx.x * blockDim.x + threadIdx.x" in texts(analysis, Category.INDEXING)


@pytest.mark.parametrize(
    "answer",
    [
        "",
        "no code here",
        "```cuda\n}}} {{{ <<< >>> __global__ (((\n```",
        "```python\ndef f(:\n```",
        "```cuda\n__global__ void k(float* a) { a[threadIdx.x] = \xe9\u00e9; if (threadIdx.x <",
        "```cuda\n" + "((" * 300 + "\n```",
    ],
)
def test_broken_answers_never_raise(answer):
    analysis = analyze_answer(answer)
    assert_consistent(analysis, answer)
    assert 0.0 <= analysis.parse_coverage <= 1.0


def test_garbage_cuda_reports_partial_coverage():
    analysis = analyze_answer("```cuda\n}}} {{{ <<< >>> __global__ (((\n```")
    assert analysis.parse_coverage < 1.0
    assert analysis.cuda_chars > 0


def test_answer_without_cuda_has_no_spans():
    analysis = analyze_answer("```python\nimport torch\nprint(torch.ones(3))\n```")
    assert (analysis.spans, analysis.regions, analysis.cuda_chars, analysis.parse_coverage) == ((), (), 0, 0.0)


def test_non_ascii_text_keeps_character_offsets():
    answer = "// größe: ü\n" + ELEMENTWISE
    analysis = analyze_answer(answer)
    assert_consistent(analysis, answer)
    assert texts(analysis, Category.BOUNDS_GUARD) == ["i < n"]


def test_json_form_is_stable():
    data = analyze_answer(ELEMENTWISE).to_json()
    assert list(data) == ["schema", "language", "cuda_chars", "parse_coverage", "spans", "regions"]
    assert data["schema"] == SCHEMA
    assert data["spans"][0] == {"start": 26, "end": 36, "category": "qualifier", "text": "__global__"}
    assert list(data["regions"][0]) == ["id", "start", "end", "kind", "category", "span_indices"]


def test_mapped_spans_join_across_escapes_but_not_across_literals():
    from cuset_core.analysis.analyze import map_span
    from cuset_core.analysis.sources import OffsetMap

    answer = 'x = "ab\\ncd" + "ef"'
    # source "ab\ncdef": a, b from 5..6, the newline from the backslash at 7, c, d from 9..10,
    # e, f from the second literal at 16..17
    offsets = OffsetMap(((0, 5, 2), (2, 7, 1), (3, 9, 2), (5, 16, 2)))
    assert map_span(offsets, 0, 5, answer) == [(5, 11)]
    assert answer[5:11] == "ab\\ncd"
    assert map_span(offsets, 3, 7, answer) == [(9, 11), (16, 18)]
