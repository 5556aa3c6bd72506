import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = """
#include <torch/extension.h>

#define THREADS 256

__device__ float block_sum(float v) {
    __shared__ float warp_sums[32];
    int lane = threadIdx.x & 31;
    int warp = threadIdx.x >> 5;
    for (int offset = 16; offset > 0; offset >>= 1) {
        v += __shfl_down_sync(0xffffffff, v, offset);
    }
    if (lane == 0) {
        warp_sums[warp] = v;
    }
    __syncthreads();
    float total = 0.0f;
    for (int w = 0; w < THREADS / 32; ++w) {
        total += warp_sums[w];
    }
    __syncthreads();  // warp_sums is reused by the next call
    return total;
}

// One block per row: the sum x + residual is written to y in the first pass and
// normalised in place, so the intermediate sum is never a separate tensor.
__global__ void add_layernorm_kernel(const float* __restrict__ x, const float* __restrict__ residual,
                                     const float* __restrict__ gamma, const float* __restrict__ beta,
                                     float* __restrict__ y, int features, float eps) {
    int64_t offset = (int64_t)blockIdx.x * features;
    const float* xr = x + offset;
    const float* rr = residual + offset;
    float* yr = y + offset;

    float sum = 0.0f;
    for (int i = threadIdx.x; i < features; i += THREADS) {
        float h = xr[i] + rr[i];
        yr[i] = h;
        sum += h;
    }
    float mean = block_sum(sum) / features;

    float sq = 0.0f;
    for (int i = threadIdx.x; i < features; i += THREADS) {
        float d = yr[i] - mean;
        sq += d * d;
    }
    float inv_std = rsqrtf(block_sum(sq) / features + eps);

    for (int i = threadIdx.x; i < features; i += THREADS) {
        yr[i] = (yr[i] - mean) * inv_std * gamma[i] + beta[i];
    }
}

torch::Tensor add_layernorm_cuda(torch::Tensor x, torch::Tensor residual, torch::Tensor gamma,
                                 torch::Tensor beta, double eps) {
    TORCH_CHECK(x.is_cuda() && residual.is_cuda() && gamma.is_cuda() && beta.is_cuda(),
                "inputs must be CUDA tensors");
    TORCH_CHECK(x.is_contiguous() && residual.is_contiguous() && gamma.is_contiguous() &&
                beta.is_contiguous(), "inputs must be contiguous");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "x must be float32");
    TORCH_CHECK(x.numel() == residual.numel(), "x and residual must have the same shape");
    int features = (int)x.size(x.dim() - 1);
    TORCH_CHECK(gamma.numel() == features && beta.numel() == features,
                "gamma and beta must match the last dimension");

    auto y = torch::empty_like(x);
    int64_t rows = features > 0 ? x.numel() / features : 0;
    if (rows > 0) {
        add_layernorm_kernel<<<rows, THREADS>>>(x.data_ptr<float>(), residual.data_ptr<float>(),
                                                gamma.data_ptr<float>(), beta.data_ptr<float>(),
                                                y.data_ptr<float>(), features, (float)eps);
    }
    return y;
}
"""

cpp_source = (
    "torch::Tensor add_layernorm_cuda(torch::Tensor x, torch::Tensor residual, "
    "torch::Tensor gamma, torch::Tensor beta, double eps);"
)

add_layernorm = load_inline(
    name="add_layernorm",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["add_layernorm_cuda"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.norm = nn.LayerNorm(features)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return add_layernorm.add_layernorm_cuda(x, residual, self.norm.weight, self.norm.bias, self.norm.eps)
