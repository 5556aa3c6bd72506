"""A GPU's alignment rule for vector loads and stores on the CPU tier (issue 47, item 4): a
``float4``/``float2``/``int4`` (any vector type of two or four elements) read or written through an
address its alignment does not divide is a fault on a GPU ("misaligned address",
``cudaErrorMisalignedAddress``), which x86 never raises. Tier 2 reports it as ``runtime_error`` naming
CUDA's error, whichever road made the address: a cast of ``x + 1`` in the kernel, a byte offset, a
store, the binding's cast, a view Python hands over, shared memory. Honest vector code passes: a
``float4`` kernel over tensors from torch's allocator with the tail in scalars, and one that checks
the address and takes a scalar path.

Every candidate adds two vectors of ``N`` floats (``N`` not a multiple of 4); before this rule
every attack here passed tier 2. Marked slow: each builds an extension with g++.
"""

from __future__ import annotations

import gpu_rule_cases
import pytest

from cuset_core.verify.execution.library_cache import LibraryCache
from cuset_core.verify.result import Verdict, VerifyResult

pytestmark = pytest.mark.slow

CUDA = r"""
#include <torch/extension.h>
#include <cstdint>

// out = a + b from element `offset` on, four at a time through float4, the rest as scalars. With an
// offset that is not a multiple of 4 the float4 loads and stores are misaligned.
__global__ void add_vec4(const float* a, const float* b, float* out, int n, int offset) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int body = (n - offset) / 4;
    if (i < body) {
        float4 x = reinterpret_cast<const float4*>(a + offset)[i];
        float4 y = reinterpret_cast<const float4*>(b + offset)[i];
        reinterpret_cast<float4*>(out + offset)[i] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
    }
    int rest = offset + 4 * body;
    if (i < offset) out[i] = a[i] + b[i];
    if (i < n - rest) out[rest + i] = a[rest + i] + b[rest + i];
}

// The same through float2 loads by __ldg at a byte offset, scalar stores.
__global__ void add_vec2_bytes(const float* a, const float* b, float* out, int n, int byte_offset) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int skip = byte_offset / 4;
    int body = (n - skip) / 2;
    if (i < body) {
        float2 x = __ldg(reinterpret_cast<const float2*>(reinterpret_cast<const char*>(a) + byte_offset) + i);
        float2 y = __ldg(reinterpret_cast<const float2*>(reinterpret_cast<const char*>(b) + byte_offset) + i);
        out[skip + 2 * i] = x.x + y.x;
        out[skip + 2 * i + 1] = x.y + y.y;
    }
    int rest = skip + 2 * body;
    if (i < skip) out[i] = a[i] + b[i];
    if (i < n - rest) out[rest + i] = a[rest + i] + b[rest + i];
}

// Scalar loads; the sums leave as int4 stores (the bits of four floats) at out + 1.
__global__ void add_store_int4(const float* a, const float* b, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int body = (n - 1) / 4;
    if (i < body) {
        int j = 1 + 4 * i;
        int4 bits = make_int4(__float_as_int(a[j] + b[j]), __float_as_int(a[j + 1] + b[j + 1]),
                              __float_as_int(a[j + 2] + b[j + 2]), __float_as_int(a[j + 3] + b[j + 3]));
        *reinterpret_cast<int4*>(out + j) = bits;
    }
    int rest = 1 + 4 * body;
    if (i == 0) out[0] = a[0] + b[0];
    if (i < n - rest) out[rest + i] = a[rest + i] + b[rest + i];
}

// Takes float4 pointers: the binding decides where they point.
__global__ void add_vec4_ptrs(const float4* a4, const float4* b4, float4* out4, int count) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < count) {
        float4 x = a4[i], y = b4[i];
        out4[i] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
    }
}

__global__ void add_scalar(const float* a, const float* b, float* out, int from, int n) {
    int i = from + blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}

// Each block stages 260 floats of a in shared memory and reads 256 of them back as float4s from
// `offset` on (the elements before it as scalars); neighbouring blocks write the same sums twice.
__global__ void add_shared_vec4(const float* a, const float* b, float* out, int n, int offset) {
    __shared__ float tile[260];
    int base = blockIdx.x * 256;
    for (int j = threadIdx.x; j < 260; j += blockDim.x) tile[j] = base + j < n ? a[base + j] : 0.f;
    __syncthreads();
    if (threadIdx.x < offset && base + threadIdx.x < n) out[base + threadIdx.x] = tile[threadIdx.x] + b[base + threadIdx.x];
    if (threadIdx.x < 64) {
        float4 x = reinterpret_cast<const float4*>(tile + offset)[threadIdx.x];
        float v[4] = {x.x, x.y, x.z, x.w};
        int j = base + offset + 4 * threadIdx.x;
        for (int k = 0; k < 4; ++k)
            if (j + k < n) out[j + k] = v[k] + b[j + k];
    }
}

// Vector loads only where the addresses allow them, else scalars: honest on any view.
__global__ void add_vec4_if_aligned(const float* a, const float* b, float* out, int n) {
    bool aligned = (reinterpret_cast<uintptr_t>(a) | reinterpret_cast<uintptr_t>(b) |
                    reinterpret_cast<uintptr_t>(out)) % 16 == 0;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (!aligned) {
        for (int j = i; j < n; j += gridDim.x * blockDim.x) out[j] = a[j] + b[j];
        return;
    }
    int body = n / 4;
    if (i < body) {
        float4 x = reinterpret_cast<const float4*>(a)[i], y = reinterpret_cast<const float4*>(b)[i];
        reinterpret_cast<float4*>(out)[i] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
    }
    if (i < n - 4 * body) out[4 * body + i] = a[4 * body + i] + b[4 * body + i];
}

static int blocks(int n) { return (n + 255) / 256; }
#define SETUP auto out = torch::empty_like(a); int n = a.numel()
#define ARGS a.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), n

torch::Tensor vec4_from(torch::Tensor a, torch::Tensor b, int64_t offset) {
    SETUP; add_vec4<<<blocks(n), 256>>>(ARGS, offset);
    return out;
}
torch::Tensor vec2_bytes(torch::Tensor a, torch::Tensor b, int64_t byte_offset) {
    SETUP; add_vec2_bytes<<<blocks(n), 256>>>(ARGS, byte_offset);
    return out;
}
torch::Tensor store_int4(torch::Tensor a, torch::Tensor b) {
    SETUP; add_store_int4<<<blocks(n), 256>>>(ARGS);
    return out;
}
// The vector part from element `offset` on, as float4 pointers the binding makes; scalars around it.
torch::Tensor vec4_ptrs_from(torch::Tensor a, torch::Tensor b, int64_t offset) {
    SETUP;
    int count = (n - offset) / 4, rest = offset + 4 * count;
    const float* pa = a.data_ptr<float>();
    const float* pb = b.data_ptr<float>();
    float* po = out.data_ptr<float>();
    add_scalar<<<1, 256>>>(pa, pb, po, 0, offset);
    add_vec4_ptrs<<<blocks(count), 256>>>((const float4*)(pa + offset), (const float4*)(pb + offset),
                                          (float4*)(po + offset), count);
    add_scalar<<<1, 256>>>(pa, pb, po, rest, n);
    return out;
}
torch::Tensor shared_vec4(torch::Tensor a, torch::Tensor b, int64_t offset) {
    SETUP; add_shared_vec4<<<blocks(n), 256>>>(ARGS, offset);
    return out;
}
torch::Tensor vec4_if_aligned(torch::Tensor a, torch::Tensor b) {
    SETUP; add_vec4_if_aligned<<<blocks(n), 256>>>(ARGS);
    return out;
}
"""
FUNCTIONS = ["vec4_from", "vec2_bytes", "store_int4", "vec4_ptrs_from", "shared_vec4", "vec4_if_aligned"]
SIGNATURES = """
torch::Tensor vec4_from(torch::Tensor a, torch::Tensor b, int64_t offset);
torch::Tensor vec2_bytes(torch::Tensor a, torch::Tensor b, int64_t byte_offset);
torch::Tensor store_int4(torch::Tensor a, torch::Tensor b);
torch::Tensor vec4_ptrs_from(torch::Tensor a, torch::Tensor b, int64_t offset);
torch::Tensor shared_vec4(torch::Tensor a, torch::Tensor b, int64_t offset);
torch::Tensor vec4_if_aligned(torch::Tensor a, torch::Tensor b);
"""


