"""The elementwise problem pool of the self-training experiment."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import torch
from typer.testing import CliRunner

from cuset_core.cli import app
from cuset_core.data.elementwise_pool import EXCLUDED, UNARY, elementwise_pool
from cuset_core.evaluation.problems import load_problems
from cuset_core.verify.cpu.sizes import int_constants

REPO = Path(__file__).resolve().parents[2]
SPLIT = REPO / "experiments" / "elementwise" / "split.json"
COMMITTED = REPO / "experiments" / "self_training" / "pool.jsonl"


def _run(problem: str) -> tuple[torch.Tensor, torch.Tensor]:
    namespace: dict = {}
    exec(compile(problem, "problem.py", "exec"), namespace)  # noqa: S102 - our own generated reference
    torch.manual_seed(0)
    [x] = namespace["get_inputs"]()
    return x, namespace["Model"](*namespace["get_init_inputs"]())(x)


def test_the_pool_is_at_least_80_distinct_problems_and_the_seed_fixes_it():
    pool = elementwise_pool()
    assert len(pool) >= 80
    assert len({p.expression for p in pool}) == len(pool) and len({p.id for p in pool}) == len(pool)
    assert elementwise_pool(seed=0) == pool and elementwise_pool(seed=1) != pool


def test_no_problem_uses_an_operation_the_elementwise_experiment_holds_out():
    split = json.loads(SPLIT.read_text())
    held_out = set(split["held_out_ops"]) | {item["op"] for item in split["eval_unseen"]}
    assert {"tanh", "elu", "leaky_relu", "softplus"} <= EXCLUDED
    assert not EXCLUDED & set(UNARY)
    for problem in elementwise_pool():
        assert not any(f"torch.{op}(" in problem.expression or f".{op}(" in problem.expression for op in held_out)
        assert any(f"torch.{name}" in problem.expression for name in ("sigmoid", "relu", "abs", "sin", "cos", "erf",
                   "atan", "nn.functional", "exp", "log1p", "sqrt", "rsqrt"))  # fmt: skip


def test_every_problem_is_a_runnable_kernelbench_reference_with_finite_outputs():
    for problem in elementwise_pool():
        x, y = _run(problem.problem)
        assert y.shape == x.shape and torch.isfinite(y).all(), problem.id
        assert int_constants(ast.parse(problem.problem)) == {"batch_size": 16, "dim": 16384}  # tier 2 shrinks them


def test_the_committed_pool_is_the_seed_0_draw_and_loads_as_a_problem_set(tmp_path):
    out = tmp_path / "pool.jsonl"
    outcome = CliRunner().invoke(app, ["data", "pool", "--out", str(out)])
    assert outcome.exit_code == 0, outcome.output
    assert out.read_text() == COMMITTED.read_text()
    problems = load_problems(str(COMMITTED))
    assert [p.id for p in problems] == [p.id for p in elementwise_pool()]
