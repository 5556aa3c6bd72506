"""Every supported format loads into the same record, and prompt styles rebuild the prompt."""

import json

import pyarrow as pa
import pyarrow.parquet as pq

from cuset_core.data import LoadOptions, Message, load_records
from cuset_core.generation.prompts import compact_prompt, kernelbench_prompt

ANSWER = '''```python
import torch
from torch.utils.cpp_extension import load_inline

src = r"""
__global__ void neg(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = -x[i];
}
"""
ext = load_inline(name="neg", cpp_sources="", cuda_sources=src, functions=["neg"])
```'''

PROBLEM = """import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return -x

def get_inputs():
    return [torch.randn(64)]

def get_init_inputs():
    return []"""

QUESTION = kernelbench_prompt(PROBLEM)


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_chat_rows_keep_their_messages_and_optional_group(tmp_path):
    rows = [
        {
            "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": "negate"},
                {"role": "assistant", "content": ANSWER},
            ],
            "group": "neg",
        },
        {
            "messages": [
                {"role": "user", "content": "a"},
                {"role": "assistant", "content": "b"},
                {"role": "user", "content": "negate"},
                {"role": "assistant", "content": ANSWER},
            ]
        },
    ]
    result = load_records(write_jsonl(tmp_path / "chat.jsonl", rows))
    first, second = result.records
    assert [m.role for m in first.messages] == ["system", "user", "assistant"]
    assert first.answer == ANSWER
    assert first.prompt_messages == [Message(role="system", content="be brief"), Message(role="user", content="negate")]
    assert (first.line, first.group, first.problem) == (1, "neg", None)
    assert (second.line, second.group, len(second.messages)) == (2, None, 4)
    assert first.meta == {"format": "chat"}


def test_prompt_completion_rows_become_a_user_and_an_assistant_turn(tmp_path):
    path = write_jsonl(tmp_path / "pc.jsonl", [{"prompt": QUESTION, "completion": ANSWER}])
    (record,) = load_records(path).records
    assert record.messages == [Message(role="user", content=QUESTION), Message(role="assistant", content=ANSWER)]
    assert record.problem == PROBLEM


def table_rows():
    return [
        {"question": QUESTION, "answer": ANSWER, "level": 1, "problem": "7"},
        {"question": QUESTION, "answer": ANSWER, "level": 2, "problem": "7"},
        {"question": QUESTION, "answer": ANSWER},
    ]


def test_table_rows_load_the_same_from_parquet_and_jsonl(tmp_path):
    parquet = tmp_path / "table.parquet"
    pq.write_table(pa.Table.from_pylist(table_rows()), parquet)
    jsonl = write_jsonl(tmp_path / "table.jsonl", table_rows())
    from_parquet, from_jsonl = load_records(parquet), load_records(jsonl)
    assert from_parquet.records == from_jsonl.records
    assert [r.group for r in from_parquet.records] == ["1/7", "2/7", None]
    assert [r.line for r in from_parquet.records] == [1, 2, 3]
    first = from_parquet.records[0]
    assert first.problem == PROBLEM
    assert first.messages[0].content == QUESTION
    assert first.meta == {"format": "table", "level": 1, "problem": "7"}


def test_parquet_is_recognised_by_content_not_by_name(tmp_path):
    path = tmp_path / "upload.bin"
    pq.write_table(pa.Table.from_pylist(table_rows()), path)
    assert load_records(path).total == 3


def test_compact_style_rebuilds_the_user_message_from_the_problem(tmp_path):
    path = write_jsonl(tmp_path / "table.jsonl", table_rows())
    (record, *_) = load_records(path, LoadOptions(prompt_style="compact")).records
    assert record.messages[0].content == compact_prompt(PROBLEM)
    assert record.answer == ANSWER


def test_compact_style_keeps_a_prompt_without_a_reference_and_warns(tmp_path):
    rows = [{"prompt": "negate a vector in CUDA", "completion": ANSWER}]
    result = load_records(write_jsonl(tmp_path / "pc.jsonl", rows), LoadOptions(prompt_style="compact"))
    assert result.records[0].messages[0].content == "negate a vector in CUDA"
    assert [(i.line, i.code.value, i.severity) for i in result.issues] == [(1, "no_reference", "warning")]


def test_split_output_rows_load_back_into_equal_records(tmp_path):
    source = load_records(
        write_jsonl(tmp_path / "table.jsonl", table_rows()), LoadOptions(prompt_style="compact")
    ).records
    again = load_records(write_jsonl(tmp_path / "chat.jsonl", [r.to_chat_row() for r in source])).records
    assert [(r.messages, r.group, r.problem) for r in again] == [(r.messages, r.group, r.problem) for r in source]


def test_many_rows_load_with_their_line_numbers(tmp_path):
    rows = [{"prompt": f"p{i}", "completion": ANSWER, "group": str(i % 10)} for i in range(500)]
    result = load_records(write_jsonl(tmp_path / "many.jsonl", rows))
    assert (result.total, len(result.records), result.issues) == (500, 500, [])
    assert result.records[-1].line == 500


def test_the_summary_reports_each_kind_of_skipped_record_once_with_its_first_lines(tmp_path):
    good = {"messages": [{"role": "user", "content": "write it"}, {"role": "assistant", "content": ANSWER}]}
    rows = [good if i % 3 else {"messages": [{"role": "user", "content": "no answer"}]} for i in range(1, 22)]
    rows[1] = {"prompt": "x"}  # line 2: a row of no known format
    path = write_jsonl(tmp_path / "data.jsonl", rows)
    loaded = load_records(path)

    notes = loaded.summary("training_file")

    skipped = [message for level, message in notes if "skipped" in message]
    assert len(skipped) == 2  # one line per kind of problem, not one per record
    wrong_order = next(message for message in skipped if "wrong_role_order" in message)
    assert wrong_order.startswith(
        "training_file: 7 records skipped, wrong_role_order (lines 3, 6, 9, 12, 15 and 2 more)"
    )
    assert notes[-1] == ("info", f"training_file: {len(loaded.records)} of 21 records usable")
    assert all(level == "warning" for level, _ in notes[:-1])


def test_a_clean_file_summarises_to_one_line(tmp_path):
    good = {"messages": [{"role": "user", "content": "write it"}, {"role": "assistant", "content": ANSWER}]}
    loaded = load_records(write_jsonl(tmp_path / "data.jsonl", [good, good]))
    assert loaded.summary("train_file") == [("info", "train_file: 2 of 2 records usable")]
