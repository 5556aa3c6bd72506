"""A confidence request (``Generation.request`` of a row of kind ``confidence``: which record of
which file, scored by which model) and its answer (``Generation.confidence``): the model's
probability of each answer token of the record, and each region's summary. Written by the
worker (``worker/tasks/confidence.py``), read by the file analysis endpoint."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class ConfidenceRequest(BaseModel):
    """Score record ``n`` of file ``file_id`` with ``model`` (resolved to its ``spec``)."""

    # Another kind's request never reads as this one (Generation.request holds either).
    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    file_id: str
    n: int = Field(ge=0, description="the record's 0-based position in the file")
    model: str
    spec: str = Field(description="cuset_core model spec of the model")


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
