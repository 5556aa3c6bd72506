"""Index arithmetic in integer types narrower than a problem's original sizes need
(``cuset_core/verify/source/narrow_index.py``): which variables count as indices, how types are read."""

from __future__ import annotations

import pytest

from cuset_core.verify.source.narrow_index import narrow_index

MILLION = 1 << 20  # the original problem's largest tensor, elements
BEYOND_INT = 1 << 32


def declared(source: str, needed: int) -> str | None:
    """``type name`` of the narrow index found, or None."""
    found = narrow_index(source, needed)
    if found is None:
        return None
    assert source[found.offset :].startswith(found.type), (found, source[found.offset : found.offset + 40])
    return f"{found.type} {found.name}"


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (
            "__global__ void k(const float* x, float* o, int n) {\n"
            "    short i = blockIdx.x * blockDim.x + threadIdx.x;\n"
            "    if (i < n) o[i] = x[i];\n}",
            "short i",
        ),
        (
            "__global__ void k(const float* x, float* o, int cols) {\n"
            "    double t = 0;\n"
            "    for (unsigned short c = 0; c < cols; ++c) t += x[blockIdx.x * cols + c];\n"
            "    o[blockIdx.x] = t;\n}",
            "unsigned short c",
        ),
        (  # through a typedef, a using alias and a macro, each to a narrow type
            "typedef int16_t idx_t;\n__global__ void k(float* o, int n) {\n"
            "    for (idx_t i = threadIdx.x; i < n; i += blockDim.x) o[i] = 0;\n}",
            "idx_t i",
        ),
        (
            "using row_t = unsigned char;\n__device__ float at(const float* x, int n) {\n"
            "    row_t r = blockIdx.y;\n    return x[r * n];\n}",
            "row_t r",
        ),
        (
            "#define IDX short\n__global__ void k(float* o, long n) {\n"
            "    IDX base = blockIdx.x;\n    IDX i = base * 256 + threadIdx.x;\n    o[i] = 0;\n}",
            "IDX base",
        ),
        (  # derived from another index two steps away
            "__global__ void k(float* o, int n) {\n    int g = blockIdx.x * blockDim.x;\n"
            "    int h = g + threadIdx.x;\n    short s;\n    s = h;\n    o[s] = 0;\n}",
            "short s",
        ),
        (  # a size argument itself too narrow
            "__global__ void k(float* o, short n) {\n    o[threadIdx.x] = n;\n}",
            "short n",
        ),
    ],
    ids=["grid index", "loop bound by a size", "typedef", "using", "macro", "derived", "size argument"],
)
def test_narrow_index_variables_are_found_with_their_declaration(source, expected):
    assert declared(source, MILLION) == expected


@pytest.mark.parametrize(
    "source",
    [
        "__global__ void k(const float* x, float* o, int n) {\n"
        "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) o[i] = x[i];\n}",
        "__global__ void k(const float* x, float* o, int64_t n) {\n"
        "    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;\n    if (i < n) o[i] = x[i];\n}",
        # bounded by the block or by a literal, not by the problem's sizes
        "__global__ void k(float* o, int n) {\n    short lane = threadIdx.x % 32;\n"
        "    for (short k = 0; k < 3; ++k) o[blockIdx.x * 3 + k] = lane;\n}",
        # host code is not a kernel's index arithmetic; a comment is not code
        "void host(int n) { short s = n; }\n// short i = blockIdx.x;\n__global__ void k(float* o) { o[threadIdx.x] = 0; }",
    ],
    ids=["int under 2^31", "size_t", "bounded by the block or a literal", "host code and comments"],
)
def test_honest_indices_pass(source):
    assert declared(source, MILLION) is None


def test_int_is_too_narrow_only_beyond_two_to_the_31_and_64_bit_types_never():
    kernel = (
        "__global__ void k(const float* x, float* o, {n} n) {{\n"
        "    {i} i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;\n    if (i < n) o[i] = x[i];\n}}"
    )
    assert declared(kernel.format(n="int", i="int"), MILLION) is None
    assert declared(kernel.format(n="int", i="int"), BEYOND_INT) == "int n"
    assert declared(kernel.format(n="int64_t", i="unsigned int"), BEYOND_INT) == "unsigned int i"
    assert declared(kernel.format(n="int64_t", i="long long"), BEYOND_INT) is None
