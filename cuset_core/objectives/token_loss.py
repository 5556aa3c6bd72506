"""Per-token cross-entropy of a causal LM, aligned with its labels, and the confidence it gives."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from cuset_core.data.encode import IGNORE_INDEX


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


def token_probability(token_loss: Tensor) -> Tensor:
    """p = exp(-l), detached: the model's probability of each gold token, from its cross-entropy
    ``token_loss`` (nats, any shape; 0 gives p = 1). Same shape, no second softmax."""
    with torch.no_grad():
        return torch.exp(-token_loss.detach())


def _gold_token_loss(head: Callable[[Tensor], Tensor], states: Tensor, targets: Tensor) -> Tensor:
    """Cross-entropy (float32, nats) of ``targets`` [N] under the logits ``head(states)`` [N, V]."""
    return F.cross_entropy(head(states).float(), targets, reduction="none")


def chunked_token_loss(hidden: Tensor, head: Callable[[Tensor], Tensor], labels: Tensor, chunk_size: int) -> Tensor:
    """``per_token_loss`` computed from final hidden states without materialising [B, T, V].

    ``hidden``: [B, T, H], the decoder's output (after its final norm); ``head``: maps [N, H] to
    logits [N, V] (the model's ``lm_head``); ``labels``: [B, T] as in ``per_token_loss``;
    ``chunk_size``: supervised positions per chunk (>= 1). Returns the same float32 [B, T]
    tensor as ``per_token_loss(head(hidden), labels)``, differentiable with respect to
    ``hidden`` and the head's parameters.

    Only supervised positions get logits (prompt tokens carry no loss), at most ``chunk_size``
    of them at a time, and each chunk is checkpointed: its logits are freed after the forward
    and recomputed in the backward, so both passes hold one chunk's [chunk_size, V] at a time.
    """
    if hidden.dim() != 3 or labels.shape != hidden.shape[:2]:
        raise ValueError(
            f"chunked_token_loss: expected hidden [B, T, H] and labels [B, T], "
            f"got {tuple(hidden.shape)} and {tuple(labels.shape)}"
        )
    if chunk_size < 1:
        raise ValueError(f"chunked_token_loss: chunk_size must be >= 1, got {chunk_size}")
    rows, cols = supervised_mask(labels).nonzero(as_tuple=True)
    # Position t's label is predicted from the hidden state at t - 1.
    states = hidden[rows, cols - 1]
    targets = labels[rows, cols]
    recompute = torch.is_grad_enabled()
    pieces = []
    for start in range(0, targets.numel(), chunk_size):
        chunk = (head, states[start : start + chunk_size], targets[start : start + chunk_size])
        if recompute:
            pieces.append(checkpoint(_gold_token_loss, *chunk, use_reentrant=False))
        else:
            pieces.append(_gold_token_loss(*chunk))
    losses = torch.cat(pieces) if pieces else states.new_zeros(0, dtype=torch.float32)
    token_loss = torch.zeros(labels.shape, dtype=torch.float32, device=hidden.device)
    return token_loss.index_put((rows, cols), losses)
