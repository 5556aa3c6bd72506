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
(:func:`original_fits`), else the verdict is ``unsupported`` with that reason. The sandbox's
limits are sized for the budget; a run at the original sizes gets limits grown with its data
(:func:`scaled_limits`).
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Callable, Iterable
from copy import deepcopy
from math import ceil

from cuset_core.verify.settings import SandboxLimits
from cuset_core.verify.source.preprocessor import compiled_code

MIN_VALUE = 8  # constants below this (kernel sizes, strides, channels of 3) are never shrunk
MAX_STEPS = 200
ORIGINAL_SIZE_FACTOR = 16  # the original sizes are run when they hold at most this many budgets
# A run at the original sizes gets at most this many times the time limits: it only happens for a
# candidate that already failed at reduced sizes, which must not hold a worker for half an hour.
TIME_SCALE_CAP = 4


LARGEST_SIZE = 1 << 62  # a size expression evaluating beyond this is not a size


def int_constants(tree: ast.Module) -> dict[str, int]:
    """The problem's module-level sizes, by key: ``name`` for ``name = <int expression>`` (also
    ``a = b = 256`` and ``D, H, W = 16, 32, 32``) and ``name[i]`` for the ``i``-th element of
    ``name = (<int expression>, ...)`` (a tuple or list).

    An int expression is built from int literals alone (``4096``, ``2048 * 2``, ``1 << 12``,
    ``(8192 + 1) // 2``); bools are not sizes. A size written with other names
    (``K = N // 4``, ``bias_shape = (out_channels, 1, 1)``) is derived: it is not a key of its
    own and follows its names when they shrink, as the module computes it again.
    """
    found: dict[str, int] = {}
    for key, value, _ in _size_slots(tree):
        size = _int_expression(value)
        if size is not None:
            found[key] = size
    return found


def with_constants(tree: ast.Module, overrides: dict[str, int]) -> ast.Module:
    """A copy of ``tree`` whose module-level sizes (keys of :func:`int_constants`) take the
    ``overrides`` values, written as literals."""
    copy = deepcopy(tree)
    for key, value, replace in _size_slots(copy):
        if key in overrides and _int_expression(value) is not None:
            replace(ast.copy_location(ast.Constant(overrides[key]), value))
    return copy


_Slot = tuple[str, ast.expr, Callable[[ast.expr], None]]


def _size_slots(tree: ast.Module) -> list[_Slot]:
    """Every place a module-level assignment gives a name (or a tuple element) a value: its key,
    the value's expression and how to replace it, in order."""
    slots: list[_Slot] = []
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            slots += _slots_of(node.target.id, node.value, _value_setter(node))
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):  # a = 256, and each name of a = b = 256
                    slots += _slots_of(target.id, node.value, _value_setter(node))
                elif (  # D, H, W = 16, 32, 32
                    isinstance(target, ast.Tuple | ast.List)
                    and isinstance(node.value, ast.Tuple | ast.List)
                    and len(target.elts) == len(node.value.elts)
                ):
                    for index, (name, element) in enumerate(zip(target.elts, node.value.elts)):
                        if isinstance(name, ast.Name):
                            slots += _slots_of(name.id, element, _element_setter(node.value, index))
    return slots


def _slots_of(name: str, value: ast.expr, replace: Callable[[ast.expr], None]) -> list[_Slot]:
    """``name``'s slot, or with a tuple or list value, one slot per element (``name[i]``)."""
    if isinstance(value, ast.Tuple | ast.List):
        return [
            (f"{name}[{index}]", element, _element_setter(value, index)) for index, element in enumerate(value.elts)
        ]
    return [(name, value, replace)]


def _value_setter(node: ast.Assign | ast.AnnAssign) -> Callable[[ast.expr], None]:
    def replace(new: ast.expr) -> None:
        node.value = new

    return replace


