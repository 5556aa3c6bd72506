"""Tier 2 source rewrite and problem-size reduction: pure text/AST transformations."""

from __future__ import annotations

import ast

from cuset_core.verify.cpu.rewrite import (
    kernel_name,
    poison_static_shared,
    rewrite_extern_shared,
    rewrite_func_attributes,
    rewrite_launches,
    rewrite_racing_updates,
    rewrite_source,
    rewrite_torch_device,
    rewrite_volatile_pointers,
    unsupported_feature,
)
from cuset_core.verify.cpu.sizes import int_constants, plan_reduction, with_constants


def test_launch_becomes_a_counted_runtime_call_on_the_same_lines():
    code = "k<<<grid, 256, 0, stream>>>(\n    a, b);\nnext();"
    out = rewrite_launches(code)
    assert out.startswith('cuset::launch("k", dim3(grid), dim3( 256), (size_t)( 0), (cudaStream_t)( stream), ')
    assert "k(cuset_a...)" in out
    assert out.count("\n") == code.count("\n")
    assert out.endswith("\nnext();")


def test_templated_launch_keeps_its_template_arguments():
    out = rewrite_launches("reduce<scalar_t, 256><<<n, 256, smem>>>(x, y);")
    assert 'cuset::launch("reduce", dim3(n), dim3( 256), (size_t)( smem), (cudaStream_t)(0)' in out
    assert "reduce<scalar_t, 256>(cuset_a...)" in out
    assert out.endswith(", x, y);")


def test_launch_without_arguments():
    assert rewrite_launches("k<<<1, 1>>>();").endswith("{ k(cuset_a...); });")


def test_func_set_attribute_names_its_kernel_for_the_runtime_on_the_same_lines():
    code = "C10_CUDA_CHECK(cudaFuncSetAttribute(tiled<float, 4>,\n    cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));"
    out = rewrite_func_attributes(code)
    assert out.startswith('C10_CUDA_CHECK(cuset::func_set_attribute("tiled", tiled<float, 4>,')
    assert out.count("\n") == code.count("\n")


def test_kernel_name_sees_through_casts_namespaces_and_template_arguments():
    assert kernel_name("(const void*)ns::k") == "k"
    assert kernel_name("reinterpret_cast<const void*>(&ops::gemm<T, std::pair<int, int>>)") == "gemm"


def test_extern_shared_points_into_the_dynamic_buffer():
    out = rewrite_extern_shared("extern __shared__ __align__(16) float smem[];")
    assert out == "float* smem = reinterpret_cast<float*>(cuset::detail::dynamic_shared_storage);"


def test_static_shared_inside_a_kernel_is_filled_once_per_block():
    code = "__global__ void k() {\n  __shared__ float a[32], b[4][4];\n}"
    out = poison_static_shared(code)
    assert "cuset::poison_shared(&a, sizeof(a), cuset_shared_seen_1);" in out
    assert "cuset::poison_shared(&b, sizeof(b), cuset_shared_seen_2);" in out
    assert out.count("\n") == 2


def test_shared_at_namespace_scope_is_left_alone():
    code = "__shared__ float g[8];\nnamespace x { __shared__ int h; }"
    assert poison_static_shared(code) == code


def test_volatile_pointer_becomes_a_lockstep_pointer():
    assert rewrite_volatile_pointers("volatile float* vs = s;") == "cuset::VolatilePtr<float> vs = s;"
    assert rewrite_volatile_pointers("volatile unsigned int *p") == "cuset::VolatilePtr<unsigned int> p"


def test_torch_device_checks_map_to_the_cpu():
    code = 'TORCH_CHECK(x.is_cuda()); auto o = x.options().device(torch::kCUDA); y.to("cuda:0");'
    assert rewrite_torch_device(code) == (
        'TORCH_CHECK(x.is_cpu()); auto o = x.options().device(torch::kCPU); y.to("cpu");'
    )


def test_comments_cannot_hide_or_fake_a_launch():
    out = rewrite_source('// k<<<1, 1>>>();\nk<<<1, 1>>>(); /* "x" */')
    assert out.count("cuset::launch") == 1
    assert out.count("\n") == 1


def test_unsupported_features_are_named():
    assert unsupported_feature('asm volatile("mov.u32 %0, %%laneid;" : "=r"(x));') == "inline PTX (asm)"
    assert unsupported_feature("wmma::fragment<wmma::matrix_a, 16, 16, 16, half> a;") == "tensor cores (wmma/mma)"
    assert unsupported_feature("#include <cub/cub.cuh>") == "cub"
    assert unsupported_feature("namespace cg = cooperative_groups;") == "cooperative groups"
    assert unsupported_feature("float v = tex1Dfetch<float>(t, i);") == "textures/surfaces"
    assert unsupported_feature('// asm("trap;") in a comment only\nint x;') is None


