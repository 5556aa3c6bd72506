"""The shared KernelBench SFT table loads with the documented counts and splits cleanly."""

import pytest

from cuset_core.data import LoadOptions, group_of, load_records, split_by_group

pytestmark = pytest.mark.shared_data


@pytest.fixture(scope="module")
def kernelbench_table(shared_data):
    return shared_data / "kernelbench_sft_train.parquet"


@pytest.fixture(scope="module")
def loaded(kernelbench_table):
    return load_records(kernelbench_table)


def test_the_table_keeps_the_2411_answers_with_a_kernel(loaded):
    result = loaded
    assert (result.total, len(result.records)) == (2799, 2411)
    assert result.counts() == {"no_cuda_kernel": 388}
    assert len({record.group for record in result.records}) == 180
    assert all(record.problem and "def get_init_inputs" in record.problem for record in result.records)


def test_keeping_non_kernel_answers_keeps_every_row(kernelbench_table):
    result = load_records(kernelbench_table, LoadOptions(require_kernel=False))
    assert (len(result.records), len(result.warnings), result.errors) == (2799, 388, [])


def test_compact_prompts_are_much_shorter_than_the_kernelbench_question(kernelbench_table, loaded):
    full = loaded.records[:20]
    compact = load_records(kernelbench_table, LoadOptions(prompt_style="compact")).records[:20]
    saved = [len(f.messages[0].content) - len(c.messages[0].content) for f, c in zip(full, compact)]
    assert min(saved) > 3000  # characters of one-shot example and instructions, per sample


def test_the_split_keeps_each_problem_on_one_side(loaded):
    train, val = split_by_group(loaded.records, 0.15, seed=0)
    assert {group_of(r) for r in train}.isdisjoint({group_of(r) for r in val})
    assert len({group_of(r) for r in val}) == 27  # round(0.15 * 180 problems)
