import torch
import torch.nn as nn


class Model(nn.Module):
    """Matrix-vector product: an (M, K) matrix times a (K, 1) column."""

    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, v)


M = 2048
K = 2048


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, 1)]


def get_init_inputs():
    return []
