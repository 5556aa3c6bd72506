"""Training objectives behind one interface: sft, dft, focal, profit and the CuSeT family.

Use: ``token_loss = per_token_loss(logits, labels)``, then
``compute_objective(MethodConfig(...), ObjectiveBatch(token_loss, ...), gather, state)``, with one
``ObjectiveState`` per training run (the CuSeT EMAs).
"""

from cuset_core.objectives.config import MethodConfig, MethodName
from cuset_core.objectives.objective import ObjectiveBatch, ObjectiveOutput, compute_objective
from cuset_core.objectives.state import ObjectiveState
from cuset_core.objectives.token_loss import (
    IGNORE_INDEX,
    online_confidence,
    per_token_loss,
    supervised_mask,
)

__all__ = [
    "IGNORE_INDEX",
    "MethodConfig",
    "MethodName",
    "ObjectiveBatch",
    "ObjectiveOutput",
    "ObjectiveState",
    "compute_objective",
    "online_confidence",
    "per_token_loss",
    "supervised_mask",
]
