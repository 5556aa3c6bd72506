"""The demo dataset: its shape, each problem's KernelBench API, each solution's CUDA, the JSONL."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest
import torch

from cuset_core.analysis.sources import find_kernel_sources
from cuset_core.data.load import load_records
from cuset_core.demo import CATEGORIES, HELD_OUT, DemoProblem, demo_problems, write_demo_dataset
from cuset_core.generation.prompts import compact_prompt
from cuset_core.verify.candidate import parse_candidate
from cuset_core.verify.compile import compile_candidate
from cuset_core.verify.result import Tier
from cuset_core.verify.settings import VerifySettings

FAMILIES = {
    "elementwise",
    "reduction",
    "normalization",
    "matmul",
    "transpose",
    "scan",
    "histogram",
    "fused",
    "convolution",
}
PROBLEMS = demo_problems()


def _by_id(pid: str) -> DemoProblem:
    return next(problem for problem in PROBLEMS if problem.id == pid)


def _method_params(code: str, class_name: str, method: str) -> list[str]:
    """Parameter names of ``class_name.method`` in ``code``."""
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == method:
                    return [arg.arg for arg in item.args.args]
    raise AssertionError(f"{class_name}.{method} not found")


def _shrunk_namespace(code: str) -> dict:
    """Run a problem file, then divide its large integer size constants by 16 for a fast CPU run."""
    namespace: dict = {}
    exec(compile(code, "<problem>", "exec"), namespace)
    for name, value in list(namespace.items()):
        if name.isupper() and type(value) is int and value >= 256:
            namespace[name] = value // 16
    return namespace


def test_there_are_at_least_40_problems_with_unique_ids():
    ids = [problem.id for problem in PROBLEMS]
    assert len(ids) >= 40
    assert len(set(ids)) == len(ids)
    assert ids == sorted(ids)
    assert all(re.fullmatch(r"\d\d_[a-z0-9_]+", pid) for pid in ids)


def test_every_family_is_present_and_lists_each_problem_once():
    assert set(CATEGORIES) == FAMILIES
    listed = [pid for ids in CATEGORIES.values() for pid in ids]
    assert sorted(listed) == [problem.id for problem in PROBLEMS]
    assert all(len(ids) >= 3 for ids in CATEGORIES.values())


def test_problem_fields_follow_the_file_name_and_category_map():
    problem = _by_id("32_transpose_tiled")
    assert problem.name == "transpose_tiled"
    assert problem.category == "transpose"
    assert "class Model(nn.Module)" in problem.problem_code
    assert "class ModelNew(nn.Module)" in problem.solution_code


def test_held_out_problems_come_from_four_different_families():
    assert len(HELD_OUT) == 4
    assert len({_by_id(pid).category for pid in HELD_OUT}) == 4


@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda problem: problem.id)
def test_problem_runs_on_cpu_with_kernelbench_api(problem: DemoProblem):
    namespace = _shrunk_namespace(problem.problem_code)
    init_inputs = namespace["get_init_inputs"]()
    inputs = namespace["get_inputs"]()
    assert isinstance(init_inputs, list)
    assert isinstance(inputs, list) and all(isinstance(t, torch.Tensor) for t in inputs)
    assert all(t.device.type == "cpu" for t in inputs)

    output = namespace["Model"](*init_inputs)(*inputs)

    assert isinstance(output, torch.Tensor)
    assert output.dtype in (torch.float32, torch.int64)
    assert torch.isfinite(output.float()).all()


@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda problem: problem.id)
def test_solution_is_a_load_inline_model_new_matching_the_reference(problem: DemoProblem):
    sources = find_kernel_sources(problem.solution_code)
    assert sources.syntax_error is None
    assert len(sources.extensions) == 1
    extension = sources.extensions[0]
    assert "#include <torch/extension.h>" in extension.cuda
    assert "__global__" in extension.cuda and "<<<" in extension.cuda
    assert extension.functions
    for function in extension.functions:
        assert re.search(rf"torch::Tensor {function}\(", extension.cuda), function
        assert re.search(rf"torch::Tensor {function}\(", extension.cpp), function
    for method in ("__init__", "forward"):
        assert _method_params(problem.solution_code, "ModelNew", method) == _method_params(
            problem.problem_code, "Model", method
        )


def test_demo_dataset_is_written_as_chat_jsonl_without_held_out_problems(tmp_path):
    path = tmp_path / "nested" / "demo.jsonl"

    written = write_demo_dataset(path, held_out=HELD_OUT)

    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert written == len(records) == len(PROBLEMS) - len(HELD_OUT)
    assert {record["problem"] for record in records} == {p.id for p in PROBLEMS} - set(HELD_OUT)
    first = records[0]
    problem = _by_id(first["problem"])
    assert first["category"] == problem.category
    assert [m["role"] for m in first["messages"]] == ["user", "assistant"]
    assert first["messages"][0]["content"] == compact_prompt(problem.problem_code)
    assert first["messages"][1]["content"] == f"```python\n{problem.solution_code.strip()}\n```"


def test_demo_dataset_loads_without_any_data_issue(tmp_path):
    path = tmp_path / "demo.jsonl"
    write_demo_dataset(path)

    loaded = load_records(path)

    assert loaded.issues == []
    assert len(loaded.records) == loaded.total == len(PROBLEMS)


def test_writing_every_problem_by_default(tmp_path):
    assert write_demo_dataset(tmp_path / "all.jsonl") == len(PROBLEMS)


def test_a_family_alone_can_be_written(tmp_path):
    path = tmp_path / "elementwise.jsonl"
    written = write_demo_dataset(path, held_out=["06_sigmoid"], categories=["elementwise"])
    problems = [json.loads(line)["problem"] for line in path.read_text().splitlines()]
    assert written == len(CATEGORIES["elementwise"]) - 1 == len(problems)
    assert "06_sigmoid" not in problems and set(problems) < set(CATEGORIES["elementwise"])
    with pytest.raises(ValueError, match="unknown famil.*spectral"):
        write_demo_dataset(path, categories=["spectral"])


def test_unknown_held_out_id_is_reported_by_name(tmp_path):
    with pytest.raises(ValueError, match="99_nope"):
        write_demo_dataset(tmp_path / "demo.jsonl", held_out=["99_nope", "01_vector_add"])
    assert not (tmp_path / "demo.jsonl").exists()


def _tier1(solution_code: str, workdir: Path):
    """Compile a solution with the compile tier (real nvcc, light torch stand-in headers)."""
    return compile_candidate(parse_candidate(solution_code), VerifySettings(tier=Tier.COMPILE), workdir)


_DIRECTIVE = re.compile(r"^\s*#\s*(include|define)\s+(\w+)?", re.MULTILINE)


def _all_solutions_as_one_answer() -> tuple[str, list[tuple[int, str]]]:
    """Every solution's extension in one ``load_inline`` answer, each in a namespace of its own
    (includes hoisted, macros undefined after it), so that one nvcc and one g++ check them all;
    and the first CUDA line of each solution, by problem id."""
    includes: dict[str, None] = {}
    cuda: list[str] = []
    cpp: list[str] = []
    functions: list[str] = []
    starts: list[tuple[int, str]] = []
    for number, problem in enumerate(PROBLEMS):
        (ext,) = parse_candidate(problem.solution_code).sources.extensions
        space = f"demo_{number}"
        body = []
        for line in ext.cuda.splitlines():
            directive = _DIRECTIVE.match(line)
            if directive and directive.group(1) == "include":
                includes[line.strip()] = None
                body.append("")  # keep the line count
            else:
                body.append(line)
        macros = [m.group(2) for m in _DIRECTIVE.finditer(ext.cuda) if m.group(1) == "define"]
        starts.append((sum(text.count("\n") + 1 for text in cuda), problem.id))
        cuda.append("\n".join([f"namespace {space} {{", *body, "}", *(f"#undef {m}" for m in macros)]))
        cpp.append(f"namespace {space} {{\n{ext.cpp}\n}}")
        functions += [f"{space}::{name}" for name in ext.functions or ()]
    cuda_text = "\n".join([*includes, *cuda])
    starts = [(line + len(includes), pid) for line, pid in starts]
    answer = f"""import torch
