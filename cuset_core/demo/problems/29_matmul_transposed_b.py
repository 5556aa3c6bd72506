import torch
import torch.nn as nn


class Model(nn.Module):
    """Computes A @ B.T for A of shape (M, K) and B of shape (N, K)."""

    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b.T)


M = 1024
K = 512
N = 768


def get_inputs():
    return [torch.randn(M, K), torch.randn(N, K)]


def get_init_inputs():
    return []
