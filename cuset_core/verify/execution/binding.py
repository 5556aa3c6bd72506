"""Bind a standalone torch-extension ``.cu`` file's ``forward`` to a KernelBench problem.

A ``.cu`` candidate (the Sakana AI CUDA Engineer format) exports a host function through
``PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &fn, ...); }``. It takes the
problem's inputs followed by the reference module's weights and settings, e.g.
``forward(x, conv_weight, conv_bias, bias)`` for ``Model(conv=Conv2d, bias=Parameter)`` or
``forward(x, weights, biases)`` with ``std::vector<torch::Tensor>`` lists for an MLP.

The heuristic, applied to the C++ parameters of the bound function in order:

1. the first ``len(get_inputs())`` parameters are the inputs, positionally;
2. a tensor parameter takes the reference's parameter or buffer with the same name, where
   ``conv.weight`` is spelled ``conv_weight`` (case-insensitive); failing that the only one
   whose name ends with it (``weight`` -> ``conv.weight``); failing that the next unused
   tensor in module order;
3. a ``std::vector<Tensor>`` parameter takes every unused tensor whose last name component is
   the parameter's name made singular (``weights`` -> every ``*.weight``), else all unused ones;
4. a scalar parameter takes the ``__init__`` argument of that name (``get_init_inputs()``
   value), else the module attribute of that name (``training`` included), else the next
   unused scalar ``__init__`` argument;
5. an optional tensor with no match gets ``None``; anything else unmatched is a
   ``BindingError``.

Tier 2 (CPU) and tier 3 (GPU) both use this module, so a ``.cu`` candidate is bound the same
way everywhere. Nothing here executes candidate code: parsing is textual, and applying a plan
only reads the reference's weights, which the reference's process describes
(:func:`reference_layout`) and ships; the candidate's process never loads the reference module.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

from torch import nn

ParamKind = Literal["tensor", "optional_tensor", "tensor_list", "int", "float", "bool", "int_list", "other"]
SourceKind = Literal["input", "tensor", "tensor_list", "init", "attr", "none"]

_SCALAR_KINDS = {"int", "float", "bool", "int_list"}
_DEF_FORWARD = re.compile(r"\.def\(\s*\"forward\"\s*,\s*&?\s*([A-Za-z_][\w:]*)")


class BindingError(ValueError):
    """The ``.cu`` forward cannot be matched to the problem; the message says which argument."""


@dataclass(frozen=True)
class CppParam:
    """One parameter of the C++ host function: its declared type text, name and kind."""

    type: str
    name: str
    kind: ParamKind


@dataclass(frozen=True)
class ArgSource:
    """Where one C++ argument comes from: an input index, tensor name(s), init index, attribute."""

    kind: SourceKind
    index: int | None = None
    names: tuple[str, ...] = ()


def bound_function_name(cuda_code: str) -> str:
    """Name of the C++ function that ``PYBIND11_MODULE`` exports as ``forward``."""
    match = _DEF_FORWARD.search(cuda_code)
    if match is None:
        return "forward"
    return match.group(1).split("::")[-1]


def forward_signature(cuda_code: str) -> list[CppParam]:
    """Parameters of the exported ``forward``, parsed from its definition in ``cuda_code``."""
    name = bound_function_name(cuda_code)
    text = _strip_comments(cuda_code)
    for match in re.finditer(rf"\b{re.escape(name)}\s*\(", text):
        open_paren = match.end() - 1
        close_paren = _matching_paren(text, open_paren)
        if close_paren is None:
            continue
        tail = text[close_paren + 1 : close_paren + 80].lstrip()
        tail = re.sub(r"^(const|noexcept|override)\b\s*", "", tail)
        if tail.startswith("{") and _is_definition_head(text, match.start()):
            return [_parse_param(piece) for piece in _split_top_level(text[open_paren + 1 : close_paren])]
    raise BindingError(f"no definition of the exported function {name!r} found in the .cu source")


def plan_binding(
    params: list[CppParam],
    n_inputs: int,
    tensor_names: list[str],
    init_names: list[str],
    attr_names: list[str],
) -> list[ArgSource]:
    """Decide, for each C++ parameter, which value feeds it (see the module docstring).

    ``tensor_names``: the reference's ``named_parameters()`` then ``named_buffers()`` names, in
    module order. ``init_names``: ``Model.__init__`` argument names, matching
    ``get_init_inputs()`` positionally. ``attr_names``: scalar attributes of the module.
    """
    if len(params) < n_inputs:
        raise BindingError(f"forward takes {len(params)} arguments but the problem has {n_inputs} inputs")
    plan = [ArgSource("input", index=i) for i in range(n_inputs)]
    unused_tensors = list(tensor_names)
    unused_inits = list(range(len(init_names)))
    for param in params[n_inputs:]:
        plan.append(_source_for(param, unused_tensors, init_names, unused_inits, attr_names))
    return plan


def apply_binding(plan: list[ArgSource], inputs: list[Any], module: Any, init_inputs: list[Any]) -> list[Any]:
    """The argument list for the extension's ``forward``, read from inputs and the module."""
    tensors = dict(module.named_parameters())
    tensors.update(module.named_buffers())
    args: list[Any] = []
    for source in plan:
        if source.kind == "input":
            assert source.index is not None, "an input source always has an index"
            args.append(inputs[source.index])
        elif source.kind == "tensor":
            args.append(tensors[source.names[0]])
        elif source.kind == "tensor_list":
            args.append([tensors[name] for name in source.names])
        elif source.kind == "init":
            assert source.index is not None, "an init source always has an index"
            args.append(init_inputs[source.index])
        elif source.kind == "attr":
            args.append(getattr(module, source.names[0]))
        else:
            args.append(None)
    return args


