import torch
import torch.nn as nn


class Model(nn.Module):
    """Applies the logistic sigmoid elementwise."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(x)


BATCH = 128
DIM = 8192


def get_inputs():
    return [torch.randn(BATCH, DIM)]


def get_init_inputs():
    return []
