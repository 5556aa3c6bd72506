"""The job's ``method`` configuration: which objective, and every knob of DESIGN.md §3."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

MethodName = Literal["sft", "dft", "focal", "profit", "cuset", "cuset_mask", "cuset_reweight"]

MASKING_METHODS = frozenset({"cuset", "cuset_mask"})
REWEIGHTING_METHODS = frozenset({"cuset", "cuset_reweight"})


class MethodConfig(BaseModel, extra="forbid"):
    """One objective and its knobs; fields a method does not use are ignored by it.

    Probabilities (``region_threshold``, ``profit_threshold``) are per-token probabilities of
    the gold token, in [0, 1].
    """

    type: MethodName = "cuset"
    confidence: Literal["online", "reference"] = Field(
        "online",
        description="where p comes from: the training forward pass, or the frozen base model",
    )
    mask_ratio: float = Field(
        0.3, ge=0, lt=1, description="share of non-sensitive tokens dropped (cuset, cuset_mask)"
    )
    mask_warmup_steps: int = Field(
        0, ge=0, description="optimizer steps over which mask_ratio ramps linearly from 0"
    )
    region_quantile: float = Field(
        0.2, gt=0, lt=1, description="quantile of sensitive-token p that sets tau_lo"
    )
    region_threshold: float | None = Field(
        None, ge=0, le=1, description="fixed tau_lo instead of region_quantile"
    )
    reweight_lambda: float = Field(1.0, ge=0, description="w = 1 + lambda * u before normalising")
    w_min: float = Field(0.5, gt=0, le=1, description="lower clip of the sample weights")
    w_max: float = Field(3.0, ge=1, description="upper clip of the sample weights")
    focal_gamma: float = Field(2.0, ge=0, description="focal: exponent of (1 - p)")
    profit_threshold: float = Field(
        0.1, ge=0, lt=1, description="profit: tokens with p below this are dropped"
    )

    @property
    def uses_masking(self) -> bool:
        """Whether the objective drops confident non-sensitive tokens (tau_hi)."""
        return self.type in MASKING_METHODS

    @property
    def uses_reweighting(self) -> bool:
        """Whether the objective reweights samples by low-confidence regions (tau_lo)."""
        return self.type in REWEIGHTING_METHODS

    @property
    def needs_sensitivity(self) -> bool:
        """Whether batches must carry sensitivity masks and region ids (the CuSeT family)."""
        return self.uses_masking or self.uses_reweighting

    def mask_ratio_at(self, step: int) -> float:
        """Effective mask ratio at an optimizer step: linear ramp from 0 over the warmup."""
        if self.mask_warmup_steps == 0:
            return self.mask_ratio
        return self.mask_ratio * min(1.0, max(step, 0) / self.mask_warmup_steps)
