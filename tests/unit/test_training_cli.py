"""`cuset tune` and `cuset generate` on a tiny random model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from cuset_core.cli import app
from cuset_core.cli.train import job_document
from cuset_core.objectives import MethodConfig
from cuset_core.training.config import Hyperparameters, TuneConfig

runner = CliRunner()
ANSWER = "```cuda\n__global__ void k(float* x, int n) {\n    int i = threadIdx.x;\n    if (i < n) x[i] = 0.0f;\n}\n```"


def write_data(path: Path) -> Path:
    row = {"messages": [{"role": "user", "content": "Zero a vector."}, {"role": "assistant", "content": ANSWER}]}
    path.write_text((json.dumps(row) + "\n") * 2)
    return path


def test_tune_trains_through_the_subprocess_and_saves_an_adapter(tmp_path, tiny_model_dir):
    data = write_data(tmp_path / "train.jsonl")
    out = tmp_path / "out"

    result = runner.invoke(
        app,
        ["tune", "--data", str(data), "--model", str(tiny_model_dir), "--method", "cuset", "--max-steps", "2",
         "--batch-size", "2", "--output", str(out)],
    )  # fmt: skip

    assert result.exit_code == 0, result.output
    assert "done: 2 steps" in result.output
    assert (out / "adapter_model.safetensors").is_file()
    job = TuneConfig.model_validate_json((out / "job.json").read_text())  # what ran, defaults resolved
    assert job.method == MethodConfig(type="cuset") and job.model == str(tiny_model_dir)
    assert (job.hyperparameters.max_steps, job.hyperparameters.batch_size) == (2, 2)
    assert job.hyperparameters.learning_rate == Hyperparameters().learning_rate
    progress = [json.loads(line) for line in (out / "progress.jsonl").read_text().splitlines()]
    assert [line["step"] for line in progress if line["type"] == "progress"] == [1, 2]


def test_tune_refuses_a_missing_data_file_with_one_line(tmp_path, tiny_model_dir):
    result = runner.invoke(
        app,
        [
            "tune",
            "--data",
            str(tmp_path / "none.jsonl"),
            "--model",
            str(tiny_model_dir),
            "--output",
            str(tmp_path / "o"),
        ],
    )

    assert result.exit_code == 2
    assert result.stderr == f"error: train_file: file not found: {tmp_path / 'none.jsonl'}\n"
    assert not (tmp_path / "o").exists()


def test_command_line_options_override_the_config_file():
    base = {"model": "m", "method": {"type": "sft", "mask_ratio": 0.5}, "hyperparameters": {"epochs": 3}}

    job = job_document(
        base, data=Path("d.jsonl"), model=None, method=None, output=Path("o"), max_steps=7, epochs=None, lr=None,
        batch_size=None, lora=False, prompt_style=None,
    )  # fmt: skip

    assert job == {
        "model": "m",
        "method": {"type": "sft", "mask_ratio": 0.5},
        "hyperparameters": {"epochs": 3, "max_steps": 7},
        "train_file": "d.jsonl",
        "output_dir": "o",
        "lora": None,
    }


def test_precision_and_memory_options_become_hyperparameters():
    from cuset_core.cli.train import Dtype, Truncation

    job = job_document(
        {}, data=None, model="Qwen/Qwen2.5-Coder-7B-Instruct", method=None, output=Path("o"), max_steps=None,
        epochs=None, lr=None, batch_size=None, lora=None, prompt_style=None, dtype=Dtype.bfloat16, qlora=True,
        gradient_checkpointing=True, group_by_length=True, truncation=Truncation.cut,
    )  # fmt: skip

    assert job["model"] == "Qwen/Qwen2.5-Coder-7B-Instruct"
    assert job["hyperparameters"] == {
        "dtype": "bfloat16", "gradient_checkpointing": True, "group_by_length": True, "truncation": "cut",
        "quantization": {"bits": 4, "type": "nf4", "double_quant": True},
    }  # fmt: skip


def test_tune_refuses_an_uncached_repo_id_offline_saying_how_to_fetch_it(tmp_path, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    data = write_data(tmp_path / "train.jsonl")

    result = runner.invoke(app, ["tune", "--data", str(data), "--model", "org/absent", "--output", str(tmp_path / "o")])

    assert result.exit_code == 2
    assert result.stderr.startswith("error: model: model 'org/absent' is not in the Hugging Face cache")
    assert "hf download org/absent" in result.stderr
    assert not (tmp_path / "o").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without a GPU")
def test_tune_refuses_qlora_without_a_gpu(tmp_path, tiny_model_dir):
    data = write_data(tmp_path / "train.jsonl")

    result = runner.invoke(
        app, ["tune", "--data", str(data), "--model", str(tiny_model_dir), "--qlora", "--output", str(tmp_path / "o")]
    )

    assert result.exit_code == 2
    assert result.stderr.startswith("error: hyperparameters.quantization: 4-bit quantization (QLoRA) needs a CUDA GPU")


def test_generate_prints_an_answer(tmp_path, tiny_model_dir):
    problem = tmp_path / "problem.py"
    problem.write_text(
        "import torch\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x + 1\n"
    )

    result = runner.invoke(
        app, ["generate", "--model", str(tiny_model_dir), "--problem", str(problem), "--max-new-tokens", "4",
              "--samples", "2", "--temperature", "1", "--seed", "1"],
    )  # fmt: skip

    assert result.exit_code == 0, result.output
    assert result.stdout.count("# sample ") == 2


def test_generate_refuses_an_unknown_model(tmp_path):
    result = runner.invoke(app, ["generate", "--model", str(tmp_path / "nope"), "--problem", str(tmp_path / "p.py")])

    assert result.exit_code == 2
    assert result.stderr.startswith("error: --model: model not found:")
    assert result.stderr.count("\n") == 1