def _element_setter(sequence: ast.Tuple | ast.List, index: int) -> Callable[[ast.expr], None]:
    def replace(new: ast.expr) -> None:
        sequence.elts[index] = new

    return replace


_OPERATORS: dict[type[ast.operator], Callable[[int, int], int]] = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.FloorDiv: lambda a, b: a // b,
    ast.Mod: lambda a, b: a % b,
    ast.LShift: lambda a, b: a << b if 0 <= b < 64 else LARGEST_SIZE + 1,
    ast.RShift: lambda a, b: a >> b if b >= 0 else LARGEST_SIZE + 1,
    ast.Pow: lambda a, b: a**b if 0 <= b < 64 and abs(a) < 1 << 16 else LARGEST_SIZE + 1,
}


def _int_expression(node: ast.expr) -> int | None:
    """The value of an expression of int literals and arithmetic, or None when it is anything else
    (a name, a call, a float, a bool) or leaves the range of sizes."""
    try:
        value = _evaluate(node)
    except (ArithmeticError, ValueError):
        return None
    return value if value is not None and abs(value) <= LARGEST_SIZE else None


def _evaluate(node: ast.expr) -> int | None:
    if isinstance(node, ast.Constant):
        return node.value if type(node.value) is int else None
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        operand = _evaluate(node.operand)
        return None if operand is None else (-operand if isinstance(node.op, ast.USub) else operand)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        left, right = _evaluate(node.left), _evaluate(node.right)
        if left is None or right is None or abs(left) > LARGEST_SIZE or abs(right) > LARGEST_SIZE:
            return None
        return _OPERATORS[type(node.op)](left, right)
    return None


