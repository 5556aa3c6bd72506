"""The one JSON document that describes a tuning job, and its cheap pre-flight checks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from cuset_core.models import (
    AttnImplementation,
    DtypeName,
    ModelNotFoundError,
    ModelOptionError,
    Quantization,
    check_load_options,
    resolve_model,
)
from cuset_core.objectives import MethodConfig
from cuset_core.training.tracking import Integration, missing_packages
from cuset_core.verify.result import Tier

DEFAULT_LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


class ConfigError(ValueError):
    """The job config is unusable; the message is one line naming the field."""


class LoraSettings(BaseModel):
    """peft LoRA adapter shape; absent (``null``) in a job means full fine-tuning."""

    model_config = ConfigDict(extra="forbid")

    rank: int = Field(16, ge=1, le=1024)
    alpha: float = Field(32.0, gt=0)
    dropout: float = Field(0.05, ge=0.0, lt=1.0)
    target_modules: list[str] = Field(default_factory=lambda: list(DEFAULT_LORA_TARGETS), min_length=1)


class Hyperparameters(BaseModel):
    """Optimiser and schedule settings; ``batch_size`` is per device, in sequences.

    Upper bounds catch typos and abuse (a job that would hold a GPU for months, a batch that
    cannot fit any device) with an error naming the field, before anything is queued."""

    model_config = ConfigDict(extra="forbid")

    learning_rate: float = Field(2e-4, gt=0)
    batch_size: int = Field(4, ge=1, le=1024)
    gradient_accumulation_steps: int = Field(1, ge=1, le=1024)
    epochs: float = Field(1.0, gt=0, le=100)
    max_steps: int = Field(-1, ge=-1, le=1_000_000)  # optimizer steps; -1 means "run ``epochs`` epochs"
    warmup_steps: int = Field(0, ge=0, le=1_000_000)
    lr_scheduler: Literal["linear", "cosine", "constant", "constant_with_warmup"] = "linear"
    weight_decay: float = Field(0.0, ge=0)
    max_seq_len: int = Field(1024, ge=16, le=131_072)  # tokens, prompt + answer
    max_grad_norm: float = Field(1.0, ge=0)
    # Recompute activations in the backward: far less memory, ~30% more time. None (the default)
    # chooses: on when training on a CPU (a laptop's 8 GB), off on a GPU (checkpointing_choice).
    gradient_checkpointing: bool | None = None
    group_by_length: bool = False  # batch records of similar length together (less padding)
    truncation: Literal["drop", "cut"] = "drop"  # records over max_seq_len: left out, or cut to it
    bf16: bool = False  # bf16 autocast on top of the weights' dtype (GPUs that support it)
    dtype: DtypeName = "auto"  # weights; auto: bfloat16 on a GPU that supports it, else float32
    attn_implementation: AttnImplementation = "sdpa"
    quantization: Quantization | None = None  # 4-bit base weights (QLoRA; CUDA and LoRA only)
    # Supervised positions per LM-head chunk of the loss; 0 materialises the full [B, T, V] logits.
    loss_chunk_size: int = Field(512, ge=0)


def checkpointing_choice(hyperparameters: Hyperparameters, on_gpu: bool) -> tuple[bool, str | None]:
    """Whether a run recomputes activations, and a line saying why when it was chosen for the user.

    ``gradient_checkpointing`` true/false is the user's choice; ``None`` turns it on when training
    on a CPU, where activations without it dominate a run's memory (SmolLM2-135M, batch 4 of 1,024
    tokens: ~15 GB without, under 4 GB with; bench/tune_memory.py), and off on a GPU, whose
    memory is sized per job by the user (DESIGN §6). It changes no number of the training, only
    its memory and time: the recomputation replays the same dropout masks."""
    chosen = hyperparameters.gradient_checkpointing
    if chosen is not None:
        return chosen, None
    if on_gpu:
        return False, None
    return True, (
        "gradient checkpointing on (chosen on a CPU: activations of a whole batch would need many GB of memory; "
        "set hyperparameters.gradient_checkpointing false for ~30% faster steps)"
    )


def check_quantized_lora(hyperparameters: Hyperparameters, has_lora: bool) -> None:
    """4-bit weights can only carry adapters; raises ValueError (naming the field) otherwise."""
    if hyperparameters.quantization is not None and not has_lora:
        raise ValueError("hyperparameters.quantization: 4-bit weights cannot be fully fine-tuned; keep lora (QLoRA)")


class SelfTrainingRounds(BaseModel):
    """The rounds of verified self-training (cuset_core/improve): each samples
    ``samples_per_problem`` answers per problem at ``temperature``/``top_p``, keeps the new ones
    that pass ``tier`` (at most ``max_kept_per_problem`` per problem over all rounds) and tunes on
    the original training data plus everything kept so far. Which problems is the caller's part
    (a path for the CLI, an uploaded problems file for the service)."""

    model_config = ConfigDict(extra="forbid")

    rounds: int = Field(2, ge=1, le=50)
    samples_per_problem: int = Field(4, ge=1, le=256)
    max_kept_per_problem: int = Field(2, ge=1, le=256, description="kept answers per problem over all rounds")
    tier: Tier = Field(Tier.CPU, description="the tier an answer must pass to be kept")
    temperature: float = Field(0.8, ge=0.0, le=2.0)
    top_p: float = Field(0.95, gt=0.0, le=1.0)
    max_new_tokens: int = Field(512, ge=1, le=8192, description="tokens per sampled answer")
    dtype: DtypeName = Field("auto", description="the weights while sampling, as an eval's dtype")


class JobSpec(BaseModel):
    """What a tuning job asks of its training, however it was submitted: the REST API stores one
    per job (typed, in the job's row) and the worker extends it to the run's :class:`TuneConfig`;
    the CLI reads a whole TuneConfig, which is a JobSpec plus the model, files and folders of one
    run. A new training option is a field here, and every path that submits jobs has it."""

    model_config = ConfigDict(extra="forbid")

    method: MethodConfig = Field(default_factory=MethodConfig)
    lora: LoraSettings | None = Field(default_factory=LoraSettings)
    hyperparameters: Hyperparameters = Field(default_factory=Hyperparameters)
    prompt_style: Literal["kernelbench", "compact"] = "compact"
    require_kernel: bool = True
    seed: int = Field(0, ge=0, le=2**31 - 1)
    save_steps: int = Field(100, ge=1)
    save_total_limit: int | None = Field(2, ge=1)  # checkpoints kept; None keeps all
    logging_steps: int = Field(1, ge=1)
    integrations: list[Integration] = Field(default_factory=list, max_length=8)  # trackers (training/tracking.py)
    # Rounds of sample-verify-keep-tune instead of one training run (the job's training file is the
    # original data every round mixes in); None: a plain tuning job.
    self_training: SelfTrainingRounds | None = None

    @model_validator(mode="after")
    def _quantized_weights_need_lora(self) -> JobSpec:
        check_quantized_lora(self.hyperparameters, self.lora is not None)
        return self


class TuneConfig(JobSpec):
    """A tuning run: its :class:`JobSpec`, and which model, which data and where results go."""

    model: str = "smollm2-135m"
    train_file: Path
    validation_file: Path | None = None
    output_dir: Path
    progress_file: Path | None = None
    resume: bool | Path = False
    reference_cache_dir: Path | None = None  # default: ``<output_dir>/../.cache``

    @model_validator(mode="after")
    def _one_run(self) -> TuneConfig:
        if self.self_training is not None:
            raise ValueError(
                "self_training: a tuning config is one training run; self-training rounds run with "
                "`cuset improve` (python -m cuset_core.improve)"
            )
        return self

    @property
    def progress_path(self) -> Path:
        """Where progress JSONL goes (``output_dir/progress.jsonl`` unless configured)."""
        return self.progress_file or self.output_dir / "progress.jsonl"

    @property
    def cache_dir(self) -> Path:
        """Folder for cached reference confidences."""
        return self.reference_cache_dir or self.output_dir.resolve().parent / ".cache"

    def validate_paths(self) -> None:
        """Check that the data files, the model and the trackers' packages exist and that this
        machine can load the model as asked (dtype, attention, quantization), without loading
        anything heavy.

        Raises ConfigError with a one-line message naming the field.
        """
        for field in ("train_file", "validation_file"):
            path = getattr(self, field)
            if path is not None and not Path(path).is_file():
                raise ConfigError(f"{field}: file not found: {path}")
        try:
            resolve_model(self.model)
        except ModelNotFoundError as exc:
            raise ConfigError(f"model: {exc}") from None
        hp = self.hyperparameters
        try:
            check_load_options(hp.dtype, hp.attn_implementation, hp.quantization)
        except ModelOptionError as exc:
            raise ConfigError(f"hyperparameters.{exc.field}: {exc}") from None
        if isinstance(self.resume, Path) and not self.resume.is_dir():
            raise ConfigError(f"resume: checkpoint folder not found: {self.resume}")
        missing = missing_packages(self.integrations)
        if missing:
            raise ConfigError(f"integrations: tracker not installed on this machine ({'; '.join(missing)})")


def format_validation_error(exc: ValidationError) -> str:
    """One line for every problem pydantic found: ``field.path: message (got value)``."""
    parts = []
    for error in exc.errors():
        if not error["loc"] and error["type"] == "value_error":
            parts.append(str(error["ctx"]["error"]))  # a whole-config check; its message names the field
            continue
        field = ".".join(str(part) for part in error["loc"]) or "config"
        got = "" if error["type"] in ("missing", "extra_forbidden") else f" (got {repr(error['input'])[:60]})"
        parts.append(f"{field}: {error['msg']}{got}")
    return "; ".join(parts)


def parse_config(data: dict[str, Any]) -> TuneConfig:
    """Validate a job config given as a dict; raises ConfigError with one line."""
    try:
        return TuneConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc)) from None


def read_config(path: Path) -> TuneConfig:
    """Read and validate a job config JSON file, paths included; raises ConfigError."""
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config file unreadable: {path}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"config file {path}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path}: expected a JSON object")
    config = parse_config(data)
    config.validate_paths()
    return config
