import torch
import torch.nn as nn


class Model(nn.Module):
    """Converts an image batch from channels-first (N, C, H, W) to channels-last (N, H, W, C)."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.permute(0, 2, 3, 1).contiguous()


BATCH = 8
CHANNELS = 64
HEIGHT = 56
WIDTH = 56


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return []
