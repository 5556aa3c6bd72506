"""Training objectives behind one interface: sft, dft, focal, profit and the CuSeT family.

Use: ``token_loss = per_token_loss(logits, labels)`` (or ``chunked_token_loss(hidden, lm_head,
labels, chunk_size)``, the same numbers without the full logits; :mod:`.token_loss`), then
``compute_objective(MethodConfig(...), ObjectiveBatch(token_loss, ...), gather, state)``
(:mod:`.objective`), with one ``ObjectiveState`` per training run (the CuSeT EMAs, :mod:`.state`).
The package itself holds only the method's configuration, which needs no torch: the API
validates it without loading any.
"""

from cuset_core.objectives.config import MethodConfig, MethodName

__all__ = ["MethodConfig", "MethodName"]
