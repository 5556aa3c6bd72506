"""The training subprocess's command line: plain python, or under ``accelerate launch`` with the
example DDP, FSDP and DeepSpeed configs, which pass through; a real two-process DDP run on CPUs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cuset_core.training.launch import LauncherError, training_command

REPO = Path(__file__).resolve().parents[2]
CONFIGS = REPO / "configs" / "accelerate"
JOB = Path("/jobs/ftjob-1/job.json")


def test_without_a_launcher_python_runs_the_module():
    assert training_command([], JOB, python="/venv/bin/python") == [
        "/venv/bin/python",
        "-m",
        "cuset_core.training",
        str(JOB),
    ]


@pytest.mark.parametrize(
    "name, distributed_type",
    [("ddp.yaml", "MULTI_GPU"), ("fsdp.yaml", "FSDP"), ("deepspeed_zero2.yaml", "DEEPSPEED")],
)
def test_accelerate_configs_pass_through_to_accelerate_launch(name, distributed_type):
    from accelerate.commands.config.config_args import load_config_from_file

    config_file = str(CONFIGS / name)
    launcher = ["accelerate", "launch", "--config_file", config_file, "--num_processes", "4"]
    assert training_command(launcher, JOB) == [*launcher, "-m", "cuset_core.training", str(JOB)]
    assert load_config_from_file(config_file).distributed_type.value == distributed_type


def test_torchrun_is_taken_as_given():
    launcher = ["torchrun", "--nproc_per_node", "2"]
    assert training_command(launcher, JOB) == [*launcher, "-m", "cuset_core.training", str(JOB)]


def test_a_missing_accelerate_config_file_is_refused_before_launching(tmp_path):
    missing = tmp_path / "nope.yaml"
    with pytest.raises(LauncherError, match=f"accelerate config file not found: {missing}"):
        training_command(["accelerate", "launch", f"--config_file={missing}"], JOB)


def test_a_file_that_is_not_an_accelerate_config_is_refused(tmp_path):
    bogus = tmp_path / "bogus.yaml"
    bogus.write_text("distributed_type: TELEPATHY\n")
    with pytest.raises(LauncherError, match="is not an accelerate config"):
        training_command(["accelerate", "launch", "--config_file", str(bogus)], JOB)


def test_accelerate_without_launch_is_refused():
    with pytest.raises(LauncherError, match="expected 'accelerate launch"):
        training_command(["accelerate", "--num_processes", "2"], JOB)


@pytest.mark.slow
def test_a_job_trains_under_accelerate_launch_with_the_ddp_config_on_two_cpu_processes(tmp_path, tiny_model_dir):
    from test_training_run import make_job

    job = make_job(tmp_path, tiny_model_dir, hp={"max_steps": 2, "batch_size": 1})
    path = tmp_path / "job.json"
    path.write_text(json.dumps(job))
    # The DDP config as a user gives it; without CUDA the Trainer runs both processes on gloo.
    launcher = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(CONFIGS / "ddp.yaml"),
                "--num_processes", "2"]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(training_command(launcher, path), cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=600)  # fmt: skip

    assert done.returncode == 0, done.stderr[-3000:]
    lines = [json.loads(line) for line in (tmp_path / "out" / "progress.jsonl").read_text().splitlines()]
    steps = [line for line in lines if line["type"] == "progress"]
    assert "data parallel over 2 processes" in [line.get("message") for line in lines]
    # Only rank 0 writes; every step reports the thresholds pooled over both processes.
    assert [line["step"] for line in steps] == [1, 2]
    assert all(line["tau_hi"] is not None and line["tau_lo"] is not None for line in steps)
    assert lines[-1]["type"] == "done" and (tmp_path / "out" / "adapter_model.safetensors").is_file()
