import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = """
#include <torch/extension.h>

__device__ __forceinline__ float warp_reduce_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) {
        v += __shfl_down_sync(0xffffffff, v, offset);
    }
    return v;
}

// Sum over the block; `scratch` holds one float per warp (dynamic shared memory).
// Every thread gets the result.
__device__ float block_reduce_sum(float v, float* scratch) {
    int lane = threadIdx.x % 32;
    int warp = threadIdx.x / 32;
    int num_warps = (blockDim.x + 31) / 32;
    v = warp_reduce_sum(v);
    if (lane == 0) {
        scratch[warp] = v;
    }
    __syncthreads();
    if (warp == 0) {
        float w = lane < num_warps ? scratch[lane] : 0.0f;
        w = warp_reduce_sum(w);
        if (lane == 0) {
            scratch[0] = w;
        }
    }
    __syncthreads();
    float total = scratch[0];
    __syncthreads();  // scratch may be reused by the next call
    return total;
}

__global__ void layernorm_kernel(const float* __restrict__ x, const float* __restrict__ weight,
                                 const float* __restrict__ bias, float* __restrict__ y,
                                 int features, float eps) {
    extern __shared__ float scratch[];
    const float* row_in = x + (int64_t)blockIdx.x * features;
    float* row_out = y + (int64_t)blockIdx.x * features;

    float sum = 0.0f;
    for (int i = threadIdx.x; i < features; i += blockDim.x) {
        sum += row_in[i];
    }
    float mean = block_reduce_sum(sum, scratch) / features;

    // Second pass over centred values: more accurate than E[x^2] - E[x]^2.
    float sq = 0.0f;
    for (int i = threadIdx.x; i < features; i += blockDim.x) {
        float d = row_in[i] - mean;
        sq += d * d;
    }
    float var = block_reduce_sum(sq, scratch) / features;
    float inv_std = rsqrtf(var + eps);

    for (int i = threadIdx.x; i < features; i += blockDim.x) {
        row_out[i] = (row_in[i] - mean) * inv_std * weight[i] + bias[i];
    }
}

torch::Tensor layernorm_cuda(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, double eps) {
    TORCH_CHECK(x.is_cuda() && weight.is_cuda() && bias.is_cuda(), "inputs must be CUDA tensors");
    TORCH_CHECK(x.is_contiguous() && weight.is_contiguous() && bias.is_contiguous(),
                "inputs must be contiguous");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "x must be float32");
    int features = (int)x.size(x.dim() - 1);
    TORCH_CHECK(weight.numel() == features && bias.numel() == features,
                "weight and bias must match the last dimension");

    auto y = torch::empty_like(x);
    int rows = features > 0 ? (int)(x.numel() / features) : 0;
    const int threads = 256;
    size_t smem = (threads / 32) * sizeof(float);
    if (rows > 0) {
        layernorm_kernel<<<rows, threads, smem>>>(x.data_ptr<float>(), weight.data_ptr<float>(),
                                                  bias.data_ptr<float>(), y.data_ptr<float>(),
                                                  features, (float)eps);
    }
    return y;
}
"""

cpp_source = "torch::Tensor layernorm_cuda(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, double eps);"

layernorm = load_inline(
    name="layernorm",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["layernorm_cuda"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.ln = nn.LayerNorm(features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return layernorm.layernorm_cuda(x, self.ln.weight, self.ln.bias, self.ln.eps)
