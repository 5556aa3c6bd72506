"""What an uploaded file holds: validation for each purpose and its records for the dashboard.

- ``fine-tune``: JSONL or parquet rows read by ``cuset_core.data.load_records`` with
  ``require_kernel=True``; one row with an error rejects the whole file. Given a
  ``TokenLimit`` (the upload passes the default base model's tokenizer and the default
  ``max_seq_len``), each record longer than it is kept with an ``over_token_limit`` warning:
  a job with the default limit would leave it out (docs/data.md).
- ``eval`` and ``problems``: JSONL rows ``{"id": str | int, "problem": str}`` with unique ids, the
  shape ``cuset_core.evaluation.problems`` reads as a problem set (it reads ``.jsonl`` only), each
  problem a KernelBench-format one (``cuset_core.evaluation.problem_check``). ``eval`` files are
  what models are measured on; ``problems`` files are pools to sample and verify answers for
  (self-training), which must never overlap an eval set. A KernelBench level folder can come as
  it is: a tar archive (gzipped or not) of its ``.py`` problem files is stored as those JSONL
  rows, one per file, its name without ``.py`` as the id, in KernelBench's order.
"""

from __future__ import annotations

import contextlib
import json
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from api.errors import APIError
from cuset_core.data import LoadOptions, invalid_json_message, load_records
from cuset_core.evaluation.kernelbench_runs import kernelbench_number
from cuset_core.evaluation.problem_check import problem_issues
from db.errors import ErrorCode
from db.file_warnings import RecordWarning

PARQUET_MAGIC = b"PAR1"
FINE_TUNE, EVAL, PROBLEMS = "fine-tune", "eval", "problems"
PURPOSES = (FINE_TUNE, EVAL, PROBLEMS)
PROBLEM_ONLY = (EVAL, PROBLEMS)  # rows {"id", "problem"}, no answers
SHOWN_ISSUES = 5  # problems spelled out in a rejection message; the rest are counted
EXCERPT_CHARS = 240
MAX_PROBLEM_BYTES = 1 << 20  # one problem file of an uploaded archive


@dataclass(frozen=True)
class Issue:
    """One problem of an uploaded file: 1-based line (or parquet row; 0 = whole file), field."""

    line: int
    field: str
    code: str
    message: str

    def __str__(self) -> str:
        where = f"line {self.line}" if self.line else "file"
        return f"{where}{', ' + self.field if self.field else ''}: {self.code} — {self.message}"


@dataclass(frozen=True)
class TokenLimit:
    """The limit an upload's records are counted against: a job's default ``max_seq_len`` with
    the default base model's tokenizer and the jobs' default prompt style."""

    tokenizer: Any
    max_tokens: int
    model: str
    prompt_style: str = "compact"
    lock: Any = None  # held while counting: a fast tokenizer encodes one text at a time


OVER_TOKEN_LIMIT = "over_token_limit"


@dataclass(frozen=True)
class Checked:
    """An accepted file: its format, rows kept, rows read and the warnings of kept rows."""

    format: str  # jsonl | parquet
    records: int
    total_rows: int
    warnings: list[RecordWarning]


@dataclass(frozen=True)
class StoredRecord:
    """One record of a stored file as the dashboard lists it."""

    line: int
    prompt: str
    answer: str | None  # None for eval problems (no answer)


def detect_format(path: Path) -> str:
    """``parquet`` when the file starts with the parquet magic ``PAR1``, ``tar`` for a tar archive
    (gzipped or not), else ``jsonl``."""
    with path.open("rb") as handle:
        if handle.read(len(PARQUET_MAGIC)) == PARQUET_MAGIC:
            return "parquet"
    return "tar" if tarfile.is_tarfile(path) else "jsonl"


