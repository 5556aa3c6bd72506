"""What the CuSeT objective remembers between micro-batches: the smoothed tau_lo and the running
mean of the sample weights (DESIGN.md §3). One ``ObjectiveState`` per training run, owned by the
trainer and passed to ``compute_objective``; nothing global.

Smoothing is over optimizer steps, not micro-batches, so gradient accumulation does not change
how fast the statistics move: the micro-batches of one step each use
``decay * ema + (1 - decay) * own statistic`` with the EMA of the completed steps, and the EMA
takes in the step's mean statistic once the next step begins. Statistics are gathered over
data-parallel ranks before they get here, so every rank holds the same state.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor


@dataclass
class StepEMA:
    """Exponential moving average over optimizer steps of a per-micro-batch scalar statistic.

    ``decay`` in [0, 1): 0 uses each micro-batch's own statistic. ``frozen`` values (from a pass
    over the dataset) never move. Values are 0-d tensors, kept on the device of the statistic so
    that no step waits on a device sync.
    """

    decay: float
    value: Tensor | None = None  # EMA over the completed steps; None before the first one
    frozen: bool = False
    _step: int | None = None
    _pending_sum: Tensor | None = None
    _pending_count: int = 0

    def use(self, step: int, observed: Tensor | None) -> Tensor | None:
        """The value for a micro-batch of optimizer step ``step`` whose own statistic is
        ``observed`` (None: the micro-batch has none), recording the statistic for the EMA."""
        if self.frozen:
            return self.value
        if self._step is not None and step != self._step:
            self._fold()
        self._step = step
        if observed is None:
            return self.value
        observed = observed.detach().float()
        self._pending_sum = observed if self._pending_sum is None else self._pending_sum + observed
        self._pending_count += 1
        if self.value is None:
            return observed
        return self.decay * self.value.to(observed.device) + (1.0 - self.decay) * observed

    def _fold(self) -> None:
        """Take the finished step's mean statistic into the EMA."""
        if self._pending_sum is not None:  # set together with a count of at least 1
            mean = self._pending_sum / self._pending_count
            self.value = mean if self.value is None else self.decay * self.value + (1.0 - self.decay) * mean
        self._pending_sum, self._pending_count = None, 0

    def state_dict(self) -> dict[str, Any]:
        """Plain floats to save with a checkpoint (the pending step is folded in first)."""
        self._fold()
        return {"value": None if self.value is None else float(self.value), "step": self._step}

    def load_state_dict(self, saved: dict[str, Any]) -> None:
        """Restore what ``state_dict`` gave (``frozen`` stays as constructed)."""
        if not self.frozen:
            value = saved.get("value")
            self.value = None if value is None else torch.tensor(float(value))
            self._step = saved.get("step")
            self._pending_sum, self._pending_count = None, 0


@dataclass
class ObjectiveState:
    """The EMAs of one CuSeT run: tau_lo and the mean sample weight (the weight normaliser)."""

    tau_lo: StepEMA = field(default_factory=lambda: StepEMA(0.0))
    weight_mean: StepEMA = field(default_factory=lambda: StepEMA(0.0))

    @classmethod
    def for_method(cls, tau_lo_decay: float, normaliser_decay: float) -> ObjectiveState:
        """Fresh EMAs with the method's decays."""
        return cls(StepEMA(tau_lo_decay), StepEMA(normaliser_decay))

    @classmethod
    def from_dataset(cls, tau_lo: float | None, weight_mean: float) -> ObjectiveState:
        """Frozen statistics of one pass over the dataset (``reference`` confidence)."""
        frozen_tau = None if tau_lo is None else torch.tensor(float(tau_lo))
        return cls(
            StepEMA(0.0, frozen_tau, frozen=True),
            StepEMA(0.0, torch.tensor(float(weight_mean)), frozen=True),
        )

    def state_dict(self) -> dict[str, Any]:
        return {"tau_lo": self.tau_lo.state_dict(), "weight_mean": self.weight_mean.state_dict()}

    def load_state_dict(self, saved: dict[str, Any]) -> None:
        self.tau_lo.load_state_dict(saved.get("tau_lo", {}))
        self.weight_mean.load_state_dict(saved.get("weight_mean", {}))
