"""Tracking: a job's integrations (OpenAI's shape) turn into the Trainer's report_to and the
trackers' settings; TensorBoard event files land among the run's artifacts; a tracker whose
package is missing is refused before anything loads."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest
from test_training_run import make_job, train

from cuset_core.cli.train import Tracker, job_document
from cuset_core.training.config import ConfigError, parse_config
from cuset_core.training.run import training_arguments
from cuset_core.training.tracking import TENSORBOARD_DIR, tracking_env

WANDB = {"type": "wandb", "wandb": {"project": "kernels", "name": "cuset-7b", "entity": "lab", "tags": ["a", "b"]}}


def config_with(tmp_path: Path, tiny_model_dir: Path, integrations: list) -> object:
    return parse_config(make_job(tmp_path, tiny_model_dir, integrations=integrations))


def test_integrations_become_the_trainers_report_to(tmp_path, tiny_model_dir):
    config = config_with(tmp_path, tiny_model_dir, [{"type": "tensorboard"}, {"type": "mlflow"}, WANDB])
    assert training_arguments(config).report_to == ["tensorboard", "mlflow", "wandb"]
    assert training_arguments(config_with(tmp_path, tiny_model_dir, [])).report_to == []


def test_tracker_settings_reach_the_trackers_environment(tmp_path, tiny_model_dir):
    mlflow = {"type": "mlflow", "mlflow": {"experiment_name": "cuset", "tracking_uri": "http://mlflow:5000"}}
    config = config_with(tmp_path, tiny_model_dir, [WANDB, mlflow, {"type": "tensorboard"}])
    assert tracking_env(config.integrations, config.output_dir) == {
        "WANDB_PROJECT": "kernels", "WANDB_NAME": "cuset-7b", "WANDB_ENTITY": "lab", "WANDB_TAGS": "a,b",
        "MLFLOW_EXPERIMENT_NAME": "cuset", "MLFLOW_TRACKING_URI": "http://mlflow:5000",
        "TENSORBOARD_LOGGING_DIR": str(config.output_dir / TENSORBOARD_DIR),
    }  # fmt: skip


@pytest.mark.parametrize(
    ("integrations", "message"),
    [
        ([{"type": "comet"}], "integrations.0: Input tag 'comet' found using 'type' does not match"),
        ([{"type": "wandb", "wandb": {}}], "integrations.0.wandb.wandb.project: Field required"),
        (
            [{"type": "wandb", "wandb": {"project": "p", "api_key": "k"}}],
            "integrations.0.wandb.wandb.api_key: Extra inputs",
        ),
    ],
)
def test_bad_integrations_name_the_field(tmp_path, tiny_model_dir, integrations, message):
    with pytest.raises(ConfigError, match=message.replace(".", r"\.").replace("(", r"\(")):
        config_with(tmp_path, tiny_model_dir, integrations)


@pytest.mark.skipif(importlib.util.find_spec("wandb") is not None, reason="wandb is installed here")
def test_a_tracker_that_is_not_installed_is_refused_before_loading(tmp_path, tiny_model_dir):
    config = config_with(tmp_path, tiny_model_dir, [WANDB])
    with pytest.raises(
        ConfigError, match=r"^integrations: tracker not installed on this machine \(wandb: pip install wandb\)$"
    ):
        config.validate_paths()


@pytest.mark.skipif(importlib.util.find_spec("tensorboard") is None, reason="tensorboard is not installed")
def test_tensorboard_events_are_kept_in_the_run_folder(tmp_path, tiny_model_dir, monkeypatch):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    monkeypatch.setattr(os, "environ", dict(os.environ))  # the run sets tracker variables in its process
    config = config_with(tmp_path, tiny_model_dir, [{"type": "tensorboard"}])
    config.validate_paths()
    outcome, _ = train(config.model_dump(mode="json"))

    events = list((tmp_path / "out" / TENSORBOARD_DIR).rglob("events.out.tfevents.*"))
    assert outcome.steps == 4 and events
    accumulator = EventAccumulator(str(events[0].parent))
    accumulator.Reload()
    assert [event.step for event in accumulator.Scalars("train/loss")] == [1, 2, 3, 4]


def test_report_to_on_the_command_line_adds_integrations_once():
    base = {"integrations": [WANDB, {"type": "tensorboard"}]}
    job = job_document(
        base, data=None, model=None, method=None, output=Path("o"), max_steps=None, epochs=None, lr=None,
        batch_size=None, lora=None, prompt_style=None, report_to=[Tracker.tensorboard, Tracker.mlflow],
    )  # fmt: skip
    assert job["integrations"] == [WANDB, {"type": "tensorboard"}, {"type": "mlflow"}]
