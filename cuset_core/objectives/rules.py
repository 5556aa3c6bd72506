"""The rules of DESIGN.md §3 as small pure functions on [B, T] token tensors.

Shapes: B samples, T positions. ``p`` is the detached probability of the gold token (float),
``supervised`` and ``sensitive`` are bool masks, ``region_ids`` is long with -1 for no region:
the id of the region whose syntactic unit holds the token (on sensitive tokens, the region of
their span). "Region tokens" are the tokens the configured extent gives to regions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

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


def global_mean(values: Tensor, gather: Gather | None) -> Tensor | None:
    """Mean of 1-D ``values`` pooled over ranks (one ``gather`` call); None when all are empty."""
    pooled = gather(values) if gather is not None else values
    if pooled.numel() == 0:
        return None
    return pooled.float().mean()


def region_tokens(extent: str, supervised: Tensor, sensitive: Tensor, region_ids: Tensor) -> Tensor:
    """Bool [B, T]: the supervised tokens that belong to regions. ``span``: the sensitive tokens
    (v1); ``unit``: also every other token of a region's syntactic unit."""
    if extent == "span":
        return supervised & sensitive
    return supervised & (sensitive | (region_ids >= 0))


def plain_keep(rule: str, p: Tensor, supervised: Tensor, region: Tensor, tau_hi: Tensor | None) -> Tensor:
    """Adaptive masking: keep every region token; of the other ("plain") tokens, keep those with
    p <= tau_hi (``confident_plain``: the confident ones are dropped) or p >= tau_hi
    (``uncertain_plain``: the unlikely ones are dropped). Bool [B, T], a subset of
    ``supervised``; without a threshold nothing is dropped."""
    if tau_hi is None:
        return supervised.clone()
    plain_kept = p <= tau_hi if rule == "confident_plain" else p >= tau_hi
    return supervised & (region | plain_kept)


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


@dataclass(frozen=True)
class RegionTable:
    """The regions of a micro-batch, R of them, each a (sample, region id) pair.

    ``confidence`` float [R]; ``sample`` long [R], the row holding the region; ``tokens`` long
    [R], its region tokens; ``region_total`` long [B], every sample's region tokens (those
    outside any region id too, as v1's sensitive tokens without a region)."""

    confidence: Tensor
    sample: Tensor
    tokens: Tensor
    region_total: Tensor


def region_table(p: Tensor, region: Tensor, region_ids: Tensor, how: str) -> RegionTable:
    """Region confidences c(r) over each region's tokens: ``geometric`` exp(mean log p), or the
    arithmetic ``mean`` of p (v1)."""
    member = region & (region_ids >= 0)
    rows = torch.arange(p.shape[0], device=p.device).unsqueeze(1).expand_as(region_ids)
    # Pairing the id with its row keeps regions of different samples apart even if ids repeat.
    keys = torch.stack((rows[member], region_ids[member]), dim=1)
    region_total = region.sum(dim=1)
    if keys.shape[0] == 0:
        empty = torch.zeros(0, dtype=torch.long, device=p.device)
        return RegionTable(torch.zeros(0, dtype=p.dtype, device=p.device), empty, empty, region_total)
    unique_keys, region_of_token = torch.unique(keys, dim=0, return_inverse=True)
    count = unique_keys.shape[0]
    values = p[member]
    if how == "geometric":
        values = torch.log(values.clamp_min(torch.finfo(values.dtype).tiny))
    sums = torch.zeros(count, dtype=values.dtype, device=p.device).index_add_(0, region_of_token, values)
    tokens = torch.bincount(region_of_token, minlength=count)
    mean = sums / tokens
    confidence = torch.exp(mean) if how == "geometric" else mean
    return RegionTable(confidence, unique_keys[:, 0], tokens, region_total)


def low_region_share(table: RegionTable, tau_lo: Tensor | float | None) -> tuple[Tensor, Tensor]:
    """``(u, region_low)``: u float [B], the share of each sample's region tokens lying in
    regions with c(r) < tau_lo (0 without region tokens), and region_low bool [R]. Without a
    threshold (no rank had a region) nothing is low."""
    if tau_lo is None:
        region_low = torch.zeros_like(table.confidence, dtype=torch.bool)
    else:
        region_low = table.confidence < tau_lo
    low_tokens = torch.zeros(table.region_total.shape[0], dtype=torch.float64, device=table.tokens.device)
    low_tokens.index_add_(0, table.sample, (table.tokens * region_low).double())
    return (low_tokens / table.region_total.clamp(min=1)).float(), region_low


def raw_weights(u: Tensor, reweight_lambda: float) -> Tensor:
    """w = 1 + lambda * u, before normalising. Float [B]."""
    return 1.0 + reweight_lambda * u


def normalised_weights(
    raw: Tensor, active: Tensor, normaliser: Tensor | float | None, w_min: float, w_max: float
) -> Tensor:
    """Sample weights, float [B], detached: raw / normaliser clipped to [w_min, w_max]; samples
    without supervised tokens (``active`` False) get weight 1."""
    with torch.no_grad():
        scaled = raw if normaliser is None else raw / normaliser
        weights = scaled.clamp(w_min, w_max)
        return torch.where(active, weights, torch.ones_like(weights))
