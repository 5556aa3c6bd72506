"""Experiment tracking of a training run: TensorBoard, MLflow and Weights & Biases through the
Trainer's own ``report_to`` callbacks.

A job names its trackers as OpenAI's fine-tuning API does, a list of integrations:
``[{"type": "wandb", "wandb": {"project": "kernels", "name": ..., "entity": ..., "tags": [...]}}]``,
plus two types of ours, ``{"type": "tensorboard"}`` and
``{"type": "mlflow", "mlflow": {"experiment_name": ..., "tracking_uri": ...}}``. TensorBoard event
files go to ``<output_dir>/tensorboard``, among the run's artifacts. W&B and MLflow read their
credentials (``WANDB_API_KEY``, ``MLFLOW_TRACKING_USERNAME``...) from the environment of the
process that trains, as they always do; a job never carries secrets.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

TENSORBOARD_DIR = "tensorboard"
# The package each tracker needs, and the pin this project tests with (pyproject's "tracking" extra).
PACKAGES = {"tensorboard": "tensorboard==2.21.0", "mlflow": "mlflow", "wandb": "wandb"}


class WandbSettings(BaseModel):
    """OpenAI's ``wandb`` integration object."""

    model_config = ConfigDict(extra="forbid")

    project: str = Field(min_length=1, max_length=128)
    name: str | None = Field(None, max_length=128)
    entity: str | None = Field(None, max_length=128)
    tags: list[Annotated[str, Field(min_length=1, max_length=64)]] = Field(default_factory=list, max_length=50)


class MlflowSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    experiment_name: str | None = Field(None, max_length=256)
    tracking_uri: str | None = Field(None, max_length=1024)


class WandbIntegration(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["wandb"]
    wandb: WandbSettings


class TensorboardIntegration(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["tensorboard"]


class MlflowIntegration(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["mlflow"]
    mlflow: MlflowSettings = Field(default_factory=MlflowSettings)


Integration = Annotated[WandbIntegration | TensorboardIntegration | MlflowIntegration, Field(discriminator="type")]


def report_to(integrations: list[Integration]) -> list[str]:
    """The Trainer's ``report_to`` for a job's integrations (each tracker once, in order)."""
    return list(dict.fromkeys(integration.type for integration in integrations))


def missing_packages(integrations: list[Integration]) -> list[str]:
    """``"<tracker>: pip install <package>"`` for every tracker whose package is not importable here."""
    return [
        f"{name}: pip install {PACKAGES[name]}"
        for name in report_to(integrations)
        if importlib.util.find_spec(name) is None
    ]


def tracking_env(integrations: list[Integration], output_dir: Path) -> dict[str, str]:
    """Environment variables the Trainer's tracker callbacks read, for these integrations."""
    env: dict[str, str] = {}
    for integration in integrations:
        if isinstance(integration, TensorboardIntegration):
            env["TENSORBOARD_LOGGING_DIR"] = str(Path(output_dir) / TENSORBOARD_DIR)
        elif isinstance(integration, WandbIntegration):
            settings = integration.wandb
            env["WANDB_PROJECT"] = settings.project
            optional = {
                "WANDB_NAME": settings.name,
                "WANDB_ENTITY": settings.entity,
                "WANDB_TAGS": ",".join(settings.tags) or None,
            }
            env |= {key: value for key, value in optional.items() if value is not None}
        else:
            optional = {
                "MLFLOW_EXPERIMENT_NAME": integration.mlflow.experiment_name,
                "MLFLOW_TRACKING_URI": integration.mlflow.tracking_uri,
            }
            env |= {key: value for key, value in optional.items() if value is not None}
    return env
