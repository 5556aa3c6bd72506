"""The context-length check of inference requests: a prompt's tokens plus ``max_tokens`` must fit
the model's context (its ``max_position_embeddings``, else its tokenizer's ``model_max_length``),
and under ``settings.max_context_tokens`` when set. The API checks it before a row is written or
a task queued, so an over-long prompt is a 400 naming both numbers instead of a worker decoding
for nobody.

Prompts are counted as the worker decodes them: a conversation rendered with the model's chat
template, a raw prompt as it is, both tokenized without added special tokens. The API keeps the
tokenizer and the context length of each base model it has seen (a tuned adapter counts with its
base's); a model whose files are not here (one an engine serves from elsewhere) is not checked
here: its engine checks it.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any

from api.errors import bad_request
from cuset_core.generation.prompts import render_prompt
from cuset_core.models import from_transformers, load_tokenizer, read_base_spec, resolve_model
from db.errors import ErrorCode
from db.settings import Settings

log = logging.getLogger(__name__)

UNBOUNDED = 10**9  # a tokenizer's model_max_length above this is transformers' "no limit" sentinel
POSITION_FIELDS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length", "n_ctx")


@dataclass
class ModelContext:
    """A base model's tokenizer and context length (None: unknown, nothing is checked)."""

    tokenizer: Any
    limit: int | None
    lock: threading.Lock = field(default_factory=threading.Lock)  # one encode at a time per tokenizer

    def count(self, prompt: list[dict] | str) -> int:
        """Tokens of ``prompt``: a conversation (rendered with the chat template) or a raw text."""
        with self.lock:
            text = prompt if isinstance(prompt, str) else render_prompt(self.tokenizer, prompt)
            return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])


_contexts: dict[tuple, ModelContext] = {}
_loading = threading.Lock()


def context_limit(config: Any, tokenizer: Any) -> int | None:
    """The context length a model config (or else its tokenizer) states; None when neither does."""
    for name in POSITION_FIELDS:
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    length = getattr(tokenizer, "model_max_length", None)
    return length if isinstance(length, int) and 0 < length < UNBOUNDED else None


def model_context(spec: str) -> ModelContext | None:
    """The tokenizer and context length of the base model of ``spec`` (loaded once per base);
    None when its files cannot be read here."""
    try:
        source = resolve_model(spec)
        base_spec = read_base_spec(source.adapter) if source.adapter is not None else spec
        base = resolve_model(base_spec) if source.adapter is not None else source
        key = (str(base.folder), base.gguf_file, base.repo_id)
        if key in _contexts:
            return _contexts[key]
        with _loading:
            if key not in _contexts:
                (AutoConfig,) = from_transformers("AutoConfig")
                tokenizer = load_tokenizer(base_spec)
                config = AutoConfig.from_pretrained(base.pretrained, **base.hf_kwargs())
                _contexts[key] = ModelContext(tokenizer, context_limit(config, tokenizer))
            return _contexts[key]
    except Exception as exc:  # noqa: BLE001 - an unreadable model is checked where it decodes, not here
        log.warning("no context-length check for model %r: %s", spec, exc)
        return None


def check_context(settings: Settings, spec: str, prompts: list, max_tokens: int, prompt_param: str) -> None:
    """400 when a prompt of ``prompts`` plus ``max_tokens`` does not fit the model's context (or
    ``settings.max_context_tokens``), naming both numbers: ``param`` is ``prompt_param`` when the
    prompt alone leaves no room for a token, ``max_tokens`` otherwise. Runs the tokenizer: call
    it from a worker thread, never on the event loop."""
    context = model_context(spec)
    limits = [n for n in (context.limit if context else None, settings.max_context_tokens or None) if n]
    if context is None or not limits:
        return
    limit = min(limits)
    for prompt in prompts:
        tokens = context.count(prompt)
        if tokens + max_tokens > limit:
            where = "this server's limit" if limit == settings.max_context_tokens else "this model's context length"
            raise bad_request(
                f"The prompt is {tokens} tokens and max_tokens is {max_tokens}: {tokens + max_tokens} in all, "
                f"over {where} of {limit} tokens. Shorten the {prompt_param} or lower max_tokens.",
                param=prompt_param if tokens >= limit else "max_tokens",
                code=ErrorCode.CONTEXT_LENGTH_EXCEEDED,
            )
