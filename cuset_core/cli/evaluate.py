"""The judges: `cuset eval` (functional metrics), `cuset eval-compare` (two models, paired) and
`cuset confidence-report` (proxies that explain, without running kernels)."""

from __future__ import annotations

import json
import os
from enum import Enum
from pathlib import Path
from typing import Any, NoReturn

import typer
from pydantic import ValidationError

from cuset_core.evaluation.config import EvalConfig
from cuset_core.generation.prompts import PromptStyle
from cuset_core.verify.result import Tier

# How the help writes each bound pydantic keeps in a field's metadata (annotated_types' attribute names).
_BOUNDS = {"ge": ">= {}", "gt": "> {}", "le": "<= {}", "lt": "< {}", "max_length": "at most {} characters"}


def knob_help(name: str) -> str:
    """The help of the option for EvalConfig's field ``name``: the field's own description and
    its bounds, as the core declares them (so a change there shows here)."""
    field = EvalConfig.model_fields[name]
    bounds = [shape.format(getattr(rule, bound)) for rule in field.metadata for bound, shape in _BOUNDS.items()
              if hasattr(rule, bound)]  # fmt: skip
    description = field.description or name
    text = f"{description[0].upper()}{description[1:]}."
    return f"{text} Bounds: {', '.join(bounds)}." if bounds else text


def knob_default(name: str) -> str | bool:
    """What the help shows as the default of EvalConfig's field ``name`` (False: nothing, for a
    required field or one that is unset by default)."""
    field = EvalConfig.model_fields[name]
    value = None if field.is_required() else field.default
    if value is None:
        return False
    if isinstance(value, Enum):
        return str(value.value)
    return str(value).lower() if isinstance(value, bool) else str(value)


def knob(name: str, *flags: str) -> Any:
    """A ``cuset eval`` option for EvalConfig's field ``name``. Unset (None), the field is left to
    --config, then to the adapter's card, then to its default; pydantic checks what is given."""
    return typer.Option(None, *flags, help=knob_help(name), show_default=knob_default(name))


def register(app: typer.Typer) -> None:
    """Add the `eval`, `eval-compare` and `confidence-report` commands to the `cuset` app."""
    app.command("eval")(evaluate)
    app.command("eval-compare")(eval_compare)
    app.command("confidence-report")(confidence_report)


