"""LoRA adapters of the tiny test model with random, non-zero weights (a fresh LoRA adapter
is the identity: its B matrices start at zero), and logits to compare models by."""

from __future__ import annotations

from pathlib import Path

import torch

from cuset_core.models import load_model, write_base_spec

LORA_TARGETS = ["q_proj", "v_proj"]


def make_adapter(base_dir: Path, folder: Path, seed: int) -> Path:
    """A LoRA adapter of the tiny base with random (non-zero) weights, saved as the trainer saves it."""
    from peft import LoraConfig, get_peft_model

    base, _ = load_model(base_dir)
    model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=LORA_TARGETS, task_type="CAUSAL_LM"))
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.5)
    model.save_pretrained(folder)
    write_base_spec(folder, str(base_dir))
    return folder


def logits(model, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=ids.to(next(model.parameters()).device)).logits.cpu()
