"""Whether one tensor's values stand in another's, in place: how the judge finds an expected output,
or part of one, among the results torch computed on the device (``judge.kernels_did_the_work``).

"In place" is the order torch's data movement keeps: the same elements in the same order, a window
of the flattened elements, or a slice along one dimension. A match that chance would explain (a
few values inside a dense output, a run of zeros) is no evidence. torch is imported where used.
"""

from __future__ import annotations

import math
from typing import Any

CHANCE = 1e-4  # a match chance would give this many times or more over the offsets tried is no evidence
_NARROWING_STEPS = 64  # values of ``part`` used to narrow the candidate offsets before checking them whole
_CHECKED_OFFSETS = 64  # offsets left after narrowing that are checked whole
_CHANCE_VALUES = 64  # values of ``part`` whose density in ``whole`` prices a match
_DENSITY_WIDTH = 100  # tolerances either side over which that density is measured
_DENSITY_SAMPLE = 1 << 16  # elements of ``whole`` (evenly strided) it is measured on


def part_of(whole: Any, part: Any, atol: float, rtol: float) -> bool:
    """Whether every value of ``part`` (any shape, ``m`` elements) stands within ``atol + rtol·max(|a|,|b|)``
    of ``whole``'s (``n >= m`` elements) in place: ``m == n`` in flattened order, a window of
    ``whole``'s flattened elements, or a slice (or one index) of ``whole`` along one dimension. Only
    when ``part`` holds more than one distinct value and the matches chance would give over the
    offsets tried number fewer than ``CHANCE``. NaN matches nothing."""
    import torch

    if part.numel() < 2 or part.numel() > whole.numel() or part.is_complex() or whole.is_complex():
        return False
    whole_d, part_d = whole.detach().double(), part.detach().double()
    flat_part = part_d.reshape(-1)
    if torch.unique(flat_part).numel() < 2:
        return False
    layouts = [(whole_d.reshape(-1), flat_part, 1)]
    layouts += [
        (whole_d.movedim(dim, 0).reshape(-1), along.movedim(dim, 0).reshape(-1), whole.numel() // whole.shape[dim])
        for dim, along in _slices(whole_d, part_d)
    ]
    return any(_window_at(w, p, step, atol, rtol) for w, p, step in layouts)


def _slices(whole: Any, part: Any) -> list[tuple[int, Any]]:
    """(dimension, ``part`` with ``whole``'s number of dimensions) for each dimension along which
    ``part`` is a slice of ``whole``'s shape (equal sizes elsewhere; one index when it lacks it)."""
    found = []
    for dim in range(whole.dim()):
        if whole.shape[dim] == 0 or dim == 0:  # along dimension 0 a slice is a flat window already
            continue
        rest = [size for d, size in enumerate(whole.shape) if d != dim]
        if part.dim() == whole.dim() and [s for d, s in enumerate(part.shape) if d != dim] == rest:
            found.append((dim, part))
        elif part.dim() == whole.dim() - 1 and list(part.shape) == rest:
            found.append((dim, part.unsqueeze(dim)))
    return found


def _close(a: Any, b: Any, atol: float, rtol: float) -> Any:
    import torch

    return (a - b).abs() <= atol + rtol * torch.maximum(a.abs(), b.abs())


def _window_at(whole: Any, part: Any, step: int, atol: float, rtol: float) -> bool:
    """Whether ``part`` (1-D, ``m`` values) matches ``whole`` (1-D) at an offset that is a multiple
    of ``step``, by more than chance."""
    import torch

    n, m = whole.numel(), part.numel()
    offsets = torch.arange(0, n - m + 1, step)
    for j in range(min(m, _NARROWING_STEPS)):
        if offsets.numel() <= _CHECKED_OFFSETS // 4:
            break
        offsets = offsets[_close(whole[offsets + j], part[j], atol, rtol)]
    matched = any(bool(_close(whole[o : o + m], part, atol, rtol).all()) for o in offsets[:_CHECKED_OFFSETS].tolist())
    return matched and _chance(whole, part, (n - m) // step + 1, atol, rtol) < CHANCE


def _chance(whole: Any, part: Any, offsets: int, atol: float, rtol: float) -> float:
    """The matches chance would give over ``offsets`` offsets, were ``part`` unrelated to ``whole``:
    each of its first values lands within tolerance of one element of ``whole`` with the density of
    ``whole``'s values around it (their share within ``_DENSITY_WIDTH`` tolerances, per tolerance),
    independently."""
    sample = whole[:: max(1, whole.numel() // _DENSITY_SAMPLE)]
    log_p = 0.0
    for value in part[:_CHANCE_VALUES]:
        window = _DENSITY_WIDTH * (atol + rtol * float(value.abs()))
        share = float(((sample - value).abs() <= window).double().mean()) / _DENSITY_WIDTH
        if share == 0.0:
            return 0.0
        log_p += math.log(min(share, 1.0))
    return offsets * math.exp(log_p)
