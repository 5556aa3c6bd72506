"""Run a model (or score given answers) over a KernelBench-format problem set.

Problems come from a folder of ``.py`` files (id = file stem), a single ``.py`` file, a
``.jsonl`` file of ``{"id", "problem"}`` rows, ``"demo"`` (the bundled demo set) or
``"demo:held-out"`` (its problems kept out of training data). Answers to
score without a model come from a ``.jsonl`` file of ``{"problem_id", "answer"}`` rows (one
per sample, several rows per problem allowed) or ``{"id", "samples": [...]}`` rows.

With a model, K samples per problem are generated in batches of problems; when
``greedy_first`` is on, sample 0 is greedy and the other K-1 are drawn at ``temperature``.
Every sample is verified up to ``tier`` and the metrics of :mod:`.metrics` are computed.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from tqdm import tqdm

from cuset_core.evaluation.metrics import Aggregate, ProblemRow, aggregate, problem_row
from cuset_core.verify.result import Tier, VerifyResult
from cuset_core.verify.run import verify
from cuset_core.verify.settings import VerifySettings

DEMO_PROBLEMS = "demo"
DEMO_HELD_OUT = "demo:held-out"


class EvalInputError(ValueError):
    """A problem set, answers file or option the user gave is unusable; one line says why."""


class EvalConfig(BaseModel):
    """Everything that defines an evaluation run; recorded in its results."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    model: str | None = Field(None, description="model spec (see cuset_core.models); None with answers")
    answers: Path | None = Field(None, description="JSONL answers to score instead of generating")
    problems: str = Field(description='folder of .py problems, a .py file, a .jsonl file, "demo", "demo:held-out"')
    samples: int = Field(1, ge=1, le=1000, description="K: samples per problem")
    temperature: float = Field(0.8, ge=0.0, description="for sampled answers (not the greedy one)")
    top_p: float = Field(0.95, gt=0.0, le=1.0)
    greedy_first: bool = Field(True, description="sample 0 is greedy, the rest sampled")
    max_new_tokens: int = Field(1024, ge=1)
    tier: Tier = Tier.COMPILE
    prompt_style: Literal["kernelbench", "compact"] = "kernelbench"
    seed: int = 0
    batch_size: int = Field(4, ge=1, description="problems per generation batch")
    cache: bool = Field(True, description="reuse cached verification results")
    cache_dir: Path | None = Field(None, description="verification cache folder; None: the default one")

    @model_validator(mode="after")
    def _one_source(self) -> "EvalConfig":
        if (self.model is None) == (self.answers is None):
            raise ValueError("give exactly one of model (to generate answers) or answers (to score them)")
        return self

    def verify_settings(self) -> VerifySettings:
        """Verification settings of this run."""
        return VerifySettings(tier=self.tier)


@dataclass(frozen=True)
class Problem:
    """One KernelBench-format problem."""

    id: str
    code: str


class SampleRecord(BaseModel):
    """One scored sample: the answer text, generation facts when generated, and its result."""

    problem_id: str
    index: int
    answer: str
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    finish_reason: str | None = None
    result: VerifyResult


class EvalReport(BaseModel):
    """The whole run: config, aggregate metrics, per-problem rows and every sample."""

    config: EvalConfig
    aggregate: Aggregate
    problems: list[ProblemRow]
    samples: list[SampleRecord]
    elapsed_s: float


# ---------------------------------------------------------------- inputs


def load_problems(spec: str) -> list[Problem]:
    """The problem set named by ``spec`` (see the module docstring), in a stable order."""
    if spec in (DEMO_PROBLEMS, DEMO_HELD_OUT):
        from cuset_core.demo import HELD_OUT, demo_problems

        chosen = [p for p in demo_problems() if spec == DEMO_PROBLEMS or p.id in HELD_OUT]
        return [Problem(p.id, p.problem_code) for p in chosen]
    path = Path(spec).expanduser()
    if path.is_dir():
        files = sorted(path.glob("*.py"))
        if not files:
            raise EvalInputError(f"problems: folder {spec} holds no .py files")
        return [Problem(f.stem, f.read_text()) for f in files]
    if path.is_file() and path.suffix == ".py":
        return [Problem(path.stem, path.read_text())]
    if path.is_file() and path.suffix == ".jsonl":
        return _problems_from_jsonl(path)
    raise EvalInputError(
        f'problems: {spec} is not a folder of .py files, a .py file, a .jsonl file, "demo" or "demo:held-out"'
    )


def _problems_from_jsonl(path: Path) -> list[Problem]:
    problems: list[Problem] = []
    seen: set[str] = set()
    for line_no, row in _jsonl_rows(path):
        problem_id, code = row.get("id"), row.get("problem")
        if not isinstance(problem_id, (str, int)) or not isinstance(code, str):
            raise EvalInputError(f'{path.name} line {line_no}: expected {{"id": str, "problem": str}}')
        if str(problem_id) in seen:
            raise EvalInputError(f"{path.name} line {line_no}: duplicate id {problem_id!r}")
        seen.add(str(problem_id))
        problems.append(Problem(str(problem_id), code))
    if not problems:
        raise EvalInputError(f"{path.name}: no problems")
    return problems


