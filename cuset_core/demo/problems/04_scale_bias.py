import torch
import torch.nn as nn


class Model(nn.Module):
    """Multiplies the input by a scalar and adds a scalar bias."""

    def __init__(self, scale: float, bias: float):
        super().__init__()
        self.scale = scale
        self.bias = bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.scale + self.bias


BATCH = 64
DIM = 32768
SCALE = 2.5
BIAS = -0.75


def get_inputs():
    return [torch.randn(BATCH, DIM)]


def get_init_inputs():
    return [SCALE, BIAS]
