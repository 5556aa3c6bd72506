import torch
import torch.nn as nn


class Model(nn.Module):
    """Inclusive prefix sum along a dimension."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(x, dim=self.dim)


BATCH = 128
LENGTH = 4000
SCAN_DIM = 1


def get_inputs():
    return [torch.randn(BATCH, LENGTH)]


def get_init_inputs():
    return [SCAN_DIM]
