"""scripts/gpu_check.sh, prepared on a CPU: its dry run goes through every step at toy sizes and
writes the figures where $OUT says (QLoRA is GPU-only and reported as skipped, with why; tier 3
on the attack classes says "unsupported" here)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_dry_run_passes_every_step_and_writes_its_figures(tmp_path):
    env = {**os.environ, "OUT": str(tmp_path), "TMPDIR": str(tmp_path), "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        ["bash", "scripts/gpu_check.sh", "--dry-run"], cwd=REPO, env=env, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    figures = json.loads((tmp_path / "gpu_check.json").read_text())
    # The level-1 eval reads the kernels `gpu_check.sh prepare` wrote; a fresh clone has none.
    level1 = "ok" if (REPO / ".gpu_check" / "level1.jsonl").is_file() else "skipped"
    assert {name: step["status"] for name, step in figures.items()} == {
        "environment": "ok", "attacks_submitted": "ok", "base_model": "ok", "lora_bf16": "ok", "qlora": "skipped",
        "generate": "ok", "verify_demo": "ok", "attacks_tier3_alone": "ok", "kernelbench_level1_eval": level1,
    }  # fmt: skip
    attacks = figures["attacks_tier3_alone"]
    assert attacks["classes"] == len(attacks["cases"]) >= 30 and not attacks["secret_leaked"]
    assert {case["tier3"] for case in attacks["cases"].values()} == {"unsupported"}  # no GPU here
    assert attacks["cases"]["torch in the C++ binding"]["tier2_in_tests"] == "static_reject"
    assert figures["qlora"]["reason"] == "4-bit weights need a CUDA GPU"
    assert figures["lora_bf16"]["steps"] == 2 and figures["lora_bf16"]["tokens_per_s"] > 0
    assert figures["generate"]["bases_loaded"] == 1 and figures["generate"]["lora"]["completion_tokens"] > 0
    assert figures["verify_demo"]["passed"] == figures["verify_demo"]["of"] == 2
    assert "| lora_bf16 | ok |" in (tmp_path / "gpu_check.md").read_text()
    assert not list(tmp_path.glob("gpu_check.??????"))  # the scratch folder is removed


def test_without_a_gpu_the_full_check_refuses_and_points_to_the_dry_run(tmp_path):
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    done = subprocess.run(
        [".venv/bin/python", "scripts/gpu_check.py", "--out", str(tmp_path), "--work", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2 and "no CUDA GPU here; use --dry-run" in done.stderr