def candidate(forward: str) -> str:
    return gpu_rule_cases.candidate("misaligned_ext", CUDA, SIGNATURES, FUNCTIONS, forward)


def returning(call: str) -> str:
    """A candidate whose forward returns ``ext.<call>``."""
    return candidate(f"        return ext.{call}")


def tier2(code: str, libraries: LibraryCache) -> VerifyResult:
    return gpu_rule_cases.tier2(code, libraries)


def assert_misaligned(result: VerifyResult, vector: str) -> None:
    assert result.verdict is Verdict.RUNTIME_ERROR, (result.verdict, result.reason, result.log[-2000:])
    assert "misaligned address (cudaErrorMisalignedAddress)" in result.reason, result.reason
    assert f"a {vector} loaded or stored" in result.reason, result.reason


# ---------------------------------------------------------------- the attack and its variations


@pytest.mark.parametrize(
    ("call", "vector"),
    [
        ("vec4_from(a, b, 1)", "float4"),  # the attack as found: float4 loads and stores of x + 1
        ("vec2_bytes(a, b, 4)", "float2"),  # another road: __ldg of float2 at a byte offset
        ("store_int4(a, b)", "int4"),  # another access: only the stores are vectors
        ("vec4_ptrs_from(a, b, 2)", "float4"),  # another layer: the binding casts, 8 bytes is not 16
        ("shared_vec4(a, b, 1)", "float4"),  # another memory: shared memory
    ],
)
def test_a_misaligned_vector_access_is_cudas_misaligned_address(libraries, call, vector):
    assert_misaligned(tier2(returning(call), libraries), vector)


