"""Hand-built micro-batches shared by the objective tests."""

from __future__ import annotations

import torch

from cuset_core.objectives.objective import ObjectiveBatch


def token_batch(
    p_rows: list[list[float | None]], sensitive, regions, reference: bool = False, **fields
) -> ObjectiveBatch:
    """An ObjectiveBatch whose token losses are -log p (with grad; 0 where p is None, meaning
    not supervised). ``reference``: the same p also comes as the frozen model's confidence.
    ``fields`` go to ObjectiveBatch (num_items_in_batch, step, ...)."""
    supervised = torch.tensor([[p is not None for p in row] for row in p_rows])
    p = torch.tensor([[1.0 if p is None else p for p in row] for row in p_rows])
    loss = torch.where(supervised, -torch.log(p), torch.zeros_like(p))
    fields.setdefault("num_items_in_batch", None)
    if reference:
        fields["reference_confidence"] = p
    return ObjectiveBatch(
        token_loss=loss.requires_grad_(),
        supervised=supervised,
        sensitive=torch.tensor(sensitive, dtype=torch.bool),
        region_ids=torch.tensor(regions),
        **fields,
    )
