"""The memory-lean loss (LM head applied to the final hidden states in chunks) gives today's
numbers: the same loss and the same gradients for every objective, with LoRA and with full
fine-tuning of a model whose LM head is tied to its embeddings."""

from __future__ import annotations

from typing import get_args

import pytest
import torch
from transformers import TrainingArguments

from cuset_core.data import IGNORE_INDEX
from cuset_core.models import tiny_model
from cuset_core.objectives import MethodConfig, MethodName
from cuset_core.training.callbacks import MetricStash
from cuset_core.training.collator import CusetCollator
from cuset_core.training.lean_loss import lean_parts
from cuset_core.training.trainer import CusetTrainer

VOCAB = 512
CHUNK = 3  # small, so a batch spans several chunks and a partial last one


def make_batch(seed: int = 0) -> dict[str, torch.Tensor]:
    """Two records of unequal length with prompts, answers, sensitive tokens and regions."""
    generator = torch.Generator().manual_seed(seed)
    features = []
    for length, prompt in ((14, 4), (9, 3)):
        ids = torch.randint(3, VOCAB, (length,), generator=generator).tolist()
        sensitive = (torch.rand(length, generator=generator) < 0.5).tolist()
        features.append(
            {
                "input_ids": ids,
                "labels": [IGNORE_INDEX] * prompt + ids[prompt:],
                "sensitive": [flag and i >= prompt for i, flag in enumerate(sensitive)],
                "region_ids": [i // 3 if flag and i >= prompt else -1 for i, flag in enumerate(sensitive)],
            }
        )
    return CusetCollator(pad_token_id=2)(features)


def make_model(lora: bool):
    model = tiny_model(VOCAB, seed=1)
    if lora:
        from peft import LoraConfig, get_peft_model

        config = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=["q_proj", "v_proj", "down_proj"])
        model = get_peft_model(model, config)
        # Non-zero B matrices, so the adapters' gradients depend on the loss path.
        for name, param in model.named_parameters():
            if "lora_B" in name:
                torch.nn.init.normal_(param, std=0.02)
    return model.train()


def loss_and_grads(model, method: str, chunk: int) -> tuple[float, dict[str, torch.Tensor]]:
    args = TrainingArguments(output_dir="unused", report_to="none", use_cpu=True)
    trainer = CusetTrainer(
        model=model, args=args, method=MethodConfig(type=method), stash=MetricStash(), loss_chunk_size=chunk
    )
    model.zero_grad()
    loss = trainer.compute_loss(model, make_batch(), num_items_in_batch=torch.tensor(19))
    loss.backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    return loss.item(), grads


@pytest.mark.parametrize("lora", [True, False], ids=["lora", "full"])
@pytest.mark.parametrize("method", get_args(MethodName))
def test_chunked_loss_and_gradients_equal_the_full_logits_ones(method, lora):
    model = make_model(lora)
    full_loss, full_grads = loss_and_grads(model, method, chunk=0)
    lean_loss, lean_grads = loss_and_grads(model, method, chunk=CHUNK)

    assert lean_loss == pytest.approx(full_loss, abs=1e-5)
    assert full_grads.keys() == lean_grads.keys() and full_grads
    for name, grad in full_grads.items():
        torch.testing.assert_close(lean_grads[name], grad, atol=1e-4, rtol=0, msg=name)


def test_tied_lm_head_gets_its_gradient_through_the_embeddings():
    model = make_model(lora=False)
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight
    _, grads = loss_and_grads(model, "sft", chunk=CHUNK)
    assert grads["model.embed_tokens.weight"].abs().sum() > 0


def test_the_lean_path_keeps_no_logits():
    model = make_model(lora=True)
    args = TrainingArguments(output_dir="unused", report_to="none", use_cpu=True)
    trainer = CusetTrainer(
        model=model, args=args, method=MethodConfig(type="cuset"), stash=MetricStash(), loss_chunk_size=CHUNK
    )
    _, outputs = trainer.compute_loss(model, make_batch(), return_outputs=True)
    assert outputs.logits.shape == (2, 0, VOCAB)


def test_models_with_transformed_logits_keep_the_full_logits_path():
    model = tiny_model(VOCAB)
    assert lean_parts(model) is not None
    model.config.final_logit_softcapping = 30.0
    assert lean_parts(model) is None


def test_reference_confidence_from_chunks_equals_the_full_logits_one():
    from cuset_core.training.collator import TrainingExample
    from cuset_core.training.reference import compute_reference_confidence

    model = make_model(lora=False)
    batch = make_batch()
    examples = [
        TrainingExample(ids[: int(mask.sum())].tolist(), labels[: int(mask.sum())].tolist(), [False] * int(mask.sum()),
                        [-1] * int(mask.sum()))
        for ids, labels, mask in zip(batch["input_ids"], batch["labels"], batch["attention_mask"])
    ]  # fmt: skip

    full = compute_reference_confidence(model, examples, 2, torch.device("cpu"), loss_chunk_size=0)
    lean = compute_reference_confidence(model, examples, 2, torch.device("cpu"), loss_chunk_size=CHUNK)

    assert [len(row) for row in lean] == [14, 9]
    for lean_row, full_row in zip(lean, full):
        assert lean_row == pytest.approx(full_row, abs=1e-6)
