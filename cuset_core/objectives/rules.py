"""The rules of DESIGN.md §3 as small pure functions on [B, T] token tensors.

Shapes: B samples, T positions. ``p`` is the detached probability of the gold token (float),
``supervised`` and ``sensitive`` are bool masks, ``region_ids`` is long with -1 for no region.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

Gather = Callable[[Tensor], Tensor]


def global_quantile(values: Tensor, q: float, gather: Gather | None) -> Tensor | None:
    """The q-quantile (linear interpolation) of 1-D ``values`` pooled over data-parallel ranks.

    ``gather`` concatenates a 1-D tensor across ranks (None: single process); it is called
    exactly once, even when ``values`` is empty, so every rank takes part in the collective.
    Returns a 0-d float tensor, or None when no rank has any value.
    """
    pooled = gather(values) if gather is not None else values
    if pooled.numel() == 0:
        return None
    return torch.quantile(pooled.float(), q)


def confidence_keep(
    p: Tensor, supervised: Tensor, sensitive: Tensor, tau_hi: Tensor | None
) -> Tensor:
    """Adaptive masking: keep every sensitive token and the non-sensitive ones with p <= tau_hi.

    Returns bool [B, T], a subset of ``supervised``; without a threshold nothing is dropped.
    """
    if tau_hi is None:
        return supervised.clone()
    return supervised & (sensitive | (p <= tau_hi))


def profit_keep(p: Tensor, supervised: Tensor, threshold: float) -> Tensor:
    """PROFIT-style masking: drop supervised tokens whose p is below ``threshold``. Bool [B, T]."""
    return supervised & (p >= threshold)


def token_factor(method: str, p: Tensor, focal_gamma: float) -> Tensor | None:
    """The per-token loss factor: p for ``dft``, (1 - p)^gamma for ``focal``, None (a factor of 1)
    for every other method. Float [B, T] like ``p``, which is detached, so the factor is a weight."""
    if method == "dft":
        return p
    if method == "focal":
        return (1.0 - p) ** focal_gamma
    return None


def low_confidence_tokens(
    p: Tensor, sensitive: Tensor, region_ids: Tensor, tau_lo: Tensor | float | None
) -> tuple[Tensor, Tensor]:
    """Mark the sensitive tokens that lie in low-confidence regions.

    A region is (sample, region id); its confidence is the mean p of its sensitive tokens, and
    it is low-confidence when that mean is below ``tau_lo`` (None: no threshold, as when no rank
    has sensitive tokens, so nothing is low). Returns ``(token_low, region_low)``:
    bool [B, T] over sensitive tokens, and bool [R] over the R regions holding sensitive tokens.
    """
    in_region = sensitive & (region_ids >= 0)
    rows = torch.arange(p.shape[0], device=p.device).unsqueeze(1).expand_as(region_ids)
    # Pairing the id with its row keeps regions of different samples apart even if ids repeat.
    keys = torch.stack((rows[in_region], region_ids[in_region]), dim=1)
    token_low = torch.zeros_like(sensitive)
    if keys.shape[0] == 0 or tau_lo is None:
        return token_low, torch.zeros(0, dtype=torch.bool, device=p.device)
    _, region_of_token = torch.unique(keys, dim=0, return_inverse=True)
    region_count = int(region_of_token.max()) + 1
    p_sum = torch.zeros(region_count, dtype=p.dtype, device=p.device)
    p_sum.index_add_(0, region_of_token, p[in_region])
    tokens = torch.bincount(region_of_token, minlength=region_count)
    region_low = p_sum / tokens < tau_lo
    token_low[in_region] = region_low[region_of_token]
    return token_low, region_low


def region_sample_weights(
    token_low: Tensor,
    sensitive: Tensor,
    supervised: Tensor,
    reweight_lambda: float,
    w_min: float,
    w_max: float,
) -> Tensor:
    """Region-aware sample weights, float [B], detached.

    u[i] = share of sample i's sensitive tokens in low-confidence regions (0 without any);
    w[i] = 1 + lambda * u[i], divided by its mean over the samples that have supervised tokens,
    then clipped to [w_min, w_max]. Samples without supervised tokens get weight 1.
    """
    with torch.no_grad():
        sensitive_count = sensitive.sum(dim=1)
        u = token_low.sum(dim=1) / sensitive_count.clamp(min=1)
        raw = 1.0 + reweight_lambda * u
        active = supervised.any(dim=1)
        mean = (raw * active).sum() / active.sum().clamp(min=1)
        weights = (raw / mean).clamp(w_min, w_max)
        return torch.where(active, weights, torch.ones_like(weights))
