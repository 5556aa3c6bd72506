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
from typing import Literal

Policy = Literal["kernels", "mixed"]
POLICIES: tuple[Policy, ...] = ("kernels", "mixed")
MAX_VIOLATIONS = 16  # kept per run: the first says why, the rest how often


class Access(StrEnum):
    """What an operation on device data does, as the policy sees it."""

    MOVEMENT = "movement"  # allocate, view, copy between device tensors, fill with a constant
    TO_HOST = "to_host"  # a device value reaches the host
    COMPUTE = "compute"  # torch computes a value on the device


# Allocation, views and copies between device tensors: no value of the problem is computed, and
# none reaches the host. ``fill_``/``zero_``/``full`` write constants the host chose (the host has
# no trial data to choose them from). Reading one element's value (``item``, ``is_nonzero``) is
# not movement: it hands the host device data.
MOVEMENT_OPS = frozenset(
    {
        # allocation and constant fills
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
        # copies between device tensors (a copy to the host is TO_HOST, told apart by its device)
        "clone",
        "_to_copy",
        "copy_",
        "contiguous",
        "lift_fresh_copy",
        "_copy_from",
        "_copy_from_and_resize",
        "to",
        "detach_",
        # views and metadata
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
# Operators whose result is a host value read from device data.
TO_HOST_OPS = frozenset(
    {"_local_scalar_dense", "item", "is_nonzero", "equal", "allclose", "tolist", "_is_all_true", "_is_any_true"}
)


def operator_access(packet: str, to_host_device: bool) -> Access:
    """How the policy reads the aten operator ``packet`` (``add`` for ``aten::add.Tensor``);
    ``to_host_device``: the call asks for its result on the CPU (``.cpu()``, ``.to("cpu")``)."""
    if to_host_device or packet in TO_HOST_OPS:
        return Access.TO_HOST
    if packet in MOVEMENT_OPS:
        return Access.MOVEMENT
    return Access.COMPUTE


def violation(access: Access, what: str, trial: int | None) -> str:
    """The policy's reason for one forbidden operation, as a verdict states it; ``trial`` 0-based,
    None between trials."""
    when = f"trial {trial + 1}" if trial is not None else "between trials"
    if access is Access.TO_HOST:
        return f"{when}: {what} moved device data to the host (a device-to-host transfer)"
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
