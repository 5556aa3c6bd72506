import torch
import torch.nn as nn


class Model(nn.Module):
    """Adds rows of `src` into the rows of a zero matrix selected by `index`."""

    def __init__(self, num_rows: int):
        super().__init__()
        self.num_rows = num_rows

    def forward(self, src: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        out = torch.zeros(self.num_rows, src.shape[1], dtype=src.dtype, device=src.device)
        return out.index_add_(0, index, src)


N = 65536
FEATURES = 64
NUM_ROWS = 1024


def get_inputs():
    return [torch.randn(N, FEATURES), torch.randint(0, NUM_ROWS, (N,))]


def get_init_inputs():
    return [NUM_ROWS]
