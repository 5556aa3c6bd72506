"""`cuset eval`: run a model over a problem set, or score given answers, and write the results."""

from __future__ import annotations

from pathlib import Path
from typing import NoReturn

import typer
from pydantic import ValidationError

from cuset_core.generation.prompts import PromptStyle
from cuset_core.verify.result import Tier

PROBLEMS_HELP = (
    'Folder of KernelBench .py problems, a .py file, a .jsonl of {"id","problem"} rows, "demo" or "demo:held-out".'
)
ANSWERS_HELP = 'JSONL of {"problem_id","answer"} or {"id","samples":[...]} rows to score instead of generating.'


def register(app: typer.Typer) -> None:
    """Add the `eval` command to the `cuset` app."""
    app.command("eval")(evaluate)


def evaluate(
    problems: str = typer.Option(..., "--problems", help=PROBLEMS_HELP),
    out: Path = typer.Option(..., "--out", help="Folder for results.json and results.md."),
    model: str | None = typer.Option(None, "--model", help="Model spec: smollm2-135m, a folder, a .gguf, an adapter."),
    answers: Path | None = typer.Option(None, "--answers", help=ANSWERS_HELP),
    samples: int = typer.Option(1, "--samples", help="K: samples per problem."),
    temperature: float = typer.Option(0.8, "--temperature", help="Temperature of the sampled answers."),
    top_p: float = typer.Option(0.95, "--top-p"),
    greedy_first: bool = typer.Option(True, "--greedy-first/--no-greedy-first", help="Sample 0 is greedy."),
    max_new_tokens: int = typer.Option(1024, "--max-new-tokens"),
    tier: Tier = typer.Option(Tier.COMPILE, "--tier", help="Verify up to this tier."),
    prompt_style: PromptStyle = typer.Option("kernelbench", "--prompt-style"),
    seed: int = typer.Option(0, "--seed"),
    batch_size: int = typer.Option(4, "--batch-size", help="Problems per generation batch."),
    cache_dir: Path | None = typer.Option(
        None, "--cache-dir", help="Verification cache folder (default ~/.cache/cuset/verify)."
    ),
    no_cache: bool = typer.Option(False, "--no-cache", help="Verify every sample afresh."),
    quiet: bool = typer.Option(False, "--quiet", help="No progress bars."),
) -> None:
    """Generate K samples per problem (or read --answers), verify them, report pass@k metrics."""
    from cuset_core.evaluation.report import write_results
    from cuset_core.evaluation.runner import EvalConfig, EvalInputError, run_eval
    from cuset_core.models import ModelNotFoundError, resolve_model

    try:
        config = EvalConfig(
            model=model, answers=answers, problems=problems, samples=samples, temperature=temperature,
            top_p=top_p, greedy_first=greedy_first, max_new_tokens=max_new_tokens, tier=tier,
            prompt_style=prompt_style, seed=seed, batch_size=batch_size, cache=not no_cache, cache_dir=cache_dir,
        )
        if config.model is not None:
            resolve_model(config.model)
        report = run_eval(config, progress=not quiet)
    except ValidationError as exc:
        error = exc.errors()[0]
        field = ".".join(str(part) for part in error["loc"]) or "options"
        _fail(f"{field}: {error['msg'].removeprefix('Value error, ')}")
    except (EvalInputError, ModelNotFoundError) as exc:
        _fail(str(exc))
    json_path, md_path = write_results(report, out)
    metrics = ", ".join(f"{name} {value:.3f}" for name, value in report.aggregate.metrics.items())
    typer.echo(f"{metrics}\nwrote {json_path} and {md_path}")


def _fail(message: str) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)
