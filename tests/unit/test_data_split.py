"""Splits keep whole groups on one side and depend only on the seed."""

import pytest

from cuset_core.data import Message, Record, group_of, split_by_group


def records(n_groups: int, per_group: int, ungrouped: int = 0) -> list[Record]:
    chat = [Message(role="user", content="q"), Message(role="assistant", content="a")]
    grouped = [
        Record(messages=chat, line=g * per_group + k + 1, group=f"1/{g}")
        for g in range(n_groups)
        for k in range(per_group)
    ]
    start = len(grouped) + 1
    return grouped + [Record(messages=chat, line=start + k) for k in range(ungrouped)]


def test_no_group_is_on_both_sides_and_nothing_is_lost():
    data = records(n_groups=40, per_group=5, ungrouped=10)
    train, val = split_by_group(data, val_fraction=0.2, seed=3)
    train_groups = {group_of(r) for r in train}
    val_groups = {group_of(r) for r in val}
    assert train_groups.isdisjoint(val_groups)
    assert len(val_groups) == 10  # round(0.2 * 50 groups)
    assert sorted(r.line for r in train + val) == [r.line for r in data]


def test_records_without_a_group_are_groups_of_their_own():
    assert group_of(records(0, 0, ungrouped=1)[0]) == "line:1"


def test_the_same_seed_gives_the_same_split_and_another_seed_another():
    data = records(n_groups=30, per_group=3)

    def val_lines(seed: int) -> list[int]:
        return [r.line for r in split_by_group(data, 0.3, seed=seed)[1]]

    assert val_lines(7) == val_lines(7)
    assert val_lines(7) != val_lines(8)


def test_the_split_does_not_depend_on_record_order():
    data = records(n_groups=30, per_group=3)
    val_forward = {r.line for r in split_by_group(data, 0.3, seed=1)[1]}
    val_reversed = {r.line for r in split_by_group(data[::-1], 0.3, seed=1)[1]}
    assert val_forward == val_reversed


def test_both_sides_keep_the_input_order():
    train, val = split_by_group(records(n_groups=20, per_group=2), 0.25, seed=0)
    assert [r.line for r in train] == sorted(r.line for r in train)
    assert [r.line for r in val] == sorted(r.line for r in val)


def test_a_small_positive_fraction_still_validates_on_one_group_and_trains_on_the_rest():
    train, val = split_by_group(records(n_groups=3, per_group=4), 0.01, seed=0)
    assert (len({r.group for r in val}), len({r.group for r in train})) == (1, 2)
    train, val = split_by_group(records(n_groups=2, per_group=4), 0.9, seed=0)
    assert (len({r.group for r in val}), len({r.group for r in train})) == (1, 1)


def test_a_zero_fraction_puts_everything_in_train():
    train, val = split_by_group(records(n_groups=5, per_group=2), 0.0, seed=0)
    assert (len(train), val) == (10, [])


@pytest.mark.parametrize("fraction", [-0.1, 1.0, 1.5])
def test_a_fraction_outside_zero_to_one_is_refused(fraction):
    with pytest.raises(ValueError, match="val_fraction must be in"):
        split_by_group(records(2, 1), fraction, seed=0)
