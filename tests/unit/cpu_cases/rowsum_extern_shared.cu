#include <torch/extension.h>
#include <cuda_runtime.h>
#include <ATen/cuda/CUDAContext.h>

__global__ void rowsum_kernel(const float* x, float* out, int cols) {
    extern __shared__ float sdata[];
    int tid = threadIdx.x;
    const float* row = x + blockIdx.x * cols;
    float v = 0.f;
    for (int j = tid; j < cols; j += blockDim.x) v += row[j];
    sdata[tid] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 32; s >>= 1) {
        if (tid < s) sdata[tid] += sdata[tid + s];
        __syncthreads();
    }
    if (tid < 32) {  // warp-synchronous tail through a volatile pointer
        volatile float* vs = sdata;
        vs[tid] += vs[tid + 32];
        vs[tid] += vs[tid + 16];
        vs[tid] += vs[tid + 8];
        vs[tid] += vs[tid + 4];
        vs[tid] += vs[tid + 2];
        vs[tid] += vs[tid + 1];
    }
    if (tid == 0) out[blockIdx.x] = sdata[0];
}

torch::Tensor run(torch::Tensor x) {
    auto out = torch::empty({x.size(0)}, x.options());
    const int threads = 256;
    rowsum_kernel<<<x.size(0), threads, threads * sizeof(float), at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), out.data_ptr<float>(), x.size(1));
    return out;
}
