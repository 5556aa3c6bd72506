"""Model specs resolve to files without loading anything; bad specs say what was expected."""

import pytest

from cuset_core.models import (
    BUNDLED_MODEL,
    ModelNotFoundError,
    load_model,
    resolve_model,
    write_base_spec,
)


def test_bundled_spec_resolves_to_the_gguf_file():
    source = resolve_model(BUNDLED_MODEL)
    assert source.gguf_file == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert (source.folder / source.gguf_file).is_file()


def test_unknown_path_names_what_was_expected(tmp_path):
    with pytest.raises(ModelNotFoundError, match="expected 'smollm2-135m', a .gguf file"):
        resolve_model(tmp_path / "nope")


def test_hf_folder_loads_with_its_tokenizer(tiny_model_dir):
    model, tokenizer = load_model(tiny_model_dir)
    assert model.config.num_hidden_layers == 2
    assert tokenizer.is_fast


def test_adapter_folder_resolves_to_its_recorded_base(tmp_path, tiny_model_dir):
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text("{}")
    write_base_spec(adapter, str(tiny_model_dir))
    source = resolve_model(adapter)
    assert source.folder == tiny_model_dir
    assert source.adapter == adapter
