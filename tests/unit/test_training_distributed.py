"""Two data-parallel ranks (torch.distributed, gloo, two CPU processes) compute what one process
computes on the same global batch: tau_hi, tau_lo, the weight normaliser, the loss and the
gradients, over two optimizer steps (so the EMAs are checked too)."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from cuset_core.objectives.token_loss import supervised_mask

WORLD = 2
OPS = {
    "add": "a[i] + b[i]", "mul": "a[i] * b[i]", "sub": "a[i] - b[i]", "max": "fmaxf(a[i], b[i])",
    "min": "fminf(a[i], b[i])", "avg": "0.5f * (a[i] + b[i])", "hyp": "hypotf(a[i], b[i])",
    "pow": "powf(a[i], b[i])",
}  # fmt: skip
ANSWER = """```cuda
__global__ void {op}_kernel(const float* a, const float* b, float* out, int n) {{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = {expr};
}}
torch::Tensor {op}_cuda(torch::Tensor a, torch::Tensor b) {{
    auto out = torch::empty_like(a);
    int n = a.numel();
    {op}_kernel<<<(n + 255) / 256, 256>>>(a.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), n);
    return out;
}}
```"""
METRICS = ("tau_hi", "tau_lo", "weight_normaliser", "weight_max")  # equal on every rank by definition


def encoded_steps(tokenizer, tmp_path: Path) -> list[list]:
    """Eight short records, encoded as training examples: two optimizer steps of four."""
    from cuset_core.data.load import LoadOptions, load_records
    from cuset_core.training.collator import encode_example

    rows = [
        {"messages": [{"role": "user", "content": f"Write a CUDA kernel computing out = {expr}."},
                      {"role": "assistant", "content": ANSWER.format(op=op, expr=expr)}]}
        for op, expr in OPS.items()
    ]  # fmt: skip
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    records = load_records(path, LoadOptions(prompt_style="compact")).records
    examples = [encode_example(record, tokenizer, None) for record in records]
    return [examples[:4], examples[4:]]


def run_steps(model_dir: str, steps: list[list], method: dict, rank: int, world: int, work: str) -> list[dict]:
    """Loss, world-averaged gradients (what DDP applies) and reduced metrics of each step, with
    this rank's share of every global batch. Runs CusetTrainer.compute_loss itself, so the
    gathers are the trainer's (accelerate over gloo when world > 1)."""
    from transformers import AutoModelForCausalLM, TrainingArguments

    from cuset_core.objectives import MethodConfig
    from cuset_core.training.callbacks import MetricStash
    from cuset_core.training.collator import CusetCollator, as_item
    from cuset_core.training.trainer import CusetTrainer

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_dir).train()
    args = TrainingArguments(output_dir=work, report_to="none", use_cpu=True)
    trainer = CusetTrainer(model=model, args=args, method=MethodConfig(**method), stash=MetricStash())
    assert trainer.accelerator.num_processes == world
    collate = CusetCollator(0)
    results = []
    for step, examples in enumerate(steps):
        share = len(examples) // world
        batch = collate([as_item(e) for e in examples[rank * share : (rank + 1) * share]])
        everything = collate([as_item(e) for e in examples])
        trainer.state.global_step = step
        model.zero_grad()
        loss = trainer.compute_loss(model, batch, num_items_in_batch=supervised_mask(everything["labels"]).sum())
        loss.backward()
        grads = torch.cat([p.grad.reshape(-1) for p in model.parameters() if p.grad is not None])
        loss = loss.detach().reshape(1)
        if world > 1:
            # DDP averages gradients over ranks; the Trainer logs the mean loss over ranks.
            dist.all_reduce(grads)
            dist.all_reduce(loss)
            grads, loss = grads / world, loss / world
        results.append({"loss": loss.item(), "grads": grads, **trainer.stash.drain()})
    return results


def _rank(rank: int, port: int, model_dir: str, steps: list[list], method: dict, out: str) -> None:
    torch.set_num_threads(1)
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank),
        WORLD_SIZE=str(WORLD), LOCAL_WORLD_SIZE=str(WORLD),
    )  # fmt: skip
    results = run_steps(model_dir, steps, method, rank, WORLD, str(Path(out) / f"work{rank}"))
    torch.save(results, Path(out) / f"rank{rank}.pt")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow
@pytest.mark.parametrize("method", [{"type": "cuset"}, {"type": "cuset", "mask_rule": "uncertain_plain"}])
def test_two_gloo_ranks_equal_one_process_on_the_same_global_batch(tmp_path, tiny_model_dir, tokenizer, method):
    steps = encoded_steps(tokenizer, tmp_path)
    mp.spawn(_rank, args=(free_port(), str(tiny_model_dir), steps, method, str(tmp_path)), nprocs=WORLD, join=True)
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(WORLD)]
    single = run_steps(str(tiny_model_dir), steps, method, 0, 1, str(tmp_path / "single"))

    for step, alone in enumerate(single):
        for results in ranks:
            together = results[step]
            assert together["loss"] == pytest.approx(alone["loss"], rel=1e-5)
            for name in METRICS:
                assert together[name] == pytest.approx(alone[name], rel=1e-5, abs=1e-7), (step, name)
            torch.testing.assert_close(together["grads"], alone["grads"], rtol=1e-4, atol=1e-6)
    # The objective did something on this data: thresholds were set and tokens dropped.
    assert 0 < single[1]["kept_ratio"] < 1 and single[1]["weight_max"] > 1.0
