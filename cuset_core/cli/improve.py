"""`cuset improve`: verified self-training on problems without answers (cuset_core/improve)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import NoReturn

import typer

from cuset_core.generation.prompts import PromptStyle
from cuset_core.objectives import MethodName
from cuset_core.verify.result import Tier


def register(app: typer.Typer) -> None:
    """Add the `improve` command to the `cuset` app."""
    app.command("improve")(improve)


def improve(
    model: str = typer.Option(..., "--model", help="Model to sample from and tune every round."),
    problems: str = typer.Option(
        ..., "--problems", help='Problems without answers: JSONL {"id", "problem"} rows or a folder of .py files.'
    ),
    out: Path = typer.Option(..., "--out", help="Folder for the rounds, kept.jsonl and report.json; resumes there."),
    rounds: int = typer.Option(2, "--rounds", min=1, max=50),
    samples: int = typer.Option(4, "--samples", min=1, max=256, help="Answers sampled per problem and round."),
    max_kept: int = typer.Option(2, "--max-kept", min=1, help="Kept answers per problem over all rounds."),
    tier: Tier = typer.Option(Tier.CPU, "--tier", help="The tier an answer must pass to be kept."),
    method: MethodName = typer.Option("cuset", "--method", help="Training objective of every round."),
    train_file: Path | None = typer.Option(None, "--train-file", help="Original training data mixed into every round."),
    eval_problems: str | None = typer.Option(
        None, "--eval-problems", help="The set the model will be measured on: refused when the pool shares a problem."
    ),
    max_steps: int = typer.Option(-1, "--max-steps", help="Optimizer steps per round; -1: --epochs epochs."),
    epochs: float = typer.Option(1.0, "--epochs", min=0.01),
    learning_rate: float = typer.Option(2e-4, "--learning-rate", min=0.0),
    temperature: float = typer.Option(0.8, "--temperature", min=0.0),
    max_new_tokens: int = typer.Option(512, "--max-tokens", min=1),
    dtype: str = typer.Option(
        "auto", "--dtype", help="The weights while sampling: auto, bfloat16 (on a CPU with AMX, faster), float32."
    ),
    prompt_style: PromptStyle = typer.Option("compact", "--prompt-style"),
    workers: int = typer.Option(1, "--workers", min=1, max=64, help="Verifications at once."),
    seed: int = typer.Option(0, "--seed"),
    quiet: bool = typer.Option(False, "--quiet", help="No progress bars."),
) -> None:
    """Sample answers, keep those the verifier passes, tune on them with the original data; repeat.
    Each finished stage is kept in --out, so running the same command again resumes."""
    from pydantic import ValidationError

    from cuset_core.evaluation.inputs import EvalInputError
    from cuset_core.improve.loop import SelfTrainingConfig, SelfTrainingError, run_self_training
    from cuset_core.models import ModelNotFoundError
    from cuset_core.training.config import ConfigError

    try:
        config = SelfTrainingConfig(
            model=model,
            problems=problems,
            out_dir=out,
            rounds=rounds,
            samples_per_problem=samples,
            max_kept_per_problem=max_kept,
            tier=tier,
            method={"type": method},
            train_file=train_file,
            eval_problems=eval_problems,
            hyperparameters={"max_steps": max_steps, "epochs": epochs, "learning_rate": learning_rate},
            temperature=temperature,
            max_new_tokens=max_new_tokens,
            dtype=dtype,
            prompt_style=prompt_style,
            workers=workers,
            seed=seed,
        )
        report = run_self_training(config, progress=not quiet, say=typer.echo)
    except ValidationError as exc:
        _fail(exc.errors()[0]["msg"])
    except (SelfTrainingError, EvalInputError, ModelNotFoundError, ConfigError) as exc:
        _fail(str(exc))
    last = report.rounds[-1]
    typer.echo(
        f"{len(report.rounds)} rounds: {last.kept_total} answers kept for {last.problems_solved} problems; "
        f"model {report.final_model or config.model}; training file {out / 'kept.jsonl'}"
    )
    typer.echo(json.dumps([r.model_dump(exclude={"fed_by"}) for r in report.rounds]))


def _fail(message: str) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(1)
