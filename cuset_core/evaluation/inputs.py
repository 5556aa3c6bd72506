"""What a user hands an evaluation: the error of an input that cannot be used, and a problem's
answers read from an answers file or a KernelBench run folder."""

from __future__ import annotations

from dataclasses import dataclass


class EvalInputError(ValueError):
    """A problem set, answers file or option the user gave is unusable; one line says why."""


@dataclass(frozen=True)
class ProblemAnswers:
    """A problem's answers: its greedy one (None: none) and its i.i.d. samples, in file order."""

    greedy: str | None
    sampled: list[str]
