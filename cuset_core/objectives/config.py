"""The job's ``method`` configuration: which objective, and every knob of DESIGN.md §3.

The CuSeT knobs default to definition v2. ``cuset_v1`` is the same objective with every knob at
its v1 value (``V1_KNOBS``), unless the config sets a knob itself.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator

MethodName = Literal["sft", "dft", "focal", "profit", "cuset", "cuset_mask", "cuset_reweight", "cuset_v1"]

MASKING_METHODS = frozenset({"cuset", "cuset_mask", "cuset_v1"})
REWEIGHTING_METHODS = frozenset({"cuset", "cuset_reweight", "cuset_v1"})

V1_KNOBS: dict[str, Any] = {
    "region_extent": "span",
    "region_confidence": "mean",
    "mask_rule": "confident_plain",
    "tau_lo_from": "tokens",
    "tau_lo_decay": 0.0,
    "normaliser_decay": 0.0,
    "reweight_scope": "step",
    "reweight_lambda": 1.0,
    "w_max": 3.0,
}
"""Definition v1: span extent, arithmetic-mean region confidence, tau_lo a quantile of token p
(no smoothing), weights normalised by the micro-batch mean, lambda 1, w_max 3."""


class MethodConfig(BaseModel, extra="forbid"):
    """One objective and its knobs; fields a method does not use are ignored by it.

    Probabilities (``region_threshold``, ``profit_threshold``) are per-token probabilities of
    the gold token, in [0, 1]. Decays are per optimizer step; 0 means no smoothing (the
    micro-batch's own statistic).
    """

    type: MethodName = "cuset"
    confidence: Literal["online", "reference"] = Field(
        "online",
        description="where p comes from: the training forward pass, or the frozen base model",
    )
    region_extent: Literal["unit", "span"] = Field(
        "unit",
        description="region tokens: every token of the smallest syntactic unit holding a sensitive "
        "span (unit), or only the span's tokens (span, v1)",
    )
    region_confidence: Literal["geometric", "mean"] = Field(
        "geometric",
        description="c(r) = exp(mean of log p) over the region's tokens (geometric), or mean p (v1)",
    )
    mask_rule: Literal["confident_plain", "uncertain_plain", "none"] = Field(
        "confident_plain",
        description="which non-region tokens are dropped: p above the (1 - mask_ratio) quantile "
        "(confident_plain), p below the mask_ratio quantile (uncertain_plain), none",
    )
    mask_ratio: float = Field(0.3, ge=0, lt=1, description="share of non-region tokens dropped (cuset, cuset_mask)")
    mask_warmup_steps: int = Field(0, ge=0, description="optimizer steps over which mask_ratio ramps linearly from 0")
    region_quantile: float = Field(
        0.2,
        gt=0,
        lt=1,
        description="quantile of region confidences (or of region-token p, tau_lo_from=tokens) that sets tau_lo",
    )
    tau_lo_from: Literal["regions", "tokens"] = Field(
        "regions",
        description="what region_quantile is taken of: region confidences c(r), or the p of region tokens (v1)",
    )
    tau_lo_decay: float = Field(0.9, ge=0, lt=1, description="EMA decay of the adaptive tau_lo over optimizer steps")
    region_threshold: float | None = Field(None, ge=0, le=1, description="fixed tau_lo instead of region_quantile")
    reweight_lambda: float = Field(2.0, ge=0, description="w = 1 + lambda * u before normalising")
    normaliser_decay: float = Field(
        0.9,
        ge=0,
        lt=1,
        description="EMA decay of the mean weight that w is divided by (0: the micro-batch mean)",
    )
    reweight_scope: Literal["auto", "step", "dataset"] = Field(
        "auto",
        description="where tau_lo and the weight normaliser come from: the training steps, or "
        "one pass over the dataset (only with reference confidence); auto picks dataset for "
        "reference confidence",
    )
    w_min: float = Field(0.5, gt=0, le=1, description="lower clip of the sample weights")
    w_max: float = Field(4.0, ge=1, description="upper clip of the sample weights")
    focal_gamma: float = Field(2.0, ge=0, description="focal: exponent of (1 - p)")
    profit_threshold: float = Field(0.1, ge=0, lt=1, description="profit: tokens with p below this are dropped")

    @model_validator(mode="before")
    @classmethod
    def _v1_defaults(cls, data: Any) -> Any:
        """``cuset_v1`` starts from the v1 knobs; knobs the config sets still win."""
        if isinstance(data, dict) and data.get("type") == "cuset_v1":
            return {**V1_KNOBS, **data}
        return data

    @model_validator(mode="after")
    def _consistent(self) -> MethodConfig:
        if self.type == "cuset_mask" and self.mask_rule == "none":
            raise ValueError("mask_rule 'none' leaves cuset_mask nothing to do: use type 'sft'")
        if self.reweight_scope == "dataset" and self.confidence != "reference":
            raise ValueError("reweight_scope 'dataset' needs confidence 'reference' (online p changes every step)")
        return self

    @property
    def uses_masking(self) -> bool:
        """Whether the objective drops non-region tokens by confidence (tau_hi)."""
        return self.type in MASKING_METHODS and self.mask_rule != "none"

    @property
    def uses_reweighting(self) -> bool:
        """Whether the objective reweights samples by low-confidence regions (tau_lo)."""
        return self.type in REWEIGHTING_METHODS

    @property
    def needs_sensitivity(self) -> bool:
        """Whether batches must carry sensitivity masks and region ids (the CuSeT family)."""
        return self.uses_masking or self.uses_reweighting

    @property
    def dataset_reweighting(self) -> bool:
        """Whether tau_lo and the weight normaliser are computed once over the dataset."""
        if not self.uses_reweighting:
            return False
        if self.reweight_scope == "auto":
            return self.confidence == "reference"
        return self.reweight_scope == "dataset"

    def mask_ratio_at(self, step: int) -> float:
        """Effective mask ratio at an optimizer step: linear ramp from 0 over the warmup."""
        if self.mask_warmup_steps == 0:
            return self.mask_ratio
        return self.mask_ratio * min(1.0, max(step, 0) / self.mask_warmup_steps)
