"""Checks on dataset rows, each problem reported with its line, field and a stable code.

Severity ``error`` means the record is left out of the loaded data; ``warning`` means it is kept
and the problem is only reported. Line 0 stands for the file as a whole.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel

from cuset_core.analysis.extract import first_code_block
from cuset_core.analysis.sources import find_kernel_sources

ROLES = ("system", "user", "assistant")


class ErrorCode(StrEnum):
    """Stable codes for data problems (API clients and tests match on these)."""

    missing_field = "missing_field"
    wrong_type = "wrong_type"
    unknown_role = "unknown_role"
    wrong_role_order = "wrong_role_order"
    empty_assistant = "empty_assistant"
    invalid_json = "invalid_json"
    invalid_encoding = "invalid_encoding"
    unknown_format = "unknown_format"
    empty_file = "empty_file"
    unreadable_file = "unreadable_file"
    over_token_limit = "over_token_limit"
    no_code_block = "no_code_block"
    no_cuda_kernel = "no_cuda_kernel"
    no_reference = "no_reference"


Severity = Literal["error", "warning"]


class DataIssue(BaseModel):
    """One problem in a dataset: where (line, field), what (code) and a readable message."""

    line: int  # 1-based line or row; 0 for the whole file
    field: str  # e.g. "messages[2].role", "answer"; "" when no single field is at fault
    code: ErrorCode
    message: str
    severity: Severity = "error"

    def __str__(self) -> str:
        where = f"line {self.line}" if self.line else "file"
        field = f", field {self.field}" if self.field else ""
        return f"{where}{field}: {self.severity} {self.code.value}: {self.message}"


def check_messages(raw: Any, line: int) -> list[DataIssue]:
    """Problems with an OpenAI-style ``messages`` list; empty when it is a usable conversation.

    Usable means: optional ``system`` first, then ``user``/``assistant`` alternating, ending
    with a non-empty ``assistant`` turn; every message has string ``role`` and ``content``.
    """
    if not isinstance(raw, list):
        return [_issue(line, "messages", ErrorCode.wrong_type, "expected a list of messages")]
    if not raw:
        return [
            _issue(
                line,
                "messages",
                ErrorCode.missing_field,
                "is empty; expected a user message followed by the assistant answer",
            )
        ]
    issues = [issue for i, message in enumerate(raw) for issue in _check_message(message, i, line)]
    if issues:
        return issues
    order = _role_order_issue([m["role"] for m in raw], line)
    if order is not None:
        return [order]
    return [
        _issue(line, f"messages[{i}].content", ErrorCode.empty_assistant, "assistant message is empty")
        for i, message in enumerate(raw)
        if message["role"] == "assistant" and not message["content"].strip()
    ]


def check_text_field(row: dict[str, Any], name: str, line: int) -> list[DataIssue]:
    """Problems with a required string column ``name`` of a row (missing, null, not a string)."""
    if row.get(name) is None:
        return [_issue(line, name, ErrorCode.missing_field, f"required field {name!r} is missing")]
    if not isinstance(row[name], str):
        return [_issue(line, name, ErrorCode.wrong_type, f"expected a string, got {type(row[name]).__name__}")]
    return []


def check_answer(answer: str, line: int, field: str, require_kernel: bool) -> list[DataIssue]:
    """Problems with an assistant answer as a CUDA training target.

    ``no_code_block`` is a warning (the whole answer is then taken as the code);
    ``no_cuda_kernel`` is an error when ``require_kernel`` is set, else a warning.
    """
    if not answer.strip():
        return [_issue(line, field, ErrorCode.empty_assistant, "answer is empty")]
    issues: list[DataIssue] = []
    if first_code_block(answer) is None:
        issues.append(_issue(line, field, ErrorCode.no_code_block, "answer has no fenced code block", "warning"))
    if not has_cuda_kernel(answer):
        issues.append(
            _issue(
                line,
                field,
                ErrorCode.no_cuda_kernel,
                "answer defines no __global__ kernel",
                "error" if require_kernel else "warning",
            )
        )
    return issues


def has_cuda_kernel(answer: str) -> bool:
    """True when the answer's scored code defines a ``__global__`` kernel.

    The resolved ``load_inline`` sources decide; the raw code is the fallback for sources built
    in ways static resolution does not follow (f-strings, ``str.join``).
    """
    sources = find_kernel_sources(answer)
    return sources.has_kernel or "__global__" in sources.code


def check_token_count(n_tokens: int, max_tokens: int | None, line: int) -> list[DataIssue]:
    """``over_token_limit`` when the rendered record has more than ``max_tokens`` tokens."""
    if max_tokens is None or n_tokens <= max_tokens:
        return []
    return [_issue(line, "", ErrorCode.over_token_limit, f"{n_tokens} tokens, more than the limit of {max_tokens}")]


def _check_message(message: Any, index: int, line: int) -> list[DataIssue]:
    field = f"messages[{index}]"
    if not isinstance(message, dict):
        return [
            _issue(
                line,
                field,
                ErrorCode.wrong_type,
                f"expected an object with role and content, got {type(message).__name__}",
            )
        ]
    issues = [
        _issue(line, f"{field}.{key}", ErrorCode.missing_field, f"message has no {key!r}")
        for key in ("role", "content")
        if message.get(key) is None
    ]
    role, content = message.get("role"), message.get("content")
    if role is not None and role not in ROLES:
        issues.append(
            _issue(line, f"{field}.role", ErrorCode.unknown_role, f"role {role!r} is not one of {', '.join(ROLES)}")
        )
    if content is not None and not isinstance(content, str):
        issues.append(
            _issue(line, f"{field}.content", ErrorCode.wrong_type, f"expected a string, got {type(content).__name__}")
        )
    return issues


def _role_order_issue(roles: list[str], line: int) -> DataIssue | None:
    """The first break of the order: optional system, user/assistant alternating, assistant last."""
    offset = 1 if roles[0] == "system" else 0
    for i, role in enumerate(roles[offset:], start=offset):
        expected = "user" if (i - offset) % 2 == 0 else "assistant"
        if role != expected:
            return _issue(
                line,
                f"messages[{i}].role",
                ErrorCode.wrong_role_order,
                f"expected {expected!r}, got {role!r} (order: optional system, then user and assistant alternating)",
            )
    if roles[-1] != "assistant":
        return _issue(
            line,
            f"messages[{len(roles) - 1}].role",
            ErrorCode.wrong_role_order,
            "the last message must be the assistant answer",
        )
    return None


def _issue(line: int, field: str, code: ErrorCode, message: str, severity: Severity = "error") -> DataIssue:
    return DataIssue(line=line, field=field, code=code, message=message, severity=severity)
