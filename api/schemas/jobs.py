"""Fine-tuning job shapes (OpenAI's ``fine_tuning.job`` and friends) and the mapping of a create
request onto cuset_core's training config.

A job row stores the *resolved* request as one cuset_core ``JobSpec`` (every default filled in);
OpenAI's names (``n_epochs``, ``batch_size``, ``learning_rate_multiplier``) exist only in the view
(:func:`openai_hyperparameters`), so the worker never sees them.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from api.errors import APIError
from cuset_core.objectives import MethodConfig
from cuset_core.training.config import (
    Hyperparameters,
    JobSpec,
    LoraSettings,
    SelfTrainingRounds,
    check_quantized_lora,
    format_validation_error,
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
_LORA_KEYS = {f"lora_{name}": name for name in LoraSettings.model_fields}
_OURS = set(Hyperparameters.model_fields) - {"epochs"} | set(_LORA_KEYS) | {"lora", "save_steps"}


class JobCreate(BaseModel):
    """``POST /v1/fine_tuning/jobs``; ``method`` and ``hyperparameters`` are checked by
    ``resolve_method`` / ``resolve_hyperparameters`` so errors name the nested field."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(min_length=1, max_length=255)
    training_file: str = Field(min_length=1, max_length=40)
    validation_file: str | None = Field(None, max_length=40)
    method: dict[str, Any] | None = None
    hyperparameters: dict[str, Any] | None = None
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


def _invalid(exc: ValidationError, prefix: str) -> APIError:
    first = ".".join(str(part) for part in exc.errors()[0]["loc"])
    return APIError(
        400,
        f"{prefix}: {format_validation_error(exc)}",
        code=ErrorCode.INVALID_VALUE,
        param=f"{prefix}.{first}" if first else prefix,
    )


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


def self_training_request(method: dict[str, Any] | None) -> SelfTrainingRequest | None:
    """The request's ``method.self_training``, checked; None for a plain tuning job."""
    given = (method or {}).get("self_training")
    if given is None:
        return None
    try:
        return SelfTrainingRequest.model_validate(given)
    except ValidationError as exc:
        raise _invalid(exc, "method.self_training") from None


def split_method(method: dict[str, Any] | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(method knobs, hyperparameters nested in the method)``. OpenAI's
    ``{"type": "supervised", "supervised": {"hyperparameters": {...}}}`` is plain SFT."""
    method = {k: v for k, v in (method or {}).items() if k != "self_training"}
    if method.get("type") != "supervised":
        return method, {}
    nested = method.pop("supervised", None) or {}
    if not isinstance(nested, dict) or set(nested) - {"hyperparameters"}:
        raise APIError(
            400,
            "method.supervised: only 'hyperparameters' is supported",
            code=ErrorCode.INVALID_VALUE,
            param="method.supervised",
        )
    knobs = {**{k: v for k, v in method.items() if k != "type"}, "type": "sft"}
    return knobs, dict(nested.get("hyperparameters") or {})


def resolve_method(knobs: dict[str, Any]) -> MethodConfig:
    """The full MethodConfig of a request's method (every knob, defaults filled in)."""
    try:
        return MethodConfig.model_validate(knobs)
    except ValidationError as exc:
        raise _invalid(exc, "method") from None


def _auto(value: Any, default: Any) -> Any:
    return default if value in (None, "auto") else value


def resolve_spec(
    method: dict[str, Any] | None,
    hyperparameters: dict[str, Any] | None,
    seed: int | None,
    integrations: list[Integration] | None,
    prompt_style: Literal["kernelbench", "compact"] | None = None,
) -> JobSpec:
    """The JobSpec a create request stands for: its method (OpenAI's ``supervised`` with nested
    hyperparameters included), hyperparameters, seed and trackers. Raises ``APIError`` naming the
    field a value is wrong in."""
    knobs, nested = split_method(method)
    hp, lora, save_steps = resolve_hyperparameters({**(hyperparameters or {}), **nested})
    self_training = self_training_request(method)
    return JobSpec(
        method=resolve_method(knobs),
        hyperparameters=hp,
        lora=lora,
        save_steps=save_steps,
        seed=seed if seed is not None else 0,
        integrations=integrations or [],
        self_training=None if self_training is None else self_training.spec_part(),
        **({} if prompt_style is None else {"prompt_style": prompt_style}),
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


def resolve_hyperparameters(given: dict[str, Any]) -> tuple[Hyperparameters, LoraSettings | None, int]:
    """OpenAI's names (``n_epochs``, ``batch_size``, ``learning_rate_multiplier``, each maybe
    ``"auto"``) and ours (any core Hyperparameters field, ``lora_rank``/``lora_alpha``/...,
    ``lora: null`` for full fine-tuning, ``save_steps``) resolved: the core hyperparameters, the
    LoRA shape (None: full fine-tuning) and the checkpoint interval."""
    unknown = sorted(set(given) - _OURS - {"n_epochs", "learning_rate_multiplier", "batch_size"})
    if unknown:
        raise APIError(
            400,
            f"hyperparameters.{unknown[0]}: unknown hyperparameter",
            code=ErrorCode.INVALID_VALUE,
            param=f"hyperparameters.{unknown[0]}",
        )
    multiplier = _auto(given.get("learning_rate_multiplier"), 1.0)
    core = {k: v for k, v in given.items() if k in Hyperparameters.model_fields}
    core["epochs"] = _auto(given.get("n_epochs"), _DEFAULT_HP.epochs)
    core["batch_size"] = _auto(given.get("batch_size"), _DEFAULT_HP.batch_size)
    try:
        if not isinstance(multiplier, (int, float)) or isinstance(multiplier, bool) or multiplier <= 0:
            raise APIError(
                400,
                "hyperparameters.learning_rate_multiplier: must be a positive number or 'auto'",
                code=ErrorCode.INVALID_VALUE,
                param="hyperparameters.learning_rate_multiplier",
            )
        core.setdefault("learning_rate", _DEFAULT_HP.learning_rate * multiplier)
        hp = Hyperparameters.model_validate(core)
    except ValidationError as exc:
        error = _invalid(exc, "hyperparameters")
        # Report OpenAI's name for the fields the request gave under it.
        error.param = (error.param or "").replace("hyperparameters.epochs", "hyperparameters.n_epochs")
        raise error from None
    lora: LoraSettings | None = None
    if given.get("lora", {}) is not None:
        lora_given = {_LORA_KEYS[k]: v for k, v in given.items() if k in _LORA_KEYS} | dict(given.get("lora") or {})
        try:
            lora = LoraSettings.model_validate(lora_given)
        except ValidationError as exc:
            error = _invalid(exc, "hyperparameters")
            error.param = (error.param or "").replace("hyperparameters.", "hyperparameters.lora_", 1)
            raise error from None
    try:
        check_quantized_lora(hp, lora is not None)
    except ValueError as exc:
        raise APIError(400, str(exc), code=ErrorCode.INVALID_VALUE, param="hyperparameters.quantization") from None
    save_steps = given.get("save_steps", JobSpec.model_fields["save_steps"].default)
    if not isinstance(save_steps, int) or isinstance(save_steps, bool) or save_steps < 1:
        raise APIError(
            400,
            "hyperparameters.save_steps: must be a positive integer",
            code=ErrorCode.INVALID_VALUE,
            param="hyperparameters.save_steps",
        )
    return hp, lora, save_steps


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
    integrations: list[Any] = []
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