def problems_from_archive(path: Path, max_records: int) -> None:
    """Rewrite a tar archive of problem files (a KernelBench level folder) in place as JSONL rows
    ``{"id", "problem"}``: every regular ``.py`` file at any depth but ``__init__.py``, its name
    without ``.py`` as the id, in KernelBench's order (the number the name starts with, then the
    name). Raises ``rejection`` naming the member for a file that is not UTF-8 text or too large,
    and for an archive without problem files or with more than ``max_records``."""
    issues: list[Issue] = []
    rows: list[tuple[str, str]] = []
    try:
        with tarfile.open(path) as archive:
            members = [
                m
                for m in archive.getmembers()
                if m.isreg() and m.name.endswith(".py") and not Path(m.name).name.startswith(("__", "."))
            ]
            if len(members) > max_records:
                raise rejection(
                    [
                        Issue(
                            0,
                            "",
                            "too_many_records",
                            f"the archive has {len(members)} problem files, more than the limit of {max_records}",
                        )
                    ]  # fmt: skip
                )
            for member in members:
                if member.size > MAX_PROBLEM_BYTES:
                    issues.append(Issue(0, member.name, "too_large", f"{member.size} bytes, over {MAX_PROBLEM_BYTES}"))
                    continue
                handle = archive.extractfile(member)
                try:
                    text = handle.read().decode("utf-8") if handle is not None else ""
                except UnicodeDecodeError:
                    issues.append(Issue(0, member.name, "invalid_encoding", "not UTF-8 text"))
                    continue
                rows.append((Path(member.name).stem, text))
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise rejection([Issue(0, "", "unreadable_archive", f"the tar archive cannot be read ({exc})")]) from None
    if issues:
        raise rejection(issues)
    if not rows:
        raise rejection([Issue(0, "", "empty_file", "the archive holds no .py problem files")])
    rows.sort(key=lambda row: (kernelbench_number(row[0]) is None, kernelbench_number(row[0]) or 0, row[0]))
    path.write_text("".join(json.dumps({"id": problem_id, "problem": code}) + "\n" for problem_id, code in rows))


def rejection(issues: list[Issue]) -> APIError:
    """The 400 for a rejected file: the first problems with line, field and code."""
    shown = "; ".join(str(issue) for issue in issues[:SHOWN_ISSUES])
    more = f" (and {len(issues) - SHOWN_ISSUES} more)" if len(issues) > SHOWN_ISSUES else ""
    return APIError(400, f"The file was rejected: {shown}{more}", code=ErrorCode.INVALID_FILE, param="file")


def check_file(path: Path, purpose: str, max_records: int, limit: TokenLimit | None = None) -> Checked:
    """Validate an upload for ``purpose``; raises ``rejection`` on any problem. A fine-tune
    record longer than ``limit`` is kept with an ``over_token_limit`` warning."""
    fmt = detect_format(path)
    if fmt == "tar":
        if purpose not in PROBLEM_ONLY:
            raise rejection([Issue(0, "", "unknown_format", f"{purpose} files are JSONL or parquet, not an archive")])
        problems_from_archive(path, max_records)
        fmt = "jsonl"
    rows = _count_rows(path, fmt)
    if rows is not None and rows > max_records:
        raise rejection(
            [
                Issue(
                    max_records + 1,
                    "",
                    "too_many_records",
                    f"the file has {rows} rows, more than the limit of {max_records}",
                )
            ]
        )
    if purpose in PROBLEM_ONLY:
        if fmt != "jsonl":
            raise rejection(
                [Issue(0, "", "unknown_format", f'{purpose} files must be JSONL rows {{"id", "problem"}}, not parquet')]
            )
        problems, issues = _eval_rows(path)
        if issues:
            raise rejection(issues)
        return Checked(fmt, len(problems), len(problems), [])
    if limit is None:
        result = load_records(path, LoadOptions(require_kernel=True))
    else:
        options = LoadOptions(require_kernel=True, max_tokens=limit.max_tokens, prompt_style=limit.prompt_style)
        with limit.lock or contextlib.nullcontext():
            result = load_records(path, options, limit.tokenizer)
    over = [i for i in result.errors if i.code.value == OVER_TOKEN_LIMIT]
    errors = [i for i in result.errors if i.code.value != OVER_TOKEN_LIMIT]
    if errors:
        raise rejection([Issue(i.line, i.field, i.code.value, i.message) for i in errors])
    warnings = [
        RecordWarning(line=w.line, field=w.field, code=w.code.value, message=w.message) for w in result.warnings
    ]
    if limit is not None:
        warnings += [
            RecordWarning(
                line=i.line,
                field=i.field,
                code=OVER_TOKEN_LIMIT,
                message=f"{i.message} (the default max_seq_len; {limit.model}'s tokenizer, "
                f"{limit.prompt_style} prompt): a job with the default limit leaves this record out; "
                "raise hyperparameters.max_seq_len or set truncation 'cut' (docs/data.md)",
            )
            for i in over
        ]
        warnings.sort(key=lambda w: w.line)
    return Checked(fmt, len(result.records) + len(over), result.total, warnings)


