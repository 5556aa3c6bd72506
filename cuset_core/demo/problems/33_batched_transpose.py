import torch
import torch.nn as nn


class Model(nn.Module):
    """Swaps the last two dimensions of a (batch, rows, cols) tensor."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.transpose(1, 2).contiguous()


BATCH = 32
ROWS = 300
COLS = 200


def get_inputs():
    return [torch.randn(BATCH, ROWS, COLS)]


def get_init_inputs():
    return []