PROBLEM = "batch_size = 16\ndim = 16384\nkernel_size = 3\nflag = True\nscale = 2.0\n"


def test_int_constants_are_the_module_level_int_literals():
    assert int_constants(ast.parse(PROBLEM)) == {"batch_size": 16, "dim": 16384, "kernel_size": 3}


def test_reduction_halves_the_largest_constant_until_the_budget_fits():
    def elements(overrides: dict[str, int]) -> int:
        sizes = {"batch_size": 16, "dim": 16384, "kernel_size": 3} | overrides
        return sizes["batch_size"] * sizes["dim"]

    plan = plan_reduction(int_constants(ast.parse(PROBLEM)), elements, 1 << 16)
    assert plan == {"dim": 4096}


def test_reduction_never_touches_small_constants_and_rounds_odd_ones_up():
    plan = plan_reduction({"k": 3, "odd": 1001, "c": 8}, lambda o: 10**9, 10)
    assert plan == {"odd": 8}


def test_odd_sizes_shrink_too():
    def elements(overrides: dict[str, int]) -> int:
        sizes = {"M": 8205, "K": 2949} | overrides
        return sizes["M"] * sizes["K"]

    assert plan_reduction({"M": 8205, "K": 2949}, elements, 1 << 18) == {"M": 513, "K": 369}


def test_overrides_rewrite_the_literals():
    tree = with_constants(ast.parse(PROBLEM), {"dim": 512})
    namespace: dict = {}
    exec(compile(tree, "problem.py", "exec"), namespace)
    assert (namespace["dim"], namespace["batch_size"]) == (512, 16)


def test_tier_reports_an_unsupported_feature_without_building():
    from cuset_core.verify.candidate import parse_candidate
    from cuset_core.verify.cpu import run_cpu_tier
    from cuset_core.verify.result import Tier, Verdict
    from cuset_core.verify.settings import VerifySettings

    answer = (
        "```cpp\n#include <torch/extension.h>\n#include <mma.h>\nusing namespace nvcuda;\n"
        # A use the compiled program keeps (unsupported comes from tier 1's PTX, not from the text).
        "__global__ void k(half* a, float* c) {\n"
        "  wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> fa;\n"
        "  wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::col_major> fb;\n"
        "  wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;\n"
        "  wmma::fill_fragment(fc, 0.0f); wmma::load_matrix_sync(fa, a, 16); wmma::load_matrix_sync(fb, a, 16);\n"
        "  wmma::mma_sync(fc, fa, fb, fc); wmma::store_matrix_sync(c, fc, 16, wmma::mem_row_major);\n"
        "}\n"
        "torch::Tensor forward(torch::Tensor x) { return x; }\n"
        'PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward); }\n```'
    )
    result = run_cpu_tier("", parse_candidate(answer), VerifySettings())
    assert (result.verdict, result.tier) == (Verdict.UNSUPPORTED, Tier.CPU)
    assert result.unsupported_feature == "tensor cores (wmma/mma)"


def test_read_modify_writes_of_elements_in_device_code_become_rmw_calls():
    source = """__device__ float twice(float v) { return v * 2; }
__global__ void k(float* out, const float* x, int* bins, float2* pairs, int n) {
    int i = threadIdx.x;
    float acc[4];
    for (int j = 0; j < 4; ++j) acc[j] += x[j];
    if (i < n) out[i / 4] += acc[0] * twice(x[i]);
    bins[i % 8]++;
    --bins[0];
    *out *= 2.0f;
    pairs[i].x -= 1;
    out[i] = out[i] + 1;
    s.a[i] += 1;
}
void host(float* h) { h[0] += 1; }
"""
    rewritten = rewrite_racing_updates(source)
    assert rewritten.count("\n") == source.count("\n")
    for expected in (
        "cuset::rmw(acc[j], ( x[j]), [](auto& cuset_a, auto&& cuset_b) { cuset_a += cuset_b; });",
        "if (i < n) cuset::rmw(out[i / 4], ( acc[0] * twice(x[i])), [](auto& cuset_a, auto&& cuset_b) { cuset_a += cuset_b; });",
        "cuset::rmw(bins[i % 8], 0, [](auto& cuset_a, int) { ++cuset_a; });",
        "cuset::rmw(bins[0], 0, [](auto& cuset_a, int) { --cuset_a; });",
        "cuset::rmw(*out, ( 2.0f), [](auto& cuset_a, auto&& cuset_b) { cuset_a *= cuset_b; });",
        "cuset::rmw(pairs[i].x, ( 1), [](auto& cuset_a, auto&& cuset_b) { cuset_a -= cuset_b; });",
        "    out[i] = out[i] + 1;",  # a plain assignment: left as written
        "    s.a[i] += 1;",  # a member of another object: left as written
        "void host(float* h) { h[0] += 1; }",  # host code: no threads to race
        "return v * 2;",
    ):
        assert expected in rewritten, expected
