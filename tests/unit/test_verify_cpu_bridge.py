"""Tier 2's torch bridge: extensions built against the light stand-in, torch run through Python."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import shutil
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from cuset_core.verify.cpu import build  # noqa: E402
from cuset_core.verify.cpu.build import (  # noqa: E402
    BuildError,
    built_with,
    compile_extension,
    prelude_named,
    prepare_preludes,
    toolchain,
    translation_unit,
)
from cuset_core.verify.cpu.torch_bridge import Options, call, resolvable  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="tier 2 needs g++")

# One extension exercising what candidates use: metadata, options, factories, generic methods and
# functions, operators, accessors, errors and the argument conversions of the bindings.
CUDA = r"""
#include <torch/extension.h>

__global__ void scale_kernel(const float* x, float* y, float factor, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * factor;
}

__global__ void row_sum_kernel(torch::PackedTensorAccessor32<float, 2, torch::RestrictPtrTraits> x, float* out) {
    int row = blockIdx.x;
    float total = 0.f;
    for (int j = 0; j < x.size(1); ++j) total += x[row][j];
    out[row] = total;
}

torch::Tensor scale(torch::Tensor x, double factor) {
    TORCH_CHECK(x.is_cuda() && x.is_contiguous(), "x must be a contiguous CUDA tensor");
    auto y = torch::empty_like(x);
    int64_t n = x.numel();
    scale_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), (float)factor, n);
    return y;
}

torch::Tensor row_sum(torch::Tensor x) {
    auto out = torch::zeros({x.size(0)}, torch::dtype(torch::kFloat32).device(x.device()));
    row_sum_kernel<<<x.size(0), 1>>>(x.packed_accessor32<float, 2, torch::RestrictPtrTraits>(), out.data_ptr<float>());
    return out;
}

torch::Tensor torch_ops(torch::Tensor x) {
    auto y = x.sum(1, true) + 2.0 * x.to(torch::kFloat64).mean().to(torch::kFloat32);
    auto z = at::gelu(y, "tanh");
    return torch::cat({z, -z}, 0).view({-1}).contiguous();
}

std::vector<int64_t> shape_of(torch::Tensor x, int64_t extra) {
    auto sizes = x.sizes().vec();
    sizes.push_back(extra);
    sizes.push_back(x.stride(0));
    sizes.push_back(x.dim());
    return sizes;
}
"""

CPP = r"""
torch::Tensor scale(torch::Tensor x, double factor);
torch::Tensor row_sum(torch::Tensor x);
torch::Tensor torch_ops(torch::Tensor x);
std::vector<int64_t> shape_of(torch::Tensor x, int64_t extra);

