import torch
import torch.nn as nn


class Model(nn.Module):
    """Depthwise 1-D convolution: every channel has its own kernel; output length equals input length."""

    def __init__(self, channels: int, kernel_size: int):
        super().__init__()
        self.conv = nn.Conv1d(channels, channels, kernel_size, padding=kernel_size // 2, groups=channels, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


BATCH = 16
CHANNELS = 64
LENGTH = 4096
KERNEL_SIZE = 7


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, LENGTH)]


def get_init_inputs():
    return [CHANNELS, KERNEL_SIZE]
