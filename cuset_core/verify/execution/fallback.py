"""Run-time fallback detection in the candidate's process: whether ``ModelNew.forward``'s outputs
came from the candidate's kernels or from torch compute (:class:`FallbackMonitor`).

It runs in the candidate's process, so it catches lazy and accidental fallbacks; the judge's
comparison is what a hostile candidate cannot get around. torch is imported where it is used.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from cuset_core.verify.execution.contracts import clip
from cuset_core.verify.policy import ALLOCATION_OPS, COPY_OPS, VIEW_OPS

if TYPE_CHECKING:
    from torch.utils._python_dispatch import TorchDispatchMode


class FallbackMonitor:
    """Counts, during ``ModelNew.forward``, aten compute ops against custom-extension calls, and
    tracks which storages hold data a custom extension produced (its results, and tensors it
    wrote in place) and which hold torch compute built from them.

    An output whose storage was last produced by torch compute on data no extension touched
    (``x @ w``, ``x * 2``, the reference's own ops) is a fallback, whatever the code looks like.
    Views share their source's storage; copies and allocations carry over or reset the mark.
    It runs in the candidate's process, so it catches lazy and accidental fallbacks; the judge's
    comparison is what a hostile candidate cannot get around.
    """

    def __init__(self) -> None:
        self.extension_calls = 0
        self.compute_ops: dict[str, int] = {}
        self._depth = 0
        self._kernel_made: dict[int, bool] = {}
        self._mode: TorchDispatchMode | None = None

    # -- the extension side
    def wrap_extension(self, module: Any) -> Any:
        """A stand-in for an extension module whose functions count as kernel calls."""
        import types

        proxy = types.ModuleType(getattr(module, "__name__", "extension"))
        for name in dir(module):
            value = getattr(module, name)
            if callable(value) and not name.startswith("__") and not isinstance(value, type):
                value = self._wrap(value)
            try:
                setattr(proxy, name, value)
            except (AttributeError, TypeError):
                continue
        return proxy

    def _wrap(self, function: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            self.extension_calls += 1
            self._depth += 1
            try:
                arguments = list(_tensors_in((args, kwargs)))
                before = [t.clone() for t in arguments]
                result = function(*args, **kwargs)
                for original, snapshot in zip(arguments, before):
                    if not _same_bits(original, snapshot):  # written in place through data_ptr
                        self._mark(original, True)
                for produced in _tensors_in(result):
                    self._mark(produced, True)
                return result
            finally:
                self._depth -= 1

        call.__name__ = getattr(function, "__name__", "extension_function")
        call.__doc__ = getattr(function, "__doc__", None)
        return call

    # -- the torch side
    def _mark(self, tensor: Any, kernel_made: bool) -> None:
        key = _storage_key(tensor)
        if key is not None:
            self._kernel_made[key] = kernel_made

    def made_by_kernel(self, tensor: Any) -> bool:
        """Whether ``tensor``'s storage holds data a custom extension produced or derived from it."""
        key = _storage_key(tensor)
        return key is not None and self._kernel_made.get(key, False)

    def observe(self, name: str, inputs: list[Any], outputs: list[Any], in_place_target: Any) -> None:
        """Record one aten op run outside any extension call."""
        if name in VIEW_OPS:
            return
        if name in ALLOCATION_OPS:
            for tensor in outputs:
                self._mark(tensor, False)
            return
        derived = any(self.made_by_kernel(t) for t in inputs)
        if name == "copy_" and len(inputs) >= 2:
            derived = self.made_by_kernel(inputs[1])
        elif name not in COPY_OPS:
            self.compute_ops[name] = self.compute_ops.get(name, 0) + 1
        for tensor in [*outputs, *([in_place_target] if in_place_target is not None else [])]:
            self._mark(tensor, derived)

    def __enter__(self) -> FallbackMonitor:
        from torch.utils._python_dispatch import TorchDispatchMode

        monitor = self

        class Mode(TorchDispatchMode):
            @classmethod
            def _should_skip_dynamo(cls) -> bool:
                # Else torch wraps __torch_dispatch__ in a dynamo guard whose first call imports
                # torch._dynamo: 1.3 CPU-s of every candidate side's first trial, for a
                # compiler that never runs here.
                return False

            def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
                kwargs = kwargs or {}
                out = func(*args, **kwargs)
                if monitor._depth == 0 and getattr(func, "namespace", "aten") not in ("aten", "prims"):
                    monitor.extension_calls += 1  # an op the candidate registered (TORCH_LIBRARY)
                    written = [
                        value
                        for spec, value in zip(func._schema.arguments, args)
                        if spec.alias_info is not None and spec.alias_info.is_write
                    ]  # Tensor(a!)
                    for produced in [*_tensors_in(out), *_tensors_in(written)]:
                        monitor._mark(produced, True)
                elif monitor._depth == 0:
                    name = func.overloadpacket.__name__
                    target = args[0] if name.endswith("_") and args else None
                    monitor.observe(name, list(_tensors_in((args, kwargs))), list(_tensors_in(out)), target)
                return out

        self._mode = Mode()
        self._mode.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        assert self._mode is not None, "__exit__ without __enter__"
        self._mode.__exit__(*exc)

    def fallback_reason(self, outputs: list[Any]) -> str | None:
        """Why ``outputs`` came from torch compute instead of the kernels; None when they did not."""
        import torch

        ops = ", ".join(f"{name} x{count}" for name, count in sorted(self.compute_ops.items())) or "none"
        counts = f"{self.extension_calls} custom-extension calls, aten compute ops: {clip(ops, 200)}"
        if self.extension_calls == 0:
            return f"run-time fallback: forward never called a custom extension ({counts})"
        for index, output in enumerate(outputs):
            if isinstance(output, torch.Tensor) and not self.made_by_kernel(output):
                return (
                    f"run-time fallback: output {index} was computed by torch ops, not by the custom kernels ({counts})"
                )
        return None


def _tensors_in(value: Any) -> Iterator[Any]:
    import torch

    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from _tensors_in(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors_in(item)


def _storage_key(tensor: Any) -> int | None:
    try:
        storage = tensor.untyped_storage()
    except (RuntimeError, NotImplementedError):
        return None
    return storage.data_ptr() if storage.nbytes() else None


def _same_bits(a: Any, b: Any) -> bool:
    """Whether two tensors of one shape and dtype hold the same bytes (NaN equals NaN)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    try:
        import torch

        return bool(torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8)))
    except RuntimeError:
        return bool(a.equal(b))
