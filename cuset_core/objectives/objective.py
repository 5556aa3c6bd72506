"""One interface for every objective: per-token losses and masks in, loss, keep mask, sample
weights and metrics out (DESIGN.md §3, definition v2; v1 through the knobs).

Definitions, with p the detached probability of the gold token and l = -log p from the
training forward pass, and "region tokens" the supervised tokens the configured
``region_extent`` gives to regions:

- ``sft``: keep every supervised token, weight 1.
- ``dft``: per-token loss p * l (p detached, as in DFT's sg(p)).
- ``focal``: per-token loss (1 - p)^gamma * l. p is detached, as DESIGN.md's notation defines
  it, so the modulating factor is a constant weight; the original focal loss (Lin et al., 2017)
  differentiates through it. A detached factor is also the only form that works with
  ``reference`` confidence.
- ``profit``: drop supervised tokens with p < profit_threshold.
- ``cuset_mask``: keep every region token; drop plain (non-region) tokens by ``mask_rule``
  against tau_hi, a quantile of plain-token p in the micro-batch, pooled over ranks.
- ``cuset_reweight``: sample weights from low-confidence regions: c(r) < tau_lo, where tau_lo
  is fixed or a quantile pooled over ranks and smoothed over steps; w = 1 + lambda * u divided
  by a running mean of w, clipped.
- ``cuset``: both; ``cuset_v1``: both with every v1 knob.

Every objective uses the configured confidence source for p (``reference``: the frozen base
model's p from the batch), while l always comes from the forward pass. The loss is
sum_{i,t} w[i] * keep[i,t] * f[i,t] * l[i,t] / num_items_in_batch, where f is the dft/focal
factor (1 otherwise) and num_items_in_batch counts the supervised tokens of the whole
optimizer-step batch before masking, so all objectives share one denominator.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch
from torch import Tensor

from cuset_core.objectives.config import MethodConfig
from cuset_core.objectives.rules import (
    Gather,
    global_mean,
    global_quantile,
    low_region_share,
    normalised_weights,
    plain_keep,
    profit_keep,
    raw_weights,
    region_table,
    region_tokens,
    token_factor,
)
from cuset_core.objectives.state import ObjectiveState
from cuset_core.objectives.token_loss import token_probability


@dataclass
class ObjectiveBatch:
    """The per-token view of one micro-batch. All [B, T] tensors share one device.

    ``token_loss``: float [B, T] from ``per_token_loss``, with grad. ``supervised``: bool [B, T].
    ``sensitive``: bool [B, T] (only supervised positions count). ``region_ids``: long [B, T],
    the region whose syntactic unit holds the token (for sensitive tokens, their span's region),
    -1 for none. ``num_items_in_batch``: supervised tokens of the whole optimizer-step batch
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
    config: MethodConfig,
    batch: ObjectiveBatch,
    gather: Gather | None = None,
    state: ObjectiveState | None = None,
) -> ObjectiveOutput:
    """Apply the configured objective to one micro-batch.

    ``gather`` concatenates a 1-D tensor across data-parallel ranks (None: single process). It
    is called for tau_hi (masking, when the effective mask ratio is above 0), then for tau_lo
    (reweighting, unless ``region_threshold`` is set or the statistics come from the dataset)
    and for the weight normaliser (unless from the dataset); these conditions depend only on the
    config and the step, so every rank makes the same calls. ``state`` carries tau_lo's EMA and
    the running mean weight across calls (None: a fresh state, as on a run's first step).
    """
    _check_batch(config, batch)
    token_loss = batch.token_loss
    supervised = batch.supervised
    sensitive = batch.sensitive & supervised
    p = _confidence(config, batch)
    region = region_tokens(config.region_extent, supervised, sensitive, batch.region_ids)

    keep = supervised.clone()
    statistics: dict[str, Tensor | float] = {}  # thresholds and normaliser used
    if config.type == "profit":
        keep = profit_keep(p, supervised, config.profit_threshold)
    mask_ratio = config.mask_ratio_at(batch.step)
    if config.uses_masking and mask_ratio > 0:
        q = 1.0 - mask_ratio if config.mask_rule == "confident_plain" else mask_ratio
        tau_hi = global_quantile(p[supervised & ~region], q, gather)
        keep = plain_keep(config.mask_rule, p, supervised, region, tau_hi)
        if tau_hi is not None:
            statistics["tau_hi"] = tau_hi

    weights = torch.ones(supervised.shape[0], dtype=token_loss.dtype, device=token_loss.device)
    region_low = None
    if config.uses_reweighting:
        state = state if state is not None else _fresh_state(config)
        weights, region_low, reweighting = _reweight(
            config, batch.step, p, region, batch.region_ids, supervised, gather, state
        )
        weights = weights.to(token_loss.dtype)
        statistics.update(reweighting)

    per_token = torch.where(keep, token_loss, torch.zeros_like(token_loss))
    factor = token_factor(config.type, p, config.focal_gamma)
    if factor is not None:
        per_token = per_token * factor
    denominator = _denominator(batch.num_items_in_batch, supervised)
    loss = (per_token.sum(dim=1) * weights).sum() / denominator

    metrics = _metrics(token_loss, p, supervised, sensitive, keep, weights, region_low, statistics)
    if config.uses_masking:
        metrics["mask_ratio"] = mask_ratio
    return ObjectiveOutput(loss=loss, keep=keep, sample_weights=weights, metrics=metrics)


def _fresh_state(config: MethodConfig) -> ObjectiveState:
    if config.dataset_reweighting:
        raise ValueError("method.reweight_scope is 'dataset' but no state from a pass over the dataset was given")
    return ObjectiveState.for_method(config.tau_lo_decay, config.normaliser_decay)


