"""`cuset tune` (runs the training subprocess behind a progress bar) and `cuset generate`."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from enum import Enum, StrEnum
from pathlib import Path
from typing import Annotated, get_args

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from cuset_core.cli.exits import EXIT_USAGE
from cuset_core.generation.prompts import PromptStyle as PromptStyleName
from cuset_core.models import DtypeName
from cuset_core.objectives.config import MethodName
from cuset_core.training.config import ConfigError, parse_config
from cuset_core.training.launch import follow_session_priority
from cuset_core.training.progress_lines import (
    CheckpointLine,
    DoneLine,
    ErrorLine,
    EvalLine,
    EventLine,
    StepLine,
    parse_line,
)

JOB_FILE = "job.json"
LOG_FILE = "train.log"


Method = Enum("Method", {name: name for name in get_args(MethodName)}, type=str)
PromptStyle = Enum("PromptStyle", {name: name for name in get_args(PromptStyleName)}, type=str)
Dtype = Enum("Dtype", {name: name for name in get_args(DtypeName)}, type=str)
Truncation = Enum("Truncation", {name: name for name in ("drop", "cut")}, type=str)
MODEL_HELP = (
    "smollm2-135m, a .gguf file, a model folder or a Hugging Face repo id (org/name, from the HF cache); "
    "generate also takes a shipped adapter's name (cuset-ew-135m)"
)
# Trackers that need no settings; W&B needs a project: give it in --config's "integrations".
Tracker = Enum("Tracker", {name: name for name in ("tensorboard", "mlflow")}, type=str)


def fail(message: str, code: int = EXIT_USAGE) -> typer.Exit:
    """Print one error line to stderr and return the Exit to raise."""
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)


def job_document(
    base: dict,
    *,
    data: Path | None,
    model: str | None,
    method: Method | None,
    output: Path,
    max_steps: int | None,
    epochs: float | None,
    lr: float | None,
    batch_size: int | None,
    lora: bool | None,
    prompt_style: PromptStyle | None,
    resume: bool = False,
    dtype: Dtype | None = None,
    qlora: bool = False,
    gradient_checkpointing: bool | None = None,
    group_by_length: bool | None = None,
    truncation: Truncation | None = None,
    report_to: list[Tracker] | None = None,
) -> dict:
    """A job config: ``base`` (from --config) overridden by the options given on the command line."""
    job = json.loads(json.dumps(base))  # deep copy of plain JSON
    job["output_dir"] = str(output)
    if data is not None:
        job["train_file"] = str(data)
    if model is not None:
        job["model"] = model
    if method is not None:
        job["method"] = {**job.get("method", {}), "type": method.value}
    if prompt_style is not None:
        job["prompt_style"] = prompt_style.value
    if resume:
        job["resume"] = True
    if report_to:
        known = {integration.get("type") for integration in job.get("integrations", [])}
        job["integrations"] = job.get("integrations", []) + [
            {"type": tracker.value} for tracker in report_to if tracker.value not in known
        ]
    if lora is False:
        job["lora"] = None
    elif lora is True and job.get("lora") is None:
        job.pop("lora", None)
    hyper = dict(job.get("hyperparameters", {}))
    given = {
        "max_steps": max_steps,
        "epochs": epochs,
        "learning_rate": lr,
        "batch_size": batch_size,
        "dtype": dtype.value if dtype else None,
        "gradient_checkpointing": gradient_checkpointing,
        "group_by_length": group_by_length,
        "truncation": truncation.value if truncation else None,
    }
    hyper.update({key: value for key, value in given.items() if value is not None})
    if qlora:
        hyper["quantization"] = {"bits": 4, "type": "nf4", "double_quant": True}
    job["hyperparameters"] = hyper
    return job


def follow(process: subprocess.Popen, console: Console) -> int:
    """Show the subprocess's JSONL progress as a bar and its events as lines; its exit code."""
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[info]}"))
    with Progress(*columns, console=console, transient=False) as bar:
        task = bar.add_task("tuning", total=None, info="")
        for raw in process.stdout:
            match parse_line(raw):
                case StepLine() as step:
                    info = "loss nan" if step.loss is None else f"loss {step.loss:.4f}"
                    info += f"  {step.tokens_per_s:.0f} tok/s"
                    info += "" if step.eta_s is None else f"  eta {step.eta_s:.0f}s"
                    bar.update(task, total=step.max_steps, completed=step.step, info=info)
                case EventLine() as event:
                    style = {"warning": "yellow", "error": "red"}.get(event.level, "dim")
                    bar.console.print(f"[{style}]{event.message}[/{style}]")
                case CheckpointLine() as checkpoint:
                    bar.console.print(f"[dim]checkpoint {checkpoint.path}[/dim]")
                case EvalLine(eval_loss=float(loss)) as evaluated:
                    bar.console.print(f"step {evaluated.step}: eval loss {loss:.4f}")
                case DoneLine() as done:
                    bar.console.print(f"[green]done: {done.steps} steps, saved to {done.output_dir}[/green]")
                case ErrorLine() as error:
                    bar.console.print(f"[red]error: {error.message}[/red]")
    return process.wait()


