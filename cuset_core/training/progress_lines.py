"""The lines a training run writes to its progress JSONL (and echoes on stdout), one typed model
per kind. The run writes them (``ProgressWriter``); the service's supervisor and ``cuset tune``
read them back with :func:`parse_line`, so the three agree on one shape.

Each line is one JSON object with ``type`` naming its kind and ``time`` (Unix seconds) when it
was written. A step's objective metrics stand flat beside the step's fields, as runs recorded them
from the start (the comparison scripts read old runs' files).
"""

from __future__ import annotations

import time
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

# A step's (or a self-training round's) figures by name: what its metrics row and the checkpoint
# saved at it record. Open-ended, as each objective reports figures of its own.
Metrics = dict[str, int | float | None]


class _Line(BaseModel):
    model_config = ConfigDict(extra="ignore")  # a newer run's extra field is no reason to drop its line

    time: float = Field(default_factory=lambda: round(time.time(), 3), description="Unix seconds when written")


class ObjectiveMetrics(BaseModel):
    """The objective's metrics of a logged step (cuset_core/objectives, drained from the
    ``MetricStash``); None where the method has no such figure."""

    ce: float | None = None
    kept_ratio: float | None = None
    dropped_grad_share: float | None = None
    mask_ratio: float | None = None
    tau_hi: float | None = None
    tau_lo: float | None = None
    sensitive_share: float | None = None
    p_sensitive_mean: float | None = None
    p_nonsensitive_mean: float | None = None
    low_conf_region_share: float | None = None
    weight_mean: float | None = None
    weight_max: float | None = None
    weight_normaliser: float | None = None


OBJECTIVE_METRICS = tuple(ObjectiveMetrics.model_fields)


class StepLine(_Line, ObjectiveMetrics):
    """One logged optimizer step: the loss, the objective's metrics (flat beside the step's own
    fields) and throughput."""

    type: Literal["progress"] = "progress"
    step: int
    max_steps: int
    epoch: float = 0.0
    loss: float | None = Field(description="training loss (None when it was not finite)")
    learning_rate: float | None = None
    grad_norm: float | None = None
    tokens_per_s: float = Field(0.0, description="input tokens per second since this attempt started")
    trained_tokens: int = Field(0, description="input tokens seen, every attempt together")
    eta_s: float | None = Field(None, description="seconds left at this attempt's pace")

    def metrics(self) -> Metrics:
        """What a step's metrics row holds: everything but the step's place and the run's pace."""
        return self.model_dump(exclude={"type", "time", "step", "max_steps", "trained_tokens", "eta_s"})


EventLevel = Literal["info", "warning", "error"]


class EventLine(_Line):
    """A line for humans. ``topic`` lets a reader tell kinds apart (``"data"``: what loading a data
    file found, which the service reported when it validated the file)."""

    type: Literal["event"] = "event"
    level: EventLevel = "info"
    message: str
    topic: str | None = None


class CheckpointLine(_Line):
    """A checkpoint saved at ``step`` in the folder ``path``."""

    type: Literal["checkpoint"] = "checkpoint"
    step: int
    path: str


class EvalLine(_Line):
    """The validation loss at ``step``."""

    type: Literal["eval"] = "eval"
    step: int
    eval_loss: float | None


class DoneLine(_Line):
    """The run finished and saved its result in ``output_dir``."""

    type: Literal["done"] = "done"
    output_dir: str
    adapter_path: str | None = Field(None, description="the LoRA adapter's folder; None for a full fine-tune")
    steps: int
    train_tokens: int


class RoundReport(BaseModel):
    """One round's figures; ``seconds`` per stage (``sample_verify``, ``train``), wall clock."""

    round: int
    model: str = Field(description="the model the round sampled from")
    sampled: int
    compiled: int
    passed: int
    kept: int
    kept_total: int
    problems_solved: int = Field(description="distinct problems with a kept answer, over all rounds so far")
    fed_by: list[str] = Field(description="problems whose kept answers the round's tuning added")
    trained: bool = Field(
        description="False when there was nothing to tune on, or nothing kept since the model it sampled from was tuned"
    )
    tuned_model: str | None
    trained_tokens: int = Field(0, description="input tokens the round's tuning saw")
    seconds: dict[str, float]


class RoundLine(_Line, RoundReport):
    """A self-training round finished (``python -m cuset_core.improve``): its figures, out of
    ``rounds``, and the seconds left at this attempt's pace."""

    type: Literal["round"] = "round"
    rounds: int
    eta_s: float | None = None

    def metrics(self) -> Metrics:
        """What the round's metrics row holds: its counts and the seconds of each stage."""
        counts = self.model_dump(include={"sampled", "compiled", "passed", "kept", "kept_total", "problems_solved"})
        return {**counts, "trained_tokens": self.trained_tokens, **{f"{k}_s": v for k, v in self.seconds.items()}}


class StageLine(_Line):
    """A stage of a self-training round advanced (``python -m cuset_core.improve``): ``done`` of
    ``total`` problems sampled or verified so far."""

    type: Literal["stage"] = "stage"
    round: int
    rounds: int
    stage: Literal["sampling", "verifying"]
    done: int
    total: int


class ErrorLine(_Line):
    """The run failed; the last line it writes."""

    type: Literal["error"] = "error"
    message: str


ProgressLine = Annotated[
    StepLine | EventLine | CheckpointLine | EvalLine | RoundLine | StageLine | DoneLine | ErrorLine,
    Field(discriminator="type"),
]
_LINE = TypeAdapter(ProgressLine)


def parse_line(raw: str | bytes) -> ProgressLine | None:
    """One line of a progress file; None for a torn line (its writer was killed mid-write), a
    line that is not a progress line, or a kind this version does not know."""
    try:
        return _LINE.validate_json(raw)
    except ValidationError:
        return None
