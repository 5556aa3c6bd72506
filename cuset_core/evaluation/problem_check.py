"""What a KernelBench-format problem must hold, checked without running it.

A problem is Python source defining ``class Model`` (an ``nn.Module`` with ``forward``) and the
module-level functions ``get_inputs()`` and ``get_init_inputs()``; the harnesses call exactly
these. Problem-only datasets (eval sets, self-training pools) are checked with this before they
are stored, so a broken problem is refused at upload with its line instead of failing every
verification later.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

REQUIRED_FUNCTIONS = ("get_inputs", "get_init_inputs")


@dataclass(frozen=True)
class ProblemIssue:
    """One defect: its 1-based line in the problem's source (0: the whole problem) and why."""

    line: int
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}" if self.line else self.message


def problem_issues(source: str) -> list[ProblemIssue]:
    """Why ``source`` is not a KernelBench-format problem ([] when it is)."""
    try:
        tree = ast.parse(source)
    except SyntaxError as error:
        return [ProblemIssue(error.lineno or 0, f"not valid Python: {error.msg}")]
    top = {node.name: node for node in tree.body if isinstance(node, (ast.ClassDef, ast.FunctionDef))}
    issues = []
    model = top.get("Model")
    if not isinstance(model, ast.ClassDef):
        issues.append(ProblemIssue(0, "no top-level `class Model` (the reference nn.Module)"))
    elif not any(isinstance(node, ast.FunctionDef) and node.name == "forward" for node in model.body):
        issues.append(ProblemIssue(model.lineno, "`class Model` has no `forward` method"))
    for name in REQUIRED_FUNCTIONS:
        if not isinstance(top.get(name), ast.FunctionDef):
            issues.append(ProblemIssue(0, f"no top-level `def {name}()`"))
    return issues