def test_a_view_python_hands_to_a_vector_kernel_is_misaligned_too(libraries):
    # Another layer: the kernel and binding are honest, Python gives them a view 4 bytes into a buffer.
    forward = """        n = a.numel()
        staged = torch.empty(n + 4, device=a.device)
        staged[1 : n + 1].copy_(a)
        return ext.vec4_from(staged[1 : n + 1], b, 0)"""
    assert_misaligned(tier2(candidate(forward), libraries), "float4")


# ---------------------------------------------------------------- honest vector code


@pytest.mark.parametrize(
    "call",
    [
        "vec4_from(a, b, 0)",  # float4 over tensors from torch's allocator, the tail of 2 in scalars
        "vec4_from(a, b, 4)",  # four scalars first, then aligned float4s
        "vec2_bytes(a, b, 8)",  # float2 at a byte offset of 8
        "vec4_ptrs_from(a, b, 4)",  # the binding's casts at 16 bytes
        "shared_vec4(a, b, 0)",
    ],
)
def test_aligned_vector_accesses_pass(libraries, call):
    result = tier2(returning(call), libraries)
    assert result.verdict is Verdict.PASS, (result.verdict, result.reason, result.log[-2000:])


def test_a_kernel_that_checks_the_address_takes_its_scalar_path_on_a_misaligned_view(libraries):
    forward = """        n = a.numel()
        staged = torch.empty(n + 4, device=a.device)
        staged[1 : n + 1].copy_(a)
        return ext.vec4_if_aligned(staged[1 : n + 1], b)"""
    result = tier2(candidate(forward), libraries)
    assert result.verdict is Verdict.PASS, (result.verdict, result.reason, result.log[-2000:])
