import torch
import torch.nn as nn


class Model(nn.Module):
    """2-D max pooling with a square window and no padding."""

    def __init__(self, kernel_size: int, stride: int):
        super().__init__()
        self.pool = nn.MaxPool2d(kernel_size=kernel_size, stride=stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x)


BATCH = 16
CHANNELS = 32
HEIGHT = 64
WIDTH = 64
KERNEL_SIZE = 2
STRIDE = 2


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return [KERNEL_SIZE, STRIDE]
