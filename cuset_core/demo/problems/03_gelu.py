import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Applies the exact (erf-based) GELU activation."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x)


BATCH = 32
DIM = 16384


def get_inputs():
    return [torch.randn(BATCH, DIM)]


def get_init_inputs():
    return []
