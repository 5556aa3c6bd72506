import torch
import torch.nn as nn


class Model(nn.Module):
    """Histogram of float values over [min_val, max_val] with equal-width bins."""

    def __init__(self, bins: int, min_val: float, max_val: float):
        super().__init__()
        self.bins = bins
        self.min_val = min_val
        self.max_val = max_val

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.histc(x, bins=self.bins, min=self.min_val, max=self.max_val)


N = 1 << 22
BINS = 256
MIN_VAL = -3.0
MAX_VAL = 3.0


def get_inputs():
    return [torch.randn(N)]


def get_init_inputs():
    return [BINS, MIN_VAL, MAX_VAL]
