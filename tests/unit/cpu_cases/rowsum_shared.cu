#include <torch/extension.h>

__global__ void rowsum_kernel(const float* x, float* out, int cols) {
    __shared__ float sdata[256];
    int tid = threadIdx.x;
    const float* row = x + blockIdx.x * cols;
    float v = 0.f;
    for (int j = tid; j < cols; j += blockDim.x) v += row[j];
    sdata[tid] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s) sdata[tid] += sdata[tid + s];
        __syncthreads();
    }
    if (tid == 0) out[blockIdx.x] = sdata[0];
}

torch::Tensor run(torch::Tensor x) {
    auto out = torch::empty({x.size(0)}, x.options());
    rowsum_kernel<<<x.size(0), 256>>>(x.data_ptr<float>(), out.data_ptr<float>(), x.size(1));
    return out;
}
