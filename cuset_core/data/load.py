"""Load training records from JSONL or parquet, validating every row on the way.

Row formats (one file may mix them; each row is recognised by its keys):
- chat: ``{"messages": [{"role", "content"}, ...]}`` (OpenAI fine-tuning format), with optional
  ``group`` and ``reference`` (the problem code);
- prompt/completion: ``{"prompt": ..., "completion": ...}``, optional ``group``/``reference``;
- KernelBench table: ``{"question": ..., "answer": ...}`` with optional ``level`` and
  ``problem`` (the problem number), as JSONL or as parquet columns.

Bad content never raises: each problem becomes a ``DataIssue`` and rows with errors are left
out. Only a file that cannot be opened raises ``DataFileError``.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from cuset_core.data.encode import encode_record
from cuset_core.data.records import Message, Record
from cuset_core.data.validate import (
    DataIssue,
    ErrorCode,
    check_answer,
    check_messages,
    check_text_field,
    check_token_count,
)
from cuset_core.generation.prompts import PromptStyle, compact_prompt, reference_from_question

_PARQUET_MAGIC = b"PAR1"
_PARQUET_BATCH_ROWS = 256
_FORMATS = "expected 'messages', 'prompt'/'completion' or 'question'/'answer'"


class DataFileError(ValueError):
    """The data file cannot be read at all (missing, a folder, no permission)."""


class DataFileMissingError(DataFileError):
    """There is no data file at the path given (a usage error for the CLI, exit 2)."""


class LoadOptions(BaseModel):
    """How records are built and which ones are kept."""

    model_config = ConfigDict(frozen=True)

    prompt_style: PromptStyle = "kernelbench"  # compact rebuilds prompts from the problem code
    require_kernel: bool = True  # drop answers without __global__ (else keep, with a warning)
    max_tokens: int | None = Field(default=None, ge=1)  # drop longer records; needs a tokenizer


class LoadResult(BaseModel):
    """The kept records, every problem found, and how many rows the file had."""

    records: list[Record]
    issues: list[DataIssue]
    total: int  # rows read (blank JSONL lines are not rows)

    @property
    def errors(self) -> list[DataIssue]:
        """Issues that dropped a record (or concern the whole file)."""
        return [issue for issue in self.issues if issue.severity == "error"]

    @property
    def warnings(self) -> list[DataIssue]:
        """Issues about records that were kept."""
        return [issue for issue in self.issues if issue.severity == "warning"]

    def counts(self) -> dict[str, int]:
        """Number of issues per error code, most frequent first."""
        return dict(Counter(issue.code.value for issue in self.issues).most_common())

    def summary(self, field: str, lines_shown: int = 5) -> list[tuple[Literal["info", "warning"], str]]:
        """What a user needs to hear about this file, once: one ``(level, message)`` per kind of
        problem (skipped records, then records kept with a warning), with its count, the first
        ``lines_shown`` line numbers and the first message, then how many records are usable."""
        notes: list[tuple[Literal["info", "warning"], str]] = []
        for severity, verb in (("error", "skipped"), ("warning", "kept with a warning")):
            by_code: dict[ErrorCode, list[DataIssue]] = {}
            for issue in self.issues:
                if issue.severity == severity:
                    by_code.setdefault(issue.code, []).append(issue)
            for code, issues in by_code.items():
                lines = sorted({issue.line for issue in issues if issue.line})
                where = ", ".join(str(line) for line in lines[:lines_shown])
                more = f" and {len(lines) - lines_shown} more" if len(lines) > lines_shown else ""
                at = f" (line{'s' if len(lines) > 1 else ''} {where}{more})" if lines else ""
                count = f"{len(lines)} record{'s' if len(lines) != 1 else ''} {verb}" if lines else "file"
                notes.append(("warning", f"{field}: {count}, {code.value}{at}: {issues[0].message}"))
        notes.append(("info", f"{field}: {len(self.records)} of {self.total} records usable"))
        return notes


def load_records(path: str | Path, options: LoadOptions = LoadOptions(), tokenizer=None) -> LoadResult:
    """Read and validate every row of a JSONL or parquet file (parquet is recognised by content).

    ``options.max_tokens`` counts tokens of the rendered chat and so needs ``tokenizer``.
    """
    if options.max_tokens is not None and tokenizer is None:
        raise ValueError("max_tokens needs a tokenizer to count tokens")
    path = Path(path)
    records: list[Record] = []
    issues: list[DataIssue] = []
    total = 0
    for line, row in _rows(path):
        if isinstance(row, DataIssue):
            issues.append(row)
            if row.line:  # an unreadable row still counts; a file-level issue does not
                total += 1
            continue
        total += 1
        record, row_issues = record_from_row(row, line, options)
        issues.extend(row_issues)
        if record is None or any(i.severity == "error" for i in row_issues):
            continue
        if options.max_tokens is not None:
            # Only records that would be kept are rendered: counting tokens is the slow check.
            n_tokens = len(encode_record(record, tokenizer).input_ids)
            too_long = check_token_count(n_tokens, options.max_tokens, line)
            if too_long:
                issues.extend(too_long)
                continue
        records.append(record)
    if total == 0 and not issues:
        issues.append(DataIssue(line=0, field="", code=ErrorCode.empty_file, message="the file holds no rows"))
    return LoadResult(records=records, issues=issues, total=total)


def record_from_row(row: Any, line: int, options: LoadOptions) -> tuple[Record | None, list[DataIssue]]:
    """Build the record of one row, with the row's issues; None when it cannot be built."""
    if not isinstance(row, dict):
        return None, [
            DataIssue(
                line=line,
                field="",
                code=ErrorCode.wrong_type,
                message=f"expected a JSON object, got {type(row).__name__}",
            )
        ]
    if "messages" in row:
        record, issues, answer_field = _from_chat(row, line)
    elif "prompt" in row or "completion" in row:
        record, issues, answer_field = _from_prompt_completion(row, line)
    elif "question" in row or "answer" in row:
        record, issues, answer_field = _from_table(row, line)
    else:
        keys = ", ".join(sorted(map(str, row))) or "none"
        return None, [
            DataIssue(line=line, field="", code=ErrorCode.unknown_format, message=f"row has keys {keys}; {_FORMATS}")
        ]
    if record is None:
        return None, issues
    issues += check_answer(record.answer, line, answer_field, options.require_kernel)
    if options.prompt_style == "compact":
        record, compact_issues = _compact(record)
        issues += compact_issues
    return record, issues


