import torch
import torch.nn as nn


class Model(nn.Module):
    """RMS normalisation over the last dimension with a learnable scale."""

    def __init__(self, features: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(features))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rms = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return x * rms * self.weight


BATCH = 512
FEATURES = 2048
EPS = 1e-6


def get_inputs():
    return [torch.randn(BATCH, FEATURES)]


def get_init_inputs():
    return [FEATURES, EPS]