def init_arg_names(model_cls: type) -> list[str]:
    """Positional argument names of ``model_cls.__init__`` (without ``self``)."""
    # mypy calls instance-level __init__ access unsound because a subclass may change it; the
    # subclass's own __init__ is exactly what this reads.
    signature = inspect.signature(model_cls.__init__)  # type: ignore[misc]
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    names = [p.name for p in signature.parameters.values() if p.kind in kinds]
    return names[1:]


def scalar_attr_names(module: nn.Module) -> list[str]:
    """Public attributes of ``module`` holding a number, bool, or tuple/list of numbers."""
    names = ["training"]
    for name, value in vars(module).items():
        if name.startswith("_") or name == "training":
            continue
        if _is_scalar_value(value):
            names.append(name)
    return names


@dataclass(frozen=True)
class ReferenceLayout:
    """What binding needs to know of the reference module, described in the reference's process
    so the candidate's process never loads the reference ``Model``: its tensor names (parameters
    then buffers, module order), ``__init__`` argument names and scalar attribute values."""

    tensor_names: list[str]
    init_names: list[str]
    attrs: dict[str, Any]


def reference_layout(model: nn.Module) -> ReferenceLayout:
    """The :class:`ReferenceLayout` of a constructed reference module."""
    tensor_names = [name for name, _ in model.named_parameters()] + [name for name, _ in model.named_buffers()]
    attrs = {name: getattr(model, name) for name in scalar_attr_names(model)}
    return ReferenceLayout(tensor_names, init_arg_names(type(model)), attrs)


class ReferenceWeights:
    """Stands in for the reference module where :func:`apply_binding` reads it: named tensors
    and scalar attributes, shipped from the reference's process."""

    def __init__(self, tensors: dict[str, Any], attrs: dict[str, Any]):
        self._tensors = tensors
        for name, value in attrs.items():
            setattr(self, name, value)

    def named_parameters(self) -> Iterator[tuple[str, Any]]:
        return iter(self._tensors.items())

    def named_buffers(self) -> Iterator[tuple[str, Any]]:
        return iter(())


class BoundExtensionModel(nn.Module):
    """``ModelNew`` for a ``.cu`` candidate: calls the extension with the inputs and the
    reference's weights (built under the same seed as the module it is compared with)."""

    def __init__(
        self, weights: ReferenceWeights, forward_fn: Callable[..., Any], plan: list[ArgSource], init_inputs: list[Any]
    ):
        super().__init__()
        self.weights = weights
        self._forward_fn = forward_fn
        self._plan = plan
        self._init_inputs = init_inputs

    def forward(self, *inputs: Any) -> Any:
        return self._forward_fn(*apply_binding(self._plan, list(inputs), self.weights, self._init_inputs))


def bind_extension(
    layout: ReferenceLayout,
    tensors: dict[str, Any],
    init_inputs: list[Any],
    n_inputs: int,
    cuda_code: str,
    forward_fn: Callable[..., Any],
) -> BoundExtensionModel:
    """Wrap the extension's forward around the reference's ``tensors`` (by name) as ``layout`` says."""
    plan = plan_binding(
        forward_signature(cuda_code), n_inputs, layout.tensor_names, layout.init_names, list(layout.attrs)
    )
    return BoundExtensionModel(ReferenceWeights(tensors, layout.attrs), forward_fn, plan, list(init_inputs))


