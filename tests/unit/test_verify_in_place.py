"""in_place.part_of: finding an expected output, or part of one, among torch's results on the device."""

from __future__ import annotations

import pytest
import torch

from cuset_core.verify.execution.in_place import part_of

TOL = (1e-4, 1e-4)  # fp32 under the kernelbench profile


@pytest.fixture
def x() -> torch.Tensor:
    return torch.randn(16, 1000, generator=torch.Generator().manual_seed(0))


def test_the_whole_output_in_another_shape_is_found(x):
    assert part_of(x.sum(1), x.sum(1, keepdim=True), *TOL)


def test_all_rows_but_the_first_are_found_as_a_window(x):
    assert part_of(x.sum(1), x[1:].sum(1), *TOL)


def test_two_rows_of_sixteen_distinct_sums_are_found(x):
    assert part_of(x.sum(1), x[3:5].sum(1), *TOL)


def test_a_block_of_columns_and_a_single_column_are_slices_along_a_dimension(x):
    running = x.cumsum(1)
    assert part_of(running, running[:, 5:9].clone(), *TOL)
    assert part_of(running, running[:, -1].clone(), *TOL)


def test_an_output_inside_a_larger_result_is_found_the_other_way_round(x):
    assert part_of(x.cumsum(1), x.sum(1), *TOL)


def test_values_within_the_tolerance_match_and_beyond_it_do_not(x):
    sums = x.sum(1)
    assert part_of(sums, sums * (1 + 5e-5), *TOL)
    assert not part_of(sums, sums + 0.5, *TOL)


def test_an_intermediate_that_an_epilogue_changes_in_part_is_not_the_output():
    # A torch convolution followed by a kernel's relu or clamp: a mixed solution, legal.
    conv = torch.randn(64, 256, generator=torch.Generator().manual_seed(1))
    assert not part_of(torch.relu(conv), conv, *TOL)
    assert not part_of(torch.clamp(conv, -1, 1), conv, *TOL)


def test_what_chance_explains_in_a_dense_output_is_no_evidence():
    dense = torch.randn(1 << 20, generator=torch.Generator().manual_seed(2))
    assert not part_of(dense, torch.tensor([0.0, 1e-5]), *TOL)
    # Two values of a million in place: chance finds such pairs, so not even the real ones count...
    assert not part_of(dense, dense[1000:1002].clone(), *TOL)
    # ...seven do: no chance puts them there.
    assert part_of(dense, dense[5:12].clone(), *TOL)


def test_constants_single_values_and_nans_are_never_evidence(x):
    relu = torch.relu(torch.randn(1 << 16, generator=torch.Generator().manual_seed(3)))
    assert not part_of(relu, torch.zeros(64), *TOL)  # a run of zeros is in any relu output
    assert not part_of(x.sum(1), x[:1].sum(1), *TOL)  # one value
    assert not part_of(x.sum(1), torch.full((16,), float("nan")), *TOL)
