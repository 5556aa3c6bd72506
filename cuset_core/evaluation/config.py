"""What defines an evaluation run: the problems and answers or model, the decoding, and the
verification knobs (:class:`EvalConfig`, recorded in its results).

Each knob is declared here once, with its default, bounds and meaning: ``cuset eval`` builds its
options from these fields and ``POST /v1/evals`` takes :class:`EvalKnobs` as its body, so a knob
means, defaults and is refused the same on every road."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, model_validator

from cuset_core.evaluation.card import CARD, recorded_eval_settings
from cuset_core.evaluation.settings import VerificationSettings
from cuset_core.generation.endpoint import is_endpoint_spec, parse_endpoint
from cuset_core.models import DtypeName, recorded_prompt_style
from cuset_core.verify.result import Tier

MAX_REPAIR_ROUNDS = 10  # each round may decode again every sample that is still failing


class EvalKnobs(VerificationSettings):
    """How an evaluation samples and verifies, whatever it runs on: the verification knobs of
    ``VerificationSettings``, the decoding and the problems kept. What the service stores as an
    eval's ``config`` (its model and problem set are columns of their own)."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    greedy: bool = Field(True, description="draw one greedy sample per problem, apart: greedy compile@1, cpu_correct@1")
    samples: int = Field(0, ge=0, le=1000, description="n: i.i.d. samples per problem at temperature, for pass@k")
    k: list[Annotated[int, Field(ge=1)]] | None = Field(
        None, description="the k of pass@k, each at most samples; null: 1 and samples"
    )
    temperature: float = Field(0.8, ge=0.0, le=2.0, description=f"of the i.i.d. samples; {CARD} (cuset-ew-135m: 0.7)")
    top_p: float = Field(0.95, gt=0.0, le=1.0, description=f"nucleus sampling of the i.i.d. samples; {CARD}")
    max_new_tokens: int = Field(1024, ge=1, description=f"new tokens per answer; {CARD} (cuset-ew-135m: 768)")
    prompt_style: Literal["kernelbench", "compact"] | None = Field(
        None,
        description=f"the prompt format; {CARD}, else the one an adapter was tuned with (recorded beside it; "
        "cuset-ew-135m: compact), else kernelbench",
    )
    seed: int = Field(0, description="seed of the i.i.d. samples' draws")
    batch_size: int = Field(4, ge=1, description="problems generated together (progress advances per batch)")
    dtype: DtypeName = Field(
        "auto",
        description="the model's weights while generating: auto (bfloat16 on a GPU that supports it, else "
        "float32), or by name (bfloat16 on a CPU with AMX: about twice float32's tokens per second)",
    )
    repair_rounds: int = Field(
        0,
        ge=0,
        le=MAX_REPAIR_ROUNDS,
        description="R: times a failing sample (greedy or i.i.d.) is sent back to the model with its verifier "
        "error as a follow-up turn; the results then also give the figures within R repairs (with answers "
        "given, the model repairs them)",
    )
    problem_ids: str | None = Field(
        None,
        max_length=2000,
        description="only these problems of the set, by KernelBench number or id: '1-10,19,23_Softmax' "
        "(a KernelBench level, say); null: all",
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


def impossible_draws(knobs: EvalKnobs) -> tuple[str, str] | None:
    """Why the samples ``knobs`` ask a model for cannot be drawn, as (the field, the message);
    None when they can. Scoring given answers draws nothing, so this holds only when generating."""
    if not knobs.greedy and knobs.samples == 0:
        return "samples", "nothing to generate: turn greedy on or ask for samples >= 1"
    for k in knobs.k or []:
        if k > knobs.samples:
            return "k", f"k={k}: pass@k needs 1 <= k <= samples ({knobs.samples} i.i.d. samples per problem)"
    return None


class EvalConfig(EvalKnobs):
    """Everything that defines an evaluation run: the source (a model, or answers to score), the
    problems, the knobs (``EvalKnobs``) and how this process runs it; recorded in its results."""

    model: str | None = Field(
        None,
        description="model spec: smollm2-135m, a folder, a .gguf, an adapter, a shipped adapter's name "
        "(cuset-ew-135m); or openai:URL#NAME for any OpenAI-compatible endpoint (URL as the openai client's "
        "base_url, e.g. http://127.0.0.1:8000/v1); null with answers",
    )
    answers: Path | None = Field(
        None,
        description='JSONL of {"problem_id","answer","greedy"?: bool} or {"id","samples":[...],"greedy"?: str} '
        "rows, or a KernelBench runs/<run_name> folder of level_<L>_problem_<P>_sample_<S>_kernel.py files, to "
        "score instead of generating",
    )
    problems: str = Field(
        description='folder of KernelBench .py problems, a .py file, a .jsonl of {"id","problem"} rows, "demo" '
        'or "demo:held-out"'
    )
    workers: int = Field(1, ge=1, le=64, description="problems verified at once (each check is its own sandbox)")
    cache: bool = Field(True, description="reuse cached verification results")
    cache_dir: Path | None = Field(
        None, description="verification cache folder; null: the core's (~/.cache/cuset/verify, cuset_core/paths.py)"
    )

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

    @property
    def style(self) -> Literal["kernelbench", "compact"]:
        """The prompt style in effect (validation fills ``prompt_style`` in; never None after it)."""
        return self.prompt_style or "kernelbench"

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
        if self.answers is None and (refused := impossible_draws(self)) is not None:
            raise ValueError(refused[1])
        return self

    @property
    def k_values(self) -> list[int]:
        """The k of pass@k when generating: ``k`` sorted, or 1 and ``samples``; [] without samples."""
        if self.k is not None:
            return sorted(set(self.k))
        return sorted({1, self.samples}) if self.samples else []
