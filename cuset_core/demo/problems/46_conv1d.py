import torch
import torch.nn as nn


class Model(nn.Module):
    """A 1-D convolution (stride 1, no padding) with bias."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int):
        super().__init__()
        self.conv = nn.Conv1d(in_channels, out_channels, kernel_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


BATCH = 16
IN_CHANNELS = 32
OUT_CHANNELS = 64
LENGTH = 1024
KERNEL_SIZE = 5


def get_inputs():
    return [torch.randn(BATCH, IN_CHANNELS, LENGTH)]


def get_init_inputs():
    return [IN_CHANNELS, OUT_CHANNELS, KERNEL_SIZE]
