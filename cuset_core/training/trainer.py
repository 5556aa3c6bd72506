"""A transformers Trainer whose only change is the loss: one objective of cuset_core.objectives."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor
from transformers import Trainer

from cuset_core.objectives import MethodConfig
from cuset_core.objectives.objective import ObjectiveBatch, compute_objective
from cuset_core.objectives.state import ObjectiveState
from cuset_core.objectives.token_loss import supervised_mask
from cuset_core.training.callbacks import MetricStash
from cuset_core.training.lean_loss import lean_parts, model_token_loss

# Batch keys the objective reads and the model must not see.
OBJECTIVE_KEYS = ("labels", "sensitive", "region_ids", "reference_confidence")
EVAL_METHOD = MethodConfig(type="sft")


def make_gather(accelerator) -> Callable[[Tensor], Tensor] | None:
    """A hook concatenating a 1-D tensor over data-parallel ranks (lengths may differ per rank),
    or None in a single process. Every rank must call it the same number of times."""
    if accelerator.num_processes <= 1:
        return None

    def gather(values: Tensor) -> Tensor:
        values = values.reshape(-1)
        lengths = accelerator.gather(torch.tensor([values.numel()], device=values.device))
        padded = accelerator.pad_across_processes(values, dim=0)
        pieces = accelerator.gather(padded).view(len(lengths), -1)
        return torch.cat([pieces[rank, : int(n)] for rank, n in enumerate(lengths.tolist())])

    return gather


class CusetTrainer(Trainer):
    """Trainer computing the loss with a ``MethodConfig`` objective from per-token losses.

    The loss of a micro-batch is the objective's weighted token-loss sum divided by the number of
    supervised tokens of the whole optimizer step (the Trainer's ``num_items_in_batch``, over all
    accumulation micro-batches and all ranks), so accumulation and data parallelism need no
    further scaling. Evaluation reports plain cross-entropy so that methods stay comparable.
    ``objective_state`` holds the CuSeT EMAs of this run (None: fresh ones for ``method``).

    ``loss_chunk_size`` >= 1 computes the per-token losses from the final hidden states, that
    many supervised positions at a time, never holding the batch's [B, T, V] logits (see
    ``lean_loss``); 0, FSDP (whose sharded LM head only exists inside the forward) and models
    with transformed logits use the full logits.
    """

    def __init__(
        self,
        *args,
        method: MethodConfig,
        stash: MetricStash,
        objective_state: ObjectiveState | None = None,
        loss_chunk_size: int = 0,
        **kwargs,
    ):
        super().__init__(*args, **kwargs)
        self.method = method
        self.stash = stash
        self.objective_state = objective_state or ObjectiveState.for_method(
            method.tau_lo_decay, method.normaliser_decay
        )
        self.loss_chunk_size = 0 if self.is_fsdp_enabled else loss_chunk_size
        self._lean_parts = lean_parts(self.accelerator.unwrap_model(self.model)) if self.loss_chunk_size else None
        # Makes the Trainer count supervised tokens over the step (num_items_in_batch) and leave the
        # loss undivided by the accumulation steps, since our loss is normalised by that count.
        self.model_accepts_loss_kwargs = True
        self._gather = make_gather(self.accelerator)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        model_inputs = {key: value for key, value in inputs.items() if key not in OBJECTIVE_KEYS}
        labels = inputs["labels"]
        token_loss, outputs = model_token_loss(model, self._lean_parts, model_inputs, labels, self.loss_chunk_size)
        supervised = supervised_mask(labels)
        denominator = num_items_in_batch if num_items_in_batch is not None else supervised.sum()
        training = model.training
        batch = ObjectiveBatch(
            token_loss=token_loss,
            supervised=supervised,
            sensitive=inputs["sensitive"],
            region_ids=inputs["region_ids"],
            num_items_in_batch=denominator,
            step=self.state.global_step,
            reference_confidence=inputs.get("reference_confidence"),
        )
        if training:
            result = compute_objective(self.method, batch, gather=self._gather, state=self.objective_state)
        else:
            result = compute_objective(EVAL_METHOD, batch, gather=self._gather)
        loss = result.loss
        if (
            num_items_in_batch is not None
            and self.args.average_tokens_across_devices
            and self.accelerator.num_processes > 1
        ):
            # Data parallelism averages gradients over ranks, while our denominator already counts
            # the tokens of every rank: undo the average.
            loss = loss * self.accelerator.num_processes
        if training:
            self.stash.add(result.metrics)
        return (loss, outputs) if return_outputs else loss