def evaluate(
    out: Path = typer.Option(
        ...,
        "--out",
        help="Folder for results.json, results.md and, for a KernelBench level, kernelbench_run/ (KernelBench's runs "
        "layout). While the eval runs it keeps checkpoint.jsonl there: run the same command again and a stopped eval "
        "resumes.",
    ),
    config: Path | None = typer.Option(
        None, "--config", help="An EvalConfig as JSON (any of the fields below); options given here override it."
    ),
    problems: str | None = knob("problems", "--problems"),
    model: str | None = knob("model", "--model"),
    api_key_env: str = typer.Option(
        "OPENAI_API_KEY", "--api-key-env", help="Environment variable holding an openai: endpoint's API key."
    ),
    answers: Path | None = knob("answers", "--answers"),
    greedy: bool | None = knob("greedy", "--greedy/--no-greedy"),
    samples: int | None = knob("samples", "--samples"),
    k: str | None = typer.Option(None, "--k", help=f"{knob_help('k')} Comma-separated, e.g. 1,4.", show_default=False),
    temperature: float | None = knob("temperature", "--temperature"),
    top_p: float | None = knob("top_p", "--top-p"),
    max_new_tokens: int | None = knob("max_new_tokens", "--max-new-tokens"),
    tier: Tier | None = knob("tier", "--tier"),
    trials: int | None = knob("trials", "--trials"),
    input_seed: int | None = knob("input_seed", "--input-seed"),
    tolerance_profile: str | None = knob("tolerance_profile", "--tolerance-profile"),
    atol: float | None = knob("atol", "--atol"),
    rtol: float | None = knob("rtol", "--rtol"),
    arch: str | None = knob("arch", "--arch"),
    compile_baseline: bool | None = knob("compile_baseline", "--compile-baseline/--no-compile-baseline"),
    policy: str | None = knob("policy", "--policy"),
    prompt_style: PromptStyle | None = knob("prompt_style", "--prompt-style"),
    seed: int | None = knob("seed", "--seed"),
    batch_size: int | None = knob("batch_size", "--batch-size"),
    dtype: str | None = knob("dtype", "--dtype"),
    repair_rounds: int | None = knob("repair_rounds", "--repair-rounds"),
    problem_ids: str | None = knob("problem_ids", "--problem-ids"),
    workers: int | None = knob("workers", "--workers"),
    cache: bool | None = knob("cache", "--cache/--no-cache"),
    cache_dir: Path | None = knob("cache_dir", "--cache-dir"),
    quiet: bool = typer.Option(False, "--quiet", help="No progress bars."),
) -> None:
    """Score a greedy sample and n i.i.d. samples per problem (or --answers): greedy metrics and pass@k,
    and with --repair-rounds the same within R repairs."""
    from cuset_core.evaluation.checkpoint import CHECKPOINT_FILE
    from cuset_core.evaluation.inputs import EvalInputError
    from cuset_core.evaluation.report import KERNELBENCH_RUN, write_kernelbench_run, write_results
    from cuset_core.evaluation.runner import run_eval
    from cuset_core.generation.endpoint import is_endpoint_spec
    from cuset_core.models import ModelNotFoundError, resolve_model

    given = {
        "problems": problems,
        "model": model,
        "answers": answers,
        "greedy": greedy,
        "samples": samples,
        "k": _k_values(k),
        "temperature": temperature,
        "top_p": top_p,
        "max_new_tokens": max_new_tokens,
        "tier": tier,
        "trials": trials,
        "input_seed": input_seed,
        "tolerance_profile": tolerance_profile,
        "atol": atol,
        "rtol": rtol,
        "arch": arch,
        "compile_baseline": compile_baseline,
        "policy": policy,
        "prompt_style": prompt_style,
        "seed": seed,
        "batch_size": batch_size,
        "dtype": dtype,
        "repair_rounds": repair_rounds,
        "problem_ids": problem_ids,
        "workers": workers,
        "cache": cache,
        "cache_dir": cache_dir,
    }
    # Only what is given counts as asked for: the adapter's card fills in the rest, then the defaults.
    fields = _config_file(config) | {name: value for name, value in given.items() if value is not None}
    try:
        run = EvalConfig.model_validate(fields)
        if run.model is not None and not is_endpoint_spec(run.model):
            resolve_model(run.model)
        report = run_eval(
            run, progress=not quiet, api_key=os.environ.get(api_key_env), checkpoint=out / CHECKPOINT_FILE
        )
    except ValidationError as exc:
        _fail(_first_error(exc))
    except (EvalInputError, ModelNotFoundError) as exc:
        _fail(str(exc))
    json_path, md_path = write_results(report, out)
    (out / CHECKPOINT_FILE).unlink(missing_ok=True)  # results.json holds everything it did
    kernelbench_run = write_kernelbench_run(report, out / KERNELBENCH_RUN)
    agg = report.aggregate
    blocks = [
        ("greedy", agg.greedy.metrics if agg.greedy else {}),
        ("pass@k", agg.sampled.metrics if agg.sampled else {}),
    ]
    if agg.repaired is not None:
        within = f"within {agg.repaired.rounds} repairs"
        blocks += [
            (f"greedy {within}", agg.repaired.greedy.metrics if agg.repaired.greedy else {}),
            (f"pass@k {within}", agg.repaired.sampled.metrics if agg.repaired.sampled else {}),
        ]
    for name, metrics in blocks:
        if metrics:
            typer.echo(f"{name}: " + ", ".join(f"{metric} {value:.3f}" for metric, value in metrics.items()))
    if agg.kernelbench is not None:
        kernelbench = agg.kernelbench
        geo_mean = "n/a" if kernelbench.geo_mean_speedup is None else f"{kernelbench.geo_mean_speedup:.3f}"
        typer.echo(
            "kernelbench: "
            + ", ".join(f"fast_{p} {value:.3f}" for p, value in kernelbench.fast_p.items())
            + f", geo-mean speedup {geo_mean}"
        )
    typer.echo(f"wrote {json_path} and {md_path}")
    if kernelbench_run is not None:
        typer.echo(f"wrote the samples in KernelBench's runs layout to {kernelbench_run}")


def eval_compare(
    a: str = typer.Argument(
        ...,
        help="Model A's results.json or the folder holding it; several (its seeds), "
        "comma-separated, are averaged per problem.",
    ),
    b: str = typer.Argument(..., help="Model B's, likewise, over the same problems."),
    resamples: int = typer.Option(10_000, "--resamples", min=1, help="Bootstrap resamples."),
    seed: int = typer.Option(0, "--seed", help="Seed of the bootstrap draws."),
    confidence: float = typer.Option(0.95, "--confidence", min=0.5, max=0.999, help="Interval coverage."),
    out: Path | None = typer.Option(None, "--out", help="Also write comparison.json and comparison.md here."),
) -> None:
    """A - B per metric (greedy compile@1, cpu_correct@1, pass@k) with a paired bootstrap interval over problems."""
    from cuset_core.evaluation.compare import CompareInputError, compare_runs, read_run, render_comparison

    try:
        comparison = compare_runs(
            [read_run(Path(part)) for part in a.split(",")],
            [read_run(Path(part)) for part in b.split(",")],
            resamples=resamples,
            seed=seed,
            confidence=confidence,
        )
    except CompareInputError as exc:
        _fail(str(exc))
    text = render_comparison(comparison)
    typer.echo(text, nl=False)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "comparison.json").write_text(comparison.model_dump_json(indent=1) + "\n")
        (out / "comparison.md").write_text(text)
        typer.echo(f"wrote {out / 'comparison.json'} and {out / 'comparison.md'}")


