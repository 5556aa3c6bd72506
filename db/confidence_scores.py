"""The answer of a confidence request (``Generation.confidence``): the model's probability of
each answer token of a training record, and each region's summary. Written by the worker
(``worker/tasks/confidence.py``), read by the file analysis endpoint."""

from __future__ import annotations

from pydantic import BaseModel, Field


class TokenScore(BaseModel):
    """One answer token: its answer character span and the model's probability of it."""

    start: int = Field(description="answer character offset, inclusive")
    end: int = Field(description="answer character offset, exclusive")
    p: float = Field(ge=0.0, le=1.0)


class RegionScore(BaseModel):
    """Mean and lowest p of the scored tokens of one region of the answer's analysis."""

    index: int = Field(description="the region's id in the answer's analysis")
    mean_p: float = Field(ge=0.0, le=1.0)
    min_p: float = Field(ge=0.0, le=1.0)
    tokens: int = Field(description="scored tokens of the region")


class AnswerScores(BaseModel):
    tokens: list[TokenScore] = Field(default_factory=list)
    regions: list[RegionScore] = Field(default_factory=list)