def _from_chat(row: dict, line: int) -> tuple[Record | None, list[DataIssue], str]:
    raw = row["messages"]
    issues = check_messages(raw, line) + _optional_text(row, ("group", "reference"), line)
    if issues:
        return None, issues, "messages"
    messages = [Message(role=m["role"], content=m["content"]) for m in raw]
    last_user = next(m.content for m in reversed(messages) if m.role == "user")
    record = Record(
        messages=messages,
        line=line,
        group=row.get("group"),
        problem=row.get("reference") or reference_from_question(last_user),
        meta={"format": "chat"},
    )
    return record, issues, f"messages[{len(raw) - 1}].content"


def _from_prompt_completion(row: dict, line: int) -> tuple[Record | None, list[DataIssue], str]:
    issues = (
        check_text_field(row, "prompt", line)
        + check_text_field(row, "completion", line)
        + _optional_text(row, ("group", "reference"), line)
    )
    if issues:
        return None, issues, "completion"
    record = Record(
        messages=[Message(role="user", content=row["prompt"]), Message(role="assistant", content=row["completion"])],
        line=line,
        group=row.get("group"),
        problem=row.get("reference") or reference_from_question(row["prompt"]),
        meta={"format": "prompt_completion"},
    )
    return record, issues, "completion"


def _from_table(row: dict, line: int) -> tuple[Record | None, list[DataIssue], str]:
    issues = check_text_field(row, "question", line) + check_text_field(row, "answer", line)
    if issues:
        return None, issues, "answer"
    level, number = row.get("level"), row.get("problem")
    known = [str(part) for part in (level, number) if part is not None]
    record = Record(
        messages=[Message(role="user", content=row["question"]), Message(role="assistant", content=row["answer"])],
        line=line,
        group="/".join(known) or None,
        problem=reference_from_question(row["question"]),
        meta={"format": "table", "level": level, "problem": number},
    )
    return record, issues, "answer"


