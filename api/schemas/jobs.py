"""Fine-tuning job shapes (OpenAI's ``fine_tuning.job`` and friends) and the mapping of a create
request onto cuset_core's training config.

A job row stores the *resolved* request as one cuset_core ``JobSpec`` (every default filled in);
OpenAI's names (``n_epochs``, ``batch_size``, ``learning_rate_multiplier``) exist only in the view
(:func:`openai_hyperparameters`), so the worker never sees them.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.fields import FieldInfo
from pydantic_core import PydanticCustomError

from api.errors import APIError
from cuset_core.objectives import MethodConfig
from cuset_core.training.config import (
    Hyperparameters,
    JobSpec,
    LoraSettings,
    SelfTrainingRounds,
    check_quantized_lora,
)
from cuset_core.training.progress_lines import Metrics
from cuset_core.training.tracking import Integration
from db.errors import ErrorCode, ErrorInfo
from db.models import EventData
from db.statuses import JobStatus

SUFFIX_PATTERN = re.compile(r"^[a-z0-9-]{1,40}$")
MAX_METADATA_PAIRS = 16
# OpenAI's "auto": the core's defaults (learning_rate_multiplier scales the default learning rate).
_DEFAULT_HP = Hyperparameters()


def _openai_auto(data: Any, names: tuple[str, ...]) -> Any:
    """``data`` without the ``names`` given as OpenAI's ``"auto"`` (the default, then)."""
    if not isinstance(data, dict):
        return data
    return {k: v for k, v in data.items() if not (k in names and v == "auto")}


def _field_of(model: type[BaseModel], name: str, **changes: Any) -> Any:
    """``model``'s field ``name`` (its bounds and description) with ``changes``, declared again in
    a request without restating it."""
    if "default" in changes:
        changes.setdefault("default_factory", None)
    return FieldInfo.merge_field_infos(model.model_fields[name], **changes)


class HyperparametersRequest(Hyperparameters):
    """A create request's ``hyperparameters``: every core field, OpenAI's names (``n_epochs`` for
    ``epochs``, ``batch_size``, ``learning_rate_multiplier``, each may be ``"auto"``: the default),
    the LoRA shape (``lora``, null for full fine-tuning, or ``lora_rank``, ``lora_alpha``, ... one by
    one) and the checkpoint interval ``save_steps`` in optimizer steps."""

    # OpenAI's name for the core's ``epochs``; errors and /docs name it as the request does.
    model_config = ConfigDict(extra="forbid", alias_generator=lambda name: "n_epochs" if name == "epochs" else name)

    learning_rate_multiplier: float | None = Field(
        None, gt=0, description="scales the default learning rate; ignored when learning_rate is given"
    )
    lora: LoraSettings | None = Field(default_factory=LoraSettings, description="null: full fine-tuning")
    lora_rank: int | None = _field_of(LoraSettings, "rank", default=None)
    lora_alpha: float | None = _field_of(LoraSettings, "alpha", default=None)
    lora_dropout: float | None = _field_of(LoraSettings, "dropout", default=None)
    lora_target_modules: list[str] | None = _field_of(LoraSettings, "target_modules", default=None)
    save_steps: int = _field_of(JobSpec, "save_steps")

    @model_validator(mode="before")
    @classmethod
    def _auto(cls, data: Any) -> Any:
        return _openai_auto(data, ("n_epochs", "batch_size", "learning_rate_multiplier"))

    def core(self) -> Hyperparameters:
        """The core hyperparameters (the learning rate scaled when only the multiplier is given)."""
        core = self.model_dump(include=set(Hyperparameters.model_fields))
        if "learning_rate" not in self.model_fields_set and self.learning_rate_multiplier is not None:
            core["learning_rate"] = _DEFAULT_HP.learning_rate * self.learning_rate_multiplier
        return Hyperparameters.model_validate(core)

    def lora_shape(self) -> LoraSettings | None:
        """The adapter's shape; None: full fine-tuning."""
        if self.lora is None:
            return None
        flat = {name: getattr(self, f"lora_{name}") for name in LoraSettings.model_fields}
        return self.lora.model_copy(update={k: v for k, v in flat.items() if v is not None})


class SupervisedRequest(BaseModel):
    """OpenAI's ``method.supervised``: its hyperparameters, which win over the request's own
    ``hyperparameters`` field by field."""

    model_config = ConfigDict(extra="forbid")

    hyperparameters: HyperparametersRequest | None = None


