#include <torch/extension.h>

__inline__ __device__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffff, v, offset);
    return v;
}

__global__ void rowsum_kernel(const float* x, float* out, int cols) {
    __shared__ float partial[32];
    int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const float* row = x + blockIdx.x * cols;
    float v = 0.f;
    for (int j = tid; j < cols; j += blockDim.x) v += row[j];
    v = warp_sum(v);
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < blockDim.x / 32 ? partial[lane] : 0.f;
        v = warp_sum(v);
        if (lane == 0) out[blockIdx.x] = v;
    }
}

torch::Tensor run(torch::Tensor x) {
    auto out = torch::empty({x.size(0)}, x.options());
    rowsum_kernel<<<x.size(0), 256>>>(x.data_ptr<float>(), out.data_ptr<float>(), x.size(1));
    return out;
}
