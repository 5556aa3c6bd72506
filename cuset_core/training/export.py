"""A finished run's model, out of the project: the adapter files an inference engine loads
(vLLM ``--enable-lora --lora-modules NAME=PATH``, peft ``PeftModel.from_pretrained``), as a
folder or one tar archive, or a merged Hugging Face folder that any engine serves as a plain model.

A run folder (``output_dir`` of a job) holds checkpoints, logs and the final model side by side;
only the final model's files leave it. Nothing that is pickled (``training_args.bin``) and no
path of this machine (``cuset_base.json``, peft's README) is exported.
"""

from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from transformers import PretrainedConfig

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_FILES = (ADAPTER_CONFIG, "adapter_model.safetensors")
# A full fine-tune's model: weights (one file or shards with their index), configs, tokenizer.
MODEL_PATTERNS = (
    "config.json", "generation_config.json", "model*.safetensors", "model.safetensors.index.json",
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
)  # fmt: skip


class ExportError(ValueError):
    """The run folder holds no finished model; the message says what was looked for."""


def model_files(run_dir: Path) -> list[Path]:
    """The final model's files in a run folder: the LoRA adapter when there is one, else the
    full fine-tuned model. Raises ExportError when the run saved neither."""
    run_dir = Path(run_dir)
    if (run_dir / ADAPTER_CONFIG).is_file():
        missing = [name for name in ADAPTER_FILES if not (run_dir / name).is_file()]
        if missing:
            raise ExportError(f"{run_dir}: adapter incomplete, missing {', '.join(missing)}")
        return [run_dir / name for name in ADAPTER_FILES]
    files = sorted({path for pattern in MODEL_PATTERNS for path in run_dir.glob(pattern) if path.is_file()})
    if not any(path.suffix == ".safetensors" for path in files):
        raise ExportError(
            f"{run_dir}: no finished model (expected {ADAPTER_CONFIG} + adapter_model.safetensors, "
            "or a full model's *.safetensors); did the run end?"
        )
    return files


def _content(path: Path, base_model: str | None) -> bytes | None:
    """The adapter config with ``base_model_name_or_path`` set to ``base_model`` (the name
    its user knows the base by, not a folder of this machine); None for any other file."""
    if path.name != ADAPTER_CONFIG or base_model is None:
        return None
    config = json.loads(path.read_text())
    config["base_model_name_or_path"] = base_model
    return (json.dumps(config, indent=2) + "\n").encode()


def write_archive(run_dir: Path, dest: Path, *, folder: str, base_model: str | None = None) -> int:
    """Write the run's model files into an uncompressed tar at ``dest`` (safetensors do not
    compress), under ``folder/``; written to a temporary name and renamed, so ``dest`` is
    complete or absent. Returns the archive's size in bytes."""
    files = model_files(run_dir)
    partial = dest.with_name(f".{dest.name}.partial")
    try:
        with tarfile.open(partial, "w") as archive:
            for path in files:
                member = f"{folder}/{path.name}"
                content = _content(path, base_model)
                if content is None:
                    archive.add(path, arcname=member, recursive=False)
                else:
                    info = tarfile.TarInfo(member)
                    info.size, info.mtime, info.mode = len(content), int(path.stat().st_mtime), 0o644
                    archive.addfile(info, io.BytesIO(content))
        os.replace(partial, dest)
    finally:
        partial.unlink(missing_ok=True)
    return dest.stat().st_size


def export_adapter(
    run_dir: Path, out: Path, *, base_model: str | None = None, dtype: torch.dtype | None = None
) -> list[Path]:
    """Copy the run's model files (the adapter, or a full model) into ``out``; returns them.

    ``dtype`` casts the floating-point tensors of the ``.safetensors`` files (e.g. float16 halves
    a float32 adapter); None copies them as they are.
    """
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for path in model_files(run_dir):
        target = out / path.name
        content = _content(path, base_model)
        if dtype is not None and path.suffix == ".safetensors":
            cast_safetensors(path, target, dtype)
        else:
            target.write_bytes(content if content is not None else path.read_bytes())
        written.append(target)
    return written


def cast_safetensors(source: Path, target: Path, dtype: torch.dtype) -> None:
    """Write ``source``'s tensors to ``target`` with floating-point ones cast to ``dtype``."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    with safe_open(str(source), framework="pt") as opened:
        metadata = opened.metadata() or {}
        tensors = {key: opened.get_tensor(key) for key in opened.keys()}
    cast = {key: t.to(dtype) if t.is_floating_point() else t for key, t in tensors.items()}
    save_file(cast, str(target), metadata={**metadata, "format": "pt"})


def export_merged(run_dir: Path, out: Path, dtype: torch.dtype | None = None) -> Path:
    """Merge the run's LoRA adapter into its base (``merge_and_unload``) and save a plain
    Hugging Face folder (safetensors + config + tokenizer) at ``out``.

    The merge happens in the precision the model loaded in; ``dtype`` then casts the saved
    weights (default: the dtype the base was stored in, from its config). A full fine-tune is
    saved as it is.
    """
    from cuset_core.models import load_model

    model_files(run_dir)  # a clear error before minutes of loading
    model, tokenizer = load_model(run_dir)
    if hasattr(model, "merge_and_unload"):
        model = model.merge_and_unload()
    target = dtype or _stored_dtype(model.config)
    if target is not None:
        model = model.to(target)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def _stored_dtype(config: PretrainedConfig) -> torch.dtype | None:
    stored = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
    if isinstance(stored, str):
        stored = getattr(torch, stored, None)
    return stored if isinstance(stored, torch.dtype) else None
