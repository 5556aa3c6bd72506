"""Per-token losses of a causal LM without its full [B, T, V] logits: the model runs with no
logits kept, its decoder's final hidden states are caught on the way out, and the LM head is
applied to the supervised positions in chunks (``chunked_token_loss``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from cuset_core.objectives.token_loss import chunked_token_loss, per_token_loss

# Config fields of models whose logits are not plain ``lm_head(hidden)`` (Gemma's soft-capping,
# Cohere's and Granite's scaling): those keep the full-logits path rather than a silently
# different loss.
LOGIT_TRANSFORMS = ("final_logit_softcapping", "logit_scale", "logits_scaling")


@dataclass(frozen=True)
class LeanParts:
    """The decoder whose output (after its final norm) feeds ``head``, the LM head."""

    decoder: nn.Module
    head: nn.Module


def lean_parts(model: nn.Module) -> LeanParts | None:
    """The decoder and LM head of a causal LM, plain or peft-wrapped, or None when its logits
    are not ``head(decoder output)`` or the parts cannot be found."""
    # Duck-typed: a peft wrapper has get_base_model, a causal LM get_decoder and
    # get_output_embeddings; nn.Module's static type declares none of them.
    wrapped: Any = model
    base = wrapped.get_base_model() if hasattr(wrapped, "get_base_model") else wrapped
    config = getattr(base, "config", None)
    if any(getattr(config, name, None) is not None for name in LOGIT_TRANSFORMS):
        return None
    try:
        decoder, head = base.get_decoder(), base.get_output_embeddings()
    except (AttributeError, NotImplementedError):
        return None
    if decoder is None or head is None or decoder is base:
        return None
    return LeanParts(decoder, head)


def _last_hidden_state(output: Any) -> Tensor:
    """The hidden states [B, T, H] of a decoder's output: a ModelOutput, or a tuple without return_dict."""
    hidden: Tensor = output.last_hidden_state if hasattr(output, "last_hidden_state") else output[0]
    return hidden


def model_token_loss(
    model: nn.Module, parts: LeanParts | None, inputs: dict[str, Tensor], labels: Tensor, chunk_size: int
) -> tuple[Tensor, object]:
    """``(per-token loss [B, T] float32 nats, model outputs)`` for ``model(**inputs)``.

    ``model`` is what the Trainer hands over (possibly wrapped for data parallelism; it is
    called as is so the wrapper sees the forward); ``parts`` come from the unwrapped model.
    With ``parts`` and ``chunk_size`` >= 1 the model keeps no logits (``outputs.logits`` is
    [B, 0, V]) and the loss comes from ``chunked_token_loss``; otherwise from full logits.
    """
    if parts is None or chunk_size < 1:
        outputs = model(**inputs)
        return per_token_loss(outputs.logits, labels), outputs
    caught: list[Tensor] = []
    hook = parts.decoder.register_forward_hook(lambda module, args, output: caught.append(_last_hidden_state(output)))
    try:
        no_positions = torch.zeros(0, dtype=torch.long, device=labels.device)
        outputs = model(**inputs, logits_to_keep=no_positions)
    finally:
        hook.remove()
    return chunked_token_loss(caught[0], parts.head, labels, chunk_size), outputs
