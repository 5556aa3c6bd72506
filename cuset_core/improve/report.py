"""What one self-training round did: the figures a run's report, its progress lines and the
service's job metrics all carry."""

from __future__ import annotations

from pydantic import BaseModel, Field


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
