"""Train/validation splits by group, so no problem appears on both sides."""

from __future__ import annotations

import random
from collections.abc import Sequence

from cuset_core.data.records import Record


def group_of(record: Record) -> str:
    """The split group of a record; a record without one is a group of its own."""
    return record.group if record.group is not None else f"line:{record.line}"


def split_by_group(records: Sequence[Record], val_fraction: float, seed: int) -> tuple[list[Record], list[Record]]:
    """Split ``records`` into ``(train, val)`` with whole groups on each side.

    ``round(val_fraction * number_of_groups)`` groups, drawn with ``seed``, go to validation
    (at least one and never all of them when ``0 < val_fraction`` and there are two or more
    groups). Both lists keep the input order.
    """
    if not 0.0 <= val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in [0, 1), got {val_fraction}")
    groups = sorted({group_of(record) for record in records})
    n_val = round(val_fraction * len(groups))
    if val_fraction > 0 and len(groups) >= 2:
        n_val = min(max(n_val, 1), len(groups) - 1)
    # Shuffle a sorted list so the draw depends only on the seed and the set of groups.
    random.Random(seed).shuffle(groups)
    val_groups = set(groups[:n_val])
    train = [record for record in records if group_of(record) not in val_groups]
    val = [record for record in records if group_of(record) in val_groups]
    return train, val