def confidence_report(
    data: Path = typer.Option(..., "--data", help="Held-out records: chat or KernelBench JSONL/parquet."),
    out: Path = typer.Option(..., "--out", help="Folder for report.json, report.md and confidence.png."),
    model: str = typer.Option("smollm2-135m", "--model", help="smollm2-135m, a .gguf file or a model folder."),
    limit: int = typer.Option(32, "--limit", min=1, help="Records to analyse (the first N kept)."),
    prompt_style: PromptStyle = typer.Option("kernelbench", "--prompt-style", help="Prompt format."),
    max_tokens: int = typer.Option(4096, "--max-tokens", min=8, help="Truncate records to this many tokens."),
) -> None:
    """Region-token NLL, top-1 accuracy and exact match per category (judges), and the paper's finding."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from cuset_core.data import DataFileError, LoadOptions, load_records
    from cuset_core.evaluation.confidence_report import OVERALL, run_report, write_report
    from cuset_core.evaluation.confidence_settings import ReportSettings
    from cuset_core.models import ModelNotFoundError, inference_dtype, load_model, place_for_inference, resolve_model

    try:
        settings = ReportSettings(
            model=model, data=data, out=out, limit=limit, prompt_style=prompt_style, max_tokens=max_tokens
        )
    except ValidationError as exc:
        _fail(_first_error(exc))
    if not data.is_file():
        _fail(f"--data: file not found: {data}")
    try:
        resolve_model(model)
    except ModelNotFoundError as exc:
        _fail(f"--model: {exc}")
    try:
        loaded = load_records(data, LoadOptions(prompt_style=settings.prompt_style, require_kernel=True))
    except DataFileError as exc:
        _fail(f"--data: {exc}")
    records = loaded.records[: settings.limit]
    if not records:
        codes = ", ".join(f"{code} x{count}" for code, count in loaded.counts().items()) or "none"
        _fail(f"--data: no usable records with a CUDA kernel in {data} ({loaded.total} rows; issues: {codes})")

    console = Console(stderr=True)
    console.print(f"loading {model} ...")
    network, tokenizer = load_model(model, inference_dtype())
    network = place_for_inference(network)
    with Progress(
        TextColumn("confidence"), BarColumn(), MofNCompleteColumn(), console=console, transient=True
    ) as progress:
        task = progress.add_task("records", total=len(records))
        summary = run_report(
            settings,
            network,
            tokenizer,
            records,
            progress=lambda done: progress.update(task, completed=done),
        )
    paths = write_report(summary, out)
    judged, groups = summary["judges"]["groups"][OVERALL], summary["groups"]
    typer.echo(
        f"{summary['records']} records, {judged['regions']} regions, {judged['tokens']} region tokens: "
        f"NLL {_number(judged['nll'])}, top-1 {_number(judged['top1_accuracy'])}, "
        f"exact match {_number(judged['region_exact_match'])}; "
        f"mean p (the paper's finding, not a judge) sensitive {_number(groups['sensitive']['mean_p'])}, "
        f"non-sensitive {_number(groups['non_sensitive']['mean_p'])}"
    )
    typer.echo("wrote " + ", ".join(str(path) for path in paths))


def _config_file(path: Path | None) -> dict[str, Any]:
    """The fields of ``--config`` (a JSON object), {} without one; one error line when unreadable."""
    if path is None:
        return {}
    try:
        fields = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        _fail(f"--config {path}: {exc}")
    if not isinstance(fields, dict):
        _fail(f"--config {path}: expected a JSON object")
    return fields


def _k_values(text: str | None) -> list[int] | None:
    """``--k 1,4`` as [1, 4]; None when not given."""
    if text is None:
        return None
    try:
        return [int(part) for part in text.split(",")]
    except ValueError:
        _fail(f"--k: expected comma-separated integers such as 1,4, got {text!r}")


def _first_error(exc: ValidationError) -> str:
    error = exc.errors()[0]
    field = ".".join(str(part) for part in error["loc"]) or "options"
    return f"{field}: {error['msg'].removeprefix('Value error, ')}"


def _number(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def _fail(message: str) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)
