"""A run's model out of the project: the adapter archive and folder load with peft and give the
run's logits; `cuset export --merge` writes a plain Hugging Face folder with the same logits."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest
import torch
from lora_support import logits, make_adapter
from typer.testing import CliRunner

from cuset_core.adapters import BASE_MARKER
from cuset_core.cli import app
from cuset_core.models import load_model
from cuset_core.training.export import ExportError, model_files, write_archive

IDS = torch.tensor([[1, 450, 3212, 9201, 42, 17, 5]])


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, tiny_model_dir) -> Path:
    """A finished LoRA run's output folder, with the clutter training leaves beside the adapter."""
    run = make_adapter(tiny_model_dir, tmp_path_factory.mktemp("run") / "out", seed=3)
    (run / "training_args.bin").write_bytes(b"pickle")
    (run / "progress.jsonl").write_text("{}\n")
    (run / "checkpoint-2").mkdir()
    return run


@pytest.fixture(scope="module")
def run_logits(run_dir) -> torch.Tensor:
    model, _ = load_model(run_dir)
    return logits(model.eval(), IDS)


def test_the_archive_holds_the_adapter_alone_and_loads_with_peft(tmp_path, run_dir, run_logits, tiny_model_dir):
    from peft import PeftModel

    archive = tmp_path / "adapter.tar"
    size = write_archive(run_dir, archive, folder="ftjob-1", base_model="tiny")
    assert size == archive.stat().st_size
    with tarfile.open(archive) as opened:
        assert sorted(opened.getnames()) == ["ftjob-1/adapter_config.json", "ftjob-1/adapter_model.safetensors"]
        opened.extractall(tmp_path, filter="data")
    config = json.loads((tmp_path / "ftjob-1" / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == "tiny"  # the service's name, not a server path
    base, _ = load_model(tiny_model_dir)
    model = PeftModel.from_pretrained(base, tmp_path / "ftjob-1").eval()
    torch.testing.assert_close(logits(model, IDS), run_logits, rtol=1e-5, atol=1e-5)
    assert not list(tmp_path.glob(".*.partial"))


def test_a_run_without_a_model_is_refused_with_what_was_expected(tmp_path):
    (tmp_path / "progress.jsonl").write_text("{}\n")
    with pytest.raises(ExportError, match="no finished model .*adapter_config.json"):
        model_files(tmp_path)
    with pytest.raises(ExportError):
        write_archive(tmp_path, tmp_path / "a.tar", folder="x")
    assert not (tmp_path / "a.tar").exists()


def test_export_merge_writes_a_plain_hf_folder_with_the_runs_logits(tmp_path, run_dir, run_logits):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = tmp_path / "merged"
    result = CliRunner().invoke(app, ["export", str(run_dir), "--merge", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert (out / "config.json").is_file() and list(out.glob("*.safetensors"))
    assert not (out / "adapter_config.json").exists() and not (out / BASE_MARKER).exists()
    merged = AutoModelForCausalLM.from_pretrained(out).eval()
    assert merged.dtype == torch.float32
    assert not any("lora" in name for name, _ in merged.named_parameters())
    torch.testing.assert_close(logits(merged, IDS), run_logits, rtol=1e-4, atol=1e-4)
    assert AutoTokenizer.from_pretrained(out).is_fast


def test_export_merge_casts_to_the_asked_dtype(tmp_path, run_dir):
    from transformers import AutoModelForCausalLM

    out = tmp_path / "merged-bf16"
    result = CliRunner().invoke(app, ["export", str(run_dir), "--merge", "--out", str(out), "--dtype", "bfloat16"])
    assert result.exit_code == 0, result.output
    assert AutoModelForCausalLM.from_pretrained(out, dtype="auto").dtype == torch.bfloat16


def test_export_without_merge_writes_the_adapter_folder(tmp_path, run_dir, tiny_model_dir):
    out = tmp_path / "adapter"
    result = CliRunner().invoke(app, ["export", str(run_dir), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == ["adapter_config.json", "adapter_model.safetensors"]
    assert json.loads((out / "adapter_config.json").read_text())["base_model_name_or_path"] == str(tiny_model_dir)


def test_export_refuses_a_folder_without_a_model_and_a_non_empty_out(tmp_path, run_dir):
    empty_run = tmp_path / "run"
    empty_run.mkdir()
    result = CliRunner().invoke(app, ["export", str(empty_run), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2 and "no finished model" in result.output
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "keep.txt").write_text("mine")
    result = CliRunner().invoke(app, ["export", str(run_dir), "--out", str(busy)])
    assert result.exit_code == 2 and "not an empty folder" in result.output
    assert sorted(p.name for p in busy.iterdir()) == ["keep.txt"]
