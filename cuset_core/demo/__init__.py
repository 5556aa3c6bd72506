"""The project's own demo dataset: KernelBench-format problems with CUDA solutions.

Every problem is a pair of files written for this project: ``problems/NN_name.py`` holds the
reference (``class Model``, ``get_inputs()``, ``get_init_inputs()``) and ``solutions/NN_name.py``
the answer (``class ModelNew`` calling a ``load_inline`` CUDA extension). The files are data: they
are read as text and never imported here, since importing a solution compiles its extension.

``HELD_OUT`` names one problem from each of four families; leave them out of training data so that
generation demos ask for kernels the model has not been trained on.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from cuset_core.generation.prompts import compact_prompt

CATEGORIES: dict[str, tuple[str, ...]] = {
    "elementwise": (
        "01_vector_add",
        "02_relu",
        "03_gelu",
        "04_scale_bias",
        "05_clamp",
        "06_sigmoid",
        "07_leaky_relu",
        "08_swish",
        "09_multiply_add",
        "10_softplus",
        "11_elu",
    ),
    "reduction": (
        "12_sum_dim",
        "13_max_dim",
        "14_mean_dim",
        "15_total_sum",
        "16_argmax_dim",
        "17_row_min",
        "18_mse_loss",
    ),
    "normalization": (
        "19_softmax",
        "20_log_softmax",
        "21_layernorm",
        "22_rmsnorm",
        "23_l2_normalize",
        "24_scaled_softmax",
    ),
    "matmul": (
        "25_matmul_naive",
        "26_matmul_tiled",
        "27_batched_matmul",
        "28_matvec",
        "29_matmul_transposed_b",
        "30_matmul_register_tiled",
    ),
    "transpose": (
        "31_transpose_naive",
        "32_transpose_tiled",
        "33_batched_transpose",
        "34_nchw_to_nhwc",
    ),
    "scan": ("35_cumsum", "36_reverse_cumsum", "37_exclusive_cumsum", "38_cummax"),
    "histogram": ("39_bincount", "40_histc", "41_index_add"),
    "fused": ("42_linear_bias_relu", "43_add_layernorm", "44_bias_gelu", "45_cross_entropy"),
    "convolution": ("46_conv1d", "47_conv2d", "48_maxpool2d", "49_depthwise_conv1d", "50_avgpool2d"),
}
"""Problem ids by family; every problem file is listed exactly once."""

HELD_OUT: tuple[str, ...] = ("10_softplus", "13_max_dim", "22_rmsnorm", "29_matmul_transposed_b")
"""One problem per family (elementwise, reduction, normalization, matmul) kept out of training."""


@dataclass(frozen=True)
class DemoProblem:
    """One demo problem: its reference code and a correct CUDA solution, both as Python source."""

    id: str
    name: str
    category: str
    problem_code: str
    solution_code: str


def demo_problems() -> list[DemoProblem]:
    """Every demo problem, sorted by id (``NN_snake_name``; ``name`` drops the ``NN_`` prefix)."""
    category_of = {pid: category for category, ids in CATEGORIES.items() for pid in ids}
    package = resources.files(__name__)
    problems = []
    for entry in package.joinpath("problems").iterdir():
        pid = entry.name.removesuffix(".py")
        if not entry.name.endswith(".py") or not pid[:1].isdigit():
            continue
        if pid not in category_of:
            raise ValueError(f"demo problem {pid} has no category in cuset_core.demo.CATEGORIES")
        problems.append(
            DemoProblem(
                id=pid,
                name=pid.split("_", 1)[1],
                category=category_of[pid],
                problem_code=entry.read_text(encoding="utf-8"),
                solution_code=package.joinpath("solutions", entry.name).read_text(encoding="utf-8"),
            )
        )
    return sorted(problems, key=lambda problem: problem.id)


def demo_record(problem: DemoProblem) -> dict:
    """A training record in OpenAI chat format: compact prompt, fenced solution, id, family."""
    answer = f"```python\n{problem.solution_code.strip()}\n```"
    return {
        "messages": [
            {"role": "user", "content": compact_prompt(problem.problem_code)},
            {"role": "assistant", "content": answer},
        ],
        "problem": problem.id,
        "category": problem.category,
    }


def write_demo_dataset(path: Path, held_out: Iterable[str] = (), categories: Iterable[str] | None = None) -> int:
    """Write one JSONL record per demo problem not in ``held_out`` (and, when ``categories`` is
    given, in one of those families); returns the number written."""
    problems = demo_problems()
    skip = set(held_out)
    unknown = skip - {problem.id for problem in problems}
    if unknown:
        raise ValueError(f"held_out: unknown demo problem id(s) {', '.join(sorted(unknown))}")
    families = set(CATEGORIES if categories is None else categories)
    if families - set(CATEGORIES):
        raise ValueError(f"categories: unknown famil(ies) {', '.join(sorted(families - set(CATEGORIES)))}")
    kept = [problem for problem in problems if problem.id not in skip and problem.category in families]
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as out:
        for problem in kept:
            out.write(json.dumps(demo_record(problem)) + "\n")
    return len(kept)
