import torch
import torch.nn as nn


class Model(nn.Module):
    """Softmax over the feature dimension of a (batch, features) matrix."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=1)


BATCH = 64
DIM = 8192


def get_inputs():
    return [torch.randn(BATCH, DIM)]


def get_init_inputs():
    return []
