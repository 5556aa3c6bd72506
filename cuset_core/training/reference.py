"""``confidence="reference"``: the frozen base model's per-token probabilities, computed once and
cached by a hash of (token ids of every example, model files, max_seq_len).

The token ids already encode the dataset content, the tokenizer and the prompt style.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from cuset_core.models import resolve_model
from cuset_core.objectives import MethodConfig
from cuset_core.objectives.objective import ObjectiveBatch, dataset_state
from cuset_core.objectives.state import ObjectiveState
from cuset_core.objectives.token_loss import supervised_mask, token_probability
from cuset_core.training.collator import CusetCollator, TrainingExample, as_item
from cuset_core.training.lean_loss import lean_parts, model_token_loss

CACHE_VERSION = "1"


def model_fingerprint(spec: str) -> str:
    """Identify a model spec by its files' names, sizes and modification times (no hashing of GBs)."""
    source = resolve_model(spec)
    if source.folder is None:
        # A repo id not cached yet has no files to describe; it is cached once its model loads.
        files: list[Path] = []
    elif source.gguf_file:
        files = [source.folder / source.gguf_file]
    else:
        files = sorted(source.folder.iterdir())
    parts = [spec]
    for path in files:
        if path.is_file():
            stat = path.stat()
            parts.append(f"{path.name}:{stat.st_size}:{stat.st_mtime_ns}")
    return "|".join(parts)


def reference_key(examples: list[TrainingExample], model_spec: str, max_seq_len: int) -> str:
    """Cache key (hex sha256) of a reference-confidence computation."""
    digest = hashlib.sha256(f"{CACHE_VERSION}|{model_fingerprint(model_spec)}|{max_seq_len}".encode())
    for example in examples:
        digest.update(np.asarray(example.input_ids, dtype=np.int64).tobytes())
        digest.update(np.asarray(example.labels, dtype=np.int64).tobytes())
    return digest.hexdigest()


Progress = Callable[[int, int], None]  # (examples done, examples in all)


@torch.no_grad()
def compute_reference_confidence(
    model,
    examples: list[TrainingExample],
    pad_token_id: int,
    device: torch.device,
    batch_size: int = 4,
    on_progress: Progress | None = None,
    loss_chunk_size: int = 0,
) -> list[list[float]]:
    """p of every token under ``model`` (eval mode, no gradient): one list of length T per example,
    position t holding p(token t | tokens < t), 1.0 where the token is not supervised.
    ``on_progress`` is called after every batch (a pass over a whole dataset takes minutes on a CPU).
    ``loss_chunk_size`` >= 1 reads p from the hidden states in chunks, as training does."""
    collate = CusetCollator(pad_token_id)
    was_training = model.training
    model.eval()
    parts = lean_parts(model)
    result: list[list[float]] = []
    for start in range(0, len(examples), batch_size):
        chunk = examples[start : start + batch_size]
        batch = collate([as_item(example) for example in chunk])
        inputs = {"input_ids": batch["input_ids"].to(device), "attention_mask": batch["attention_mask"].to(device)}
        token_loss, _ = model_token_loss(model, parts, inputs, batch["labels"].to(device), loss_chunk_size)
        p = token_probability(token_loss).cpu()
        result.extend(p[row, : len(example.input_ids)].tolist() for row, example in enumerate(chunk))
        if on_progress is not None:
            on_progress(len(result), len(examples))
    model.train(was_training)
    return result


def load_cached(path: Path, examples: list[TrainingExample]) -> list[list[float]] | None:
    """Read a cache file written by ``save_cache`` if it matches the examples' lengths."""
    if not path.is_file():
        return None
    with np.load(path) as data:
        values, lengths = data["values"], data["lengths"]
    if lengths.tolist() != [len(e.input_ids) for e in examples]:
        return None
    bounds = np.concatenate([[0], np.cumsum(lengths)])
    return [values[bounds[i] : bounds[i + 1]].astype(np.float64).tolist() for i in range(len(examples))]


def save_cache(path: Path, confidences: list[list[float]]) -> None:
    """Write confidences as one flat float32 array plus lengths (written atomically)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f"{path.stem}.{os.getpid()}.tmp.npz")
    np.savez(
        temporary,
        values=np.concatenate([np.asarray(c, dtype=np.float32) for c in confidences]) if confidences else np.zeros(0),
        lengths=np.asarray([len(c) for c in confidences], dtype=np.int64),
    )
    temporary.replace(path)


def attach_reference(
    examples: list[TrainingExample],
    model,
    *,
    model_spec: str,
    max_seq_len: int,
    cache_dir: Path,
    pad_token_id: int,
    device: torch.device,
    batch_size: int,
    on_progress: Progress | None = None,
    loss_chunk_size: int = 0,
) -> tuple[list[TrainingExample], bool]:
    """Examples carrying the base model's confidences, and whether they came from the cache."""
    path = cache_dir / f"reference-{reference_key(examples, model_spec, max_seq_len)}.npz"
    confidences = load_cached(path, examples)
    from_cache = confidences is not None
    if confidences is None:
        confidences = compute_reference_confidence(
            model, examples, pad_token_id, device, batch_size, on_progress, loss_chunk_size
        )
        save_cache(path, confidences)
    return [e.with_reference(c) for e, c in zip(examples, confidences, strict=True)], from_cache


def dataset_reweighting_state(
    method: MethodConfig, examples: list[TrainingExample], pad_token_id: int, batch_size: int = 64
) -> ObjectiveState:
    """The frozen tau_lo and weight normaliser of ``method`` over ``examples``, which carry
    reference confidences (``attach_reference``). Every rank computes the same values from the
    whole dataset, so no collective is needed."""
    collate = CusetCollator(pad_token_id)

    def batches():
        for start in range(0, len(examples), batch_size):
            batch = collate([as_item(example) for example in examples[start : start + batch_size]])
            yield ObjectiveBatch(
                token_loss=torch.zeros(batch["labels"].shape),  # not read: p is the reference's
                supervised=supervised_mask(batch["labels"]),
                sensitive=batch["sensitive"],
                region_ids=batch["region_ids"],
                num_items_in_batch=None,
                reference_confidence=batch["reference_confidence"],
            )

    return dataset_state(method, batches())
