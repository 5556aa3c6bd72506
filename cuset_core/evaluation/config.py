"""What defines an evaluation run: the problems and answers or model, the decoding, and the
verification knobs (:class:`EvalConfig`, recorded in its results)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import ConfigDict, Field, model_validator

from cuset_core.evaluation.card import recorded_eval_settings
from cuset_core.evaluation.settings import VerificationSettings
from cuset_core.generation.endpoint import is_endpoint_spec, parse_endpoint
from cuset_core.models import recorded_prompt_style
from cuset_core.verify.result import Tier

MAX_REPAIR_ROUNDS = 10  # each round may decode again every sample that is still failing


class EvalKnobs(VerificationSettings):
    """How an evaluation samples and verifies, whatever it runs on: the verification knobs of
    ``VerificationSettings``, the decoding and the problems kept. What the service stores as an
    eval's ``config`` (its model and problem set are columns of their own)."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    greedy: bool = Field(True, description="draw one greedy sample per problem, apart (greedy metrics)")
    samples: int = Field(0, ge=0, le=1000, description="n: i.i.d. samples per problem at temperature (pass@k)")
    k: list[int] | None = Field(None, description="the k of pass@k; None: 1 and n")
    temperature: float = Field(0.8, ge=0.0, description="of the i.i.d. samples")
    top_p: float = Field(0.95, gt=0.0, le=1.0)
    max_new_tokens: int = Field(1024, ge=1)
    prompt_style: Literal["kernelbench", "compact"] | None = Field(
        None, description="None: the style the adapter was tuned with (recorded beside it), else kernelbench"
    )
    seed: int = 0
    batch_size: int = Field(4, ge=1, description="problems per generation batch")
    repair_rounds: int = Field(
        0,
        ge=0,
        le=MAX_REPAIR_ROUNDS,
        description="R: times a failing sample (greedy or i.i.d.) is sent back to the model with its verifier "
        "error as a follow-up turn; the results then also give the figures within R repairs",
    )
    problem_ids: str | None = Field(
        None,
        description="the problems to keep, by KernelBench number or id: '1-10,19,23_Softmax'; None: all",
    )

    @model_validator(mode="before")
    @classmethod
    def _legacy_greedy_first(cls, data: Any) -> Any:
        """Configs recorded before the greedy sample was drawn apart: ``greedy_first`` made
        sample 0 of ``samples`` greedy, so the same draws are 1 greedy + samples - 1 i.i.d."""
        if isinstance(data, dict) and "greedy_first" in data:
            data = dict(data)
            first = bool(data.pop("greedy_first"))
            data.setdefault("greedy", first)
            data["samples"] = int(data.get("samples", 1)) - int(first)
        return data


class EvalConfig(EvalKnobs):
    """Everything that defines an evaluation run: the source (a model, or answers to score), the
    problems, the knobs (``EvalKnobs``) and how this process runs it; recorded in its results."""

    model: str | None = Field(
        None, description="model spec (see cuset_core.models) or openai:URL#NAME (an endpoint); None with answers"
    )
    answers: Path | None = Field(
        None, description="JSONL answers, or a KernelBench runs/<name> folder, to score instead of generating"
    )
    problems: str = Field(description='folder of .py problems, a .py file, a .jsonl file, "demo", "demo:held-out"')
    workers: int = Field(1, ge=1, le=64, description="problems verified at once (each check is its own sandbox)")
    cache: bool = Field(True, description="reuse cached verification results")
    cache_dir: Path | None = Field(None, description="verification cache folder; None: the default one")

    @classmethod
    def of(cls, knobs: EvalKnobs, *, model: str | None, problems: str) -> EvalConfig:
        """The run of ``knobs`` on ``model`` over ``problems`` (this process's defaults for the
        rest). Only the knobs ``knobs`` has set count as asked for, so an adapter's card fills in
        the others as it would for a run given the same knobs directly."""
        return cls(model=model, problems=problems, **knobs.model_dump(exclude_unset=True))

    @model_validator(mode="after")
    def _card_defaults(self) -> EvalConfig:
        """An adapter whose card recorded its evaluation settings (cuset_core/evaluation/card.py)
        is measured under them: tier, temperature, top-p, prompt style and token budget, each
        unless set here."""
        for key, value in recorded_eval_settings(self.model).items():
            if key not in self.model_fields_set or (key == "prompt_style" and self.prompt_style is None):
                setattr(self, key, Tier(value) if key == "tier" else value)
        return self

    @model_validator(mode="after")
    def _default_prompt_style(self) -> EvalConfig:
        """An adapter is measured on the prompt it was tuned on unless a style is asked for."""
        if self.prompt_style is None:
            self.prompt_style = recorded_prompt_style(self.model) or "kernelbench"
        return self

    @model_validator(mode="after")
    def _one_source(self) -> EvalConfig:
        if self.model is None and self.answers is None:
            raise ValueError("give exactly one of model (to generate answers) or answers (to score them)")
        if self.model is not None and self.answers is not None and not self.repair_rounds:
            raise ValueError("give exactly one of model (to generate answers) or answers (to score them)")
        if self.repair_rounds and self.model is None:
            raise ValueError("repair_rounds: repairs need a model to send failing samples back to")
        if self.model is not None and is_endpoint_spec(self.model):
            parse_endpoint(self.model)
        generating = self.answers is None
        if generating and not self.greedy and self.samples == 0:
            raise ValueError("nothing to generate: turn greedy on or ask for samples >= 1")
        for k in self.k or []:
            if k < 1 or (generating and k > self.samples):
                raise ValueError(f"k={k}: pass@k needs 1 <= k <= samples ({self.samples} i.i.d. samples per problem)")
        return self

    @property
    def k_values(self) -> list[int]:
        """The k of pass@k when generating: ``k`` sorted, or 1 and ``samples``; [] without samples."""
        if self.k is not None:
            return sorted(set(self.k))
        return sorted({1, self.samples}) if self.samples else []