from torch.utils.cpp_extension import load_inline
cuda_src = r\"\"\"
{cuda_text}
\"\"\"
cpp_src = r\"\"\"
{chr(10).join(cpp)}
\"\"\"
ext = load_inline(name="demo_solutions", cpp_sources=cpp_src, cuda_sources=cuda_src, functions={functions!r})
"""
    return answer, starts


@pytest.mark.nvcc
def test_every_solution_compiles_with_nvcc(tmp_path):
    # One nvcc run for all of them: most of a run is nvcc parsing its headers, once instead of 50 times.
    answer, starts = _all_solutions_as_one_answer()
    report = _tier1(answer, tmp_path)

    def solution_at(line: int | None) -> str:
        return next((pid for start, pid in reversed(starts) if line is not None and line > start), "?")

    failing = sorted({f"{solution_at(d.line)}: {d.message}" for d in report.diagnostics if d.severity == "error"})
    assert report.ok, "\n".join(failing) or report.log
    built = {m.group(1) for r in report.resources for m in re.finditer(r"\bdemo_(\d+)::", r.kernel)}
    assert built == {str(number) for number in range(len(PROBLEMS))}  # every solution's kernels were built


@pytest.mark.nvcc
def test_compile_tier_rejects_a_broken_demo_kernel(tmp_path):
    broken = _by_id("01_vector_add").solution_code.replace("out[i] = a[i] + b[i];", "out[i] = a[i] + c;")

    report = _tier1(broken, tmp_path)

    assert not report.ok
    assert any('identifier "c" is undefined' in d.message for d in report.diagnostics)
