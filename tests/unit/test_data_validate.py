"""Every data problem is reported with its line, field and stable code, and bad rows are dropped."""

import json

import pytest

from cuset_core.data import DataFileError, ErrorCode, LoadOptions, load_records

KERNEL_ANSWER = '''```python
import torch
from torch.utils.cpp_extension import load_inline

src = r"""
__global__ void twice(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
}
torch::Tensor twice_cuda(torch::Tensor x);
"""
ext = load_inline(name="twice", cpp_sources="torch::Tensor twice_cuda(torch::Tensor x);",
                  cuda_sources=src, functions=["twice_cuda"])
```'''

TORCH_ONLY_ANSWER = "```python\nclass ModelNew:\n    pass\n```"


def chat(*turns: tuple[str, str]) -> dict:
    return {"messages": [{"role": role, "content": content} for role, content in turns]}


GOOD = chat(("user", "write a kernel"), ("assistant", KERNEL_ANSWER))


def write_lines(tmp_path, lines: list[str], name: str = "data.jsonl"):
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


def only_issue(tmp_path, bad_line: str, options: LoadOptions = LoadOptions(), tokenizer=None):
    """Load GOOD, GOOD, bad_line, GOOD and return the single issue (expected at line 3)."""
    good = json.dumps(GOOD)
    result = load_records(write_lines(tmp_path, [good, good, bad_line, good]), options, tokenizer)
    assert len(result.issues) == 1, result.issues
    return result, result.issues[0]


@pytest.mark.parametrize(
    ("row", "code", "field"),
    [
        (chat(("user", "q")), ErrorCode.wrong_role_order, "messages[0].role"),
        (chat(("assistant", KERNEL_ANSWER), ("user", "q")), ErrorCode.wrong_role_order, "messages[0].role"),
        (
            chat(("user", "q"), ("user", "q"), ("assistant", KERNEL_ANSWER)),
            ErrorCode.wrong_role_order,
            "messages[1].role",
        ),
        (chat(("system", "s"), ("assistant", KERNEL_ANSWER)), ErrorCode.wrong_role_order, "messages[1].role"),
        (chat(("user", "q"), ("assistant", "  \n")), ErrorCode.empty_assistant, "messages[1].content"),
        (chat(("user", "q"), ("tool", "x"), ("assistant", KERNEL_ANSWER)), ErrorCode.unknown_role, "messages[1].role"),
        (
            {"messages": [{"role": "user"}, {"role": "assistant", "content": KERNEL_ANSWER}]},
            ErrorCode.missing_field,
            "messages[0].content",
        ),
        (
            {"messages": [{"content": "q"}, {"role": "assistant", "content": KERNEL_ANSWER}]},
            ErrorCode.missing_field,
            "messages[0].role",
        ),
        ({"messages": []}, ErrorCode.missing_field, "messages"),
        ({"messages": "hello"}, ErrorCode.wrong_type, "messages"),
        (
            {"messages": [{"role": "user", "content": ["q"]}, {"role": "assistant", "content": KERNEL_ANSWER}]},
            ErrorCode.wrong_type,
            "messages[0].content",
        ),
        ({"prompt": "q"}, ErrorCode.missing_field, "completion"),
        ({"completion": KERNEL_ANSWER}, ErrorCode.missing_field, "prompt"),
        ({"prompt": 7, "completion": KERNEL_ANSWER}, ErrorCode.wrong_type, "prompt"),
        ({"prompt": "q", "completion": ""}, ErrorCode.empty_assistant, "completion"),
        ({"question": "q"}, ErrorCode.missing_field, "answer"),
        ({"question": None, "answer": KERNEL_ANSWER}, ErrorCode.missing_field, "question"),
        ({"question": "q", "answer": TORCH_ONLY_ANSWER}, ErrorCode.no_cuda_kernel, "answer"),
        (chat(("user", "q"), ("assistant", TORCH_ONLY_ANSWER)), ErrorCode.no_cuda_kernel, "messages[1].content"),
        ({"text": "q"}, ErrorCode.unknown_format, ""),
        ([1, 2], ErrorCode.wrong_type, ""),
        (dict(GOOD, group=3), ErrorCode.wrong_type, "group"),
    ],
)
def test_each_error_is_reported_on_its_line_and_drops_the_row(tmp_path, row, code, field):
    result, issue = only_issue(tmp_path, json.dumps(row))
    assert (issue.line, issue.field, issue.code, issue.severity) == (3, field, code, "error")
    assert [record.line for record in result.records] == [1, 2, 4]
    assert result.total == 4