def _compact(record: Record) -> tuple[Record, list[DataIssue]]:
    """The record with its last user message rebuilt as a compact prompt of its problem."""
    if record.problem is None:
        return record, [
            DataIssue(
                line=record.line,
                field="",
                code=ErrorCode.no_reference,
                severity="warning",
                message="no reference `class Model` found in the prompt; kept the prompt as it is",
            )
        ]
    last_user = max(i for i, m in enumerate(record.messages) if m.role == "user")
    messages = list(record.messages)
    messages[last_user] = Message(role="user", content=compact_prompt(record.problem))
    return record.model_copy(update={"messages": messages}), []


def _optional_text(row: dict, names: tuple[str, ...], line: int) -> list[DataIssue]:
    return [
        DataIssue(
            line=line,
            field=name,
            code=ErrorCode.wrong_type,
            message=f"expected a string, got {type(row[name]).__name__}",
        )
        for name in names
        if row.get(name) is not None and not isinstance(row[name], str)
    ]


def _rows(path: Path) -> Iterator[tuple[int, Any]]:
    """``(line, row)`` pairs of a file, or ``(line, DataIssue)`` for a row that cannot be read."""
    try:
        with path.open("rb") as handle:
            magic = handle.read(len(_PARQUET_MAGIC))
    except FileNotFoundError:
        raise DataFileMissingError(f"data file not found: {path}") from None
    except IsADirectoryError:
        raise DataFileError(f"data file is a folder, not a file: {path}") from None
    except OSError as error:
        raise DataFileError(f"cannot read data file {path}: {error.strerror}") from None
    if magic == _PARQUET_MAGIC:
        yield from _parquet_rows(path)
    else:
        yield from _jsonl_rows(path)


def invalid_json_message(error: json.JSONDecodeError) -> str:
    """The issue message of a line that is not JSON: json's reason, then the column (1-based).
    A colon, not "at": some of json's reasons already end in "at"."""
    return f"not valid JSON: {error.msg}: column {error.colno}"


def _jsonl_rows(path: Path) -> Iterator[tuple[int, Any]]:
    with path.open("rb") as handle:
        for line, raw in enumerate(handle, start=1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                yield (
                    line,
                    DataIssue(
                        line=line,
                        field="",
                        code=ErrorCode.invalid_encoding,
                        message=f"not UTF-8 (byte {error.start + 1})",
                    ),
                )
                continue
            if not text.strip():
                continue
            try:
                yield line, json.loads(text)
            except json.JSONDecodeError as error:
                yield (
                    line,
                    DataIssue(line=line, field="", code=ErrorCode.invalid_json, message=invalid_json_message(error)),
                )
            except RecursionError:
                # The parser recurses per nesting level; a record is a flat object of strings.
                yield (
                    line,
                    DataIssue(
                        line=line,
                        field="",
                        code=ErrorCode.invalid_json,
                        message="not valid JSON for a record: arrays or objects nested too deeply",
                    ),
                )


def _parquet_rows(path: Path) -> Iterator[tuple[int, Any]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    row = 0
    try:
        for batch in pq.ParquetFile(path).iter_batches(batch_size=_PARQUET_BATCH_ROWS):
            for values in batch.to_pylist():
                row += 1
                yield row, values
    except (pa.ArrowException, OSError) as error:
        yield (
            0,
            DataIssue(
                line=0,
                field="",
                code=ErrorCode.unreadable_file,
                message=f"parquet file cannot be read after row {row}: {error}",
            ),
        )
