"""The generation worker's model cache: one base model with several LoRA adapters attached, each
adapter giving the outputs it gives loaded alone, and the base given back on request."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from lora_support import logits, make_adapter

from cuset_core.models import load_model
from worker.model_cache import ModelCache, adapter_name


@pytest.fixture(scope="module")
def adapters(tmp_path_factory, tiny_model_dir) -> list[Path]:
    root = tmp_path_factory.mktemp("adapters")
    return [make_adapter(tiny_model_dir, root / f"adapter-{seed}", seed) for seed in (1, 2)]


@pytest.fixture(scope="module")
def ids() -> torch.Tensor:
    return torch.tensor([[1, 450, 3212, 9201, 42, 17, 5]])


def alone(spec: Path | str, ids: torch.Tensor) -> torch.Tensor:
    model, _ = load_model(spec)
    return logits(model.eval(), ids)


def test_two_adapters_on_one_base_give_what_each_gives_loaded_alone(adapters, ids, tiny_model_dir):
    cache = ModelCache()
    expected = [alone(adapter, ids) for adapter in adapters]
    assert not torch.allclose(expected[0], expected[1], atol=1e-3)  # the adapters differ
    for _ in range(2):  # switching back and forth keeps each adapter's own outputs
        for number, adapter in enumerate(adapters):
            with cache.use(str(adapter), f"ft:tiny:a{number}") as (model, tokenizer):
                torch.testing.assert_close(logits(model, ids), expected[number], rtol=1e-5, atol=1e-5)
                assert tokenizer.pad_token is not None
    with cache.use(str(tiny_model_dir)) as (model, _):
        torch.testing.assert_close(logits(model, ids), alone(tiny_model_dir, ids), rtol=1e-5, atol=1e-5)
    assert cache.loaded() == {"base": [str(tiny_model_dir)], "adapters": ["ft:tiny:a0", "ft:tiny:a1"]}


def test_the_base_is_held_once_whatever_the_number_of_adapters(adapters, tiny_model_dir):
    base, _ = load_model(tiny_model_dir)
    base_params = sum(p.numel() for p in base.parameters())
    cache = ModelCache()
    with cache.use(str(adapters[0]), "one") as (model, _):
        with_one = sum(p.numel() for p in model.parameters())
    with cache.use(str(adapters[1]), "two") as (model, _):
        with_two = sum(p.numel() for p in model.parameters())
    adapter_params = with_one - base_params
    assert 0 < adapter_params < base_params / 10
    assert with_two == base_params + 2 * adapter_params


def test_least_recently_used_adapter_is_dropped_beyond_the_limit(adapters, ids):
    cache = ModelCache(max_adapters=1)
    for number, adapter in enumerate(adapters):
        with cache.use(str(adapter), f"a{number}") as (model, _):
            torch.testing.assert_close(logits(model, ids), alone(adapter, ids), rtol=1e-5, atol=1e-5)
    assert cache.loaded()["adapters"] == ["a1"]


def test_release_drops_every_model(adapters):
    cache = ModelCache()
    with cache.use(str(adapters[0]), "a0"):
        pass
    cache.release()
    assert cache.loaded() == {"base": [], "adapters": []}


def base_dtypes(model) -> set[torch.dtype]:
    return {p.dtype for name, p in model.named_parameters() if "lora_" not in name}


def test_a_base_is_held_in_the_dtype_its_caller_asks_for_and_loaded_again_for_another(adapters, ids):
    cache = ModelCache()
    with cache.use(str(adapters[0]), "a0", torch.bfloat16) as (model, _):
        assert base_dtypes(model) == {torch.bfloat16}  # peft keeps the adapter's own weights in float32
        in_bfloat16 = logits(model, ids).float()
    with cache.use(str(adapters[0]), "a0") as (model, _):  # inference_dtype(): float32 on a CPU
        assert base_dtypes(model) == {torch.float32}
        torch.testing.assert_close(in_bfloat16, logits(model, ids), rtol=0.1, atol=0.1)  # the same model, rounded


def test_adapter_names_are_model_ids_without_dots():
    assert adapter_name("ft:Qwen/Qwen2.5-Coder-7B:ftjob-1") == "ft:Qwen/Qwen2_5-Coder-7B:ftjob-1"


@pytest.mark.gpu
def test_models_are_placed_on_the_gpu(adapters):
    with ModelCache().use(str(adapters[0]), "a0") as (model, _):
        assert {p.device.type for p in model.parameters()} == {"cuda"}