float first_float(torch::Tensor x) { return x.data_ptr<float>()[0]; }
void checked(int64_t value) { TORCH_CHECK(value > 0, "value must be positive, got ", value); }
std::tuple<torch::Tensor, int64_t> pair(torch::Tensor x, std::optional<int64_t> k) { return {x, k.value_or(-1)}; }

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("scale", &scale, "scale");
  m.def("row_sum", &row_sum);
  m.def("torch_ops", &torch_ops);
  m.def("shape_of", &shape_of, py::arg("x"), py::arg("extra"));
  m.def("first_float", &first_float);
  m.def("checked", &checked);
  m.def("pair", &pair);
  m.def("twice", [](torch::Tensor x) { return x * 2; });
}
"""


def _load(name: str, library: Path):
    loader = importlib.machinery.ExtensionFileLoader(name, str(library))
    spec = importlib.util.spec_from_file_location(name, library, loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def preludes():
    return prepare_preludes()


@pytest.fixture(scope="module")
def extension(preludes, tmp_path_factory):
    folder = tmp_path_factory.mktemp("bridge")
    unit = translation_unit("bridge_ext", CUDA, CPP, None)
    library = compile_extension("bridge_ext", unit, folder, preludes, toolchain())
    assert built_with(library) == "bridge"
    return _load("bridge_ext", library)


def test_a_kernel_built_on_the_bridge_computes_on_torch_tensors(extension):
    x = torch.randn(1000)
    assert torch.equal(extension.scale(x, 3.0), x * torch.tensor(3.0))
    m = torch.randn(7, 5)
    torch.testing.assert_close(extension.row_sum(m), m.sum(1))


def test_torch_operations_in_the_binding_are_torch_s_own(extension):
    x = torch.randn(4, 3)
    y = x.sum(1, keepdim=True) + 2.0 * x.double().mean().float()
    z = torch.nn.functional.gelu(y, approximate="tanh")
    torch.testing.assert_close(extension.torch_ops(x), torch.cat([z, -z], 0).view(-1))


def test_bindings_convert_arguments_and_results_as_pybind11_does(extension):
    x = torch.zeros(2, 6)
    assert extension.shape_of(x, 9) == [2, 6, 9, 6, 2]
    assert extension.shape_of(x=x, extra=1)[2] == 1
    assert extension.pair(x, None)[1] == -1 and extension.pair(x, 4)[1] == 4
    assert torch.equal(extension.twice(torch.ones(3)), torch.full((3,), 2.0))
    with pytest.raises(TypeError, match="incompatible function arguments"):
        extension.shape_of(x, 2.5)  # an int parameter takes no float
    with pytest.raises(TypeError):
        extension.scale("not a tensor", 1.0)


def test_checks_and_dtype_mismatches_raise_torch_s_messages(extension):
    with pytest.raises(RuntimeError, match="value must be positive, got -3"):
        extension.checked(-3)
    with pytest.raises(RuntimeError, match="expected scalar type Float but found Double"):
        extension.first_float(torch.zeros(2, dtype=torch.float64))
    with pytest.raises(RuntimeError, match="contiguous CUDA tensor"):
        extension.scale(torch.randn(4, 4).t(), 1.0)


def test_what_the_bridge_lacks_is_built_on_aten_s_headers(preludes, tmp_path):
    cuda = "#include <torch/extension.h>\ntorch::Tensor f(torch::Tensor x) { return x.index({0}); }\n"
    library = compile_extension(
        "lacking_ext", translation_unit("lacking_ext", cuda, "", ["f"]), tmp_path, preludes, toolchain()
    )
    assert built_with(library) == "light"
    assert torch.equal(_load("lacking_ext", library).f(torch.arange(6).view(2, 3)), torch.arange(3))


def test_an_extension_that_no_prelude_builds_reports_the_compiler(preludes, tmp_path):
    cuda = "#include <torch/extension.h>\ntorch::Tensor f(torch::Tensor x) { return undeclared(x); }\n"
    with pytest.raises(BuildError, match="undeclared"):
        compile_extension(
            "broken_ext", translation_unit("broken_ext", cuda, "", ["f"]), tmp_path, preludes, toolchain()
        )


def test_cpp_arguments_fill_keyword_only_parameters_in_schema_order():
    x = torch.randn(5)
    torch.testing.assert_close(call("gelu", (x, "tanh"), False), torch.nn.functional.gelu(x, approximate="tanh"))
    # C++ passes a reduction's dtype positionally; Python takes it by keyword.
    assert call("sum", (x, [0], False, torch.float64), True).dtype == torch.float64
    # TensorOptions become keyword arguments; a trailing nullopt is dropped.
    made = call("empty", ([2, 3], Options(dtype=7, device_kind=0)), False)
    assert made.shape == (2, 3) and made.dtype == torch.float64
    assert call("mean", (x, [0], False, None), True).shape == ()


def test_names_torch_cannot_run_are_left_to_aten_s_headers():
    assert resolvable("sum", method=True) and resolvable("empty", method=False)
    assert not resolvable("item_tensor", method=True)
    assert not resolvable("from_blob", method=False)


def test_a_typo_met_alike_under_two_preludes_is_not_tried_under_the_full_headers(preludes, tmp_path, monkeypatch):
    tried = []
    real_run = build._run

    def counting(command, workdir):
        if "-c" in command:
            tried.append(prelude_named(Path(command[command.index("-include") + 1]).parent).name)
        real_run(command, workdir)

    monkeypatch.setattr(build, "_run", counting)
    cuda = "#include <torch/extension.h>\ntorch::Tensor f(torch::Tensor x) { int n = 1 return x; }\n"
    with pytest.raises(BuildError, match="expected"):
        compile_extension("typo_ext", translation_unit("typo_ext", cuda, "", ["f"]), tmp_path, preludes, toolchain())
    assert tried == ["bridge", "light"]


def test_an_error_that_names_torch_is_tried_under_the_next_prelude_even_when_met_alike():
    nn_missing = "ext.cpp:3:12: error: 'nn' is not a member of 'torch'"
    typo = "ext.cpp:2:50: error: expected ',' or ';' before 'return'"
    assert not build._candidates_own(nn_missing, nn_missing)
    assert build._candidates_own(typo, typo)
    assert not build._candidates_own(typo, None)  # the first prelude's error alone proves nothing
