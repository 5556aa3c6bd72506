"""Training on a tiny random SmolLM2-architecture model: the loss falls, every objective runs,
progress lines carry every metric, cancellation checkpoints, resume continues, adapters reload,
and the sft objective equals the model's own loss."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from cuset_core.training.callbacks import ProgressWriter
from cuset_core.training.config import parse_config
from cuset_core.training.run import run_job

REPO = Path(__file__).resolve().parents[2]
PROGRESS_FIELDS = {
    "type", "step", "max_steps", "epoch", "loss", "ce", "kept_ratio", "dropped_grad_share", "mask_ratio", "tau_hi",
    "tau_lo", "sensitive_share", "p_sensitive_mean", "p_nonsensitive_mean", "low_conf_region_share", "weight_mean",
    "weight_max", "weight_normaliser", "learning_rate", "tokens_per_s", "trained_tokens", "eta_s", "time",
}  # fmt: skip
OPS = {"add": "a[i] + b[i]", "mul": "a[i] * b[i]", "sub": "a[i] - b[i]", "max": "fmaxf(a[i], b[i])"}
# Short answers keep the tiny model's steps fast (the 49k-token vocabulary dominates the cost).
ANSWER = """```cuda
__global__ void {op}_kernel(const float* a, const float* b, float* out, int n) {{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {{
        out[i] = {expr};
    }}
}}
```"""


def write_dataset(path: Path) -> Path:
    """Four chat records: an elementwise op asked for, a CUDA kernel answered."""
    rows = [
        {
            "messages": [
                {"role": "user", "content": f"Write a CUDA kernel computing out = {expr}."},
                {"role": "assistant", "content": ANSWER.format(op=op, expr=expr)},
            ]
        }
        for op, expr in OPS.items()
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def make_job(tmp_path: Path, model_dir: Path, **changes) -> dict:
    hyper = {"learning_rate": 3e-3, "batch_size": 2, "max_steps": 4, "max_seq_len": 256, **changes.pop("hp", {})}
    return {
        "model": str(model_dir),
        "train_file": str(write_dataset(tmp_path / "train.jsonl")),
        "output_dir": str(tmp_path / "out"),
        "hyperparameters": hyper,
        "save_steps": 1000,
        **changes,
    }


def train(job: dict):
    config = parse_config(job)
    outcome = run_job(config, ProgressWriter(config.progress_path, stream=open(os.devnull, "w"), enabled=True))
    lines = [json.loads(line) for line in config.progress_path.read_text().splitlines()]
    return outcome, lines


def start_training(tmp_path: Path, job: dict) -> subprocess.Popen:
    """``python -m cuset_core.training`` on ``job``, its progress lines on stdout."""
    path = tmp_path / "job.json"
    path.write_text(json.dumps(job))
    return subprocess.Popen(
        [sys.executable, "-m", "cuset_core.training", str(path)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=REPO,
    )  # fmt: skip


def progress(lines: list[dict]) -> list[dict]:
    return [line for line in lines if line["type"] == "progress"]


@pytest.mark.parametrize("method", ["sft", "cuset"])
def test_loss_falls_over_a_dozen_steps(tmp_path, tiny_model_dir, method):
    job = make_job(
        tmp_path, tiny_model_dir, method={"type": method}, lora=None, hp={"max_steps": 12, "learning_rate": 1e-2}
    )

    outcome, lines = train(job)

    losses = [line["ce"] for line in progress(lines)]
    assert outcome.steps == 12 and len(losses) == 12
    assert sum(losses[-3:]) / 3 < 0.7 * sum(losses[:3]) / 3


@pytest.mark.parametrize(
    "method", ["sft", "dft", "focal", "profit", "cuset", "cuset_mask", "cuset_reweight", "cuset_v1"]
)
def test_every_method_trains_a_few_steps_with_lora(tmp_path, tiny_model_dir, method):
    outcome, lines = train(make_job(tmp_path, tiny_model_dir, method={"type": method}, hp={"max_steps": 2}))

    steps = progress(lines)
    assert outcome.steps == 2 and not outcome.cancelled
    assert [line["step"] for line in steps] == [1, 2]
    assert all(torch.isfinite(torch.tensor(line["loss"])) for line in steps)
    assert lines[-1]["type"] == "done" and lines[-1]["steps"] == 2


def test_progress_lines_carry_every_metric(tmp_path, tiny_model_dir):
    _, lines = train(make_job(tmp_path, tiny_model_dir, hp={"max_steps": 2, "gradient_accumulation_steps": 2}))

    first = progress(lines)[0]
    assert PROGRESS_FIELDS <= set(first)
    assert first["max_steps"] == 2 and first["trained_tokens"] > 0 and first["tokens_per_s"] > 0
    assert 0 < first["sensitive_share"] < 1
    assert 0 < first["kept_ratio"] < 1  # cuset masks 30 % of the non-region tokens
    assert 0 < first["dropped_grad_share"] < 1
    assert 0 < first["tau_hi"] <= 1 and 0 < first["tau_lo"] <= 1
    # The first step has no history: each micro-batch is normalised by its own mean (up to clipping).
    assert first["weight_mean"] == pytest.approx(1.0, abs=0.1)
    assert 1.0 <= first["weight_max"] <= 4.0
    assert [line["type"] for line in lines][-2:] == ["checkpoint", "done"]  # the Trainer saves at the end


def test_adapter_is_saved_in_peft_format_and_reloads(tmp_path, tiny_model_dir):
    from peft import PeftModel

    from cuset_core.models import load_model

    outcome, lines = train(make_job(tmp_path, tiny_model_dir, hp={"max_steps": 2}))

    out = tmp_path / "out"
    assert (out / "adapter_config.json").is_file() and (out / "adapter_model.safetensors").is_file()
    # The base it needs and the prompt style it was tuned with (what evals default to).
    assert json.loads((out / "cuset_base.json").read_text()) == {
        "base_model": str(tiny_model_dir.resolve()),
        "prompt_style": "compact",
    }
    assert lines[-1] == {**lines[-1], "type": "done", "adapter_path": str(out), "steps": 2}
    model, tokenizer = load_model(out)
    assert isinstance(model, PeftModel)
    assert tokenizer.pad_token is not None


def test_cancel_file_stops_with_a_checkpoint_and_resume_continues(tmp_path, tiny_model_dir):
    job = make_job(tmp_path, tiny_model_dir, hp={"max_steps": 6})
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "CANCEL").touch()

    outcome, lines = train(job)

    assert outcome.cancelled and outcome.steps == 1
    assert {"type": "checkpoint", "step": 1} == {k: lines[-1][k] for k in ("type", "step")}
    assert (tmp_path / "out" / "checkpoint-1" / "adapter_model.safetensors").is_file()
    assert not (tmp_path / "out" / "adapter_config.json").exists()
    # A checkpoint is a model: it names its base as the final adapter would.
    from cuset_core.models import resolve_model

    assert resolve_model(tmp_path / "out" / "checkpoint-1").folder == resolve_model(tiny_model_dir).folder

    outcome, lines = train({**job, "resume": True})

    assert not outcome.cancelled and outcome.steps == 6
    assert [line["step"] for line in progress(lines)][-5:] == [2, 3, 4, 5, 6]
    assert any(line.get("message", "").startswith("resuming from") for line in lines)


def test_a_checkpoint_carries_the_objective_ema_and_a_resume_restores_it(tmp_path, tiny_model_dir):
    job = make_job(tmp_path, tiny_model_dir, hp={"max_steps": 3}, save_steps=2)

    train(job)
    saved = json.loads((tmp_path / "out" / "checkpoint-2" / "objective_state.json").read_text())
    assert 0 < saved["tau_lo"]["value"] < 1 and saved["weight_mean"]["value"] >= 1.0

    _, lines = train({**job, "resume": str(tmp_path / "out" / "checkpoint-2")})
    assert progress(lines)[-1]["step"] == 3
    # Exactly this message, without "(no saved objective state ...)": the EMAs were restored.
    assert f"resuming from {tmp_path / 'out' / 'checkpoint-2'}" in [line.get("message") for line in lines]


def test_sigterm_saves_a_checkpoint_and_exits_0(tmp_path, tiny_model_dir):
    job = make_job(tmp_path, tiny_model_dir, hp={"max_steps": 500})
    process = start_training(tmp_path, job)
    seen = []
    for line in process.stdout:
        seen.append(json.loads(line))
        if seen[-1]["type"] == "progress" and seen[-1]["step"] == 2:
            process.send_signal(signal.SIGTERM)
    code = process.wait(timeout=120)

    assert code == 0
    assert seen[-1]["type"] == "event" and seen[-1]["message"].startswith("cancelled at step")
    checkpoint = next(line for line in seen if line["type"] == "checkpoint")
    assert Path(checkpoint["path"], "trainer_state.json").is_file()
    assert not any(line["type"] in ("done", "error") for line in seen)


def test_sigterm_inside_a_long_step_saves_the_last_completed_step_at_once(tmp_path, tiny_model_dir):
    # A cancel waited for the step's end, and a CPU step outlasts the supervisor's grace
    # (CUSET_CANCEL_GRACE_S), which then killed the run with no checkpoint at all. Here a step is
    # 32 micro-batches (gradient accumulation), recomputing activations as on a CPU by default.
    hp = {"max_steps": 50, "batch_size": 1, "gradient_accumulation_steps": 32, "gradient_checkpointing": True}
    job = make_job(tmp_path, tiny_model_dir, hp=hp)
    process = start_training(tmp_path, job)
    seen, signalled = [], False
    for line in process.stdout:
        seen.append(json.loads(line))
        if not signalled and seen[-1]["type"] == "progress" and seen[-1]["step"] == 1:
            step_s = seen[-1]["time"] - next(s["time"] for s in seen if s.get("message", "").startswith("training"))
            time.sleep(step_s / 4)  # a quarter into step 2
            process.send_signal(signal.SIGTERM)
            signalled = True
    code = process.wait(timeout=120)

    # Stopped inside step 2, not at its end: no line of step 2, and step 1's checkpoint only (a
    # wall-clock bound would flake on a loaded machine).
    assert code == 0 and signalled
    assert [line["step"] for line in seen if line["type"] == "progress"] == [1]
    assert [line["step"] for line in seen if line["type"] == "checkpoint"] == [1]
    checkpoint = tmp_path / "out" / "checkpoint-1"
    assert (checkpoint / "adapter_model.safetensors").is_file() and (checkpoint / "optimizer.pt").is_file()
    assert json.loads((checkpoint / "trainer_state.json").read_text())["global_step"] == 1
    assert seen[-1]["message"] == "cancelled at step 1; checkpoint saved"

    outcome, lines = train({**job, "resume": True, "hyperparameters": {**job["hyperparameters"], "max_steps": 2}})
    assert not outcome.cancelled and outcome.steps == 2
    assert f"resuming from {checkpoint}" in [line.get("message") for line in lines]


@pytest.mark.parametrize("loss_chunk_size", [0, 4], ids=["full-logits", "chunked"])
def test_sft_loss_equals_the_models_own_loss(tiny_model_dir, tokenizer, loss_chunk_size):
    from transformers import AutoModelForCausalLM, TrainingArguments

    from cuset_core.objectives import MethodConfig
    from cuset_core.training.callbacks import MetricStash
    from cuset_core.training.collator import CusetCollator
    from cuset_core.training.trainer import CusetTrainer

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).train()
    args = TrainingArguments(output_dir="unused", report_to="none", use_cpu=True)
    trainer = CusetTrainer(
        model=model, args=args, method=MethodConfig(type="sft"), stash=MetricStash(), loss_chunk_size=loss_chunk_size
    )
    rows = [[5, 6, 7, 8, 9, 10], [11, 12, 13]]
    labels = [[-100, -100, 7, 8, 9, 10], [-100, 12, 13]]
    batch = CusetCollator(tokenizer.pad_token_id)(
        [
            {"input_ids": ids, "labels": lab, "sensitive": [False] * len(ids), "region_ids": [-1] * len(ids)}
            for ids, lab in zip(rows, labels)
        ]
    )

    ours = trainer.compute_loss(model, batch, num_items_in_batch=torch.tensor(6))
    theirs = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"]).loss

    assert ours.item() == pytest.approx(theirs.item(), rel=1e-5)
    assert trainer.stash.drain()["ce"] == pytest.approx(theirs.item(), rel=1e-5)


def test_reference_confidence_is_computed_once_then_read_from_the_cache(tmp_path, tiny_model_dir):
    job = make_job(
        tmp_path, tiny_model_dir, method={"type": "cuset", "confidence": "reference"}, hp={"max_steps": 1},
        reference_cache_dir=str(tmp_path / "cache"),
    )  # fmt: skip

    _, first = train(job)
    _, second = train({**job, "output_dir": str(tmp_path / "again")})

    assert len(list((tmp_path / "cache").glob("reference-*.npz"))) == 1
    assert {"reference confidence computed and cached"} <= {line.get("message") for line in first}
    passes = [line["message"] for line in first if line.get("message", "").startswith("reference confidence: ")]
    assert passes and passes[-1].startswith("reference confidence: 4/4 examples")
    assert {"reference confidence read from cache"} <= {line.get("message") for line in second}
    assert progress(first)[0]["p_sensitive_mean"] == pytest.approx(progress(second)[0]["p_sensitive_mean"])
    # cuset with reference confidence takes tau_lo and the weight normaliser over the dataset.
    dataset_event = next(line["message"] for line in first if line.get("message", "").startswith("dataset reweighting"))
    tau_lo = float(dataset_event.split("tau_lo ")[1].split(",")[0])
    assert [line["tau_lo"] for line in progress(first)] == pytest.approx([tau_lo], abs=1e-4)


def test_validation_file_reports_eval_loss_at_every_save(tmp_path, tiny_model_dir):
    job = make_job(tmp_path, tiny_model_dir, hp={"max_steps": 2}, save_steps=1)
    job["validation_file"] = job["train_file"]

    _, lines = train(job)

    evals = [line for line in lines if line["type"] == "eval"]
    assert [line["step"] for line in evals] == [1, 2]
    assert all(line["eval_loss"] > 0 for line in evals)
    assert [line["step"] for line in lines if line["type"] == "checkpoint"] == [1, 2]


def test_records_over_max_seq_len_are_dropped_or_truncated(tmp_path, tiny_model_dir, tokenizer):
    from cuset_core.training.config import ConfigError
    from cuset_core.training.run import load_examples

    job = make_job(tmp_path, tiny_model_dir, hp={"max_seq_len": 40})
    writer = ProgressWriter(None, stream=open(os.devnull, "w"), enabled=False)

    with pytest.raises(
        ConfigError, match=r"^train_file: no usable record among 4 \(first: line 1: error over_token_limit"
    ):
        load_examples(Path(job["train_file"]), parse_config(job), tokenizer, writer, "train_file")
    cut = {**job, "hyperparameters": {**job["hyperparameters"], "truncation": "cut"}}
    examples = load_examples(Path(job["train_file"]), parse_config(cut), tokenizer, writer, "train_file")

    assert [len(example.input_ids) for example in examples] == [40, 40, 40, 40]
    assert all(len(example.sensitive) == len(example.region_ids) == 40 for example in examples)


def test_bf16_lora_keeps_the_base_in_bf16_and_the_adapters_in_float32(tmp_path, tiny_model_dir):
    from cuset_core.training.run import prepare_model

    job = make_job(tmp_path, tiny_model_dir, hp={"dtype": "bfloat16"})
    model = prepare_model(parse_config(job))
    dtypes = {name: param.dtype for name, param in model.named_parameters()}

    assert {d for name, d in dtypes.items() if "lora_" in name} == {torch.float32}
    assert {d for name, d in dtypes.items() if "lora_" not in name} == {torch.bfloat16}


def test_bf16_training_steps_run_on_the_cpu_and_save_float32_adapters(tmp_path, tiny_model_dir):
    from safetensors import safe_open

    outcome, lines = train(make_job(tmp_path, tiny_model_dir, hp={"dtype": "bfloat16", "max_steps": 3}))

    losses = [line["loss"] for line in progress(lines)]
    assert outcome.steps == 3 and all(0 < loss < 20 for loss in losses)
    with safe_open(tmp_path / "out" / "adapter_model.safetensors", "pt") as saved:
        assert {saved.get_tensor(key).dtype for key in saved.keys()} == {torch.float32}


def test_full_fine_tuning_in_bf16_trains_bf16_weights(tmp_path, tiny_model_dir):
    from cuset_core.training.run import prepare_model

    job = make_job(tmp_path, tiny_model_dir, lora=None, hp={"dtype": "bfloat16", "max_steps": 2})
    assert {param.dtype for param in prepare_model(parse_config(job)).parameters()} == {torch.bfloat16}
    outcome, lines = train(job)
    assert outcome.steps == 2 and all(0 < line["loss"] < 20 for line in progress(lines))


def test_chunked_loss_with_gradient_checkpointing_trains_like_the_full_logits(tmp_path, tiny_model_dir):
    def first_losses(name: str, **hp) -> list[float]:
        job = make_job(tmp_path / name, tiny_model_dir, hp={"max_steps": 2, **hp})
        return [line["loss"] for line in progress(train(job)[1])]

    (tmp_path / "full").mkdir()
    (tmp_path / "lean").mkdir()
    full = first_losses("full", loss_chunk_size=0)
    lean = first_losses("lean", loss_chunk_size=16, gradient_checkpointing=True)

    assert lean == pytest.approx(full, abs=1e-4)


def test_group_by_length_batches_records_of_similar_length(tmp_path, tiny_model_dir, tokenizer):
    from transformers.trainer_pt_utils import LengthGroupedSampler

    from cuset_core.training.callbacks import MetricStash
    from cuset_core.training.collator import ExampleDataset
    from cuset_core.training.run import training_arguments
    from cuset_core.training.trainer import CusetTrainer

    def sampler(group: bool):
        config = parse_config(make_job(tmp_path, tiny_model_dir, hp={"group_by_length": group}))
        examples = load_examples_of(config, tokenizer)
        trainer = CusetTrainer(
            model=torch.nn.Linear(1, 1),
            args=training_arguments(config),
            method=config.method,
            stash=MetricStash(),
            train_dataset=ExampleDataset(examples),
        )
        return trainer._get_train_sampler()

    assert isinstance(sampler(True), LengthGroupedSampler)
    assert not isinstance(sampler(False), LengthGroupedSampler)


def load_examples_of(config, tokenizer):
    from cuset_core.training.run import load_examples

    writer = ProgressWriter(None, stream=open(os.devnull, "w"), enabled=False)
    return load_examples(config.train_file, config, tokenizer, writer, "train_file")


def test_a_repo_id_trains_offline_from_the_hf_cache(tmp_path, hf_home):
    job = make_job(tmp_path, Path("unused"), hp={"max_steps": 1, "dtype": "bfloat16"})
    job["model"] = "cuset-test/tiny-coder"
    path = tmp_path / "job.json"
    path.write_text(json.dumps(job))
    env = {**os.environ, "HF_HOME": str(hf_home), "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    env.pop("HF_HUB_CACHE", None)

    done = subprocess.run(
        [sys.executable, "-m", "cuset_core.training", str(path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
    )

    assert done.returncode == 0, done.stderr[-2000:]
    out = tmp_path / "out"
    assert (out / "adapter_model.safetensors").is_file()
    marker = json.loads((out / "cuset_base.json").read_text())
    assert marker == {"base_model": "cuset-test/tiny-coder", "prompt_style": "compact"}


@pytest.mark.gpu
def test_qlora_trains_4bit_nf4_weights_with_float32_adapters_on_the_gpu(tmp_path, tiny_model_dir):
    pytest.importorskip("bitsandbytes")
    import bitsandbytes as bnb

    from cuset_core.training.run import prepare_model

    qlora = {"quantization": {"bits": 4, "type": "nf4", "double_quant": True}, "gradient_checkpointing": True}
    job = make_job(tmp_path, tiny_model_dir, hp={"max_steps": 2, **qlora})
    model = prepare_model(parse_config(job))
    assert any(isinstance(module, bnb.nn.Linear4bit) for module in model.modules())
    assert {p.dtype for name, p in model.named_parameters() if "lora_" in name} == {torch.float32}

    outcome, lines = train(job)

    assert outcome.steps == 2 and all(0 < line["loss"] < 20 for line in progress(lines))
    assert (tmp_path / "out" / "adapter_model.safetensors").is_file()


@pytest.mark.gpu
def test_auto_dtype_loads_bf16_weights_on_the_gpu(tmp_path, tiny_model_dir):
    from cuset_core.training.run import prepare_model

    model = prepare_model(parse_config(make_job(tmp_path, tiny_model_dir)))
    assert {p.dtype for name, p in model.named_parameters() if "lora_" not in name} == {torch.bfloat16}


@pytest.mark.skipif(torch.cuda.is_available(), reason="the default chooses checkpointing on a CPU only")
def test_default_tuning_on_a_cpu_recomputes_activations_and_trains_the_same_numbers(tmp_path, tiny_model_dir):
    from cuset_core.training.run import prepare_model

    def recomputes(model) -> bool:
        return any(getattr(module, "gradient_checkpointing", False) for module in model.modules())

    (tmp_path / "default").mkdir()
    job = make_job(tmp_path / "default", tiny_model_dir, hp={"max_steps": 2})
    assert recomputes(prepare_model(parse_config(job)))
    _, lines = train(job)
    assert any("gradient checkpointing on (chosen on a CPU" in line.get("message", "") for line in lines)

    (tmp_path / "off").mkdir()
    off = make_job(tmp_path / "off", tiny_model_dir, hp={"max_steps": 2, "gradient_checkpointing": False})
    assert not recomputes(prepare_model(parse_config(off)))
    _, off_lines = train(off)
    assert not any("gradient checkpointing" in line.get("message", "") for line in off_lines)
    assert [line["loss"] for line in progress(lines)] == pytest.approx(
        [line["loss"] for line in progress(off_lines)], abs=1e-5
    )


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_a_cpu_training_process_returns_freed_tensors_to_the_os():
    from cuset_core.training.run import return_freed_tensors_to_the_os

    assert return_freed_tensors_to_the_os()
