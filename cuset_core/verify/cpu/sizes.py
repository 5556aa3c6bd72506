"""Problem-size reduction through a problem's module-level integer constants.

KernelBench problems size their tensors with module-level constants (``batch_size = 16``,
``dim = 16384``, ``M = 1024``). Tier 2 runs on a CPU, so it shrinks them: the largest
constant of at least ``2 * MIN_VALUE`` is halved (odd values round up, so an odd size stays
odd-ish and still exercises the kernels' bounds guards; powers of two keep dividing each
other; small settings such as kernel sizes are never touched) until the measured element
count fits the budget.

A reduction must never blame the candidate. When the reduced problem breaks the reference
(a shape written as a literal somewhere, e.g. LayerNorm's ``normalized_shape``), or the
candidate fails only at reduced sizes (it hard-codes them: ``#define N 4096``, a constant, a
fixed grid), the check runs again at the original sizes when they fit
(:func:`original_fits`), else the verdict is ``unsupported`` with that reason.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Callable, Iterable
from copy import deepcopy

from cuset_core.verify.cpu.rewrite import strip_comments

MIN_VALUE = 8  # constants below this (kernel sizes, strides, channels of 3) are never shrunk
MAX_STEPS = 200
ORIGINAL_SIZE_FACTOR = 16  # the original sizes are run when they hold at most this many budgets


def int_constants(tree: ast.Module) -> dict[str, int]:
    """Module-level ``name = <int literal>`` assignments (bools excluded), by name."""
    found: dict[str, int] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            value = node.value
            if isinstance(value, ast.Constant) and type(value.value) is int:
                found[node.targets[0].id] = value.value
    return found


def with_constants(tree: ast.Module, overrides: dict[str, int]) -> ast.Module:
    """A copy of ``tree`` whose module-level int constants take the ``overrides`` values."""
    copy = deepcopy(tree)
    for node in copy.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if name in overrides and isinstance(node.value, ast.Constant) and type(node.value.value) is int:
                node.value = ast.copy_location(ast.Constant(overrides[name]), node.value)
    return copy


def plan_reduction(
    constants: dict[str, int], measure: Callable[[dict[str, int]], int], max_elements: int
) -> dict[str, int]:
    """Overrides that bring ``measure(overrides)`` (elements) to at most ``max_elements``.

    ``measure`` returns the element count of the problem's tensors with the given constants.
    Returns the smallest-effort overrides found (possibly empty); it stops when no constant
    can shrink further.
    """
    current = dict(constants)
    changed: dict[str, int] = {}
    for _ in range(MAX_STEPS):
        if measure(changed) <= max_elements:
            break
        shrinkable = [name for name, value in current.items() if value >= 2 * MIN_VALUE]
        if not shrinkable:
            break
        name = max(shrinkable, key=lambda n: current[n])
        current[name] = (current[name] + 1) // 2
        changed[name] = current[name]
    return changed


def original_fits(elements: int | None, max_elements: int) -> bool:
    """Whether a problem of ``elements`` elements (None: unknown) may run at its original sizes."""
    return elements is not None and elements <= ORIGINAL_SIZE_FACTOR * max_elements


def hardcoded_sizes(code: str, constants: dict[str, int], overrides: dict[str, int]) -> list[str]:
    """``name=value`` for each reduced constant whose original value appears as a number in ``code``
    (a candidate that hard-codes the problem's sizes; pass it through :func:`size_bearing_code`)."""
    return [
        f"{name}={constants[name]}"
        for name in overrides
        if name in constants and re.search(rf"(?<![\w.]){constants[name]}(?![\w.])", code)
    ]


_C_LITERAL = re.compile(r"\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])*'")


def size_bearing_code(code: str, language: str, sources: Iterable[str]) -> str:
    """The text of a candidate where a hard-coded size counts: its code without comments and
    string literals (Python or C/C++ by ``language``) and, for a Python candidate, its kernel
    ``sources`` (the strings ``load_inline`` compiles) without theirs.

    A number in a comment or a message (``// N = 4096``) sizes nothing: it must not turn a
    wrong kernel's failure into ``unsupported``."""
    if language != "python":
        return without_c_literals(code)
    return "\n".join([without_python_literals(code), *(without_c_literals(source) for source in sources)])


def without_c_literals(source: str) -> str:
    """C/C++ ``source`` with comments blanked and string and character literals emptied."""
    return _C_LITERAL.sub('""', strip_comments(source))


def without_python_literals(source: str) -> str:
    """The tokens of Python ``source`` other than comments and string literals, space-separated;
    empty when it does not tokenize (nothing then counts as hard-coded: the verdict stays the
    candidate's)."""
    dropped = {tokenize.COMMENT, tokenize.STRING, getattr(tokenize, "FSTRING_MIDDLE", tokenize.STRING)}
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError):
        return ""
    return " ".join(token.string for token in tokens if token.type not in dropped)
