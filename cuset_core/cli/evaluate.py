"""The judges: `cuset eval` (functional metrics), `cuset eval-compare` (two models, paired) and
`cuset confidence-report` (proxies that explain, without running kernels)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import NoReturn

import typer
from pydantic import ValidationError

from cuset_core.evaluation.settings import VerificationSettings
from cuset_core.generation.prompts import PromptStyle
from cuset_core.verify.result import Tier

# The verification knobs' defaults are the evaluation's (and the API's): written once, there.
KNOBS = VerificationSettings()

PROBLEMS_HELP = (
    'Folder of KernelBench .py problems, a .py file, a .jsonl of {"id","problem"} rows, "demo" or "demo:held-out".'
)
ANSWERS_HELP = (
    'JSONL of {"problem_id","answer","greedy"?: bool} or {"id","samples":[...],"greedy"?: str} rows, or a '
    "KernelBench runs/<run_name> folder of level_<L>_problem_<P>_sample_<S>_kernel.py files, to score instead of "
    "generating."
)
MODEL_HELP = (
    "Model spec: smollm2-135m, a folder, a .gguf, an adapter, a shipped adapter's name (cuset-ew-135m); or openai:URL#NAME for any OpenAI-compatible "
    "endpoint (URL as the openai client's base_url, e.g. http://127.0.0.1:8000/v1)."
)


def register(app: typer.Typer) -> None:
    """Add the `eval`, `eval-compare` and `confidence-report` commands to the `cuset` app."""
    app.command("eval")(evaluate)
    app.command("eval-compare")(eval_compare)
    app.command("confidence-report")(confidence_report)


CARD_DEFAULT = "Default: the adapter card's evaluation setting (cuset-ew-135m's, say), else"


def evaluate(
    problems: str = typer.Option(..., "--problems", help=PROBLEMS_HELP),
    out: Path = typer.Option(
        ...,
        "--out",
        help="Folder for results.json, results.md and, for a KernelBench level, kernelbench_run/ (KernelBench's runs "
        "layout). While the eval runs it keeps checkpoint.jsonl there: run the same command again and a stopped eval "
        "resumes.",
    ),
    model: str | None = typer.Option(None, "--model", help=MODEL_HELP),
    api_key_env: str = typer.Option(
        "OPENAI_API_KEY", "--api-key-env", help="Environment variable holding an openai: endpoint's API key."
    ),
    answers: Path | None = typer.Option(None, "--answers", help=ANSWERS_HELP),
    greedy: bool = typer.Option(
        True, "--greedy/--no-greedy", help="Draw one greedy sample per problem, apart: greedy compile@1, cpu_correct@1."
    ),
    samples: int = typer.Option(0, "--samples", help="n: i.i.d. samples per problem at --temperature, for pass@k."),
    k: str | None = typer.Option(None, "--k", help="k of pass@k, comma-separated (e.g. 1,4); default 1 and n."),
    temperature: float | None = typer.Option(
        None, "--temperature", help=f"Temperature of the i.i.d. samples. {CARD_DEFAULT} 0.8."
    ),
    top_p: float | None = typer.Option(None, "--top-p", help=f"{CARD_DEFAULT} 0.95."),
    max_new_tokens: int | None = typer.Option(None, "--max-new-tokens", help=f"{CARD_DEFAULT} 1024."),
    tier: Tier | None = typer.Option(
        None, "--tier", help=f"Verify up to this tier. {CARD_DEFAULT} {KNOBS.tier.value}."
    ),
    trials: int = typer.Option(
        KNOBS.trials, "--trials", help="Correctness trials per sample (tiers 2-3), one input seed each."
    ),
    input_seed: int = typer.Option(
        KNOBS.input_seed, "--input-seed", help="Trial i draws its inputs under seed input_seed + i."
    ),
    tolerance_profile: str = typer.Option(
        KNOBS.tolerance_profile,
        "--tolerance-profile",
        help="kernelbench: atol = rtol = 1e-4 for fp32 outputs, 1e-2 for fp16/bf16; v0: 1e-2 for every dtype.",
    ),
    atol: float | None = typer.Option(
        KNOBS.atol, "--atol", help="Absolute tolerance for every dtype (overrides the profile)."
    ),
    rtol: float | None = typer.Option(
        KNOBS.rtol, "--rtol", help="Relative tolerance for every dtype (overrides the profile)."
    ),
    arch: str = typer.Option(KNOBS.arch, "--arch", help="nvcc target of the compile tier, e.g. sm_80."),
    compile_baseline: bool = typer.Option(
        KNOBS.compile_baseline,
        "--compile-baseline",
        help="GPU tier: also time torch.compile of the reference (fast_p against it).",
    ),
    prompt_style: PromptStyle | None = typer.Option(
        None,
        "--prompt-style",
        help="Default: the adapter card's evaluation setting or the style it was tuned with (recorded beside it), "
        "else kernelbench.",
    ),
    seed: int = typer.Option(0, "--seed"),
    batch_size: int = typer.Option(4, "--batch-size", help="Problems per generation batch."),
    repair_rounds: int = typer.Option(
        0,
        "--repair-rounds",
        help="R: send a failing sample back to --model with its verifier error, up to R times, and also report "
        "the figures within R repairs. With --answers, the given answers are repaired by --model.",
    ),
    problem_ids: str | None = typer.Option(
        None,
        "--problem-ids",
        help="Only these problems, by KernelBench number or id: 1-10,19,23_Softmax (a KernelBench level folder "
        "as --problems).",
    ),
    workers: int = typer.Option(1, "--workers", help="Problems verified at once (one sandbox each)."),
    cache_dir: Path | None = typer.Option(
        None, "--cache-dir", help="Verification cache folder (default ~/.cache/cuset/verify)."
    ),
    no_cache: bool = typer.Option(False, "--no-cache", help="Verify every sample afresh."),
    quiet: bool = typer.Option(False, "--quiet", help="No progress bars."),
) -> None:
    """Score a greedy sample and n i.i.d. samples per problem (or --answers): greedy metrics and pass@k,
    and with --repair-rounds the same within R repairs."""
    from cuset_core.evaluation.checkpoint import CHECKPOINT_FILE
    from cuset_core.evaluation.config import EvalConfig
    from cuset_core.evaluation.inputs import EvalInputError
    from cuset_core.evaluation.report import KERNELBENCH_RUN, write_kernelbench_run, write_results
    from cuset_core.evaluation.runner import run_eval
    from cuset_core.generation.endpoint import is_endpoint_spec
    from cuset_core.models import ModelNotFoundError, resolve_model

    # Left unset, these come from the adapter card's recorded evaluation settings (a shipped
    # adapter's), else EvalConfig's defaults.
    chosen = {"temperature": temperature, "top_p": top_p, "max_new_tokens": max_new_tokens, "tier": tier}
    try:
        config = EvalConfig(
            model=model,
            answers=answers,
            problems=problems,
            greedy=greedy,
            samples=samples,
            k=_k_values(k),
            **{key: value for key, value in chosen.items() if value is not None},
            trials=trials,
            input_seed=input_seed,
            tolerance_profile=tolerance_profile,
            atol=atol,
            rtol=rtol,
            arch=arch,
            compile_baseline=compile_baseline,
            prompt_style=prompt_style,
            seed=seed,
            batch_size=batch_size,
            repair_rounds=repair_rounds,
            problem_ids=problem_ids,
            workers=workers,
            cache=not no_cache,
            cache_dir=cache_dir,
        )
        if config.model is not None and not is_endpoint_spec(config.model):
            resolve_model(config.model)
        report = run_eval(
            config, progress=not quiet, api_key=os.environ.get(api_key_env), checkpoint=out / CHECKPOINT_FILE
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