def plan_reduction(
    constants: dict[str, int],
    measure: Callable[[dict[str, int]], int],
    max_elements: int,
    keep: frozenset[str] = frozenset(),
    floor: int = MIN_VALUE,
) -> dict[str, int]:
    """Overrides that bring ``measure(overrides)`` (elements) to at most ``max_elements``.

    ``measure`` returns the element count of the problem's tensors with the given constants.
    Sizes of one value shrink together (``out_channels = 16`` and ``bias_shape = (16, 1, 1)``
    name one dimension twice; shrinking one alone would break the problem): each step halves the
    largest such group. Only sizes of at least ``2 * MIN_VALUE`` ever shrink, and never below
    ``floor``; the groups of the names in ``keep`` keep their values. Returns the smallest-effort
    overrides found (possibly empty); it stops when no size can shrink further.
    """
    groups: dict[int, list[str]] = {}
    for name, value in constants.items():
        groups.setdefault(value, []).append(name)
    current = {original: original for original in groups}
    # Groups whose next halving broke the problem (GroupNorm's groups, say), and those kept whole.
    frozen: set[int] = {group for group, names in groups.items() if keep & set(names)}
    changed: dict[str, int] = {}
    elements = measure(changed)
    for _ in range(MAX_STEPS):
        if elements <= max_elements:
            break
        shrinkable = [
            group
            for group, value in current.items()
            if group >= 2 * MIN_VALUE and value >= 2 * floor and group not in frozen
        ]
        if not shrinkable:
            break
        group = max(shrinkable, key=lambda g: current[g])
        trial = {**changed, **dict.fromkeys(groups[group], (current[group] + 1) // 2)}
        try:
            elements = measure(trial)
        except Exception:  # noqa: BLE001 - the problem's own constraint (divisibility, a minimum size)
            frozen.add(group)
            continue
        current[group], changed = (current[group] + 1) // 2, trial
    return changed


def whole_size_plan(
    constants: dict[str, int],
    overrides: dict[str, int],
    measure: Callable[[dict[str, int]], int],
    max_elements: int,
) -> dict[str, int] | None:
    """Overrides that keep the size ``overrides`` shrank most at its original value and shrink the
    others first, down to 1, to fit ``max_elements``: one row of 131,072 columns rather than 16 rows
    of 4,096, so that a kernel right only up to the reduced size of a dimension fails. None when no
    size was shrunk, or when no such plan fits."""
    shrunk = {name: constants[name] / value for name, value in overrides.items() if value < constants.get(name, 0)}
    if not shrunk:
        return None
    whole = max(shrunk, key=lambda name: shrunk[name])
    plan = plan_reduction(constants, measure, max_elements, keep=frozenset({whole}), floor=1)
    try:
        fits = measure(plan) <= max_elements
    except Exception:  # noqa: BLE001 - the problem's own constraint: no such plan
        return None
    return plan if fits and plan != overrides else None


def original_fits(elements: int | None, max_elements: int) -> bool:
    """Whether a problem of ``elements`` elements (None: unknown) may run at its original sizes."""
    return elements is not None and elements <= ORIGINAL_SIZE_FACTOR * max_elements


def scaled_limits(limits: SandboxLimits, elements: int | None, max_elements: int) -> SandboxLimits:
    """``limits`` (sized for a problem of ``max_elements`` elements) for a run at ``elements``
    elements: the work folder and largest file grow with the data, by elements / max_elements
    (at most ``ORIGINAL_SIZE_FACTOR``), memory by what the work folder grew (it is a tmpfs
    counted in the memory limit) plus the tensors themselves (float32, inputs, outputs and a
    copy of each), and time by the same ratio up to ``TIME_SCALE_CAP``. Unchanged for a run
    within the budget or of unknown size."""
    if elements is None or elements <= max_elements:
        return limits
    ratio = min(elements / max_elements, ORIGINAL_SIZE_FACTOR)
    workdir_mb = ceil(limits.workdir_mb * ratio)
    tensors_mb = ceil(elements * 4 * 4 / 2**20)
    grown_mb = workdir_mb - limits.workdir_mb + tensors_mb
    time_ratio = min(ratio, TIME_SCALE_CAP)
    return limits.model_copy(
        update={
            "workdir_mb": workdir_mb,
            "file_size_mb": ceil(limits.file_size_mb * ratio),
            "memory_mb": limits.memory_mb + grown_mb,
            "address_space_mb": None if limits.address_space_mb is None else limits.address_space_mb + grown_mb,
            "wall_s": limits.wall_s * time_ratio,
            "cpu_s": ceil(limits.cpu_s * time_ratio),
        }
    )


def hardcoded_sizes(code: str, constants: dict[str, int], overrides: dict[str, int]) -> list[str]:
    """``name=value`` for each reduced constant whose original value appears as a number in ``code``
    (a candidate that hard-codes the problem's sizes; pass it through :func:`size_bearing_code`)."""
    return [
        f"{name}={constants[name]}"
        for name in overrides
        if name in constants and re.search(rf"(?<![\w.]){constants[name]}(?![\w.])", code)
    ]


def size_bearing_code(code: str, language: str, sources: Iterable[str]) -> str:
    """The text of a candidate where a hard-coded size counts: its code without comments and
    string literals (Python or C/C++ by ``language``) and, for a Python candidate, its kernel
    ``sources`` (the strings ``load_inline`` compiles) without theirs. C/C++ counts only where
    the compiler compiles it (:func:`compiled_c_code`).

    A number in a comment, a message (``// N = 4096``) or a group the preprocessor skips
    (``#if 0``) sizes nothing: it must not turn a wrong kernel's failure into ``unsupported``."""
    if language != "python":
        return compiled_c_code(code)
    return "\n".join([without_python_literals(code), *(compiled_c_code(source) for source in sources)])


def compiled_c_code(source: str) -> str:
    """C/C++ ``source`` as the compiler compiles it (``preprocessor.compiled_code``: no comment,
    literal or skipped group), with C++14 digit separators dropped so that ``16'384`` reads as
    the 16384 it is (blanked literals leave a ``'`` only inside a number)."""
    return compiled_code(source).replace("'", "")


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
