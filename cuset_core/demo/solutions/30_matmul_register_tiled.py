import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = """
#include <torch/extension.h>

#define BM 32
#define BN 32
#define BK 16
#define THREADS_X 16
#define THREADS_Y 16

// A 16x16 thread block computes a 32x32 tile of C: each thread owns a 2x2 group of
// outputs (rows ty and ty + 16, columns tx and tx + 16), so every value loaded from
// shared memory is used twice from a register.
__global__ void matmul_2x2_kernel(const float* __restrict__ a, const float* __restrict__ b,
                                  float* __restrict__ c, int m, int k, int n) {
    __shared__ float as[BM][BK];
    __shared__ float bs[BK][BN];

    int tx = threadIdx.x;
    int ty = threadIdx.y;
    int tid = ty * THREADS_X + tx;
    int row0 = blockIdx.y * BM;
    int col0 = blockIdx.x * BN;

    float acc00 = 0.0f, acc01 = 0.0f, acc10 = 0.0f, acc11 = 0.0f;

    for (int t = 0; t < k; t += BK) {
        for (int i = tid; i < BM * BK; i += THREADS_X * THREADS_Y) {
            int r = i / BK;
            int kk = i % BK;
            int gr = row0 + r;
            int gk = t + kk;
            as[r][kk] = (gr < m && gk < k) ? a[(int64_t)gr * k + gk] : 0.0f;
        }
        for (int i = tid; i < BK * BN; i += THREADS_X * THREADS_Y) {
            int kk = i / BN;
            int cc = i % BN;
            int gk = t + kk;
            int gc = col0 + cc;
            bs[kk][cc] = (gk < k && gc < n) ? b[(int64_t)gk * n + gc] : 0.0f;
        }
        __syncthreads();

        #pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
            float a0 = as[ty][kk];
            float a1 = as[ty + THREADS_Y][kk];
            float b0 = bs[kk][tx];
            float b1 = bs[kk][tx + THREADS_X];
            acc00 += a0 * b0;
            acc01 += a0 * b1;
            acc10 += a1 * b0;
            acc11 += a1 * b1;
        }
        __syncthreads();
    }

    int r0 = row0 + ty;
    int r1 = r0 + THREADS_Y;
    int c0 = col0 + tx;
    int c1 = c0 + THREADS_X;
    if (r0 < m && c0 < n) c[(int64_t)r0 * n + c0] = acc00;
    if (r0 < m && c1 < n) c[(int64_t)r0 * n + c1] = acc01;
    if (r1 < m && c0 < n) c[(int64_t)r1 * n + c0] = acc10;
    if (r1 < m && c1 < n) c[(int64_t)r1 * n + c1] = acc11;
}

torch::Tensor matmul_2x2_cuda(torch::Tensor a, torch::Tensor b) {
    TORCH_CHECK(a.is_cuda() && b.is_cuda(), "a and b must be CUDA tensors");
    TORCH_CHECK(a.is_contiguous() && b.is_contiguous(), "a and b must be contiguous");
    TORCH_CHECK(a.scalar_type() == torch::kFloat32 && b.scalar_type() == torch::kFloat32,
                "a and b must be float32");
    TORCH_CHECK(a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(0),
                "expected (M, K) @ (K, N)");

    int m = (int)a.size(0);
    int k = (int)a.size(1);
    int n = (int)b.size(1);
    auto c = torch::empty({m, n}, a.options());
    dim3 block(THREADS_X, THREADS_Y);
    dim3 grid((n + BN - 1) / BN, (m + BM - 1) / BM);
    if (m > 0 && n > 0) {
        matmul_2x2_kernel<<<grid, block>>>(a.data_ptr<float>(), b.data_ptr<float>(),
                                           c.data_ptr<float>(), m, k, n);
    }
    return c;
}
"""

cpp_source = "torch::Tensor matmul_2x2_cuda(torch::Tensor a, torch::Tensor b);"

matmul_2x2 = load_inline(
    name="matmul_2x2",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["matmul_2x2_cuda"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return matmul_2x2.matmul_2x2_cuda(a, b)
