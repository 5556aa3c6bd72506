#include <torch/extension.h>

__global__ void histogram_kernel(const int64_t* x, int* bins, int n) {
    __shared__ int local[64];
    for (int b = threadIdx.x; b < 64; b += blockDim.x) local[b] = 0;
    __syncthreads();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        atomicAdd(&local[x[i]], 1);
    __syncthreads();
    for (int b = threadIdx.x; b < 64; b += blockDim.x) atomicAdd(&bins[b], local[b]);
}

torch::Tensor run(torch::Tensor x) {
    auto bins = torch::zeros({64}, x.options().dtype(torch::kInt32));
    histogram_kernel<<<8, 128>>>(x.data_ptr<int64_t>(), bins.data_ptr<int>(), x.numel());
    return bins;
}
