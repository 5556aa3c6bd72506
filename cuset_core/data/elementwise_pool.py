"""A pool of distinct elementwise problems in KernelBench's format, for self-training experiments.

Each problem's ``Model.forward`` is a composition of torch unary operations with constants on one
input (``x * torch.sigmoid(1.7 * x) - 0.1``). The operations exclude every held-out and unseen
operation of ``experiments/elementwise/split.json`` (tanh, elu, leaky_relu, softplus) and every
expression combines a non-linear operation, so no problem is one of those sets' operations (scale,
add, scale-bias, multiply-add): a model trained on what it solves here is still measured on
operations it never saw. The draw is seeded; the same seed gives the same pool.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

# Unary operations, as a template on the sub-expression {x}; all finite on any finite input.
UNARY = {
    "sigmoid": "torch.sigmoid({x})",
    "relu": "torch.relu({x})",
    "abs": "torch.abs({x})",
    "sin": "torch.sin({x})",
    "cos": "torch.cos({x})",
    "erf": "torch.erf({x})",
    "atan": "torch.atan({x})",
    "gelu": "torch.nn.functional.gelu({x})",
    "hardsigmoid": "torch.nn.functional.hardsigmoid({x})",
    "softsign": "({x} / (1 + torch.abs({x})))",
    "gaussian": "torch.exp(-{x} * {x})",
    "log1p_abs": "torch.log1p(torch.abs({x}))",
    "sqrt1p_abs": "torch.sqrt(1 + torch.abs({x}))",
    "rsqrt1p_sq": "torch.rsqrt(1 + {x} * {x})",
}
# Operations of the held-out and unseen sets of the elementwise experiment: never drawn.
EXCLUDED = frozenset({"tanh", "elu", "leaky_relu", "softplus"})
_CONSTANTS = (0.1, 0.25, 0.5, 0.75, 1.5, 1.7, 2.0, 3.0)
# Ways to combine up to two operations f, g with constants a, b, c; {f(...)} applies f.
_FORMS = {
    "affine": "{a} * {f(b * x)} + {c}",
    "gate": "x * {f(a * x)} - {c}",
    "product": "{f(x)} * {g(x)}",
    "sum": "{f(x)} + {a} * {g(x)}",
    "max": "torch.maximum({f(x)}, {a} * {g(x)})",
    "nested": "{f(g(a * x))}",
    "select": "torch.where(x > {c}, {f(x)}, {a} * {g(x)})",
}

PROBLEM_TEMPLATE = '''import torch
import torch.nn as nn


class Model(nn.Module):
    """Elementwise: y = {expression}."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return {expression}


batch_size = 16
dim = 16384


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
'''


@dataclass(frozen=True)
class PoolProblem:
    """One generated problem: ``id`` (``ew_<n>_<form>_<ops>``), its expression and file text."""

    id: str
    expression: str
    problem: str


def _apply(name: str, inner: str) -> str:
    inner = inner if inner.isidentifier() else f"({inner})"
    return UNARY[name].format(x=inner)


def _expression(form: str, f: str, g: str, a: float, b: float, c: float) -> str:
    scaled = {"a * x": f"{a} * x", "b * x": f"{b} * x"}
    calls = {
        "{f(x)}": _apply(f, "x"),
        "{g(x)}": _apply(g, "x"),
        "{f(a * x)}": _apply(f, scaled["a * x"]),
        "{f(b * x)}": _apply(f, scaled["b * x"]),
        "{f(g(a * x))}": _apply(f, _apply(g, scaled["a * x"])),
    }
    text = _FORMS[form]
    for call, applied in calls.items():
        text = text.replace(call, applied)
    return text.replace("{a}", str(a)).replace("{c}", str(c))


def elementwise_pool(count: int = 96, seed: int = 0) -> list[PoolProblem]:
    """``count`` distinct problems drawn under ``seed`` (distinct expressions, stable order)."""
    if count > 2000:
        raise ValueError("count: at most 2000 problems")
    rng = random.Random(seed)
    names, forms = sorted(UNARY), sorted(_FORMS)
    seen: set[str] = set()
    pool: list[PoolProblem] = []
    while len(pool) < count:
        form = rng.choice(forms)
        f, g = rng.sample(names, 2)
        a, b, c = (rng.choice(_CONSTANTS) for _ in range(3))
        expression = _expression(form, f, g, a, b, c)
        if expression in seen:
            continue
        seen.add(expression)
        uses_g = "g(" in _FORMS[form]
        ops = f"{f}_{g}" if uses_g else f
        problem_id = f"ew_{len(pool):03d}_{form}_{ops}"
        pool.append(PoolProblem(problem_id, expression, PROBLEM_TEMPLATE.format(expression=expression)))
    return pool
