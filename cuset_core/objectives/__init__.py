"""Training objectives behind one interface: sft, dft, focal, profit and the CuSeT family.

Use: ``token_loss = per_token_loss(logits, labels)`` (or ``chunked_token_loss(hidden, lm_head,
labels, chunk_size)``, the same numbers without the full logits), then
``compute_objective(MethodConfig(...), ObjectiveBatch(token_loss, ...), gather, state)``, with one
``ObjectiveState`` per training run (the CuSeT EMAs).
"""

from cuset_core.objectives.config import MethodConfig, MethodName
from cuset_core.objectives.objective import ObjectiveBatch, ObjectiveOutput, compute_objective
from cuset_core.objectives.state import ObjectiveState
from cuset_core.objectives.token_loss import (
    chunked_token_loss,
    per_token_loss,
    supervised_mask,
    token_probability,
)

__all__ = [
    "MethodConfig",
    "MethodName",
    "ObjectiveBatch",
    "ObjectiveOutput",
    "ObjectiveState",
    "chunked_token_loss",
    "compute_objective",
    "per_token_loss",
    "supervised_mask",
    "token_probability",
]
