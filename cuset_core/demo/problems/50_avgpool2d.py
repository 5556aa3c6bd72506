import torch
import torch.nn as nn


class Model(nn.Module):
    """2-D average pooling with zero padding counted in the average."""

    def __init__(self, kernel_size: int, stride: int, padding: int):
        super().__init__()
        self.pool = nn.AvgPool2d(kernel_size=kernel_size, stride=stride, padding=padding)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x)


BATCH = 16
CHANNELS = 32
HEIGHT = 65
WIDTH = 65
KERNEL_SIZE = 3
STRIDE = 2
PADDING = 1


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return [KERNEL_SIZE, STRIDE, PADDING]
