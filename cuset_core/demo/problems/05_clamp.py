import torch
import torch.nn as nn


class Model(nn.Module):
    """Clamps every element into the closed range [min_val, max_val]."""

    def __init__(self, min_val: float, max_val: float):
        super().__init__()
        self.min_val = min_val
        self.max_val = max_val

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.clamp(x, min=self.min_val, max=self.max_val)


BATCH = 16
DIM = 65536
MIN_VAL = -0.5
MAX_VAL = 0.5


def get_inputs():
    return [torch.randn(BATCH, DIM)]


def get_init_inputs():
    return [MIN_VAL, MAX_VAL]
