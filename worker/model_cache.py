"""The worker process's loaded models: one base model on this worker's device, with the tuned
adapters of that base attached to it by name (peft ``load_adapter``/``set_adapter``).

A tuned model is a base plus a LoRA adapter of a few MB, so serving ten tuned models of one
7B base takes one copy of the base, not ten. A worker process owns one GPU (compose pins it), so
the cache holds one base; asking for a model of another base drops the first. ``release()``
frees everything (and the CUDA cache) so a training run can have the GPU.

Use ``with models.use(spec, name) as (model, tokenizer):``: the lock is held while the model is
in use, since the active adapter is state shared by every caller of the base.
"""

from __future__ import annotations

import gc
import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from cuset_core.models import (
    ModelSource,
    inference_device,
    inference_dtype,
    load_model,
    place_for_inference,
    read_base_spec,
    resolve_model,
)

MAX_ADAPTERS = 8  # LoRA adapters kept attached to the base; the least recently used goes first


def adapter_name(model_id: str) -> str:
    """A peft adapter name for a model id (peft keeps adapters in a ModuleDict: no dots)."""
    return model_id.replace(".", "_")


@dataclass
class _Base:
    """A loaded base model and the adapters attached to it (name -> adapter folder)."""

    key: tuple[str, str | None, torch.dtype]
    model: Any  # a transformers model (not typed here), a PeftModel once an adapter is attached
    tokenizer: Any
    adapters: OrderedDict[str, Path] = field(default_factory=OrderedDict)


class ModelCache:
    """One base model with up to ``max_adapters`` adapters, on ``device``."""

    def __init__(self, max_adapters: int = MAX_ADAPTERS, device: torch.device | None = None) -> None:
        self.max_adapters = max_adapters
        self.device = device
        self._base: _Base | None = None
        self._lock = threading.RLock()

    @contextmanager
    def use(self, spec: str, name: str | None = None, dtype: torch.dtype | None = None) -> Iterator[tuple]:
        """``(model, tokenizer)`` for ``spec`` (a base spec or a tuned adapter folder), in eval
        mode on the device, its weights in ``dtype`` (default ``inference_dtype()``), with the
        adapter ``name`` (default: the spec) active, or every adapter disabled for a base spec."""
        with self._lock:
            source = resolve_model(spec)
            base_spec = read_base_spec(source.adapter) if source.adapter else str(spec)
            base = self._load_base(base_spec, source, dtype or inference_dtype())
            if source.adapter is None:
                disabled = base.model.disable_adapter() if base.adapters else nullcontext()
                with disabled:
                    yield base.model, base.tokenizer
                return
            self._activate(base, adapter_name(name or str(spec)), source.adapter)
            yield base.model, base.tokenizer

    def loaded(self) -> dict[str, list[str]]:
        """What is in memory: ``{"base": [folder], "adapters": [names]}`` (empty lists when nothing)."""
        with self._lock:
            if self._base is None:
                return {"base": [], "adapters": []}
            return {"base": [self._base.key[0]], "adapters": list(self._base.adapters)}

    @property
    def holds_model(self) -> bool:
        """Whether a base model is loaded; read without the lock, so it answers at once while
        a caller is using the model (a momentary answer, for status reports)."""
        return self._base is not None

    def release(self) -> None:
        """Drop every model and return the GPU memory they held to the driver."""
        with self._lock:
            self._base = None
            gc.collect()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()

    def _load_base(self, base_spec: str, source: ModelSource, dtype: torch.dtype) -> _Base:
        """The base model of ``source`` in ``dtype`` (keyed by its files and dtype, so two specs
        naming the same model share it), loaded from ``base_spec`` unless it already is."""
        key = (str(source.folder), source.gguf_file, dtype)
        if self._base is not None and self._base.key == key:
            return self._base
        self.release()  # one base per device: a second would not fit next to a 7B model
        model, tokenizer = load_model(base_spec, dtype, with_adapter=False)
        self._base = _Base(key, place_for_inference(model, self.device or inference_device()), tokenizer)
        return self._base

    def _activate(self, base: _Base, name: str, folder: Path) -> None:
        """Make adapter ``name`` (loaded from ``folder``) the active one."""
        from peft import PeftModel

        if name in base.adapters and base.adapters[name] != folder:
            self._drop_adapter(base, name)  # the same model id now names another folder
        if name not in base.adapters:
            if len(base.adapters) >= self.max_adapters:
                self._drop_adapter(base, next(iter(base.adapters)))
            try:
                if isinstance(base.model, PeftModel):
                    base.model.load_adapter(folder, adapter_name=name)
                else:
                    base.model = PeftModel.from_pretrained(base.model, folder, adapter_name=name)
            except BaseException:
                self.release()  # a half-attached adapter may have changed the base: load it afresh next time
                raise
            # Adapter weights load on the CPU first; they follow the base onto its device.
            base.model = place_for_inference(base.model, next(base.model.parameters()).device)
        base.adapters[name] = folder
        base.adapters.move_to_end(name)
        base.model.set_adapter(name)

    @staticmethod
    def _drop_adapter(base: _Base, name: str) -> None:
        base.adapters.pop(name)
        if not base.adapters:
            base.model = base.model.unload()  # the bare base again, without LoRA layers
            return
        base.model.set_adapter(next(reversed(base.adapters)))  # peft will not delete the active one
        base.model.delete_adapter(name)
