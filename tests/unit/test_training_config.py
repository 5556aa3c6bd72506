"""Job configs: defaults, one-line errors, and `python -m cuset_core.training` refusing bad jobs
with exit code 2 before any model is loaded."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from cuset_core.training.config import ConfigError, TuneConfig, parse_config, read_config
from cuset_core.training.run import main

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def data_file(tmp_path) -> Path:
    path = tmp_path / "train.jsonl"
    path.write_text('{"messages": []}\n')
    return path


def job(tmp_path: Path, data_file: Path, **changes) -> dict:
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text("{}")  # enough for a path check; never loaded here
    return {"model": str(model), "train_file": str(data_file), "output_dir": str(tmp_path / "out"), **changes}


def test_defaults_are_lora_cuset_with_compact_prompts(tmp_path, data_file):
    config = TuneConfig(train_file=data_file, output_dir=tmp_path / "out")

    assert config.model == "smollm2-135m"
    assert config.method.type == "cuset"
    assert config.lora.rank == 16 and config.lora.alpha == 32 and config.lora.dropout == 0.05
    assert config.lora.target_modules == ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    assert config.hyperparameters.max_seq_len == 1024 and config.hyperparameters.max_steps == -1
    assert config.prompt_style == "compact" and config.require_kernel is True and config.logging_steps == 1
    assert config.progress_path == tmp_path / "out" / "progress.jsonl"


def test_null_lora_means_full_fine_tuning(tmp_path, data_file):
    assert parse_config(job(tmp_path, data_file, lora=None)).lora is None


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"method": {"type": "magic"}}, "method.type: Input should be 'sft', 'dft', 'focal', 'profit', 'cuset'"),
        ({"method": {"mask_ratio": -0.1}}, "method.mask_ratio: Input should be greater than or equal to 0 (got -0.1)"),
        (
            {"hyperparameters": {"batch_size": 0}},
            "hyperparameters.batch_size: Input should be greater than or equal to 1",
        ),
        ({"epoch": 3}, "epoch: Extra inputs are not permitted"),
        ({"hyperparameters": {"truncation": "wrap"}}, "hyperparameters.truncation: Input should be 'drop' or 'cut'"),
        ({"hyperparameters": {"dtype": "int8"}}, "hyperparameters.dtype: Input should be 'auto', 'bfloat16'"),
        ({"hyperparameters": {"quantization": {"bits": 8}}}, "hyperparameters.quantization.bits: Input should be 4"),
        (
            {"lora": None, "hyperparameters": {"quantization": {}}},
            "hyperparameters.quantization: 4-bit weights cannot be fully fine-tuned; keep lora (QLoRA)",
        ),
        ({"hyperparameters": {"epochs": 1e9}}, "hyperparameters.epochs: Input should be less than or equal to 100"),
        (
            {"hyperparameters": {"max_steps": 10**9}},
            "hyperparameters.max_steps: Input should be less than or equal to 1000000",
        ),
        (
            {"hyperparameters": {"max_seq_len": 10**7}},
            "hyperparameters.max_seq_len: Input should be less than or equal to 131072",
        ),
        (
            {"hyperparameters": {"batch_size": 10**6}},
            "hyperparameters.batch_size: Input should be less than or equal to 1024",
        ),
        ({"lora": {"rank": 65536}}, "lora.rank: Input should be less than or equal to 1024"),
    ],
)
def test_invalid_fields_give_one_line_naming_the_field(tmp_path, data_file, changes, message):
    with pytest.raises(ConfigError) as caught:
        parse_config(job(tmp_path, data_file, **changes))

    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_missing_train_file_is_reported_by_field(tmp_path, data_file):
    config = parse_config(job(tmp_path, tmp_path / "nope.jsonl"))

    with pytest.raises(ConfigError, match=r"^train_file: file not found: .*nope\.jsonl$"):
        config.validate_paths()


def test_missing_model_is_reported_by_field(tmp_path, data_file):
    config = parse_config(job(tmp_path, data_file, model=str(tmp_path / "no-model")))

    with pytest.raises(ConfigError, match=r"^model: model not found: .*no-model"):
        config.validate_paths()


def test_config_file_that_is_not_json_names_the_line(tmp_path):
    path = tmp_path / "job.json"
    path.write_text('{\n  "model": \n}')

    with pytest.raises(ConfigError, match=r"not valid JSON \(line 3"):
        read_config(path)


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"method": {"type": "magic"}}, "error: method.type: Input should be"),
        ({"method": {"mask_ratio": -1}}, "error: method.mask_ratio: Input should be greater than or equal to 0"),
        ({"train_file": "missing.jsonl"}, "error: train_file: file not found: missing.jsonl"),
        ({"model": "no/such/model"}, "error: model: model not found: 'no/such/model'"),
    ],
)
def test_bad_job_exits_2_with_one_line_before_loading_anything(
    tmp_path, data_file, changes, expected, capsys, monkeypatch
):
    import cuset_core.training.run

    def no_loading(*args, **kwargs):
        raise AssertionError("a model or tokenizer was loaded")

    # The names the training run calls (bound when it is imported).
    monkeypatch.setattr(cuset_core.training.run, "load_model", no_loading)
    monkeypatch.setattr(cuset_core.training.run, "load_tokenizer", no_loading)
    path = tmp_path / "job.json"
    path.write_text(json.dumps(job(tmp_path, data_file, **changes)))

    code = main([str(path)])

    captured = capsys.readouterr()
    assert code == 2
    assert captured.err.startswith(expected)
    assert captured.err.count("\n") == 1
    assert captured.out == ""
    assert not (tmp_path / "out").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without a GPU")
def test_qlora_without_a_gpu_is_refused_before_loading_anything(tmp_path, data_file, capsys):
    path = tmp_path / "job.json"
    path.write_text(json.dumps(job(tmp_path, data_file, hyperparameters={"quantization": {"bits": 4, "type": "nf4"}})))

    code = main([str(path)])

    assert code == 2
    assert capsys.readouterr().err == (
        "error: hyperparameters.quantization: 4-bit quantization (QLoRA) needs a CUDA GPU "
        "and none is visible to this process\n"
    )


def test_training_process_exit_code_is_2_for_a_bad_job(tmp_path, data_file):
    path = tmp_path / "job.json"
    path.write_text(json.dumps(job(tmp_path, data_file, method={"type": "magic"})))

    done = subprocess.run(
        [sys.executable, "-m", "cuset_core.training", str(path)], capture_output=True, text=True, cwd=REPO, timeout=120
    )

    assert done.returncode == 2
    assert done.stderr.startswith("error: method.type: Input should be 'sft', 'dft'")
    assert done.stderr.count("\n") == 1


def test_gradient_checkpointing_is_chosen_on_a_cpu_and_said_so_and_left_off_on_a_gpu():
    from cuset_core.training.config import Hyperparameters, checkpointing_choice

    on, note = checkpointing_choice(Hyperparameters(), on_gpu=False)
    assert on and "gradient checkpointing on" in note and "memory" in note
    assert checkpointing_choice(Hyperparameters(), on_gpu=True) == (False, None)
    for chosen in (True, False):
        for on_gpu in (True, False):
            assert checkpointing_choice(Hyperparameters(gradient_checkpointing=chosen), on_gpu) == (chosen, None)
