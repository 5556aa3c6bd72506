"""The worker process's loaded models: an LRU of ``(model, tokenizer)`` by model spec.

Loading SmolLM2-135M takes seconds and a tuned model is its base plus an adapter, so a worker
keeps the last few it served. The key is the spec (a base spec, or an adapter folder whose base
is recorded inside it), which names base and adapters together.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import torch

from cuset_core.models import load_model

CACHE_SIZE = 2


class ModelCache:
    """At most ``size`` loaded models; the least recently used one is dropped first."""

    def __init__(self, size: int = CACHE_SIZE) -> None:
        self.size = size
        self._models: OrderedDict[str, tuple] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, spec: str) -> tuple:
        """``(model, tokenizer)`` for ``spec`` in eval mode, on the GPU when there is one."""
        with self._lock:
            if spec in self._models:
                self._models.move_to_end(spec)
                return self._models[spec]
            model, tokenizer = load_model(spec)
            if torch.cuda.is_available():
                model = model.to("cuda")
            model.eval()
            self._models[spec] = (model, tokenizer)
            while len(self._models) > self.size:
                self._models.popitem(last=False)
            return model, tokenizer


models = ModelCache()