def _reweight(
    config: MethodConfig,
    step: int,
    p: Tensor,
    region: Tensor,
    region_ids: Tensor,
    supervised: Tensor,
    gather: Gather | None,
    state: ObjectiveState,
) -> tuple[Tensor, Tensor, dict[str, Tensor | float]]:
    """Sample weights float [B], region_low bool [R], and the statistics used (tau_lo and the
    weight normaliser) for the metrics."""
    table = region_table(p, region, region_ids, config.region_confidence)
    tau_lo: Tensor | float | None = config.region_threshold
    if tau_lo is None:
        statistic = None
        if not state.tau_lo.frozen:
            values = table.confidence if config.tau_lo_from == "regions" else p[region]
            statistic = global_quantile(values, config.region_quantile, gather)
        tau_lo = state.tau_lo.use(step, statistic)
    u, region_low = low_region_share(table, tau_lo)
    raw = raw_weights(u, config.reweight_lambda)
    active = supervised.any(dim=1)
    observed = None if state.weight_mean.frozen else global_mean(raw[active], gather)
    normaliser = state.weight_mean.use(step, observed)
    weights = normalised_weights(raw, active, normaliser, config.w_min, config.w_max)
    used: dict[str, Tensor | float] = {}
    if tau_lo is not None:
        used["tau_lo"] = tau_lo
    if normaliser is not None:
        used["weight_normaliser"] = normaliser
    return weights, region_low, used


def dataset_state(config: MethodConfig, batches: Iterable[ObjectiveBatch]) -> ObjectiveState:
    """tau_lo and the weight normaliser from one pass over a whole dataset, frozen for training
    (``reference`` confidence, whose p never changes): tau_lo is ``region_threshold`` or the
    ``region_quantile`` of every region's confidence (of every region token's p with
    ``tau_lo_from: tokens``), and the normaliser the mean raw weight 1 + lambda * u over every
    sample. ``batches`` carry ``reference_confidence``; their token losses are not read."""
    tables = []
    statistics = []
    for batch in batches:
        _check_batch(config, batch)
        supervised = batch.supervised
        p = _confidence(config, batch)
        region = region_tokens(config.region_extent, supervised, batch.sensitive & supervised, batch.region_ids)
        table = region_table(p, region, batch.region_ids, config.region_confidence)
        tables.append((table, supervised.any(dim=1)))
        statistics.append(table.confidence if config.tau_lo_from == "regions" else p[region])
    tau_lo: Tensor | float | None = config.region_threshold
    if tau_lo is None and statistics:
        tau_lo = global_quantile(torch.cat(statistics), config.region_quantile, None)
    raws = [raw_weights(low_region_share(table, tau_lo)[0], config.reweight_lambda)[active] for table, active in tables]
    mean = global_mean(torch.cat(raws), None) if raws else None
    return ObjectiveState.from_dataset(None if tau_lo is None else float(tau_lo), 1.0 if mean is None else float(mean))


def _check_batch(config: MethodConfig, batch: ObjectiveBatch) -> None:
    """Reject batches whose tensors do not fit together (programming errors, one clear line)."""
    shape = batch.token_loss.shape
    if batch.token_loss.dim() != 2:
        raise ValueError(f"token_loss must be [B, T], got {tuple(shape)}")
    for name in ("supervised", "sensitive", "region_ids"):
        tensor = getattr(batch, name)
        if tensor.shape != shape:
            raise ValueError(f"{name} must have token_loss's shape {tuple(shape)}, got {tuple(tensor.shape)}")
    for name in ("supervised", "sensitive"):
        if getattr(batch, name).dtype != torch.bool:
            raise ValueError(f"{name} must be a bool tensor, got {getattr(batch, name).dtype}")
    if config.confidence == "reference":
        if batch.reference_confidence is None:
            raise ValueError("method.confidence is 'reference' but the batch has no reference_confidence")
        if batch.reference_confidence.shape != shape:
            raise ValueError(
                f"reference_confidence must have token_loss's shape {tuple(shape)}, "
                f"got {tuple(batch.reference_confidence.shape)}"
            )


def _confidence(config: MethodConfig, batch: ObjectiveBatch) -> Tensor:
    """p [B, T], detached, from the configured source."""
    if config.confidence == "reference":
        assert batch.reference_confidence is not None, "_check_batch rejects a reference batch without it"
        return batch.reference_confidence.detach().to(batch.token_loss.dtype)
    return token_probability(batch.token_loss)


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
    statistics: dict[str, Tensor | float],
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
            # The share of SFT's gradient scale that masking removed: d(l)/d(logit of the gold
            # token) = p - 1, so each token's pull on the model scales with 1 - p.
            "dropped_grad_share": (((1.0 - p) * (supervised & ~keep)).sum(), ((1.0 - p) * supervised).sum()),
            "sensitive_share": (sensitive.sum(), n_supervised),
            "p_sensitive_mean": ((p * sensitive).sum(), sensitive.sum()),
            "p_nonsensitive_mean": ((p * non_sensitive).sum(), non_sensitive.sum()),
            "weight_mean": ((weights * active).sum(), active.sum()),
            "weight_max": (weights.masked_fill(~active, float("-inf")).max(), active.any()),
        }
        if region_low is not None:
            pairs["low_conf_region_share"] = (region_low.sum(), torch.tensor(region_low.numel()))
        for name, value in statistics.items():
            pairs[name] = (torch.as_tensor(value), torch.tensor(1))
        device = token_loss.device
        values = torch.stack(
            [torch.stack((num.to(device, torch.float64), den.to(device, torch.float64))) for num, den in pairs.values()]
        ).tolist()
    return {name: num / den for name, (num, den) in zip(pairs, values) if den > 0}
