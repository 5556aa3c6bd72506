import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = """
#include <torch/extension.h>

// Grid: x and y tile the output plane, z enumerates (batch, out_channel) pairs.
// Taps that fall into the zero padding are skipped.
__global__ void conv2d_kernel(const float* __restrict__ x, const float* __restrict__ w,
                              const float* __restrict__ bias, float* __restrict__ y,
                              int in_ch, int out_ch, int height, int width, int ksize, int pad,
                              int out_h, int out_w) {
    int ow = blockIdx.x * blockDim.x + threadIdx.x;
    int oh = blockIdx.y * blockDim.y + threadIdx.y;
    int oc = blockIdx.z % out_ch;
    int b = blockIdx.z / out_ch;
    if (oh >= out_h || ow >= out_w) {
        return;
    }

    float acc = bias[oc];
    for (int ic = 0; ic < in_ch; ++ic) {
        const float* x_plane = x + ((int64_t)b * in_ch + ic) * height * width;
        const float* w_plane = w + ((int64_t)oc * in_ch + ic) * ksize * ksize;
        for (int kh = 0; kh < ksize; ++kh) {
            int ih = oh + kh - pad;
            if (ih < 0 || ih >= height) {
                continue;
            }
            for (int kw = 0; kw < ksize; ++kw) {
                int iw = ow + kw - pad;
                if (iw >= 0 && iw < width) {
                    acc += x_plane[ih * width + iw] * w_plane[kh * ksize + kw];
                }
            }
        }
    }
    y[(((int64_t)b * out_ch + oc) * out_h + oh) * out_w + ow] = acc;
}

torch::Tensor conv2d_cuda(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, int64_t pad) {
    TORCH_CHECK(x.is_cuda() && weight.is_cuda() && bias.is_cuda(), "inputs must be CUDA tensors");
    TORCH_CHECK(x.is_contiguous() && weight.is_contiguous() && bias.is_contiguous(),
                "inputs must be contiguous");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "x must be float32");
    TORCH_CHECK(x.dim() == 4 && weight.dim() == 4, "expected NCHW input and OIHW weight");
    TORCH_CHECK(x.size(1) == weight.size(1), "channel mismatch");
    TORCH_CHECK(weight.size(2) == weight.size(3), "kernel must be square");

    int batch = (int)x.size(0);
    int in_ch = (int)x.size(1);
    int height = (int)x.size(2);
    int width = (int)x.size(3);
    int out_ch = (int)weight.size(0);
    int ksize = (int)weight.size(2);
    int out_h = height + 2 * (int)pad - ksize + 1;
    int out_w = width + 2 * (int)pad - ksize + 1;
    TORCH_CHECK(out_h > 0 && out_w > 0, "kernel larger than the padded input");
    TORCH_CHECK(bias.numel() == out_ch, "bias must have C_out elements");

    auto y = torch::empty({batch, out_ch, out_h, out_w}, x.options());
    dim3 block(16, 16);
    dim3 grid((out_w + block.x - 1) / block.x, (out_h + block.y - 1) / block.y, batch * out_ch);
    if (batch > 0 && out_ch > 0) {
        conv2d_kernel<<<grid, block>>>(x.data_ptr<float>(), weight.data_ptr<float>(),
                                       bias.data_ptr<float>(), y.data_ptr<float>(), in_ch, out_ch,
                                       height, width, ksize, (int)pad, out_h, out_w);
    }
    return y;
}
"""

cpp_source = "torch::Tensor conv2d_cuda(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, int64_t pad);"

conv2d_ext = load_inline(
    name="conv2d_ext",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["conv2d_cuda"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return conv2d_ext.conv2d_cuda(x, self.conv.weight, self.conv.bias, self.conv.padding[0])