def _source_for(
    param: CppParam,
    unused_tensors: list[str],
    init_names: list[str],
    unused_inits: list[int],
    attr_names: list[str],
) -> ArgSource:
    if param.kind in ("tensor", "optional_tensor"):
        name = _match_tensor(param.name, unused_tensors)
        if name is None and param.kind == "tensor" and unused_tensors:
            name = unused_tensors[0]
        if name is None:
            if param.kind == "optional_tensor":
                return ArgSource("none")
            raise BindingError(f"no reference parameter or buffer left for tensor argument {param.name!r}")
        unused_tensors.remove(name)
        return ArgSource("tensor", names=(name,))
    if param.kind == "tensor_list":
        leaf = _singular(param.name.lower())
        names = [n for n in unused_tensors if n.rsplit(".", 1)[-1].lower() == leaf] or list(unused_tensors)
        for name in names:
            unused_tensors.remove(name)
        return ArgSource("tensor_list", names=tuple(names))
    if param.kind in _SCALAR_KINDS:
        if param.name in init_names:
            index = init_names.index(param.name)
            if index in unused_inits:
                unused_inits.remove(index)
            return ArgSource("init", index=index)
        if param.name in attr_names:
            return ArgSource("attr", names=(param.name,))
        if unused_inits:
            return ArgSource("init", index=unused_inits.pop(0))
    raise BindingError(f"cannot bind argument {param.name!r} of type {param.type!r} to the problem")


def _match_tensor(name: str, candidates: list[str]) -> str | None:
    """Exact (``conv_weight`` == ``conv.weight``) match, else the unique suffix match."""
    key = name.lower()
    normalised = {c: c.replace(".", "_").lower() for c in candidates}
    for candidate, norm in normalised.items():
        if norm == key:
            return candidate
    suffix = [c for c, norm in normalised.items() if norm.endswith("_" + key) or key.endswith("_" + norm)]
    return suffix[0] if len(suffix) == 1 else None


def _singular(name: str) -> str:
    if name.endswith("ses"):
        return name[:-2]
    if name.endswith("s"):
        return name[:-1]
    return name


def _is_scalar_value(value: Any) -> bool:
    if isinstance(value, (bool, int, float)):
        return True
    if isinstance(value, (tuple, list)) and value:
        return all(isinstance(v, (bool, int, float)) for v in value)
    return False


def _parse_param(text: str) -> CppParam:
    declaration = text.split("=", 1)[0].strip()
    match = re.search(r"([A-Za-z_]\w*)\s*$", declaration)
    if match is None:
        raise BindingError(f"cannot read the forward parameter {text.strip()!r}")
    name = match.group(1)
    ctype = " ".join(declaration[: match.start()].split())
    return CppParam(ctype, name, _kind_of(ctype))


def _kind_of(ctype: str) -> ParamKind:
    compact = ctype.replace(" ", "")
    if "Tensor" in compact:
        if "vector<" in compact or "TensorList" in compact:
            return "tensor_list"
        if "optional<" in compact:
            return "optional_tensor"
        return "tensor"
    if "IntArrayRef" in compact or re.search(r"vector<(int|int64_t|long)", compact):
        return "int_list"
    if re.search(r"\bbool\b", ctype):
        return "bool"
    if re.search(r"\b(float|double)\b", ctype):
        return "float"
    if re.search(r"\b(int|long|int64_t|int32_t|size_t|unsigned|short)\b", ctype):
        return "int"
    return "other"


def _strip_comments(code: str) -> str:
    """Replace comments with spaces of the same length (offsets stay valid)."""
    return re.sub(r"//[^\n]*|/\*.*?\*/", lambda m: re.sub(r"[^\n]", " ", m.group(0)), code, flags=re.S)


def _matching_paren(text: str, open_index: int) -> int | None:
    depth = 0
    for i in range(open_index, len(text)):
        if text[i] == "(":
            depth += 1
        elif text[i] == ")":
            depth -= 1
            if depth == 0:
                return i
    return None


def _is_definition_head(text: str, name_start: int) -> bool:
    """True when a return type, not an operator or ``&``, precedes the function name."""
    before = text[max(0, name_start - 120) : name_start].rstrip()
    return bool(before) and (before[-1].isalnum() or before[-1] in "_>&*:") and not before.endswith("&&")


def _split_top_level(params: str) -> list[str]:
    pieces: list[str] = []
    current: list[str] = []
    depth = 0
    for ch in params:
        if ch in "<([{":
            depth += 1
        elif ch in ">)]}":
            depth -= 1
        if ch == "," and depth == 0:
            pieces.append("".join(current))
            current = []
        else:
            current.append(ch)
    if "".join(current).strip() and "".join(current).strip() != "void":
        pieces.append("".join(current))
    return [p for p in pieces if p.strip()]
