"""Adapters the project ships load by name: `cuset ship-adapter` puts a run's LoRA adapter into the
package in float16 (at most 20 MiB, with its model card and base spec), and the name then works
wherever a model spec does; a name whose files are missing says which and how to put them there."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from lora_support import logits, make_adapter
from safetensors import safe_open
from typer.testing import CliRunner

import cuset_core.adapters as adapters
from cuset_core.adapters import available_adapters
from cuset_core.cli import app
from cuset_core.models import ModelNotFoundError, load_model, resolve_model, spec_kind
from cuset_core.training.ship import ShipError, ship_adapter

NAME = "cuset-ew-135m"
IDS = torch.tensor([[1, 450, 3212, 9201, 42, 17, 5]])


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, tiny_model_dir) -> Path:
    """A finished LoRA run of the tiny model (float32 weights), with a tokenizer beside it."""
    return make_adapter(tiny_model_dir, tmp_path_factory.mktemp("run") / "out", seed=5)


@pytest.fixture
def card(tmp_path) -> Path:
    path = tmp_path / "CARD.md"
    path.write_text("# cuset-ew-135m\n\ntrained with `cuset tune ...`; greedy cpu_correct@1 0.2\n")
    return path


@pytest.fixture
def root(tmp_path, monkeypatch) -> Path:
    """An empty shipped-adapters folder in place of the package's."""
    folder = tmp_path / "adapters"
    folder.mkdir()
    monkeypatch.setattr(adapters, "ADAPTERS_ROOT", folder)
    return folder


def test_a_shipped_adapter_holds_float16_weights_its_card_and_base(run_dir, card, root, tiny_model_dir):
    folder = ship_adapter(run_dir, NAME, card=card)
    assert folder == root / NAME
    assert sorted(path.name for path in folder.iterdir()) == [
        "README.md",
        "adapter_config.json",
        "adapter_model.safetensors",
        "cuset_base.json",
    ]
    with safe_open(str(folder / "adapter_model.safetensors"), framework="pt") as weights:
        assert {weights.get_tensor(key).dtype for key in weights.keys()} == {torch.float16}
    assert json.loads((folder / "cuset_base.json").read_text()) == {"base_model": str(tiny_model_dir)}
    assert (folder / "README.md").read_text() == card.read_text()
    assert not list(root.glob(".*"))  # no partial or old folder left behind
    assert available_adapters() == [NAME]


def test_the_name_loads_the_shipped_adapter_on_its_base(run_dir, card, root):
    ship_adapter(run_dir, NAME, card=card)
    source = resolve_model(NAME)
    assert (source.kind, source.adapter) == ("adapter", root / NAME)
    shipped, _ = load_model(NAME)
    run, _ = load_model(run_dir)
    # float16 weights: the logits agree with the run's to float16's precision.
    torch.testing.assert_close(logits(shipped.eval(), IDS), logits(run.eval(), IDS), rtol=1e-2, atol=1e-2)


def test_a_name_without_its_files_says_which_are_missing_and_how_to_ship_them(root):
    assert spec_kind(NAME) == "adapter" and available_adapters() == []
    with pytest.raises(
        ModelNotFoundError, match=r"'cuset-ew-135m' is not in this installation: .* lacks adapter_config"
    ):
        resolve_model(NAME)
    with pytest.raises(ModelNotFoundError, match="cuset ship-adapter RUN --name cuset-ew-135m"):
        resolve_model(NAME)


def test_an_adapter_over_the_size_limit_is_refused_and_the_shipped_one_kept(run_dir, card, root):
    ship_adapter(run_dir, NAME, card=card)
    before = (root / NAME / "adapter_model.safetensors").read_bytes()
    with pytest.raises(ShipError, match="over the 1e-06 MiB"):
        ship_adapter(run_dir, NAME, card=card, max_mib=1e-6)
    assert (root / NAME / "adapter_model.safetensors").read_bytes() == before
    assert not list(root.glob(".*"))


def test_shipping_needs_a_known_name_and_a_model_card(run_dir, card, root):
    with pytest.raises(ShipError, match="not a shipped adapter name"):
        ship_adapter(run_dir, "my-adapter", card=card)
    with pytest.raises(ShipError, match="no model card"):
        ship_adapter(run_dir, NAME)
    ship_adapter(run_dir, NAME, card=card)
    ship_adapter(run_dir, NAME)  # a second shipping keeps the card already there
    assert (root / NAME / "README.md").read_text() == card.read_text()


def test_cli_ships_then_generates_with_the_name(run_dir, card, root, tmp_path):
    runner = CliRunner()
    shipped = runner.invoke(app, ["ship-adapter", str(run_dir), "--name", NAME, "--card", str(card)])
    assert shipped.exit_code == 0, shipped.output
    assert f"shipped {NAME}" in shipped.output and "MiB" in shipped.output
    problem = tmp_path / "problem.py"
    problem.write_text("import torch\nclass Model(torch.nn.Module):\n    pass\n")
    generated = runner.invoke(app, ["generate", "--model", NAME, "--problem", str(problem), "--max-new-tokens", "4"])
    assert generated.exit_code == 0, generated.output


def test_cli_refuses_to_ship_without_a_card_in_one_line(run_dir, root):
    result = CliRunner().invoke(app, ["ship-adapter", str(run_dir), "--name", NAME])
    assert result.exit_code == 2
    assert "error: no model card" in result.output


def test_the_workers_model_cache_serves_the_name_on_its_base(run_dir, card, root):
    from worker.model_cache import ModelCache

    ship_adapter(run_dir, NAME, card=card)
    run, _ = load_model(run_dir)
    cache = ModelCache(device=torch.device("cpu"))
    with cache.use(NAME, NAME) as (model, _tokenizer):
        torch.testing.assert_close(logits(model, IDS), logits(run.eval(), IDS), rtol=1e-2, atol=1e-2)
    assert cache.loaded()["adapters"] == [NAME]


@pytest.mark.parametrize(
    "command", [["eval", "--problems", "demo", "--samples", "0", "--tier", "static"], ["generate", "--problem"]]
)
def test_clis_name_the_missing_files_of_an_absent_shipped_adapter(root, tmp_path, command):
    problem = tmp_path / "problem.py"
    problem.write_text("import torch\n")
    args = [*command, str(problem)] if command[-1] == "--problem" else [*command, "--out", str(tmp_path / "eval")]
    result = CliRunner().invoke(app, [*args, "--model", NAME])
    assert result.exit_code != 0
    assert f"shipped adapter '{NAME}' is not in this installation" in result.output
