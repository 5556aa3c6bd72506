import torch
import torch.nn as nn


class Model(nn.Module):
    """Counts how often each integer in [0, num_bins) occurs."""

    def __init__(self, num_bins: int):
        super().__init__()
        self.num_bins = num_bins

    def forward(self, values: torch.Tensor) -> torch.Tensor:
        return torch.bincount(values, minlength=self.num_bins)


N = 1 << 22
NUM_BINS = 1000


def get_inputs():
    return [torch.randint(0, NUM_BINS, (N,))]


def get_init_inputs():
    return [NUM_BINS]
