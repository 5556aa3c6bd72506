"""`cuset demo`: the whole CuSeT pipeline on the embedded defaults, in one command.

Demo data -> sensitivity analysis -> a short CuSeT tuning run on the bundled model ->
a kernel generated for a held-out problem -> verification (static, nvcc, CPU execution).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from cuset_core.cli.train import Method, PromptStyle, tune
from cuset_core.demo import HELD_OUT, demo_problems, write_demo_dataset
from cuset_core.models import BUNDLED_MODEL


def demo(
    out: Annotated[Path, typer.Option(help="folder for everything the demo writes")] = Path("runs/demo"),
    model: Annotated[str, typer.Option(help="base model spec")] = BUNDLED_MODEL,
    method: Annotated[Method, typer.Option(help="training objective")] = Method.cuset,
    steps: Annotated[int, typer.Option(min=1, help="optimizer steps of the tuning run")] = 20,
    problem: Annotated[str, typer.Option(help="held-out demo problem to generate a kernel for")] = HELD_OUT[0],
    max_new_tokens: Annotated[int, typer.Option(min=16, help="generation budget, tokens")] = 768,
    tier: Annotated[str, typer.Option(help="verification tier: static|compile|cpu")] = "cpu",
) -> None:
    """Run the CuSeT pipeline end to end on the demo data and the bundled model."""
    from cuset_core.analysis.analyze import analyze_answer
    from cuset_core.data.load import LoadOptions, load_records
    from cuset_core.verify.result import Tier
    from cuset_core.verify.run import verify
    from cuset_core.verify.settings import VerifySettings

    console = Console()
    problems = {p.id: p for p in demo_problems()}
    if problem not in problems:
        raise typer.BadParameter(f"unknown demo problem {problem!r}; held-out ones: {', '.join(HELD_OUT)}")
    try:
        verify_tier = Tier(tier)
    except ValueError:
        raise typer.BadParameter(f"--tier must be one of static, compile, cpu, gpu (got {tier!r})") from None
    out.mkdir(parents=True, exist_ok=True)

    console.rule("1. Data")
    data_file = out / "demo_train.jsonl"
    written = write_demo_dataset(data_file, held_out=HELD_OUT)
    loaded = load_records(data_file, LoadOptions(prompt_style="compact"))
    console.print(
        f"{written} demo records written to {data_file} ({len(HELD_OUT)} problems held out: "
        f"{', '.join(HELD_OUT)}); {len(loaded.records)} valid, {len(loaded.errors)} errors"
    )

    console.rule("2. CUDA sensitivity")
    analyses = [analyze_answer(record.answer) for record in loaded.records]
    by_category = Counter(span.category.value for a in analyses for span in a.spans)
    table = Table("category", "spans", title=f"sensitive spans over {len(analyses)} answers")
    for category, count in by_category.most_common():
        table.add_row(category, str(count))
    console.print(table)
    regions = sum(len(a.regions) for a in analyses)
    console.print(f"{regions} sensitive regions; try `cuset analyze` on any answer for the spans")

    console.rule(f"3. Tuning {model} with {method.value} for {steps} steps")
    run_dir = out / f"tune-{method.value}"
    base_job = {
        "hyperparameters": {
            "batch_size": 2,
            "gradient_accumulation_steps": 1,
            "learning_rate": 3e-4,
            "warmup_steps": 2,
            # Long enough for every demo record (the longest is ~1,620 tokens); checkpointing
            # keeps peak memory near 4 GB on the CPU.
            "max_seq_len": 1664,
            "gradient_checkpointing": True,
        },
        "save_steps": max(steps // 2, 1),
    }
    job_file = out / "demo_job.json"
    job_file.write_text(json.dumps(base_job, indent=2) + "\n")
    tune(
        output=run_dir,
        data=data_file,
        model=model,
        method=method,
        max_steps=steps,
        epochs=None,
        lr=None,
        batch_size=None,
        lora=True,
        prompt_style=PromptStyle.compact,
        config=job_file,
    )

    console.rule(f"4. Generating a kernel for held-out problem {problem}")
    from cuset_core.generation.prompts import build_messages, render_prompt
    from cuset_core.generation.sampling import stream_decode
    from cuset_core.models import load_model

    tuned, tokenizer = load_model(run_dir)
    prompt = render_prompt(tokenizer, build_messages(problems[problem].problem_code, "compact"))
    with DecodingProgress(console) as shown:
        answer = stream_decode(
            tuned, tokenizer, prompt, on_text=shown.update, max_new_tokens=max_new_tokens, every_s=1.0
        )
    assert answer is not None  # only an on_text that answers False stops it early
    answer_file = out / f"generated_{problem}.md"
    answer_file.write_text(answer.text)
    console.print(f"{answer.completion_tokens} tokens ({answer.finish_reason}) -> {answer_file}")

    console.rule(f"5. Verifying it (up to tier {verify_tier.value})")
    result = verify(problems[problem].problem_code, answer.text, VerifySettings(tier=verify_tier))
    (out / f"verification_{problem}.json").write_text(result.model_dump_json(indent=2) + "\n")
    colour = "green" if result.passed else "yellow"
    console.print(f"[{colour}]verdict: {result.verdict.value}[/{colour}] (decided by tier {result.tier.value})")
    if result.reason:
        console.print(f"reason: {result.reason}")

    console.rule("Done")
    console.print(f"everything is in {out}/: training data, job config, progress.jsonl, the adapter,")
    console.print(
        "the generated answer and its verification. Next: `cuset eval --model "
        f"{run_dir} --problems demo --samples 4 --out {out}/eval`."
    )


class DecodingProgress:
    """What a long decoding has written so far: on a terminal a live line (lines, characters,
    elapsed time); in a log or a pipe a plain line every ``every_s`` seconds, so a greedy answer
    that takes minutes on a CPU never looks stalled."""

    def __init__(self, console: Console, every_s: float = 30.0):
        self.console = console
        self.every_s = every_s
        self.bar = Progress(
            SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=console, transient=True
        )
        self.task = self.bar.add_task("decoding", total=None)
        self.started = self.last_line = time.monotonic()

    def __enter__(self) -> DecodingProgress:
        if self.console.is_terminal:
            self.bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.console.is_terminal:
            self.bar.stop()

    def update(self, text: str) -> bool:
        """``stream_decode``'s ``on_text``: show ``text`` (the answer so far); always go on."""
        done = f"decoding: {len(text.splitlines())} lines, {len(text)} characters"
        now = time.monotonic()
        if self.console.is_terminal:
            self.bar.update(self.task, description=done)
        elif now - self.last_line >= self.every_s:
            self.console.print(f"{done} after {now - self.started:.0f} s", highlight=False)
            self.last_line = now
        return True


def register(app: typer.Typer) -> None:
    """Add `demo` to the `cuset` app."""
    app.command("demo")(demo)