def test_a_line_that_is_not_json_is_invalid_json_with_its_line(tmp_path):
    result, issue = only_issue(tmp_path, '{"messages": [')
    assert (issue.line, issue.code, issue.field) == (3, ErrorCode.invalid_json, "")
    assert issue.message.startswith("not valid JSON")
    assert len(result.records) == 3


@pytest.mark.parametrize("bad_line", ["[" * 200_000, '{"a": ' * 100_000])
def test_deeply_nested_json_is_invalid_json_with_its_line_not_a_crash(tmp_path, bad_line):
    result, issue = only_issue(tmp_path, bad_line)
    assert (issue.line, issue.code) == (3, ErrorCode.invalid_json)
    assert "nested too deeply" in issue.message
    assert len(result.records) == 3


def test_bytes_that_are_not_utf8_are_reported_not_raised(tmp_path):
    path = tmp_path / "data.jsonl"
    path.write_bytes(json.dumps(GOOD).encode() + b"\n\xff\xfe\n")
    result = load_records(path)
    assert [(i.line, i.code) for i in result.issues] == [(2, ErrorCode.invalid_encoding)]
    assert result.total == 2


def test_an_answer_without_a_fence_is_a_warning_and_kept(tmp_path):
    unfenced = KERNEL_ANSWER.strip("`").removeprefix("python\n")
    row = chat(("user", "q"), ("assistant", unfenced))
    result, issue = only_issue(tmp_path, json.dumps(row))
    assert (issue.line, issue.code, issue.severity) == (3, ErrorCode.no_code_block, "warning")
    assert [record.line for record in result.records] == [1, 2, 3, 4]
    assert result.errors == []


def test_keeping_non_kernel_answers_turns_the_error_into_a_warning(tmp_path):
    row = {"question": "q", "answer": TORCH_ONLY_ANSWER}
    result, issue = only_issue(tmp_path, json.dumps(row), LoadOptions(require_kernel=False))
    assert (issue.line, issue.code, issue.severity) == (3, ErrorCode.no_cuda_kernel, "warning")
    assert len(result.records) == 4


def test_records_over_the_token_limit_are_dropped_with_their_line(tmp_path, tokenizer):
    long_row = chat(("user", "word " * 400), ("assistant", KERNEL_ANSWER))
    result, issue = only_issue(tmp_path, json.dumps(long_row), LoadOptions(max_tokens=300), tokenizer)
    assert (issue.line, issue.code, issue.severity) == (3, ErrorCode.over_token_limit, "error")
    assert [record.line for record in result.records] == [1, 2, 4]


def test_a_token_limit_without_a_tokenizer_is_refused(tmp_path):
    path = write_lines(tmp_path, [json.dumps(GOOD)])
    with pytest.raises(ValueError, match="max_tokens needs a tokenizer"):
        load_records(path, LoadOptions(max_tokens=10))


def test_blank_lines_are_not_rows_but_keep_the_numbering(tmp_path):
    good = json.dumps(GOOD)
    result = load_records(write_lines(tmp_path, [good, "", "   ", "{bad"]))
    assert [(i.line, i.code) for i in result.issues] == [(4, ErrorCode.invalid_json)]
    assert result.total == 2


def test_an_empty_file_is_one_file_level_error(tmp_path):
    result = load_records(write_lines(tmp_path, ["", ""]))
    assert [(i.line, i.code) for i in result.issues] == [(0, ErrorCode.empty_file)]
    assert result.total == 0
    # The service loads uploads under temporary names: the message names none.
    assert result.issues[0].message == "the file holds no rows"


def test_an_unterminated_string_is_reported_in_plain_words_with_its_column(tmp_path):
    result = load_records(write_lines(tmp_path, ['{"messages": "never closed']))
    [issue] = result.issues
    assert issue.code == ErrorCode.invalid_json
    # json's own reason ends in "at" ("... character at"): the column follows a colon, not "at at".
    assert issue.message == "not valid JSON: Invalid control character at: column 27"


def test_a_corrupt_parquet_file_is_reported_not_raised(tmp_path):
    path = tmp_path / "broken.parquet"
    path.write_bytes(b"PAR1" + b"\x00" * 64)
    result = load_records(path)
    assert [(i.line, i.code) for i in result.issues] == [(0, ErrorCode.unreadable_file)]
    assert result.records == []


def test_a_missing_file_raises_one_clear_error(tmp_path):
    with pytest.raises(DataFileError, match="^data file not found: .*nope.jsonl$"):
        load_records(tmp_path / "nope.jsonl")
    with pytest.raises(DataFileError, match="is a folder"):
        load_records(tmp_path)


def test_issues_print_as_one_line_with_line_field_and_code(tmp_path):
    _, issue = only_issue(tmp_path, json.dumps({"prompt": "q"}))
    assert str(issue) == "line 3, field completion: error missing_field: required field 'completion' is missing"
