import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = """
#include <torch/extension.h>

#define BLOCK 256

// One block per row. The row is scanned in chunks of BLOCK elements with a
// Hillis-Steele scan in double-buffered shared memory; `carry` holds the sum of the
// chunks already written and is added to the current one.
__global__ void cumsum_kernel(const float* __restrict__ x, float* __restrict__ y, int length) {
    __shared__ float buf[2][BLOCK];
    __shared__ float carry;
    const float* in = x + (int64_t)blockIdx.x * length;
    float* out = y + (int64_t)blockIdx.x * length;
    int tid = threadIdx.x;
    if (tid == 0) {
        carry = 0.0f;
    }

    for (int start = 0; start < length; start += BLOCK) {
        int i = start + tid;
        buf[0][tid] = i < length ? in[i] : 0.0f;
        __syncthreads();

        int cur = 0;
        for (int offset = 1; offset < BLOCK; offset <<= 1) {
            float v = buf[cur][tid];
            if (tid >= offset) {
                v += buf[cur][tid - offset];
            }
            buf[1 - cur][tid] = v;
            cur = 1 - cur;
            __syncthreads();
        }

        if (i < length) {
            out[i] = buf[cur][tid] + carry;
        }
        __syncthreads();  // all threads have used `carry` before it grows
        if (tid == BLOCK - 1) {
            carry += buf[cur][BLOCK - 1];
        }
        __syncthreads();
    }
}

torch::Tensor cumsum_cuda(torch::Tensor x, int64_t dim) {
    TORCH_CHECK(x.is_cuda() && x.is_contiguous(), "x must be a contiguous CUDA tensor");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "x must be float32");
    TORCH_CHECK(x.dim() == 2, "x must be 2-D");
    TORCH_CHECK(dim == 1 || dim == -1, "this kernel scans the last dimension");

    auto y = torch::empty_like(x);
    int rows = (int)x.size(0);
    int length = (int)x.size(1);
    if (rows > 0 && length > 0) {
        cumsum_kernel<<<rows, BLOCK>>>(x.data_ptr<float>(), y.data_ptr<float>(), length);
    }
    return y;
}
"""

cpp_source = "torch::Tensor cumsum_cuda(torch::Tensor x, int64_t dim);"

cumsum_ext = load_inline(
    name="cumsum_ext",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["cumsum_cuda"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return cumsum_ext.cumsum_cuda(x, self.dim)
