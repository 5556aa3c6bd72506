"""Which verified answers a self-training round keeps, and the problem-text checks against leakage."""

from __future__ import annotations

import ast
import hashlib
import re
from dataclasses import dataclass

from cuset_core.evaluation.metrics import passed_tier
from cuset_core.evaluation.scoring import SampleRecord
from cuset_core.verify.candidate import parse_candidate
from cuset_core.verify.result import Tier

# Declarations whose name is the author's choice: renaming it changes nothing a kernel computes.
_DECLARED = (
    re.compile(r"\b(?:def|class)\s+([A-Za-z_]\w*)"),
    re.compile(
        r"\b(?:void|float|double|int|unsigned|long|bool|auto|size_t|int64_t|int32_t|half|__half|scalar_t)"
        r"\s*[*&]*\s+(?:__restrict__\s+)?([A-Za-z_]\w*)"
    ),
    re.compile(r"\btorch::Tensor\s*&?\s+([A-Za-z_]\w*)"),
    re.compile(r"^\s*([A-Za-z_]\w*)\s*=", re.MULTILINE),
)
_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")
_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/|#[^\n]*", re.DOTALL)


@dataclass(frozen=True)
class KeptSample:
    """One verified answer a round keeps: its problem, the round and the sample's index in it."""

    problem_id: str
    round: int
    index: int
    answer: str
    fingerprint: str


def normalised(code: str) -> str:
    """``code`` with comments dropped, whitespace collapsed and every name it declares renamed to
    its order of first appearance (``n0``, ``n1``, ...): two answers that differ only there are one."""
    code = _COMMENT.sub(" ", code)
    declared: dict[str, str] = {}
    for pattern in _DECLARED:
        for name in pattern.findall(code):
            declared.setdefault(name, "")
    order = [m.group(0) for m in _IDENTIFIER.finditer(code) if m.group(0) in declared]
    renames: dict[str, str] = {}
    for name in order:
        renames.setdefault(name, f"n{len(renames)}")
    code = _IDENTIFIER.sub(lambda m: renames.get(m.group(0), m.group(0)), code)
    return " ".join(code.split())


def fingerprint(answer: str) -> str:
    """sha256 of the answer's code, normalised (see ``normalised``)."""
    return hashlib.sha256(normalised(parse_candidate(answer).code).encode()).hexdigest()


def keep_passing(
    records: list[SampleRecord], tier: Tier, round_: int, kept: list[KeptSample], max_per_problem: int
) -> list[KeptSample]:
    """The samples of ``records`` that passed ``tier`` and are new (no kept sample has their
    fingerprint), at most ``max_per_problem`` per problem counting what ``kept`` already holds."""
    seen = {sample.fingerprint for sample in kept}
    per_problem: dict[str, int] = {}
    for sample in kept:
        per_problem[sample.problem_id] = per_problem.get(sample.problem_id, 0) + 1
    new: list[KeptSample] = []
    for record in records:
        if record.round or not passed_tier(record.result, tier):
            continue
        if per_problem.get(record.problem_id, 0) >= max_per_problem:
            continue
        print_ = fingerprint(record.answer)
        if print_ in seen:
            continue
        seen.add(print_)
        per_problem[record.problem_id] = per_problem.get(record.problem_id, 0) + 1
        new.append(KeptSample(record.problem_id, round_, record.index, record.answer, print_))
    return new


def problem_digest(code: str) -> str:
    """sha256 of a problem's text with formatting and comments normalised away (``ast.unparse``),
    so the same problem re-indented or re-commented has the same digest."""
    try:
        text = ast.unparse(ast.parse(code))
    except SyntaxError:
        text = " ".join(code.split())
    return hashlib.sha256(text.encode()).hexdigest()


def shared_problems(pool: dict[str, str], evaluation: dict[str, str]) -> list[tuple[str, str]]:
    """(pool id, eval id) of every pool problem whose text is one of the eval set's."""
    eval_by_digest = {problem_digest(code): pid for pid, code in evaluation.items()}
    return [
        (pid, eval_by_digest[digest])
        for pid, code in pool.items()
        if (digest := problem_digest(code)) in eval_by_digest
    ]
