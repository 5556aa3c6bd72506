"""The real bundled SmolLM2-135M: a few CuSeT steps with LoRA, then the tuned adapter generates."""

from __future__ import annotations

import json
import os

import pytest

from cuset_core.generation.sampling import generate
from cuset_core.models import BUNDLED_MODEL, load_model
from cuset_core.training.callbacks import ProgressWriter
from cuset_core.training.config import parse_config
from cuset_core.training.run import run_job

pytestmark = pytest.mark.slow

ANSWER = """```cuda
__global__ void scale_kernel(const float* x, float* y, float alpha, int n) {{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {{
        y[i] = {expr};
    }}
}}
```"""


def test_cuset_steps_on_the_bundled_model_then_generation(tmp_path):
    rows = [
        {"messages": [{"role": "user", "content": f"Write a CUDA kernel computing y = {expr}."},
                      {"role": "assistant", "content": ANSWER.format(expr=expr)}]}
        for expr in ("alpha * x[i]", "x[i] + alpha", "x[i] * x[i]", "alpha - x[i]")
    ]  # fmt: skip
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    config = parse_config(
        {
            "model": BUNDLED_MODEL,
            "train_file": str(data),
            "output_dir": str(tmp_path / "out"),
            "method": {"type": "cuset"},
            "hyperparameters": {"max_steps": 3, "batch_size": 2, "max_seq_len": 192, "learning_rate": 1e-3},
        }
    )

    outcome = run_job(config, ProgressWriter(config.progress_path, stream=open(os.devnull, "w"), enabled=True))

    lines = [json.loads(line) for line in config.progress_path.read_text().splitlines()]
    steps = [line for line in lines if line["type"] == "progress"]
    assert outcome.steps == 3 and [line["step"] for line in steps] == [1, 2, 3]
    # A trained instruct model is far more confident than a random one.
    assert all(line["ce"] < 5 and 0 < line["p_sensitive_mean"] < 1 for line in steps)
    model, tokenizer = load_model(tmp_path / "out")
    [[answer]] = generate(model, tokenizer, [rows[0]["messages"][:1]], max_new_tokens=4)
    assert answer.completion_tokens >= 1 and answer.prompt_tokens > 10