def load_answers(path: Path, problem_ids: list[str]) -> dict[str, list[str]]:
    """Answers per problem id, in file order; every id must name a problem of the set."""
    if not path.is_file():
        raise EvalInputError(f"answers: file not found: {path}")
    known = set(problem_ids)
    answers: dict[str, list[str]] = {pid: [] for pid in problem_ids}
    for line_no, row in _jsonl_rows(path):
        if "problem_id" in row and isinstance(row.get("answer"), str):
            problem_id, texts = row["problem_id"], [row["answer"]]
        elif "id" in row and isinstance(row.get("samples"), list) and all(isinstance(s, str) for s in row["samples"]):
            problem_id, texts = row["id"], row["samples"]
        else:
            raise EvalInputError(
                f'{path.name} line {line_no}: expected {{"problem_id", "answer": str}} '
                f'or {{"id", "samples": [str, ...]}}'
            )
        if str(problem_id) not in known:
            raise EvalInputError(f"{path.name} line {line_no}: problem id {problem_id!r} is not in the problem set")
        answers[str(problem_id)].extend(texts)
    if not any(answers.values()):
        raise EvalInputError(f"{path.name}: no answers")
    return answers


def _jsonl_rows(path: Path) -> list[tuple[int, dict[str, Any]]]:
    rows = []
    for line_no, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise EvalInputError(f"{path.name} line {line_no}: not valid JSON ({exc.msg})") from None
        if not isinstance(row, dict):
            raise EvalInputError(f"{path.name} line {line_no}: expected a JSON object")
        rows.append((line_no, row))
    return rows


# ---------------------------------------------------------------- generation


@dataclass(frozen=True)
class _Sample:
    answer: str
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    finish_reason: str | None = None


def _generate_samples(config: EvalConfig, problems: list[Problem], progress: bool) -> dict[str, list[_Sample]]:
    """K samples per problem from the configured model, batched over problems."""
    from cuset_core.generation.prompts import build_messages
    from cuset_core.generation.sampling import generate
    from cuset_core.models import inference_dtype, load_model, place_for_inference

    model, tokenizer = load_model(config.model, inference_dtype())
    model = place_for_inference(model)  # generation dominates an eval's time; the GPU is what it is for
    greedy = 1 if config.greedy_first else 0
    sampled = config.samples - greedy
    out: dict[str, list[_Sample]] = {p.id: [] for p in problems}
    batches = [problems[i : i + config.batch_size] for i in range(0, len(problems), config.batch_size)]
    for batch in tqdm(batches, desc="generate", unit="batch", disable=not progress):
        messages = [build_messages(p.code, config.prompt_style) for p in batch]
        runs = []
        if greedy:
            runs.append(dict(n=1, temperature=0.0, top_p=1.0))
        if sampled:
            runs.append(dict(n=sampled, temperature=config.temperature, top_p=config.top_p))
        for run in runs:
            generated = generate(model, tokenizer, messages, max_new_tokens=config.max_new_tokens,
                                 seed=config.seed, **run)
            for problem, texts in zip(batch, generated):
                out[problem.id].extend(
                    _Sample(g.text, g.prompt_tokens, g.completion_tokens, g.finish_reason) for g in texts
                )
    return out


# ---------------------------------------------------------------- run


def run_eval(config: EvalConfig, *, progress: bool = True) -> EvalReport:
    """Generate (or read) the samples, verify each, and compute the metrics."""
    start = time.perf_counter()
    problems = load_problems(config.problems)
    if config.answers is not None:
        answers = load_answers(config.answers, [p.id for p in problems])
        samples = {pid: [_Sample(text) for text in texts] for pid, texts in answers.items()}
    else:
        samples = _generate_samples(config, problems, progress)
    settings = config.verify_settings()
    total = sum(len(s) for s in samples.values())
    records: list[SampleRecord] = []
    with tqdm(total=total, desc=f"verify ({config.tier.value})", unit="sample", disable=not progress) as bar:
        for problem in problems:
            for index, sample in enumerate(samples[problem.id]):
                result = verify(problem.code, sample.answer, settings, cache_dir=config.cache_dir,
                                use_cache=config.cache)
                records.append(SampleRecord(problem_id=problem.id, index=index, answer=sample.answer,
                                            prompt_tokens=sample.prompt_tokens,
                                            completion_tokens=sample.completion_tokens,
                                            finish_reason=sample.finish_reason, result=result))
                bar.update(1)
    rows = [problem_row(p.id, [r.result for r in records if r.problem_id == p.id]) for p in problems]
    largest = config.samples if config.answers is None else max((row.n for row in rows), default=1)
    k_values = sorted({1, max(largest, 1)})
    return EvalReport(
        config=config,
        aggregate=aggregate(rows, config.tier, k_values),
        problems=rows,
        samples=records,
        elapsed_s=time.perf_counter() - start,
    )
