"""The Python half of tier 2's torch bridge (``runtime/cuset_torch_bridge.h``).

A candidate extension built on the bridge prelude sees the light stand-in of the PyTorch C++ API
(``verify/stubs/light``) instead of ATen's headers, so g++ has no ATen templates to instantiate.
Its tensors are handles to ``torch.Tensor`` objects, and every torch operation it calls
(``torch::empty``, ``x.sum(1)``, ``a + b``) comes here and runs as the aten operator of that name,
so the semantics are torch's own. C++ passes arguments positionally, as the C++ API does; the
operator's schema decides which of them are keyword-only in Python (``dtype``, ``approximate``,
...). ``TensorOptions`` arrive as an :class:`Options` and become keyword arguments.

Runs in the candidate's process, which is untrusted anyway: the judge never relies on it.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any

# In the order of c10::ScalarType in the stand-in (the index is the enum's value).
DTYPE_NAMES = (
    "uint8",
    "int8",
    "int16",
    "int32",
    "int64",
    "float16",
    "float32",
    "float64",
    "complex32",
    "complex64",
    "complex128",
    "bool",
    "qint8",
    "quint8",
    "qint32",
    "bfloat16",
    "float8_e5m2",
    "float8_e4m3fn",
    "uint16",
    "uint32",
    "uint64",
)
# In the order of c10::MemoryFormat in the stand-in.
MEMORY_FORMAT_NAMES = ("contiguous_format", "preserve_format", "channels_last", "channels_last_3d")
# Operators the C++ API spells differently from aten (``x.float_()`` is the stand-in's name).
_RENAMED = {"float_": "float", "double_": "double", "long_": "long", "int_": "int", "bool_": "bool"}
# Methods whose leading dtype or device is positional in Python too.
_POSITIONAL_DTYPE = frozenset({"to", "view", "type"})
# Run as Python's own methods: aten spells their overloads with other arguments than C++ does.
_PYTHON_FIRST = frozenset({"to", "type"})


def dtypes() -> tuple[Any, ...]:
    """torch dtypes by ScalarType index (None where this torch has no such dtype)."""
    import torch

    return tuple(getattr(torch, name, None) for name in DTYPE_NAMES)


def memory_formats() -> tuple[Any, ...]:
    """torch memory formats by MemoryFormat index."""
    import torch

    return tuple(getattr(torch, name) for name in MEMORY_FORMAT_NAMES)


class Options:
    """A ``TensorOptions``: the keyword arguments it stands for."""

    def __init__(self, dtype: int, device_kind: int) -> None:
        self.kwargs: dict[str, Any] = {}
        if dtype >= 0:
            self.kwargs["dtype"] = dtypes()[dtype]
        if device_kind >= 0:
            self.kwargs["device"] = device(device_kind)


# Set by the candidate's host process behind the device boundary (cpu/device/), before any
# extension loads: its device tensors are "cuda" ones there.
BEHIND_DEVICE_BOUNDARY = False
_CUDA, _META = 1, 9  # c10::DeviceType in the stand-in


def device(kind: int) -> Any:
    """The torch device a C++ ``DeviceType`` names: the CPU on tier 2, which has no GPU; behind the
    device boundary, CUDA stays CUDA."""
    import torch

    if BEHIND_DEVICE_BOUNDARY and kind in (_CUDA, _META):
        return torch.device("cuda" if kind == _CUDA else "meta")
    return torch.device("cpu")


def _arguments(name: str, args: Iterable[Any]) -> tuple[list[Any], dict[str, Any]]:
    """Positional and keyword arguments of a C++ call: options spread, trailing nullopts dropped."""
    import torch

    positional: list[Any] = []
    keywords: dict[str, Any] = {}
    for value in args:
        if isinstance(value, Options):
            keywords.update(value.kwargs)
        elif isinstance(value, torch.memory_format):
            keywords["memory_format"] = value
        elif isinstance(value, (torch.dtype, torch.device)) and name not in _POSITIONAL_DTYPE:
            keywords["dtype" if isinstance(value, torch.dtype) else "device"] = value
        else:
            positional.append(value)
    while positional and positional[-1] is None:
        positional.pop()
    return positional, keywords


@functools.cache
def _aten(name: str) -> Any:
    import torch

    return getattr(torch.ops.aten, name, None)


def _python_level(name: str, method: bool) -> Any:
    import torch

    if method:
        return getattr(torch.Tensor, name, None)
    return getattr(torch, name, None) or getattr(torch.nn.functional, name, None)


def _by_schema(packet: Any, positional: list[Any], keywords: dict[str, Any]) -> Any:
    """Call an aten operator packet with C++-style arguments: positional ones fill the schema in
    order, keyword-only parameters included; the first overload that accepts them runs."""
    failures = []
    for overload in packet.overloads():
        op = getattr(packet, overload)
        parameters = op._schema.arguments
        if len(positional) > len(parameters) or overload.endswith("out"):
            continue
        args, kwargs = [], dict(keywords)
        for parameter, value in zip(parameters, positional):
            if parameter.kwarg_only:
                kwargs[parameter.name] = value
            else:
                args.append(value)
        try:
            return op(*args, **kwargs)
        except (TypeError, RuntimeError) as exc:
            failures.append(exc)
    if failures:
        raise failures[-1]
    raise TypeError(f"aten::{packet.__name__} takes no such arguments")


def resolvable(name: str, method: bool) -> bool:
    """Whether a C++ ``name`` (a Tensor method, or a function of at::/torch::) runs here."""
    name = _RENAMED.get(name, name)
    return _aten(name) is not None or _python_level(name, method) is not None


def call(name: str, args: tuple[Any, ...], method: bool) -> Any:
    """Run the torch operation ``name`` as C++ called it (``args[0]`` is ``self`` for a method)."""
    name = _RENAMED.get(name, name)
    positional, keywords = _arguments(name, args)
    packet = _aten(name)
    if packet is not None and name not in _PYTHON_FIRST:
        return _by_schema(packet, positional, keywords)
    target = _python_level(name, method)
    if target is None:
        raise AttributeError(f"torch has no operation {name!r}")
    return target(*positional, **keywords)


def binary(op: str, a: Any, b: Any) -> Any:
    """A C++ operator on tensors and scalars (``a + b``, ``a < 2``): Python's operators are the
    same operations, scalars on either side."""
    import operator

    return getattr(operator, op)(a, b)
