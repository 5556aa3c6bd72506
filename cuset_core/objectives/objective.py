"""One interface for every objective: per-token losses and masks in, loss, keep mask, sample
weights and metrics out (DESIGN.md §3).

Definitions, with p the detached probability of the gold token and l = -log p from the
training forward pass:

- ``sft``: keep every supervised token, weight 1.
- ``dft``: per-token loss p * l (p detached, as in DFT's sg(p)).
- ``focal``: per-token loss (1 - p)^gamma * l. p is detached, as DESIGN.md's notation defines
  it, so the modulating factor is a constant weight; the original focal loss (Lin et al., 2017)
  differentiates through it. A detached factor is also the only form that works with
  ``reference`` confidence.
- ``profit``: drop supervised tokens with p < profit_threshold.
- ``cuset_mask``: keep every sensitive token; drop non-sensitive tokens with p > tau_hi, the
  (1 - mask_ratio) quantile of non-sensitive p in the micro-batch, pooled over ranks.
- ``cuset_reweight``: sample weights from low-confidence regions (see ``rules``).
- ``cuset``: both.

Every objective uses the configured confidence source for p (``reference``: the frozen base
model's p from the batch), while l always comes from the forward pass. The loss is
sum_{i,t} w[i] * keep[i,t] * f[i,t] * l[i,t] / num_items_in_batch, where f is the dft/focal
factor (1 otherwise) and num_items_in_batch counts the supervised tokens of the whole
optimizer-step batch before masking, so all objectives share one denominator.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from cuset_core.objectives.config import MethodConfig
from cuset_core.objectives.rules import (
    Gather,
    confidence_keep,
    global_quantile,
    low_confidence_tokens,
    profit_keep,
    region_sample_weights,
    token_factor,
)
from cuset_core.objectives.token_loss import online_confidence


@dataclass
class ObjectiveBatch:
    """The per-token view of one micro-batch. All [B, T] tensors share one device.

    ``token_loss``: float [B, T] from ``per_token_loss``, with grad. ``supervised``: bool [B, T].
    ``sensitive``: bool [B, T] (only supervised positions count). ``region_ids``: long [B, T],
    -1 for no region. ``num_items_in_batch``: supervised tokens of the whole optimizer-step batch
    (all accumulation steps, all ranks) before masking; None uses this micro-batch's count.
    ``step``: optimizer step, for the mask warmup. ``reference_confidence``: float [B, T], the
    frozen base model's p, required when ``confidence="reference"``.
    """

    token_loss: Tensor
    supervised: Tensor
    sensitive: Tensor
    region_ids: Tensor
    num_items_in_batch: int | Tensor | None
    step: int = 0
    reference_confidence: Tensor | None = None


@dataclass
class ObjectiveOutput:
    """``loss``: 0-d tensor with grad. ``keep``: bool [B, T], the tokens in the loss.
    ``sample_weights``: float [B], detached. ``metrics``: plain floats; a mean over an empty set
    (e.g. ``p_sensitive_mean`` without sensitive tokens) is left out rather than reported."""

    loss: Tensor
    keep: Tensor
    sample_weights: Tensor
    metrics: dict[str, float]


def compute_objective(
    config: MethodConfig, batch: ObjectiveBatch, gather: Gather | None = None
) -> ObjectiveOutput:
    """Apply the configured objective to one micro-batch.

    ``gather`` concatenates a 1-D tensor across data-parallel ranks (None: single process). It
    is called for tau_hi (masking, when the effective mask ratio is above 0) and then for tau_lo
    (reweighting, unless ``region_threshold`` is set); these conditions depend only on the config
    and the step, so every rank makes the same calls.
    """
    _check_batch(config, batch)
    token_loss = batch.token_loss
    supervised = batch.supervised
    sensitive = batch.sensitive & supervised
    non_sensitive = supervised & ~sensitive
    p = _confidence(config, batch)

    keep = supervised.clone()
    thresholds: dict[str, Tensor | float] = {}
    if config.type == "profit":
        keep = profit_keep(p, supervised, config.profit_threshold)
    mask_ratio = config.mask_ratio_at(batch.step)
    if config.uses_masking and mask_ratio > 0:
        tau_hi = global_quantile(p[non_sensitive], 1.0 - mask_ratio, gather)
        keep = confidence_keep(p, supervised, sensitive, tau_hi)
        if tau_hi is not None:
            thresholds["tau_hi"] = tau_hi

    weights = torch.ones(supervised.shape[0], dtype=token_loss.dtype, device=token_loss.device)
    region_low = None
    if config.uses_reweighting:
        tau_lo = config.region_threshold
        if tau_lo is None:
            tau_lo = global_quantile(p[sensitive], config.region_quantile, gather)
        token_low, region_low = low_confidence_tokens(p, sensitive, batch.region_ids, tau_lo)
        weights = region_sample_weights(
            token_low, sensitive, supervised, config.reweight_lambda, config.w_min, config.w_max
        ).to(token_loss.dtype)
        if tau_lo is not None:
            thresholds["tau_lo"] = tau_lo

    per_token = torch.where(keep, token_loss, torch.zeros_like(token_loss))
    factor = token_factor(config.type, p, config.focal_gamma)
    if factor is not None:
        per_token = per_token * factor
    denominator = _denominator(batch.num_items_in_batch, supervised)
    loss = (per_token.sum(dim=1) * weights).sum() / denominator

    metrics = _metrics(token_loss, p, supervised, sensitive, keep, weights, region_low, thresholds)
    if config.uses_masking:
        metrics["mask_ratio"] = mask_ratio
    return ObjectiveOutput(loss=loss, keep=keep, sample_weights=weights, metrics=metrics)


def _check_batch(config: MethodConfig, batch: ObjectiveBatch) -> None:
    """Reject batches whose tensors do not fit together (programming errors, one clear line)."""
    shape = batch.token_loss.shape
    if batch.token_loss.dim() != 2:
        raise ValueError(f"token_loss must be [B, T], got {tuple(shape)}")
    for name in ("supervised", "sensitive", "region_ids"):
        tensor = getattr(batch, name)
        if tensor.shape != shape:
            raise ValueError(
                f"{name} must have token_loss's shape {tuple(shape)}, got {tuple(tensor.shape)}"
            )
    for name in ("supervised", "sensitive"):
        if getattr(batch, name).dtype != torch.bool:
            raise ValueError(f"{name} must be a bool tensor, got {getattr(batch, name).dtype}")
    if config.confidence == "reference":
        if batch.reference_confidence is None:
            raise ValueError(
                "method.confidence is 'reference' but the batch has no reference_confidence"
            )
        if batch.reference_confidence.shape != shape:
            raise ValueError(
                f"reference_confidence must have token_loss's shape {tuple(shape)}, "
                f"got {tuple(batch.reference_confidence.shape)}"
            )


def _confidence(config: MethodConfig, batch: ObjectiveBatch) -> Tensor:
    """p [B, T], detached, from the configured source."""
    if config.confidence == "reference":
        return batch.reference_confidence.detach().to(batch.token_loss.dtype)
    return online_confidence(batch.token_loss)


def _denominator(num_items_in_batch: int | Tensor | None, supervised: Tensor) -> Tensor | float:
    """Supervised tokens before masking (at least 1, so an all-padding batch gives loss 0)."""
    if num_items_in_batch is None:
        return supervised.sum().clamp(min=1)
    if isinstance(num_items_in_batch, Tensor):
        return num_items_in_batch.to(supervised.device).clamp(min=1)
    return float(max(num_items_in_batch, 1))


def _metrics(
    token_loss: Tensor,
    p: Tensor,
    supervised: Tensor,
    sensitive: Tensor,
    keep: Tensor,
    weights: Tensor,
    region_low: Tensor | None,
    thresholds: dict[str, Tensor | float],
) -> dict[str, float]:
    """Per-step metrics of DESIGN.md §3 for this micro-batch, read back in one device sync.

    Each metric is a (numerator, denominator) pair, a denominator of 1 meaning "defined";
    pairs with a zero denominator are dropped.
    """
    with torch.no_grad():
        non_sensitive = supervised & ~sensitive
        active = supervised.any(dim=1)
        n_supervised = supervised.sum()
        pairs: dict[str, tuple[Tensor, Tensor]] = {
            "ce": ((token_loss.detach() * supervised).sum(), n_supervised),
            "kept_ratio": (keep.sum(), n_supervised),
            "sensitive_share": (sensitive.sum(), n_supervised),
            "p_sensitive_mean": ((p * sensitive).sum(), sensitive.sum()),
            "p_nonsensitive_mean": ((p * non_sensitive).sum(), non_sensitive.sum()),
            "weight_mean": ((weights * active).sum(), active.sum()),
            "weight_max": (weights.masked_fill(~active, float("-inf")).max(), active.any()),
        }
        if region_low is not None:
            pairs["low_conf_region_share"] = (region_low.sum(), torch.tensor(region_low.numel()))
        for name, value in thresholds.items():
            pairs[name] = (torch.as_tensor(value), torch.tensor(1))
        device = token_loss.device
        values = torch.stack(
            [torch.stack((num.to(device, torch.float64), den.to(device, torch.float64)))
             for num, den in pairs.values()]
        ).tolist()
    return {name: num / den for name, (num, den) in zip(pairs, values) if den > 0}
