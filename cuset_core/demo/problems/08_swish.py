import torch
import torch.nn as nn


class Model(nn.Module):
    """Applies Swish (SiLU): x * sigmoid(x)."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(x)


BATCH = 16
DIM = 65536


def get_inputs():
    return [torch.randn(BATCH, DIM)]


def get_init_inputs():
    return []
