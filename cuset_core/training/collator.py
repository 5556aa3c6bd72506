"""Training examples, encoded once, and the collator that pads them into micro-batches.

An example carries, per token position t of ``input_ids``: the label (-100 on the prompt), whether
token t is CUDA-sensitive, the id of the region whose syntactic unit holds it (-1 for none; the
objective's ``region_extent`` decides whether the unit's non-sensitive tokens count) and, with
``confidence="reference"``, the frozen base model's probability of token t.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from cuset_core.analysis.analyze import analyze_answer
from cuset_core.analysis.tokens import align_tokens
from cuset_core.data import IGNORE_INDEX
from cuset_core.data.encode import encode_record

NO_REGION = -1


@dataclass(frozen=True)
class TrainingExample:
    """One record as token-aligned lists of equal length T (tokens of prompt + answer)."""

    input_ids: list[int]
    labels: list[int]
    sensitive: list[bool]
    region_ids: list[int]
    reference_confidence: list[float] | None = field(default=None)

    def with_reference(self, confidence: list[float]) -> TrainingExample:
        """The same example carrying the base model's per-token probabilities (length T)."""
        if len(confidence) != len(self.input_ids):
            raise ValueError(f"reference confidence has {len(confidence)} values for {len(self.input_ids)} tokens")
        return TrainingExample(self.input_ids, self.labels, self.sensitive, self.region_ids, list(confidence))


def encode_example(record, tokenizer, max_seq_len: int | None) -> TrainingExample:
    """Tokenise a record once and mark the sensitive tokens of its answer.

    Tokens outside the answer (prompt, template) are never sensitive; the analysis tolerates
    broken code, so every record gets an example.
    """
    encoded = encode_record(record, tokenizer, max_tokens=max_seq_len)
    sensitivity = align_tokens(analyze_answer(record.answer), encoded.offsets, encoded.answer_start)
    return TrainingExample(
        input_ids=list(encoded.input_ids),
        labels=list(encoded.labels),
        sensitive=[bool(flag) for flag in sensitivity.sensitive],
        region_ids=[region if region >= 0 else NO_REGION for region in sensitivity.unit_region],
    )


class ExampleDataset(torch.utils.data.Dataset):
    """A list of TrainingExample served as dicts of lists, as the Trainer's dataloader expects."""

    def __init__(self, examples: list[TrainingExample]):
        self.examples = examples

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, index: int) -> dict:
        return as_item(self.examples[index])


def as_item(example: TrainingExample) -> dict:
    """An example as the dict of lists the collator takes."""
    item = {
        "input_ids": example.input_ids,
        "labels": example.labels,
        "sensitive": example.sensitive,
        "region_ids": example.region_ids,
    }
    if example.reference_confidence is not None:
        item["reference_confidence"] = example.reference_confidence
    return item


def unique_region_ids(rows: list[list[int]]) -> list[list[int]]:
    """Renumber region ids so that no two samples of a micro-batch share one (-1 stays -1)."""
    renumbered, offset = [], 0
    for row in rows:
        renumbered.append([region + offset if region >= 0 else NO_REGION for region in row])
        offset += max(row, default=NO_REGION) + 1
    return renumbered


def _pad(rows: list[list], value, length: int, dtype: torch.dtype) -> Tensor:
    """Right-pad each row to ``length`` with ``value``: tensor [B, length]."""
    return torch.tensor([list(row) + [value] * (length - len(row)) for row in rows], dtype=dtype)


@dataclass(frozen=True)
class CusetCollator:
    """Pads a list of dataset items to the longest one (right padding) into tensors [B, T]."""

    pad_token_id: int

    def __call__(self, features: list[dict]) -> dict[str, Tensor]:
        length = max(len(feature["input_ids"]) for feature in features)
        batch = {
            "input_ids": _pad([f["input_ids"] for f in features], self.pad_token_id, length, torch.long),
            "attention_mask": _pad([[1] * len(f["input_ids"]) for f in features], 0, length, torch.long),
            "labels": _pad([f["labels"] for f in features], IGNORE_INDEX, length, torch.long),
            "sensitive": _pad([f["sensitive"] for f in features], False, length, torch.bool),
            "region_ids": _pad(unique_region_ids([f["region_ids"] for f in features]), NO_REGION, length, torch.long),
        }
        if all("reference_confidence" in f for f in features):
            batch["reference_confidence"] = _pad(
                [f["reference_confidence"] for f in features], 0.0, length, torch.float32
            )
        return batch
