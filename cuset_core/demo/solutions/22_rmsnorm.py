import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = """
#include <torch/extension.h>

#define THREADS 128
#define WARPS (THREADS / 32)

__global__ void rmsnorm_kernel(const float* __restrict__ x, const float* __restrict__ weight,
                               float* __restrict__ y, int features, float eps) {
    __shared__ float warp_partial[WARPS];
    __shared__ float inv_rms;
    const float* row_in = x + (int64_t)blockIdx.x * features;
    float* row_out = y + (int64_t)blockIdx.x * features;

    float sq = 0.0f;
    for (int i = threadIdx.x; i < features; i += THREADS) {
        float v = row_in[i];
        sq += v * v;
    }
    for (int offset = 16; offset > 0; offset >>= 1) {
        sq += __shfl_down_sync(0xffffffff, sq, offset);
    }
    if (threadIdx.x % 32 == 0) {
        warp_partial[threadIdx.x / 32] = sq;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        float total = 0.0f;
        for (int w = 0; w < WARPS; ++w) {
            total += warp_partial[w];
        }
        inv_rms = rsqrtf(total / features + eps);
    }
    __syncthreads();

    for (int i = threadIdx.x; i < features; i += THREADS) {
        row_out[i] = row_in[i] * inv_rms * weight[i];
    }
}

torch::Tensor rmsnorm_cuda(torch::Tensor x, torch::Tensor weight, double eps) {
    TORCH_CHECK(x.is_cuda() && weight.is_cuda(), "inputs must be CUDA tensors");
    TORCH_CHECK(x.is_contiguous() && weight.is_contiguous(), "inputs must be contiguous");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32 && weight.scalar_type() == torch::kFloat32,
                "inputs must be float32");
    int features = (int)x.size(-1);
    TORCH_CHECK(weight.numel() == features, "weight must match the last dimension");

    auto y = torch::empty_like(x);
    int64_t rows = features > 0 ? x.numel() / features : 0;
    if (rows > 0) {
        rmsnorm_kernel<<<rows, THREADS>>>(x.data_ptr<float>(), weight.data_ptr<float>(),
                                          y.data_ptr<float>(), features, (float)eps);
    }
    return y;
}
"""

cpp_source = "torch::Tensor rmsnorm_cuda(torch::Tensor x, torch::Tensor weight, double eps);"

rmsnorm = load_inline(
    name="rmsnorm",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["rmsnorm_cuda"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, features: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(features))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rmsnorm.rmsnorm_cuda(x, self.weight, self.eps)