def tune(
    output: Annotated[Path, typer.Option("--output", "-o", help="folder for checkpoints, adapter and progress")],
    data: Annotated[Path | None, typer.Option("--data", help="training data (JSONL or parquet)")] = None,
    model: Annotated[str | None, typer.Option(help=MODEL_HELP)] = None,
    method: Annotated[Method | None, typer.Option(help="training objective")] = None,
    max_steps: Annotated[int | None, typer.Option(help="optimizer steps (overrides --epochs)")] = None,
    epochs: Annotated[float | None, typer.Option(help="passes over the data")] = None,
    lr: Annotated[float | None, typer.Option(help="learning rate")] = None,
    batch_size: Annotated[int | None, typer.Option(help="sequences per device per micro-batch")] = None,
    lora: Annotated[bool | None, typer.Option("--lora/--full", help="LoRA adapter or full fine-tuning")] = None,
    prompt_style: Annotated[PromptStyle | None, typer.Option(help="prompt format of the records")] = None,
    config: Annotated[Path | None, typer.Option(help="job config JSON; options given here override it")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="continue from the last checkpoint in --output")] = False,
    dtype: Annotated[
        Dtype | None, typer.Option(help="weights' dtype; auto: bfloat16 on a GPU, float32 on a CPU")
    ] = None,
    qlora: Annotated[bool, typer.Option("--qlora", help="4-bit NF4 base weights with LoRA (CUDA GPU only)")] = False,
    gradient_checkpointing: Annotated[
        bool | None,
        typer.Option(
            "--gradient-checkpointing/--no-gradient-checkpointing",
            help="recompute activations: less memory, ~30% more time [default: on a CPU, off on a GPU]",
        ),
    ] = None,
    group_by_length: Annotated[
        bool | None,
        typer.Option("--group-by-length/--no-group-by-length", help="batch records of similar length (less padding)"),
    ] = None,
    truncation: Annotated[Truncation | None, typer.Option(help="records over max_seq_len: drop or cut")] = None,
    report_to: Annotated[
        list[Tracker] | None,
        typer.Option(help="log metrics to a tracker too (repeatable); TensorBoard events go to OUTPUT/tensorboard"),
    ] = None,
) -> None:
    """Fine-tune a model on CUDA answers with one objective; Ctrl-C stops after a checkpoint."""
    base: dict = {}
    if config is not None:
        try:
            base = json.loads(config.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise fail(f"--config {config}: {exc}") from None
        if not isinstance(base, dict):
            raise fail(f"--config {config}: expected a JSON object")
    job = job_document(
        base,
        data=data,
        model=model,
        method=method,
        output=output,
        max_steps=max_steps,
        epochs=epochs,
        lr=lr,
        batch_size=batch_size,
        lora=lora,
        prompt_style=prompt_style,
        resume=resume,
        report_to=report_to,
        dtype=dtype,
        qlora=qlora,
        gradient_checkpointing=gradient_checkpointing,
        group_by_length=group_by_length,
        truncation=truncation,
    )
    try:
        resolved = parse_config(job)
        resolved.validate_paths()
    except ConfigError as exc:
        raise fail(str(exc)) from None
    output.mkdir(parents=True, exist_ok=True)
    job_file = output / JOB_FILE
    # The resolved TuneConfig, every default filled in, as the worker writes it: the file says
    # exactly what ran, whatever later releases change in the defaults.
    job_file.write_text(resolved.model_dump_json(indent=2) + "\n")
    console = Console(stderr=False)
    with (output / LOG_FILE).open("a") as log:
        # A new session keeps the terminal's Ctrl-C away from the child: we forward it as SIGTERM,
        # which the training process answers by checkpointing and stopping.
        process = subprocess.Popen(
            [sys.executable, "-m", "cuset_core.training", str(job_file)],
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            start_new_session=True,
        )
        follow_session_priority(process.pid)

        def forward(signum, frame) -> None:
            console.print("[yellow]stopping after the current step (checkpoint)...[/yellow]")
            process.send_signal(signal.SIGTERM)

        previous = signal.signal(signal.SIGINT, forward)
        try:
            code = follow(process, console)
        finally:
            signal.signal(signal.SIGINT, previous)
    if code != 0:
        console.print(f"[red]training exited with code {code}; log: {output / LOG_FILE}[/red]")
        raise typer.Exit(code)


def generate(
    problem: Annotated[Path, typer.Option(help="KernelBench-format problem (.py with class Model)")],
    model: Annotated[str, typer.Option(help=MODEL_HELP + ", or a tuned output folder")] = "smollm2-135m",
    samples: Annotated[int, typer.Option(min=1, help="answers to sample")] = 1,
    temperature: Annotated[float, typer.Option(min=0.0, help="0 = greedy")] = 0.0,
    top_p: Annotated[float, typer.Option(min=0.0, max=1.0)] = 1.0,
    max_new_tokens: Annotated[int, typer.Option(min=1)] = 512,
    prompt_style: Annotated[PromptStyle, typer.Option(help="prompt format")] = PromptStyle.compact,
    seed: Annotated[int | None, typer.Option(help="sampling seed")] = None,
    code_only: Annotated[bool, typer.Option("--code-only", help="print only the first code block")] = False,
) -> None:
    """Write a kernel for a problem with a base model or a tuned adapter."""
    from cuset_core.analysis.extract import answer_code
    from cuset_core.generation.prompts import build_messages
    from cuset_core.generation.sampling import generate as sample
    from cuset_core.models import ModelNotFoundError, inference_dtype, load_model, place_for_inference, resolve_model

    try:
        resolve_model(model)
    except ModelNotFoundError as exc:
        raise fail(f"--model: {exc}") from None
    try:
        problem_code = problem.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise fail(f"--problem {problem}: {exc}") from None
    loaded, tokenizer = load_model(model, inference_dtype())
    loaded = place_for_inference(loaded)
    messages = build_messages(problem_code, prompt_style.value)
    [answers] = sample(
        loaded,
        tokenizer,
        [messages],
        n=samples,
        temperature=temperature,
        top_p=top_p,
        max_new_tokens=max_new_tokens,
        seed=seed,
    )
    for index, answer in enumerate(answers):
        if samples > 1:
            typer.echo(f"# sample {index + 1} ({answer.completion_tokens} tokens, {answer.finish_reason})")
        typer.echo(answer_code(answer.text).code if code_only else answer.text)


class ExportDtype(StrEnum):
    auto = "auto"
    bfloat16 = "bfloat16"
    float16 = "float16"
    float32 = "float32"


def export(
    run: Annotated[Path, typer.Argument(help="a tuned output folder (the --output of `cuset tune`)")],
    out: Annotated[Path, typer.Option("--out", help="folder to write (created; must be empty or absent)")],
    merge: Annotated[
        bool,
        typer.Option(
            "--merge", help="merge the LoRA adapter into its base: a plain Hugging Face model folder any engine serves"
        ),
    ] = False,
    dtype: Annotated[
        ExportDtype, typer.Option(help="weights of the merged folder; auto = the base's own")
    ] = ExportDtype.auto,
) -> None:
    """Write a run's model for an inference engine: its adapter files (vLLM --enable-lora), or with
    --merge a merged Hugging Face folder (safetensors, config, tokenizer)."""
    import torch

    from cuset_core.models import ModelNotFoundError, read_base_spec
    from cuset_core.training.export import ExportError, export_adapter, export_merged, model_files

    try:
        files = model_files(run)
    except ExportError as exc:
        raise fail(f"RUN: {exc}") from None
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise fail(f"--out {out}: exists and is not an empty folder")
    try:
        if merge:
            export_merged(run, out, None if dtype is ExportDtype.auto else getattr(torch, dtype.value))
        else:
            adapter = files[0].name == "adapter_config.json"
            export_adapter(run, out, base_model=read_base_spec(run) if adapter else None)
    except ModelNotFoundError as exc:
        raise fail(f"RUN: {exc}") from None
    typer.echo(f"{'merged model' if merge else 'model files'} written to {out}")


def ship_adapter(
    run: Annotated[Path, typer.Argument(help="a finished LoRA run folder (the --output of `cuset tune`)")],
    name: Annotated[str, typer.Option(help="the shipped adapter's name (cuset_core.adapters.SHIPPED)")],
    card: Annotated[
        Path | None,
        typer.Option(help="model card (README.md: training command, evaluation figures); default: keep the current"),
    ] = None,
    base_model: Annotated[
        str | None, typer.Option(help="base model spec users load it on; default: the one the run recorded")
    ] = None,
) -> None:
    """Ship a run's LoRA adapter inside the package as cuset_core/adapters/NAME (float16 weights,
    at most 20 MiB), loadable everywhere by NAME."""
    from cuset_core.models import ModelNotFoundError
    from cuset_core.training.export import ExportError
    from cuset_core.training.ship import ShipError, folder_mib
    from cuset_core.training.ship import ship_adapter as ship

    try:
        folder = ship(run, name, card=card, base_model=base_model)
    except (ShipError, ExportError, ModelNotFoundError) as exc:
        raise fail(str(exc)) from None
    typer.echo(f"shipped {name}: {folder} ({folder_mib(folder):.1f} MiB)")


def register(app: typer.Typer) -> None:
    """Add `tune`, `generate`, `export` and `ship-adapter` to the `cuset` app."""
    app.command("tune")(tune)
    app.command("generate")(generate)
    app.command("export")(export)
    app.command("ship-adapter")(ship_adapter)
