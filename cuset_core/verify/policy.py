"""The data-flow policy of tier 2's verdicts: what the candidate's host code may do with device data.

DESIGN.md §4. The device process sees every operation on device memory (copies, memsets,
launches, torch operators); it classifies each one here and records what the `kernels` policy
forbids. The judge then decides by the policy the settings name:

- ``kernels`` (the default): from the moment the first trial's inputs exist, no device data reaches
  the host (no device-to-host copy, no symbol read, no operator whose result is a host value), and
  during a trial's forward torch computes nothing on the device: the host may allocate, view,
  copy between device tensors, fill with constants and launch kernels. The host then never sees a
  trial's inputs, so nothing it computes can be the answer, whatever road carries it in.
- ``mixed`` (KernelBench's rule: some operators replaced): torch compute on the device is allowed
  and listed on the pass; device data still never reaches the host (numpy or a host loop is no
  operator of torch's on the device); the kernels-did-the-work checks (kernels-off and host-off
  replays, torch-made values in place) decide.

The table below is the policy: an operator's kind by its overload packet's name. Anything not in
it is compute, so a new torch operator is refused until someone writes down why it only moves
data.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

Policy = Literal["kernels", "mixed"]
POLICIES: tuple[Policy, ...] = ("kernels", "mixed")
MAX_VIOLATIONS = 16  # kept per run: the first says why, the rest how often


class Access(StrEnum):
    """What an operation on device data does, as the policy sees it."""

    MOVEMENT = "movement"  # allocate, view, copy between device tensors, fill with a constant
    TO_HOST = "to_host"  # a device value reaches the host
    COMPUTE = "compute"  # torch computes a value on the device
    TRIAL_DATA = "trial_data"  # the host asks for a trial's data out of turn (refused)


# Ops that allocate, view, move or copy data: they do no work of the problem. Everything else
# that runs outside an extension call during ``forward`` is torch compute.
ALLOCATION_OPS = frozenset(
    {
        "empty",
        "empty_like",
        "empty_strided",
        "new_empty",
        "new_empty_strided",
        "zeros",
        "zeros_like",
        "new_zeros",
        "ones",
        "ones_like",
        "new_ones",
        "full",
        "full_like",
        "new_full",
        "scalar_tensor",
        "lift_fresh",
        "resize_",
        "set_",
        "zero_",
        "fill_",
    }
)
COPY_OPS = frozenset(
    {
        "clone",
        "_to_copy",
        "copy_",
        "contiguous",
        "lift_fresh_copy",
        "_copy_from",
        "_copy_from_and_resize",
        "to",
        "detach_",
        "_local_scalar_dense",
        "item",
    }
)
# Reads of a tensor's shape and layout: numbers the host may have, since no data decides them.
SHAPE_READS = frozenset(
    {
        "is_same_size",
        "_has_compatible_shallow_copy_type",
        "sym_size",
        "sym_stride",
        "sym_numel",
        "sym_storage_offset",
        "dim",
        "size",
        "stride",
        "numel",
    }
)
VIEW_OPS = (
    frozenset(
        {
            "view",
            "_unsafe_view",
            "reshape",
            "as_strided",
            "t",
            "transpose",
            "permute",
            "expand",
            "expand_as",
            "squeeze",
            "unsqueeze",
            "slice",
            "select",
            "split",
            "split_with_sizes",
            "chunk",
            "unbind",
            "narrow",
            "detach",
            "alias",
            "flatten",
            "unflatten",
            "view_as",
            "_reshape_alias",
            "movedim",
            "squeeze_",
            "unsqueeze_",
            "t_",
            "transpose_",
            "is_nonzero",
        }
    )
    | SHAPE_READS
)


# Ops that only place the values they are given, with no index or mask that could select them by
# value: with the sets above, what the device process does not count as torch compute when it keeps
# what torch computed on the device (cpu/device/server.py). ``where``, ``gather`` and ``index`` are
# compute there: ``torch.where(x > 0, x, 0)`` is a relu.
PLACEMENT_OPS = frozenset(
    {
        "cat",
        "stack",
        "flip",
        "roll",
        "repeat",
        "tile",
        "narrow_copy",
        "constant_pad_nd",
        "slice_scatter",
        "select_scatter",
    }
)
DATA_MOVEMENT_OPS = ALLOCATION_OPS | COPY_OPS | VIEW_OPS | PLACEMENT_OPS
# What the ``kernels`` policy lets the host run on device tensors during a forward: allocation,
# constant fills, copies between device tensors and views; no value of the problem is computed.
# The value reads among them (``item``, ``is_nonzero``) are transfers (:data:`TO_HOST_OPS`, which
# :func:`operator_access` asks first); placement (``cat``, ``flip``) arranges values, so it is compute.
MOVEMENT_OPS = ALLOCATION_OPS | COPY_OPS | VIEW_OPS


# Operators whose result is a host value read from device data, or whose result's shape depends on
# device data (the host reads it off the result's shape).
TO_HOST_OPS = frozenset(
    {
        "_local_scalar_dense",
        "item",
        "is_nonzero",
        "equal",
        "allclose",
        "tolist",
        "_is_all_true",
        "_is_any_true",
        "Float",
        "Int",
        "Bool",
        "ScalarImplicit",
        "nonzero",
        "nonzero_numpy",
        "argwhere",
        "unique",
        "_unique",
        "_unique2",
        "unique_dim",
        "unique_consecutive",
        "masked_select",
        "bincount",
        "repeat_interleave",
    }
)
# Operators whose number results read tensors' metadata, not their data.
METADATA_OPS = SHAPE_READS | {"is_contiguous", "is_complex", "is_floating_point", "is_signed", "_nnz"}
# The argument names of a movement operator that may be device tensors besides its first: what it
# copies or fills from, or whose metadata it takes. Anywhere else a device value would decide the
# result's layout (``narrow(x, 0, start_tensor, 1)``'s offset) or be read as a number.
DATA_SLOTS = frozenset({"src", "value", "source", "other"})


def operator_access(packet: str, to_host_device: bool) -> Access:
    """How the policy reads the aten operator ``packet`` (``add`` for ``aten::add.Tensor``);
    ``to_host_device``: the call asks for its result on the CPU (``.cpu()``, ``.to("cpu")``)."""
    if to_host_device or packet in TO_HOST_OPS:
        return Access.TO_HOST
    if packet in MOVEMENT_OPS:
        return Access.MOVEMENT
    return Access.COMPUTE


def layout_slot(func: Any, args: list[Any], kwargs: dict[str, Any]) -> str | None:
    """The name of an argument of the movement operator ``func`` that holds a device tensor
    (``{"t": handle}`` in the encoded ``args``/``kwargs``) where no device data may go: any
    argument but the first and :data:`DATA_SLOTS`, or one whose type is not a tensor. None if none."""
    schema = func._schema.arguments
    named = [(argument, value) for argument, value in zip(schema, args)]
    by_name = {argument.name: argument for argument in schema}
    named += [(by_name[name], value) for name, value in kwargs.items() if name in by_name]
    for position, (argument, value) in enumerate(named):
        if not _names_device_tensor(value):
            continue
        takes_tensor = "Tensor" in str(argument.type)
        if not takes_tensor or (position > 0 and argument.name not in DATA_SLOTS):
            return str(argument.name)
    return None


def _names_device_tensor(value: Any) -> bool:
    if isinstance(value, list):
        return any(_names_device_tensor(item) for item in value)
    if isinstance(value, dict):
        return "t" in value or any(_names_device_tensor(item) for item in value.values())
    return False


def narrowing_copy(packet: str, args: list[Any], kwargs: dict[str, Any], result: Any) -> bool:
    """Whether a copy operator converted to a dtype that cannot hold every value of its source
    (float to int, float32 to float16): a conversion that computes (truncation, rounding), not
    movement. Widening conversions stay movement."""
    import torch

    if packet not in COPY_PACKETS or not isinstance(result, torch.Tensor):
        return False
    if packet == "copy_":
        source = kwargs.get("src", args[1] if len(args) > 1 else None)
    else:
        source = args[0] if args else None
    if not isinstance(source, torch.Tensor) or source.dtype == result.dtype:
        return False
    return torch.promote_types(source.dtype, result.dtype) != result.dtype or (
        source.dtype.is_floating_point and not result.dtype.is_floating_point
    )


COPY_PACKETS = frozenset({"_to_copy", "to", "copy_", "_copy_from", "_copy_from_and_resize", "clone"})


def violation(access: Access, what: str, trial: int | None) -> str:
    """The policy's reason for one forbidden operation, as a verdict states it; ``trial`` 0-based,
    None between trials."""
    when = f"trial {trial + 1}" if trial is not None else "between trials"
    if access is Access.TO_HOST:
        return f"{when}: {what} moved device data to the host (a device-to-host transfer)"
    if access is Access.TRIAL_DATA:
        return f"{when}: {what} (a trial's inputs reach the host only during its own forward)"
    return f"{when}: {what} computed on device data with torch during forward"


def policy_reason(policy: Policy, violations: list[str]) -> str:
    """The ``static_reject`` reason of a run that broke ``policy`` (``violations``: what it forbids,
    in order, as :func:`violation` says them)."""
    more = f" (and {len(violations) - 1} more)" if len(violations) > 1 else ""
    rule = (
        "only the candidate's kernels may compute and no device data may reach the host (policy mixed "
        "allows torch compute)"
        if policy == "kernels"
        else "torch may compute on the device, but no device data may reach the host"
    )
    return f"policy {policy}: {violations[0]}{more}; under this policy {rule}"
