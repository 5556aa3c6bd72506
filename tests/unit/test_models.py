"""Model specs (bundled, GGUF file, folder, Hub repo id, adapter) resolve to files without
loading anything; bad specs say what was expected; weights load in the asked precision."""

import os
import subprocess
import sys
from pathlib import Path

import gguf
import gguf.quants
import pytest
import torch

from cuset_core.models import (
    BUNDLED_MODEL,
    ModelNotFoundError,
    ModelOptionError,
    Quantization,
    bundled_cache_dir,
    bundled_gguf_path,
    check_load_options,
    keep_bundled_dequantized,
    load_model,
    load_tokenizer,
    resolve_dtype,
    resolve_model,
    write_base_spec,
)

REPO = Path(__file__).resolve().parents[2]


def test_bundled_spec_resolves_to_the_gguf_file_until_it_is_kept_dequantised(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # an empty cache
    source = resolve_model(BUNDLED_MODEL)
    assert source.gguf_file == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert (source.folder / source.gguf_file).is_file()


@pytest.mark.slow
def test_the_bundled_model_is_read_from_its_dequantised_cache_folder_with_the_gguf_files_weights():
    # The machine's own cache, as every bundled-model load of this run uses it: the first load
    # anywhere in the run dequantises the GGUF file (about 20 s), later ones read the folder.
    model, tokenizer = load_model(BUNDLED_MODEL)

    cached = resolve_model(BUNDLED_MODEL)
    assert cached.kind == "bundled" and cached.gguf_file is None and cached.folder == bundled_cache_dir()
    assert not [p for p in cached.folder.parent.iterdir() if p.name.startswith(".writing-")]
    assert not getattr(model, "is_quantized", False)  # trainable, as the GGUF-loaded one is made
    reader = gguf.GGUFReader(str(bundled_gguf_path()))
    embedding = next(t for t in reader.tensors if t.name == "token_embd.weight")
    expected = torch.from_numpy(gguf.quants.dequantize(embedding.data, embedding.tensor_type))
    assert torch.equal(model.get_input_embeddings().weight.detach(), expected)
    kernel = "__global__ void relu(float* x) { x[threadIdx.x] = fmaxf(x[threadIdx.x], 0.f); }"
    assert len(tokenizer) == model.config.vocab_size == 49152
    assert tokenizer.decode(tokenizer(kernel).input_ids) == kernel
    assert "<|im_start|>" in tokenizer.chat_template


@pytest.mark.slow
def test_loading_the_bundled_tokenizer_alone_keeps_only_the_tokenizer(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # an empty cache

    tokenizer = load_tokenizer(BUNDLED_MODEL)

    kept = sorted(p.name for p in bundled_cache_dir().parent.iterdir())
    assert kept == [bundled_cache_dir().name + "-tokenizer"]  # no 20 s model dequantisation for it
    assert resolve_model(BUNDLED_MODEL).gguf_file is not None  # the model is not cached yet
    again = load_tokenizer(BUNDLED_MODEL)
    kernel = "__global__ void relu(float* x) { x[threadIdx.x] = fmaxf(x[threadIdx.x], 0.f); }"
    assert again(kernel).input_ids == tokenizer(kernel).input_ids and again.chat_template == tokenizer.chat_template


def test_a_cache_that_cannot_be_written_leaves_the_bundled_model_in_its_gguf_form(tmp_path, monkeypatch):
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where the cache folder would go")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))
    source = resolve_model(BUNDLED_MODEL)

    assert keep_bundled_dequantized(source) == source


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


TINY_REPO_ID = "cuset-test/tiny-coder"  # the repo the ``hf_home`` fixture caches


@pytest.fixture
def offline_hub(monkeypatch, hf_home):
    """huggingface_hub looking at ``hf_home``'s cache, offline (as ``HF_HOME=... HF_HUB_OFFLINE=1``)."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hf_home / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return hf_home


def test_cached_repo_id_resolves_to_its_snapshot(offline_hub):
    source = resolve_model(TINY_REPO_ID)
    assert source.kind == "hub" and source.repo_id == TINY_REPO_ID
    assert source.pretrained == TINY_REPO_ID
    assert (source.folder / "config.json").is_file()
    assert source.folder.parent.name == "snapshots"


def test_uncached_repo_id_offline_fails_at_once_saying_how_to_fetch_it(offline_hub):
    with pytest.raises(
        ModelNotFoundError,
        match=r"'Qwen/Qwen2.5-Coder-7B' is not in the Hugging Face cache .*"
        r"HF_HUB_OFFLINE is set: fetch it first with `hf download Qwen/Qwen2.5-Coder-7B`",
    ):
        resolve_model("Qwen/Qwen2.5-Coder-7B")


def test_each_spec_form_says_its_source(tmp_path, tiny_model_dir, offline_hub):
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF")
    assert resolve_model(BUNDLED_MODEL).kind == "bundled"
    assert resolve_model(gguf).kind == "gguf"
    assert resolve_model(tiny_model_dir).kind == "folder"
    assert resolve_model(TINY_REPO_ID).kind == "hub"


def test_repo_id_loads_offline_from_the_cache_under_hf_home(hf_home, tmp_path):
    """The real environment variables, in a fresh process: HF_HOME's cache, HF_HUB_OFFLINE=1."""
    script = (
        "from cuset_core.models import load_model\n"
        f"model, tokenizer = load_model({TINY_REPO_ID!r})\n"
        "print(model.config.num_hidden_layers, len(tokenizer))\n"
    )
    env = {**os.environ, "HF_HOME": str(hf_home), "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    env.pop("HF_HUB_CACHE", None)
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["2", "49152"]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_weights_load_in_the_asked_dtype(tiny_model_dir, dtype):
    model, _ = load_model(tiny_model_dir, dtype)
    assert {param.dtype for param in model.parameters()} == {dtype}


def test_auto_dtype_is_float32_without_a_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_dtype("auto") == torch.float32
    assert resolve_dtype("bfloat16") == torch.bfloat16


def test_auto_dtype_is_bfloat16_on_a_gpu_that_supports_it(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: True)
    assert resolve_dtype("auto") == torch.bfloat16


def test_quantization_without_a_gpu_is_refused_with_the_reason(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ModelOptionError, match="QLoRA\\) needs a CUDA GPU and none is visible") as caught:
        check_load_options("auto", "sdpa", Quantization())
    assert caught.value.field == "quantization"


def test_flash_attention_without_its_package_is_refused(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "flash_attn" else real(name, *a))
    with pytest.raises(ModelOptionError, match="flash_attention_2 needs a CUDA GPU and the flash-attn package"):
        check_load_options("bfloat16", "flash_attention_2", None)


def test_eager_attention_is_passed_to_the_model(tiny_model_dir):
    model, _ = load_model(tiny_model_dir, attn_implementation="eager")
    assert model.config._attn_implementation == "eager"


@pytest.mark.gpu
def test_4bit_nf4_loads_on_the_gpu(tiny_model_dir):
    pytest.importorskip("bitsandbytes")
    import bitsandbytes as bnb

    model, _ = load_model(tiny_model_dir, torch.bfloat16, quantization=Quantization())
    layers = [module for module in model.modules() if isinstance(module, bnb.nn.Linear4bit)]
    assert layers and layers[0].weight.quant_type == "nf4"
    assert next(model.parameters()).is_cuda


# A fresh interpreter: the race is in transformers' first lookups, which this process made long ago.
TOKENIZERS_AT_ONCE = """
import sys, threading
from cuset_core.models import load_tokenizer

barrier, failed = threading.Barrier(8), []

def load():
    barrier.wait()
    try:
        load_tokenizer(sys.argv[1])
    except Exception as exc:
        failed.append(repr(exc))

threads = [threading.Thread(target=load) for _ in range(8)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(failed)
"""


def test_tokenizers_loaded_from_several_threads_of_a_fresh_process_all_load(tiny_model_dir):
    # Two /fit requests to a fresh API server once failed with "cannot import name 'AutoTokenizer'
    # from 'transformers'": its lazy module's first lookups are not thread-safe.
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    for _ in range(2):
        done = subprocess.run(
            [sys.executable, "-c", TOKENIZERS_AT_ONCE, str(tiny_model_dir)],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.strip() == "[]", done.stdout[-2000:]