def over_limit_note(warnings: list[RecordWarning], records: int) -> str | None:
    """The file object's ``status_details`` when some records exceed the default token limit."""
    over = sum(1 for w in warnings if w.code == OVER_TOKEN_LIMIT)
    if not over:
        return None
    return (
        f"{over} of {records} records are longer than the default max_seq_len and would be left out "
        "by a job with that limit (warnings with code over_token_limit; see docs/data.md)"
    )


def read_records(path: Path, purpose: str) -> list[StoredRecord]:
    """The records of an accepted stored file, in file order (cached: stored files never change)."""
    return _read_records(str(path), purpose)


@lru_cache(maxsize=2)
def _read_records(path: str, purpose: str) -> list[StoredRecord]:
    if purpose in PROBLEM_ONLY:
        problems, _ = _eval_rows(Path(path))
        return [StoredRecord(line, code, None) for line, _id, code in problems]
    records = load_records(path, LoadOptions(require_kernel=True)).records
    return [StoredRecord(r.line, r.prompt_messages[-1].content if r.prompt_messages else "", r.answer) for r in records]


def excerpt(text: str | None, limit: int = EXCERPT_CHARS) -> str | None:
    """The first ``limit`` characters of ``text``, with an ellipsis when cut."""
    if text is None or len(text) <= limit:
        return text
    return text[: limit - 1] + "…"


def _count_rows(path: Path, fmt: str) -> int | None:
    """Rows of the file without parsing them (None when parquet metadata is unreadable: the
    loader then reports the file as unreadable)."""
    if fmt == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            return pq.ParquetFile(path).metadata.num_rows
        except (pa.ArrowException, OSError):
            return None
    with path.open("rb") as handle:
        return sum(1 for raw in handle if raw.strip())


def _eval_rows(path: Path) -> tuple[list[tuple[int, str, str]], list[Issue]]:
    """``(line, id, problem)`` of every eval row, and the issues of the rows that are not."""
    problems: list[tuple[int, str, str]] = []
    issues: list[Issue] = []
    seen: set[str] = set()
    for line, row in _jsonl_objects(path, issues):
        problem_id, code = row.get("id"), row.get("problem")
        row_issues = []
        for name, value, kinds, wanted in (
            ("id", problem_id, (str, int), "a string or integer"),
            ("problem", code, (str,), "a string"),
        ):
            if value is None:
                row_issues.append(Issue(line, name, "missing_field", f"required field {name!r} is missing"))
            elif not isinstance(value, kinds) or isinstance(value, bool):
                row_issues.append(Issue(line, name, "wrong_type", f"expected {wanted}, got {type(value).__name__}"))
        text = code if isinstance(code, str) else ""
        if not row_issues and not text.strip():
            row_issues.append(Issue(line, "problem", "missing_field", "problem code is empty"))
        elif not row_issues:
            row_issues += [
                Issue(line, "problem", "invalid_problem", f"problem {problem_id!r}: {issue}")
                for issue in problem_issues(text)
            ]
        if not row_issues and str(problem_id) in seen:
            row_issues.append(Issue(line, "id", "duplicate_id", f"id {problem_id!r} appears twice"))
        issues += row_issues
        if not row_issues:
            seen.add(str(problem_id))
            problems.append((line, str(problem_id), text))
    if not problems and not issues:
        issues.append(Issue(0, "", "empty_file", "the file holds no rows"))
    return problems, issues


def _jsonl_objects(path: Path, issues: list[Issue]) -> Iterator[tuple[int, dict]]:
    """JSON objects of the non-blank lines; unreadable lines become ``issues``."""
    with path.open("rb") as handle:
        for line, raw in enumerate(handle, start=1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                issues.append(Issue(line, "", "invalid_encoding", f"not UTF-8 (byte {error.start + 1})"))
                continue
            if not text.strip():
                continue
            try:
                row = json.loads(text)
            except json.JSONDecodeError as error:
                issues.append(Issue(line, "", "invalid_json", invalid_json_message(error)))
                continue
            if not isinstance(row, dict):
                issues.append(Issue(line, "", "wrong_type", f"expected a JSON object, got {type(row).__name__}"))
                continue
            yield line, row
