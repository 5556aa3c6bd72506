"""The problem set of an evaluation and the answers to score without a model.

Problems come from a folder of ``.py`` files (id = file stem), a single ``.py`` file, a
``.jsonl`` file of ``{"id", "problem"}`` rows, ``"demo"`` (the bundled demo set) or
``"demo:held-out"`` (its problems kept out of training data). Answers to score come from a
``.jsonl`` file of ``{"problem_id", "answer"}`` rows (one per sample, several rows per problem
allowed; ``"greedy": true`` marks a problem's greedy answer) or ``{"id", "samples": [...]}`` rows
(optionally ``"greedy": "<answer>"``), or from a KernelBench ``runs/<run_name>`` folder of
generations (:mod:`.kernelbench_runs`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cuset_core.evaluation.inputs import EvalInputError, ProblemAnswers
from cuset_core.evaluation.kernelbench_runs import kernelbench_number, load_kernelbench_run

DEMO_PROBLEMS = "demo"


DEMO_HELD_OUT = "demo:held-out"


@dataclass(frozen=True)
class Problem:
    """One KernelBench-format problem."""

    id: str
    code: str


def load_problems(spec: str) -> list[Problem]:
    """The problem set named by ``spec`` (see the module docstring), in a stable order."""
    if spec in (DEMO_PROBLEMS, DEMO_HELD_OUT):
        from cuset_core.demo import HELD_OUT, demo_problems

        chosen = [p for p in demo_problems() if spec == DEMO_PROBLEMS or p.id in HELD_OUT]
        return [Problem(p.id, p.problem_code) for p in chosen]
    path = Path(spec).expanduser()
    if path.is_dir():
        files = sorted(path.glob("*.py"))
        if not files:
            raise EvalInputError(f"problems: folder {spec} holds no .py files")
        return [Problem(f.stem, f.read_text()) for f in files]
    if path.is_file() and path.suffix == ".py":
        return [Problem(path.stem, path.read_text())]
    if path.is_file() and path.suffix == ".jsonl":
        return _problems_from_jsonl(path)
    raise EvalInputError(
        f'problems: {spec} is not a folder of .py files, a .py file, a .jsonl file, "demo" or "demo:held-out"'
    )


def select_problems(problems: list[Problem], selection: str | None) -> list[Problem]:
    """The problems ``selection`` names, in their order: comma-separated KernelBench numbers
    (``19``), ranges of them (``1-10``) and ids (``23_Softmax``); all when None.
    ``EvalInputError`` for a part that names no problem, so a typo never silently shrinks a run."""
    if selection is None:
        return problems
    numbers: set[int] = set()
    ids: set[str] = set()
    for part in (part.strip() for part in selection.split(",")):
        bounds = part.split("-")
        if len(bounds) == 2 and all(bound.strip().isdigit() for bound in bounds):
            numbers.update(range(int(bounds[0]), int(bounds[1]) + 1))
        elif part.isdigit():
            numbers.add(int(part))
        elif part:
            ids.add(part)
    chosen = [p for p in problems if p.id in ids or kernelbench_number(p.id) in numbers]
    unknown = sorted(ids - {p.id for p in chosen})
    if unknown or not chosen:
        named = f"{', '.join(unknown)} " if unknown else ""
        raise EvalInputError(f"problem_ids: {named or repr(selection) + ' '}names no problem of the set")
    return chosen


def _problems_from_jsonl(path: Path) -> list[Problem]:
    problems: list[Problem] = []
    seen: set[str] = set()
    for line_no, row in _jsonl_rows(path):
        problem_id, code = row.get("id"), row.get("problem")
        if not isinstance(problem_id, (str, int)) or not isinstance(code, str):
            raise EvalInputError(f'{path.name} line {line_no}: expected {{"id": str, "problem": str}}')
        if str(problem_id) in seen:
            raise EvalInputError(f"{path.name} line {line_no}: duplicate id {problem_id!r}")
        seen.add(str(problem_id))
        problems.append(Problem(str(problem_id), code))
    if not problems:
        raise EvalInputError(f"{path.name}: no problems")
    return problems


def load_answers(path: Path, problem_ids: list[str]) -> dict[str, ProblemAnswers]:
    """Answers per problem id, from a JSONL file or a KernelBench run folder; every id must name a
    problem of the set, and a problem has at most one greedy answer."""
    if path.is_dir():
        return load_kernelbench_run(path, problem_ids)
    if not path.is_file():
        raise EvalInputError(f"answers: file not found: {path}")
    known = set(problem_ids)
    greedy: dict[str, str] = {}
    sampled: dict[str, list[str]] = {pid: [] for pid in problem_ids}
    for line_no, row in _jsonl_rows(path):
        if "problem_id" in row and isinstance(row.get("answer"), str) and isinstance(row.get("greedy", False), bool):
            problem_id = str(row["problem_id"])
            first, texts = (row["answer"], []) if row.get("greedy") else (None, [row["answer"]])
        elif (
            "id" in row
            and isinstance(row.get("samples"), list)
            and all(isinstance(s, str) for s in row["samples"])
            and isinstance(row.get("greedy", ""), str)
        ):
            problem_id, first, texts = str(row["id"]), row.get("greedy"), row["samples"]
        else:
            raise EvalInputError(
                f'{path.name} line {line_no}: expected {{"problem_id", "answer": str, "greedy"?: bool}} '
                f'or {{"id", "samples": [str, ...], "greedy"?: str}}'
            )
        if problem_id not in known:
            raise EvalInputError(f"{path.name} line {line_no}: problem id {problem_id!r} is not in the problem set")
        if first is not None:
            if problem_id in greedy:
                raise EvalInputError(f"{path.name} line {line_no}: a second greedy answer for problem {problem_id!r}")
            greedy[problem_id] = first
        sampled[problem_id].extend(texts)
    if not greedy and not any(sampled.values()):
        raise EvalInputError(f"{path.name}: no answers")
    return {pid: ProblemAnswers(greedy.get(pid), sampled[pid]) for pid in problem_ids}


def _jsonl_rows(path: Path) -> list[tuple[int, dict[str, Any]]]:
    rows = []
    for line_no, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise EvalInputError(f"{path.name} line {line_no}: not valid JSON ({exc.msg})") from None
        if not isinstance(row, dict):
            raise EvalInputError(f"{path.name} line {line_no}: expected a JSON object")
        rows.append((line_no, row))
    return rows
