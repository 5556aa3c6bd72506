"""Binding a standalone .cu extension's `forward` to a KernelBench problem's inputs and weights."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from cuset_core.verify.execution.binding import (
    ArgSource,
    BindingError,
    CppParam,
    apply_binding,
    bind_extension,
    bound_function_name,
    forward_signature,
    init_arg_names,
    plan_binding,
    reference_layout,
)

CONV_CU = r"""
#include <torch/extension.h>
// torch::Tensor conv_forward(int nope);  a comment, not the definition
__global__ void k(const float* x) {}
torch::Tensor conv_forward(torch::Tensor x, torch::Tensor conv_weight,
                           torch::Tensor conv_bias, torch::Tensor bias) {
    return conv_forward_impl(x);
}
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("forward", &conv_forward, "conv + relu + bias");
}
"""

MLP_CU = r"""
torch::Tensor forward(
    torch::Tensor x,
    const std::vector<torch::Tensor>& weights,
    const std::vector<torch::Tensor>& biases) { return x; }
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward); }
"""


class ConvModel(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, bias_shape):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        return torch.relu(self.conv(x)) + self.bias


class ScaleModel(nn.Module):
    def __init__(self, features, scale):
        super().__init__()
        self.linear = nn.Linear(features, features)
        self.scale = scale

    def forward(self, x):
        return self.linear(x) * self.scale


def test_the_function_exported_as_forward_is_found_by_its_pybind_name():
    assert bound_function_name(CONV_CU) == "conv_forward"
    assert bound_function_name("torch::Tensor forward(torch::Tensor x) {}") == "forward"


def test_the_signature_is_read_from_the_definition_not_a_comment_or_call():
    params = forward_signature(CONV_CU)
    assert [(p.name, p.kind) for p in params] == [
        ("x", "tensor"),
        ("conv_weight", "tensor"),
        ("conv_bias", "tensor"),
        ("bias", "tensor"),
    ]


def test_vector_parameters_are_tensor_lists():
    assert [(p.name, p.kind) for p in forward_signature(MLP_CU)] == [
        ("x", "tensor"),
        ("weights", "tensor_list"),
        ("biases", "tensor_list"),
    ]


def test_a_missing_definition_is_a_binding_error():
    with pytest.raises(BindingError, match="no definition"):
        forward_signature('PYBIND11_MODULE(n, m) { m.def("forward", &fwd); }')


def test_conv_weights_bind_by_name_after_the_inputs():
    plan = plan_binding(forward_signature(CONV_CU), 1, ["conv.weight", "conv.bias", "bias"], [], ["training"])
    assert plan == [
        ArgSource("input", index=0),
        ArgSource("tensor", names=("conv.weight",)),
        ArgSource("tensor", names=("conv.bias",)),
        ArgSource("tensor", names=("bias",)),
    ]


def test_mlp_lists_collect_every_layers_weights_and_biases_in_order():
    names = ["net.0.weight", "net.0.bias", "net.2.weight", "net.2.bias"]
    plan = plan_binding(forward_signature(MLP_CU), 1, names, [], [])
    assert plan[1:] == [
        ArgSource("tensor_list", names=("net.0.weight", "net.2.weight")),
        ArgSource("tensor_list", names=("net.0.bias", "net.2.bias")),
    ]


def test_scalars_bind_to_init_arguments_then_attributes():
    params = [
        CppParam("torch::Tensor", "x", "tensor"),
        CppParam("torch::Tensor", "w", "tensor"),
        CppParam("double", "scale", "float"),
        CppParam("bool", "training", "bool"),
    ]
    plan = plan_binding(params, 1, ["linear.weight", "linear.bias"], ["features", "scale"], ["training"])
    assert plan[1:] == [
        ArgSource("tensor", names=("linear.weight",)),  # no name match: next tensor in order
        ArgSource("init", index=1),
        ArgSource("attr", names=("training",)),
    ]


def test_too_few_arguments_for_the_inputs_is_a_binding_error():
    with pytest.raises(BindingError, match="2 inputs"):
        plan_binding([CppParam("torch::Tensor", "a", "tensor")], 2, [], [], [])


def test_init_argument_names_skip_self():
    assert init_arg_names(ConvModel) == ["in_channels", "out_channels", "kernel_size", "bias_shape"]


def test_the_bound_model_calls_the_extension_with_inputs_then_the_shipped_reference_weights():
    calls = []

    def fake_forward(x, conv_weight, conv_bias, bias):
        calls.append((conv_weight, conv_bias, bias))
        return x

    torch.manual_seed(0)
    reference = ConvModel(3, 4, 3, (4, 1, 1))
    layout = reference_layout(reference)  # in the reference's process; only data crosses over
    assert layout.tensor_names == ["bias", "conv.weight", "conv.bias"]
    tensors = {name: t.detach().clone() for name, t in reference.named_parameters()}
    model = bind_extension(layout, tensors, [3, 4, 3, (4, 1, 1)], 1, CONV_CU, fake_forward)
    x = torch.randn(1, 3, 5, 5)
    assert model(x) is x
    assert [t.shape for t in calls[0]] == [torch.Size([4, 3, 3, 3]), torch.Size([4]), torch.Size([4, 1, 1])]
    assert torch.equal(calls[0][0], reference.conv.weight)


def test_apply_binding_reads_scalar_init_inputs_and_attributes():
    module = ScaleModel(2, 0.5)
    plan = [
        ArgSource("input", index=0),
        ArgSource("init", index=1),
        ArgSource("attr", names=("scale",)),
        ArgSource("none"),
    ]
    assert apply_binding(plan, ["x"], module, [2, 0.5]) == ["x", 0.5, 0.5, None]
