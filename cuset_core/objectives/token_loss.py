"""Per-token cross-entropy of a causal LM, aligned with its labels, and the confidence it gives."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

IGNORE_INDEX = -100


def per_token_loss(logits: Tensor, labels: Tensor) -> Tensor:
    """Cross-entropy of every labelled token, aligned with ``labels`` (Hugging Face convention).

    ``logits``: [B, T, V] from the model; ``labels``: [B, T] aligned with ``input_ids``, with
    ``-100`` where a token is not supervised. Returns a float32 [B, T] tensor (nats) whose
    position t holds -log p(labels[t] | tokens < t), computed from ``logits[:, t - 1]``; 0 at
    t = 0 and wherever the label is -100. Differentiable with respect to ``logits``.

    One ``cross_entropy`` call over the unsliced logits: the labels are shifted instead of the
    logits, so no [B, T, V] copy and no second softmax are made (as in transformers' own loss).
    """
    if logits.dim() != 3 or labels.shape != logits.shape[:2]:
        raise ValueError(
            f"per_token_loss: expected logits [B, T, V] and labels [B, T], "
            f"got {tuple(logits.shape)} and {tuple(labels.shape)}"
        )
    batch, length, vocab = logits.shape
    next_labels = F.pad(labels[:, 1:], (0, 1), value=IGNORE_INDEX)
    predicted = F.cross_entropy(
        logits.float().reshape(batch * length, vocab),
        next_labels.reshape(-1),
        ignore_index=IGNORE_INDEX,
        reduction="none",
    ).view(batch, length)
    # predicted[:, t] is the loss of labels[:, t + 1]; move it to position t + 1.
    return F.pad(predicted[:, :-1], (1, 0))


def supervised_mask(labels: Tensor) -> Tensor:
    """Bool [B, T]: the positions whose label is trained on (not -100, and not the first token,
    which has no preceding context)."""
    mask = labels != IGNORE_INDEX
    mask[:, 0] = False
    return mask


def online_confidence(token_loss: Tensor) -> Tensor:
    """p = exp(-l), detached: the probability of the gold token, from the per-token loss [B, T]."""
    with torch.no_grad():
        return torch.exp(-token_loss.detach())
