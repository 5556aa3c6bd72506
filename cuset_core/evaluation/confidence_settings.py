"""What a confidence report measures and how it summarises it (``cuset confidence-report``, the
service's confidence jobs and the kernel view's thresholds), apart from the report itself so that
the API reads it without loading torch."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

from cuset_core.generation.prompts import PromptStyle


class ReportSettings(BaseModel):
    """What to measure and how to summarise it."""

    model_config = ConfigDict(frozen=True)

    model: str = "smollm2-135m"  # a model spec (see cuset_core.models)
    data: Path
    out: Path
    limit: int | None = Field(default=32, ge=1)  # records analysed (None: all)
    prompt_style: PromptStyle = "kernelbench"
    max_tokens: int = Field(default=4096, ge=8)  # longer records are truncated
    high: float = Field(default=0.9, gt=0.0, le=1.0)  # "confident": p >= high
    low: float = Field(default=0.5, gt=0.0, le=1.0)  # "unsure": p < low
    bins: int = Field(default=20, ge=2, le=200)
    top_regions: int = Field(default=20, ge=0)

    @model_validator(mode="after")
    def _ordered_thresholds(self) -> ReportSettings:
        if self.low > self.high:
            raise ValueError(f"low ({self.low}) must not exceed high ({self.high})")
        return self