class SelfTrainingRequest(SelfTrainingRounds):
    """``method.self_training`` of a create request: the rounds (sample, verify, keep, tune), the
    problems they sample answers for, and the set the tuned model will be measured on."""

    problems_file: str = Field(
        min_length=1, max_length=40, description="id of a file with purpose 'problems' (problems without answers)"
    )
    eval_problems: str | None = Field(
        None,
        max_length=40,
        description='the set the tuned model will be measured on: "demo", "demo:held-out" or the id of a '
        "file with purpose 'eval' or 'problems'; the job is refused when a problem of problems_file is one of it",
    )

    def spec_part(self) -> SelfTrainingRounds:
        """The part a job's spec stores (the files are the job row's)."""
        return SelfTrainingRounds.model_validate(self.model_dump(include=set(SelfTrainingRounds.model_fields)))


class MethodRequest(MethodConfig):
    """A create request's ``method``: the objective and its knobs (``MethodConfig``), OpenAI's
    ``{"type": "supervised", "supervised": {"hyperparameters": {...}}}`` (plain SFT), and a
    self-training job's rounds."""

    supervised: SupervisedRequest | None = Field(None, description='only with type "supervised" (OpenAI\'s SFT)')
    self_training: SelfTrainingRequest | None = None

    @model_validator(mode="before")
    @classmethod
    def _openai_supervised(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        if data.get("type") == "supervised":
            return {**data, "type": "sft"}
        if "supervised" in data:
            raise PydanticCustomError("supervised_without_type", "'supervised' is given only with type 'supervised'")
        return data

    def config(self) -> MethodConfig:
        """The objective's knobs, every default filled in."""
        return MethodConfig.model_validate(self.model_dump(include=set(MethodConfig.model_fields)))


class JobCreate(BaseModel):
    """``POST /v1/fine_tuning/jobs``. ``method`` and ``hyperparameters`` are typed here, so a bad
    knob is refused naming its nested field before anything is stored; :func:`resolve_spec` then
    turns the request into the ``JobSpec`` a job stores."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(min_length=1, max_length=255)
    training_file: str = Field(min_length=1, max_length=40)
    validation_file: str | None = Field(None, max_length=40)
    method: MethodRequest | None = None
    hyperparameters: HyperparametersRequest | None = None
    suffix: str | None = None
    seed: int | None = Field(None, ge=0, le=2**31 - 1)
    prompt_style: Literal["kernelbench", "compact"] | None = Field(
        None,
        description="the prompt the records are tuned with (default compact); the tuned model records it, and "
        "evals and generation with it default to it",
    )
    metadata: dict[str, str] | None = None
    integrations: list[Integration] | None = Field(
        None,
        max_length=8,
        description='experiment trackers: OpenAI\'s {"type": "wandb", "wandb": {"project", "name", "entity", "tags"}}, '
        '{"type": "tensorboard"} (event files among the job\'s artifacts) or '
        '{"type": "mlflow", "mlflow": {"experiment_name", "tracking_uri"}}; the tracker\'s package must be '
        "installed on the service's machines",
    )

    @field_validator("suffix")
    @classmethod
    def _suffix(cls, value: str | None) -> str | None:
        if value is not None and not SUFFIX_PATTERN.match(value):
            raise ValueError("must be 1-40 characters of a-z, 0-9 and '-'")
        return value

    @field_validator("metadata")
    @classmethod
    def _metadata(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        if value is None:
            return None
        if len(value) > MAX_METADATA_PAIRS:
            raise ValueError(f"at most {MAX_METADATA_PAIRS} key-value pairs")
        if any(len(k) > 64 or len(v) > 512 for k, v in value.items()):
            raise ValueError("keys are at most 64 characters and values at most 512")
        return value


def resolve_spec(body: JobCreate) -> JobSpec:
    """The JobSpec a create request stands for: its method (OpenAI's ``supervised`` with nested
    hyperparameters included), hyperparameters, seed and trackers. Raises ``APIError`` naming the
    field when the knobs are valid one by one but not together."""
    method = body.method or MethodRequest()
    given = [h for h in (body.hyperparameters, method.supervised and method.supervised.hyperparameters) if h]
    # The method's nested hyperparameters win over the request's own, field by field.
    merged = {k: v for h in given for k, v in h.model_dump(by_alias=True, exclude_unset=True).items()}
    hyperparameters = HyperparametersRequest.model_validate(merged)
    core, lora = hyperparameters.core(), hyperparameters.lora_shape()
    try:
        check_quantized_lora(core, lora is not None)
    except ValueError as exc:
        raise APIError(400, str(exc), code=ErrorCode.INVALID_VALUE, param="hyperparameters.quantization") from None
    return JobSpec(
        method=method.config(),
        hyperparameters=core,
        lora=lora,
        save_steps=hyperparameters.save_steps,
        seed=body.seed if body.seed is not None else 0,
        integrations=body.integrations or [],
        self_training=None if method.self_training is None else method.self_training.spec_part(),
        **({} if body.prompt_style is None else {"prompt_style": body.prompt_style}),
    )


class SelfTrainingView(SelfTrainingRounds):
    """A self-training job's rounds as the API shows them, with the problems file they sample for."""

    problems_file: str | None


class MethodView(MethodConfig):
    """A job's ``method`` as the API shows it: every knob, and a self-training job's rounds
    (null for a plain tuning job)."""

    self_training: SelfTrainingView | None = None


class HyperparametersView(Hyperparameters):
    """A job's hyperparameters as the API shows them: OpenAI's three names (``n_epochs``,
    ``batch_size``, ``learning_rate_multiplier``), every core field, the LoRA shape (null: full
    fine-tuning) and the checkpoint interval in optimizer steps."""

    n_epochs: float
    learning_rate_multiplier: float
    lora: LoraSettings | None
    save_steps: int


def method_view(spec: JobSpec, problems_file: str | None) -> MethodView:
    """A job's ``method`` as the API shows it."""
    rounds = None
    if spec.self_training is not None:
        rounds = SelfTrainingView(**spec.self_training.model_dump(), problems_file=problems_file)
    return MethodView(**spec.method.model_dump(), self_training=rounds)


def openai_hyperparameters(spec: JobSpec) -> HyperparametersView:
    """A job's hyperparameters as the API shows them."""
    hp = spec.hyperparameters
    return HyperparametersView(
        **hp.model_dump(),
        n_epochs=hp.epochs,
        learning_rate_multiplier=hp.learning_rate / _DEFAULT_HP.learning_rate,
        lora=spec.lora,
        save_steps=spec.save_steps,
    )


class JobProgress(BaseModel):
    """Where a job is: optimizer steps done of ``total_steps``; ``eta_s`` in seconds."""

    step: int
    total_steps: int | None
    percent: float | None
    eta_s: float | None


class JobObject(BaseModel):
    """OpenAI's fine-tuning job plus ``progress``, ``user_provided_suffix`` and ``prompt_style``."""

    id: str
    object: Literal["fine_tuning.job"] = "fine_tuning.job"
    created_at: int
    finished_at: int | None
    model: str
    fine_tuned_model: str | None
    organization_id: str = "org-local"
    result_files: list[str] = []
    status: JobStatus
    validation_file: str | None
    training_file: str
    hyperparameters: HyperparametersView
    trained_tokens: int | None
    error: ErrorInfo | None
    seed: int
    metadata: dict[str, str] | None
    method: MethodView
    estimated_finish: int | None
    integrations: list[Integration] = []
    progress: JobProgress
    user_provided_suffix: str | None
    prompt_style: Literal["kernelbench", "compact"] = Field(description="the prompt the records are tuned with")


class JobEventObject(BaseModel):
    id: str
    object: Literal["fine_tuning.job.event"] = "fine_tuning.job.event"
    created_at: int
    level: str
    message: str
    data: EventData | None
    type: Literal["message", "metrics"]


class CheckpointObject(BaseModel):
    id: str
    object: Literal["fine_tuning.job.checkpoint"] = "fine_tuning.job.checkpoint"
    created_at: int
    fine_tuned_model_checkpoint: str
    fine_tuning_job_id: str
    step_number: int
    metrics: Metrics


class MetricPoint(BaseModel, extra="allow"):
    """One optimizer step's metrics (loss, ce, kept_ratio, learning_rate, tokens_per_s, ...)."""

    step: int


class MetricSeries(BaseModel):
    """Per-step metrics in step order; ``after_step`` of the next page is the last ``step``."""

    object: Literal["list"] = "list"
    job_id: str
    data: list[MetricPoint]
    has_more: bool
