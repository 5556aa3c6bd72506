"""The training subprocess: one JSON job config in, progress JSONL and a peft adapter out.

Exit codes: 0 done or cancelled, 2 bad configuration (one line on stderr, nothing loaded),
1 failure (an ``error`` line in the progress JSONL, the traceback on stderr).
Works as a plain process and under ``accelerate launch``/``torchrun`` (the Trainer owns the
distributed set-up; only rank 0 writes progress and final files).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

import torch
from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training
from transformers import PrinterCallback, TrainingArguments, set_seed
from transformers.trainer_utils import get_last_checkpoint

from cuset_core.models import load_model, load_tokenizer, resolve_dtype, resolve_model, write_base_spec
from cuset_core.objectives.state import ObjectiveState
from cuset_core.training.callbacks import (
    CANCEL_FILE,
    BaseSpecCallback,
    MetricStash,
    ObjectiveStateCallback,
    ProgressCallback,
    ProgressWriter,
    SigtermCallback,
    StepInterrupted,
    checkpoint_dir,
)
from cuset_core.training.config import ConfigError, TuneConfig, checkpointing_choice, read_config
from cuset_core.training.progress_lines import DoneLine
from cuset_core.training.tracking import report_to, tracking_env

EXIT_OK, EXIT_FAILED, EXIT_BAD_CONFIG = 0, 1, 2


@dataclass(frozen=True)
class JobOutcome:
    """How a job ended: optimizer steps reached, input tokens seen, and whether it was cancelled."""

    steps: int
    train_tokens: int
    cancelled: bool


def load_examples(path: Path, config: TuneConfig, tokenizer, writer: ProgressWriter, field: str):
    """Load, validate and encode one data file; problems become warning events.

    Raises ConfigError when the file cannot be read or no record is usable.
    """
    from cuset_core.data.load import DataFileError, LoadOptions, load_records
    from cuset_core.training.collator import encode_example

    max_len = config.hyperparameters.max_seq_len
    options = LoadOptions(
        prompt_style=config.prompt_style,
        require_kernel=config.require_kernel,
        max_tokens=None if config.hyperparameters.truncation == "cut" else max_len,
    )
    try:
        loaded = load_records(path, options, tokenizer)
    except DataFileError as exc:
        raise ConfigError(f"{field}: {exc}") from None
    if not loaded.records:
        first = f" (first: {loaded.errors[0]})" if loaded.errors else ""
        raise ConfigError(f"{field}: no usable record among {loaded.total}{first}")
    for level, message in loaded.summary(field):
        writer.event(message, level=level, topic="data")
    return [encode_example(record, tokenizer, max_len) for record in loaded.records]


def training_arguments(config: TuneConfig):
    """transformers TrainingArguments for a job (checkpoints in ``output_dir/checkpoint-N``)."""
    hp = config.hyperparameters
    return TrainingArguments(
        **length_grouping(hp.group_by_length),
        output_dir=str(config.output_dir),
        per_device_train_batch_size=hp.batch_size,
        per_device_eval_batch_size=hp.batch_size,
        gradient_accumulation_steps=hp.gradient_accumulation_steps,
        learning_rate=hp.learning_rate,
        weight_decay=hp.weight_decay,
        num_train_epochs=hp.epochs,
        max_steps=hp.max_steps,
        warmup_steps=hp.warmup_steps,
        lr_scheduler_type=hp.lr_scheduler,
        max_grad_norm=hp.max_grad_norm,
        bf16=hp.bf16,
        seed=config.seed,
        data_seed=config.seed,
        logging_steps=config.logging_steps,
        save_strategy="steps",
        save_steps=config.save_steps,
        save_total_limit=config.save_total_limit,
        eval_strategy="steps" if config.validation_file else "no",
        eval_steps=config.save_steps if config.validation_file else None,
        prediction_loss_only=True,
        include_num_input_tokens_seen="non_padding",
        remove_unused_columns=False,
        label_names=["labels"],
        report_to=report_to(config.integrations) or "none",
        disable_tqdm=True,
        dataloader_num_workers=0,
        dataloader_pin_memory=torch.cuda.is_available(),
        # Without a GPU, say so: then `torchrun` on CPUs runs real data parallelism (gloo).
        use_cpu=not torch.cuda.is_available(),
    )


def length_grouping(enabled: bool) -> dict:
    """TrainingArguments fields that batch records of similar length: transformers renamed
    ``group_by_length`` to ``train_sampling_strategy``, and both releases are supported."""
    if "train_sampling_strategy" in TrainingArguments.__dataclass_fields__:
        return {"train_sampling_strategy": "group_by_length" if enabled else "random"}
    return {"group_by_length": enabled}


def resume_checkpoint(config: TuneConfig) -> str | None:
    """The checkpoint to resume from: the configured folder, the newest in output_dir, or None."""
    if isinstance(config.resume, Path):
        return str(config.resume)
    if config.resume and config.output_dir.is_dir():
        return get_last_checkpoint(str(config.output_dir))
    return None


def prepare_model(config: TuneConfig):
    """Load the base model in the configured dtype (4-bit with ``quantization``) and wrap it in
    a LoRA adapter, whose parameters peft keeps in float32 (or leave it whole for full
    fine-tuning)."""
    hp = config.hyperparameters
    checkpointing_on, _ = checkpointing_choice(hp, torch.cuda.is_available())
    model, _ = load_model(
        config.model,
        resolve_dtype(hp.dtype),
        with_adapter=False,
        attn_implementation=hp.attn_implementation,
        quantization=hp.quantization,
    )
    checkpointing = {"use_reentrant": False}
    if hp.quantization is not None:
        # Freezes the 4-bit base, keeps its norms in float32 and enables checkpointing if asked.
        model = prepare_model_for_kbit_training(
            model, use_gradient_checkpointing=checkpointing_on, gradient_checkpointing_kwargs=checkpointing
        )
    elif checkpointing_on:
        # Enabled on the model rather than through TrainingArguments, whose flag is being renamed.
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=checkpointing)
    if config.lora is None:
        return model
    lora = config.lora
    adapter = LoraConfig(
        r=lora.rank,
        lora_alpha=lora.alpha,  # type: ignore[arg-type]  # peft annotates int but only divides by it; floats work
        lora_dropout=lora.dropout,
        target_modules=lora.target_modules,
        task_type="CAUSAL_LM",
    )
    if checkpointing_on:
        model.enable_input_require_grads()
    return get_peft_model(model, adapter)


def base_spec(config: TuneConfig) -> str:
    """The spec of the model a run tunes, as its adapters record it: names (the bundled model, a
    repo id, an opt-in model's name) stay names; paths become absolute."""
    named = resolve_model(config.model).kind in ("bundled", "hub", "named")
    return config.model if named else str(Path(config.model).resolve())


def run_job(config: TuneConfig, writer: ProgressWriter) -> JobOutcome:
    """Train as configured; rank 0 saves the adapter (or full model), tokenizer and base spec.

    SIGTERM is caught from here on, so a cancel during loading still ends cleanly.
    """
    if resolve_model(config.model).adapter is not None:
        raise ConfigError("model: a tuned adapter folder cannot be tuned again; give its base model")
    cancel_file = config.output_dir / CANCEL_FILE
    if config.resume and cancel_file.exists():
        # A resume is an explicit request to continue, so the cancel that stopped the last run is spent.
        cancel_file.unlink()
    cancel = SigtermCallback(cancel_file)
    try:
        return _train(config, writer, cancel)
    finally:
        cancel.close()


class ReferenceProgress:
    """Reports the reference-confidence pass as events at every tenth of the examples, with an
    ETA, so a job's event stream (and the dashboard) shows it moving before training starts."""

    def __init__(self, writer: ProgressWriter):
        self.writer = writer
        self.started = time.monotonic()
        self.reported = 0  # tenths reported so far

    def __call__(self, done: int, total: int) -> None:
        tenths = 10 * done // total
        if tenths <= self.reported and done < total:
            return
        self.reported = tenths
        elapsed = time.monotonic() - self.started
        eta = elapsed * (total - done) / done
        self.writer.event(f"reference confidence: {done}/{total} examples, {elapsed:.0f} s, ETA {eta:.0f} s")


def _objective_state(config: TuneConfig, examples, pad_token_id: int, writer: ProgressWriter):
    """The objective's EMAs for this run; with dataset-wide reweighting (reference confidence),
    tau_lo and the weight normaliser from one pass over the training examples, reported as an
    event."""
    from cuset_core.training.reference import dataset_reweighting_state

    method = config.method
    if not method.dataset_reweighting:
        return ObjectiveState.for_method(method.tau_lo_decay, method.normaliser_decay)
    state = dataset_reweighting_state(method, examples, pad_token_id)
    tau_lo, weight_mean = state.tau_lo.value, state.weight_mean.value
    assert weight_mean is not None, "a dataset pass always sets the weight normaliser"
    writer.event(
        "dataset reweighting: tau_lo "
        + ("none (no regions)" if tau_lo is None else f"{float(tau_lo):.4f}")
        + f", weight normaliser {float(weight_mean):.4f}"
    )
    return state


def _train(config: TuneConfig, writer: ProgressWriter, cancel: SigtermCallback) -> JobOutcome:
    """Load tokenizer, data and model (in that order, cheapest first), then train and save."""
    from cuset_core.training.collator import CusetCollator, ExampleDataset
    from cuset_core.training.reference import attach_reference
    from cuset_core.training.trainer import CusetTrainer

    set_seed(config.seed)
    # The Trainer's tracker callbacks read their settings from the environment (this process is the run's own).
    os.environ.update(tracking_env(config.integrations, config.output_dir))
    args = training_arguments(config)
    if args.world_size > 1:
        writer.event(f"data parallel over {args.world_size} processes")
    tokenizer = load_tokenizer(config.model)
    train_examples = load_examples(config.train_file, config, tokenizer, writer, "train_file")
    eval_examples = (
        load_examples(config.validation_file, config, tokenizer, writer, "validation_file")
        if config.validation_file
        else None
    )
    writer.event(f"loading model {config.model}")
    _, checkpointing_note = checkpointing_choice(config.hyperparameters, torch.cuda.is_available())
    if checkpointing_note:
        writer.event(checkpointing_note)
    model = prepare_model(config)
    if config.method.confidence == "reference":
        with args.main_process_first(desc="reference confidence"):
            base = model.get_base_model() if config.lora is not None else model
            train_examples, cached = attach_reference(
                train_examples,
                # 4-bit weights were placed on this rank's GPU when loaded and cannot be moved.
                base if config.hyperparameters.quantization else base.to(args.device),
                model_spec=config.model,
                max_seq_len=config.hyperparameters.max_seq_len,
                cache_dir=config.cache_dir,
                pad_token_id=tokenizer.pad_token_id,
                device=args.device,
                batch_size=config.hyperparameters.batch_size,
                on_progress=ReferenceProgress(writer),
                loss_chunk_size=config.hyperparameters.loss_chunk_size,
            )
        writer.event("reference confidence " + ("read from cache" if cached else "computed and cached"))
    objective_state = _objective_state(config, train_examples, tokenizer.pad_token_id, writer)
    stash = MetricStash()
    state_callback = ObjectiveStateCallback(objective_state)
    trainer = CusetTrainer(
        model=model,
        args=args,
        train_dataset=ExampleDataset(train_examples),
        eval_dataset=ExampleDataset(eval_examples) if eval_examples else None,
        data_collator=CusetCollator(tokenizer.pad_token_id),
        processing_class=tokenizer,
        callbacks=[
            ProgressCallback(writer, stash),
            state_callback,
            BaseSpecCallback(base_spec(config), config.prompt_style),
            cancel,
        ],
        method=config.method,
        stash=stash,
        loss_chunk_size=config.hyperparameters.loss_chunk_size,
        objective_state=objective_state,
    )
    trainer.remove_callback(PrinterCallback)
    checkpoint = resume_checkpoint(config)
    if checkpoint:
        restored = state_callback.load(Path(checkpoint))
        writer.event(
            f"resuming from {checkpoint}"
            + (
                ""
                if restored or not config.method.uses_reweighting
                else " (no saved objective state: its EMAs start over)"
            )
        )
    try:
        trainer.train(resume_from_checkpoint=checkpoint)
    except StepInterrupted:
        save_last_step(trainer)
    state = trainer.state
    outcome = JobOutcome(state.global_step, int(state.num_input_tokens_seen), cancel.cancelled)
    if outcome.cancelled:
        return outcome
    trainer.save_model(str(config.output_dir))
    if trainer.is_world_process_zero():
        tokenizer.save_pretrained(str(config.output_dir))
        write_base_spec(config.output_dir, base_spec(config), config.prompt_style)
    writer.write(
        DoneLine(
            output_dir=str(config.output_dir),
            adapter_path=str(config.output_dir) if config.lora is not None else None,
            steps=outcome.steps,
            train_tokens=outcome.train_tokens,
        )
    )
    return outcome


def save_last_step(trainer) -> None:
    """After a stop inside a step (``StepInterrupted``): the weights, optimizer and schedule are
    those of the last completed step, so they are saved as its checkpoint, as a stop at a step's
    end saves one; nothing when no step completed or that step has its checkpoint already."""
    trainer.model.zero_grad(set_to_none=True)  # the interrupted step's partial gradients
    args, state = trainer.args, trainer.state
    if state.global_step == 0 or checkpoint_dir(args, state).exists():
        return
    trainer._save_checkpoint(trainer.model, trial=None)
    trainer.control = trainer.callback_handler.on_save(args, state, trainer.control)


M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES = -3, 128 * 1024


def return_freed_tensors_to_the_os() -> bool:
    """Serve host allocations over 128 KiB by mmap, unmapped when freed (glibc only).

    glibc otherwise raises its mmap threshold up to 32 MiB as large blocks are freed and keeps
    later tensors in heap arenas it rarely returns: a CPU training step, which frees and
    reallocates activations of every size layer after layer, then holds far more resident memory
    than it has live tensors (bench/tune_memory.py). True when set."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        return bool(ctypes.CDLL("libc.so.6").mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))
    except (OSError, AttributeError):
        return False  # not glibc (musl): nothing to tune


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m cuset_core.training CONFIG.json``; returns the exit code."""
    if not torch.cuda.is_available():
        return_freed_tensors_to_the_os()
    parser = argparse.ArgumentParser(prog="python -m cuset_core.training", description=__doc__.splitlines()[0])
    parser.add_argument("config", type=Path, help="job config (JSON, a TuneConfig)")
    options = parser.parse_args(argv)
    try:
        config = read_config(options.config)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_CONFIG
    writer = ProgressWriter(config.progress_path)
    try:
        outcome = run_job(config, writer)
    except ConfigError as exc:
        writer.error(str(exc))
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_CONFIG
    except Exception as exc:  # noqa: BLE001 - the job's last word must reach the progress file
        traceback.print_exc(file=sys.stderr)
        writer.error(f"{type(exc).__name__}: {exc}")
        return EXIT_FAILED
    if outcome.cancelled:
        writer.event(f"cancelled at step {outcome.steps}; checkpoint saved", level="warning")
    return EXIT_OK
