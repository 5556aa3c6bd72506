"""`cuset analyze`: tables for people, stable JSON for tools, one-line errors."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from cuset_core.analysis.analyze import analyze_answer
from cuset_core.cli import app

KERNEL = """#include <cuda_runtime.h>
__global__ void fill(float* out, float v, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = v;
}
"""


def test_json_output_is_the_analysis_json(tmp_path):
    path = tmp_path / "fill.cu"
    path.write_text(KERNEL)
    result = CliRunner().invoke(app, ["analyze", str(path), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == analyze_answer(KERNEL).to_json()


def test_table_output_shows_spans_and_regions(tmp_path):
    path = tmp_path / "fill.cu"
    path.write_text(KERNEL)
    result = CliRunner().invoke(app, ["analyze", str(path)])
    assert result.exit_code == 0, result.output
    assert "fill.cu: cu, 157 CUDA/C++ characters, parse coverage 1.000, 5 spans, 4 regions" in result.output
    assert "bounds_guard" in result.output
    assert "out[i] = v;" in result.output  # brackets are shown as code, not read as markup


def test_missing_file_is_one_line(tmp_path):
    result = CliRunner().invoke(app, ["analyze", str(tmp_path / "gone.py")])
    assert result.exit_code == 2
    assert result.output.strip() == f"error: FILE: not found: {tmp_path / 'gone.py'}"


def test_unknown_suffix_is_rejected(tmp_path):
    path = tmp_path / "answer.json"
    path.write_text("{}")
    result = CliRunner().invoke(app, ["analyze", str(path)])
    assert result.exit_code == 2
    assert result.output.strip() == "error: FILE: expected one of .py, .cu, .cuh, .md, .txt, got answer.json"
