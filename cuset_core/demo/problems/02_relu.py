import torch
import torch.nn as nn


class Model(nn.Module):
    """Applies ReLU to a batch of feature vectors."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


BATCH = 16
DIM = 16384


def get_inputs():
    return [torch.randn(BATCH, DIM)]


def get_init_inputs():
    return []
