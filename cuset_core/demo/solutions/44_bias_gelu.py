import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = """
#include <torch/extension.h>

__device__ __forceinline__ float gelu_tanh(float v) {
    const float k0 = 0.7978845608028654f;  // sqrt(2 / pi)
    const float k1 = 0.044715f;
    return 0.5f * v * (1.0f + tanhf(k0 * (v + k1 * v * v * v)));
}

// The bias broadcasts along rows: element i uses bias[i % features].
__global__ void bias_gelu_kernel(const float* __restrict__ x, const float* __restrict__ bias,
                                 float* __restrict__ y, int64_t n, int features) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = gelu_tanh(x[i] + bias[i % features]);
    }
}

torch::Tensor bias_gelu_cuda(torch::Tensor x, torch::Tensor bias) {
    TORCH_CHECK(x.is_cuda() && bias.is_cuda(), "inputs must be CUDA tensors");
    TORCH_CHECK(x.is_contiguous() && bias.is_contiguous(), "inputs must be contiguous");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32 && bias.scalar_type() == torch::kFloat32,
                "inputs must be float32");
    int features = (int)x.size(x.dim() - 1);
    TORCH_CHECK(bias.numel() == features, "bias must match the last dimension of x");

    auto y = torch::empty_like(x);
    int64_t n = x.numel();
    const int threads = 256;
    int64_t blocks = (n + threads - 1) / threads;
    if (n > 0) {
        bias_gelu_kernel<<<blocks, threads>>>(x.data_ptr<float>(), bias.data_ptr<float>(),
                                              y.data_ptr<float>(), n, features);
    }
    return y;
}
"""

cpp_source = "torch::Tensor bias_gelu_cuda(torch::Tensor x, torch::Tensor bias);"

bias_gelu = load_inline(
    name="bias_gelu",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["bias_gelu_cuda"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features) * 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return bias_gelu.bias_gelu_cuda(x, self.bias)
