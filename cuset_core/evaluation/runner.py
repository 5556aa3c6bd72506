"""Run a model (or score given answers) over a KernelBench-format problem set.

Problems come from a folder of ``.py`` files (id = file stem), a single ``.py`` file, a
``.jsonl`` file of ``{"id", "problem"}`` rows, ``"demo"`` (the bundled demo set) or
``"demo:held-out"`` (its problems kept out of training data). Answers to
score without a model come from a ``.jsonl`` file of ``{"problem_id", "answer"}`` rows (one
per sample, several rows per problem allowed; ``"greedy": true`` marks a problem's greedy
answer) or ``{"id", "samples": [...]}`` rows (optionally ``"greedy": "<answer>"``), or from a
KernelBench ``runs/<run_name>`` folder of generations (:mod:`.kernelbench_runs`).

With a model, samples are generated in batches of problems: one greedy sample per problem
when ``greedy`` is on, drawn apart, and ``samples`` i.i.d. samples at ``temperature``. The model
is loaded in this process, or is any OpenAI-compatible endpoint (``openai:URL#NAME``), asked
``batch_size`` problems at a time. Every sample is verified up to ``tier`` with the run's
verification knobs (correctness trials and their input seed, tolerances, nvcc arch, the
torch.compile baseline); the greedy sample feeds the greedy metrics and the i.i.d. ones pass@k
(:mod:`.metrics`), never the other way round.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from tqdm import tqdm

from cuset_core.evaluation.metrics import Aggregate, ProblemRow, aggregate, problem_row
from cuset_core.generation.endpoint import is_endpoint_spec, parse_endpoint
from cuset_core.verify.result import Tier, VerifyResult
from cuset_core.verify.run import verify
from cuset_core.verify.settings import ToleranceProfile, VerifySettings

DEMO_PROBLEMS = "demo"
DEMO_HELD_OUT = "demo:held-out"


class EvalInputError(ValueError):
    """A problem set, answers file or option the user gave is unusable; one line says why."""


class EvalConfig(BaseModel):
    """Everything that defines an evaluation run; recorded in its results."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    model: str | None = Field(
        None, description="model spec (see cuset_core.models) or openai:URL#NAME (an endpoint); None with answers"
    )
    answers: Path | None = Field(
        None, description="JSONL answers, or a KernelBench runs/<name> folder, to score instead of generating"
    )
    problems: str = Field(description='folder of .py problems, a .py file, a .jsonl file, "demo", "demo:held-out"')
    greedy: bool = Field(True, description="draw one greedy sample per problem, apart (greedy metrics)")
    samples: int = Field(0, ge=0, le=1000, description="n: i.i.d. samples per problem at temperature (pass@k)")
    k: list[int] | None = Field(None, description="the k of pass@k; None: 1 and n")
    temperature: float = Field(0.8, ge=0.0, description="of the i.i.d. samples")
    top_p: float = Field(0.95, gt=0.0, le=1.0)
    max_new_tokens: int = Field(1024, ge=1)
    tier: Tier = Tier.COMPILE
    trials: int = Field(5, ge=1, le=20, description="correctness trials per sample (tiers 2-3; KernelBench: 5)")
    input_seed: int = Field(
        1000, ge=0, le=2**31 - 1, description="trial i draws the problem's inputs under seed input_seed + i"
    )
    tolerance_profile: ToleranceProfile = Field(
        "kernelbench", description="kernelbench: atol = rtol = 1e-4 for fp32, 1e-2 for fp16/bf16; v0: 1e-2 for all"
    )
    atol: float | None = Field(
        None, ge=0, allow_inf_nan=False, description="absolute tolerance for every dtype; None: the profile's"
    )
    rtol: float | None = Field(
        None, ge=0, allow_inf_nan=False, description="relative tolerance for every dtype; None: the profile's"
    )
    arch: str = Field("sm_90", pattern=r"^sm_\d+[a-z]?$", description="nvcc target of tier 1 (compile)")
    compile_baseline: bool = Field(False, description="tier 3: also time torch.compile of the reference")
    prompt_style: Literal["kernelbench", "compact"] = "kernelbench"
    seed: int = 0
    batch_size: int = Field(4, ge=1, description="problems per generation batch")
    cache: bool = Field(True, description="reuse cached verification results")
    cache_dir: Path | None = Field(None, description="verification cache folder; None: the default one")

    @model_validator(mode="before")
    @classmethod
    def _legacy_greedy_first(cls, data: Any) -> Any:
        """Configs recorded before the greedy sample was drawn apart: ``greedy_first`` made
        sample 0 of ``samples`` greedy, so the same draws are 1 greedy + samples - 1 i.i.d."""
        if isinstance(data, dict) and "greedy_first" in data:
            data = dict(data)
            first = bool(data.pop("greedy_first"))
            data.setdefault("greedy", first)
            data["samples"] = int(data.get("samples", 1)) - int(first)
        return data

    @model_validator(mode="after")
    def _one_source(self) -> EvalConfig:
        if (self.model is None) == (self.answers is None):
            raise ValueError("give exactly one of model (to generate answers) or answers (to score them)")
        if self.model is not None and is_endpoint_spec(self.model):
            parse_endpoint(self.model)
        if self.model is not None and not self.greedy and self.samples == 0:
            raise ValueError("nothing to generate: turn greedy on or ask for samples >= 1")
        for k in self.k or []:
            if k < 1 or (self.model is not None and k > self.samples):
                raise ValueError(f"k={k}: pass@k needs 1 <= k <= samples ({self.samples} i.i.d. samples per problem)")
        return self

    @property
    def k_values(self) -> list[int]:
        """The k of pass@k when generating: ``k`` sorted, or 1 and ``samples``; [] without samples."""
        if self.k is not None:
            return sorted(set(self.k))
        return sorted({1, self.samples}) if self.samples else []

    def verify_settings(self) -> VerifySettings:
        """Verification settings of this run."""
        return VerifySettings(
            tier=self.tier,
            arch=self.arch,
            seeds=self.trials,
            input_seed=self.input_seed,
            tolerance_profile=self.tolerance_profile,
            atol=self.atol,
            rtol=self.rtol,
            compile_baseline=self.compile_baseline,
        )


@dataclass(frozen=True)
class Problem:
    """One KernelBench-format problem."""

    id: str
    code: str


class SampleRecord(BaseModel):
    """One scored sample: the answer text, generation facts when generated, and its result.
    ``greedy`` marks the problem's greedy sample (index 0 when there is one)."""

    problem_id: str
    index: int
    greedy: bool = False
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


@dataclass(frozen=True)
class ProblemAnswers:
    """A problem's answers: its greedy one (None: none) and its i.i.d. samples, in file order."""

    greedy: str | None
    sampled: list[str]


def load_answers(path: Path, problem_ids: list[str]) -> dict[str, ProblemAnswers]:
    """Answers per problem id, from a JSONL file or a KernelBench run folder; every id must name a
    problem of the set, and a problem has at most one greedy answer."""
    if path.is_dir():
        from cuset_core.evaluation.kernelbench_runs import load_kernelbench_run

        return load_kernelbench_run(path, problem_ids)
    if not path.is_file():
        raise EvalInputError(f"answers: file not found: {path}")
    known = set(problem_ids)
    greedy: dict[str, str] = {}
    sampled: dict[str, list[str]] = {pid: [] for pid in problem_ids}
    for line_no, row in _jsonl_rows(path):
        if "problem_id" in row and isinstance(row.get("answer"), str) and isinstance(row.get("greedy", False), bool):
            problem_id = str(row["problem_id"])
            first, texts = (row["answer"], []) if row.get("greedy") else (None, [row["answer"]])
        elif (
            "id" in row
            and isinstance(row.get("samples"), list)
            and all(isinstance(s, str) for s in row["samples"])
            and isinstance(row.get("greedy", ""), str)
        ):
            problem_id, first, texts = str(row["id"]), row.get("greedy"), row["samples"]
        else:
            raise EvalInputError(
                f'{path.name} line {line_no}: expected {{"problem_id", "answer": str, "greedy"?: bool}} '
                f'or {{"id", "samples": [str, ...], "greedy"?: str}}'
            )
        if problem_id not in known:
            raise EvalInputError(f"{path.name} line {line_no}: problem id {problem_id!r} is not in the problem set")
        if first is not None:
            if problem_id in greedy:
                raise EvalInputError(f"{path.name} line {line_no}: a second greedy answer for problem {problem_id!r}")
            greedy[problem_id] = first
        sampled[problem_id].extend(texts)
    if not greedy and not any(sampled.values()):
        raise EvalInputError(f"{path.name}: no answers")
    return {pid: ProblemAnswers(greedy.get(pid), sampled[pid]) for pid in problem_ids}


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
class Answer:
    """One answer to score: its text, whether it is the greedy one, and generation facts."""

    answer: str
    greedy: bool = False
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    finish_reason: str | None = None


def _runs(config: EvalConfig) -> list[tuple[bool, dict[str, Any]]]:
    """The decoding runs per problem: (greedy?, sampling arguments), greedy first."""
    runs: list[tuple[bool, dict[str, Any]]] = []
    if config.greedy:
        runs.append((True, dict(n=1, temperature=0.0, top_p=1.0)))
    if config.samples:
        runs.append((False, dict(n=config.samples, temperature=config.temperature, top_p=config.top_p)))
    return runs


def _generate_samples(
    config: EvalConfig, problems: list[Problem], progress: bool, api_key: str | None
) -> dict[str, list[Answer]]:
    """:func:`generate_answers` from the configured model, loaded for this run, or the same
    answers from an ``openai:`` endpoint."""
    if is_endpoint_spec(config.model):
        return endpoint_answers(config, problems, progress, api_key)
    from cuset_core.models import inference_dtype, load_model, place_for_inference

    model, tokenizer = load_model(config.model, inference_dtype())
    model = place_for_inference(model)  # generation dominates an eval's time; the GPU is what it is for
    batches = [problems[i : i + config.batch_size] for i in range(0, len(problems), config.batch_size)]
    out: dict[str, list[Answer]] = {}
    for batch in tqdm(batches, desc="generate", unit="batch", disable=not progress):
        out |= generate_answers(model, tokenizer, config, batch)
    return out


def generate_answers(model, tokenizer, config: EvalConfig, problems: list[Problem]) -> dict[str, list[Answer]]:
    """Per problem, the greedy answer (when ``config.greedy``) then ``config.samples`` i.i.d.
    answers at ``config.temperature``, from ``model`` in one batch over ``problems`` (callers
    pass ``config.batch_size`` problems at a time, in set order, so seeds match run to run)."""
    from cuset_core.generation.prompts import build_messages
    from cuset_core.generation.sampling import generate

    out: dict[str, list[Answer]] = {p.id: [] for p in problems}
    messages = [build_messages(p.code, config.prompt_style) for p in problems]
    for greedy, run in _runs(config):
        generated = generate(model, tokenizer, messages, max_new_tokens=config.max_new_tokens, seed=config.seed, **run)
        for problem, texts in zip(problems, generated):
            out[problem.id].extend(
                Answer(g.text, greedy, g.prompt_tokens, g.completion_tokens, g.finish_reason) for g in texts
            )
    return out


def score_problem(
    problem: Problem, answers: list[Answer], settings: VerifySettings, cache_dir: Path | None, use_cache: bool
) -> tuple[ProblemRow, list[SampleRecord]]:
    """Verify every answer of one problem; its row (greedy and i.i.d. apart) and the samples."""
    records = [
        SampleRecord(
            problem_id=problem.id,
            index=index,
            greedy=sample.greedy,
            answer=sample.answer,
            prompt_tokens=sample.prompt_tokens,
            completion_tokens=sample.completion_tokens,
            finish_reason=sample.finish_reason,
            result=verify(problem.code, sample.answer, settings, cache_dir=cache_dir, use_cache=use_cache),
        )
        for index, sample in enumerate(answers)
    ]
    greedy = next((r.result for r in records if r.greedy), None)
    return problem_row(problem.id, [r.result for r in records if not r.greedy], greedy), records


def endpoint_answers(
    config: EvalConfig, problems: list[Problem], progress: bool, api_key: str | None
) -> dict[str, list[Answer]]:
    """The answers of :func:`generate_answers` from an OpenAI-compatible endpoint: one chat
    request per problem and run (greedy, i.i.d.), ``batch_size`` requests in flight."""
    import httpx

    from cuset_core.generation.endpoint import DEFAULT_TIMEOUT_S, EndpointError, chat_answers
    from cuset_core.generation.prompts import build_messages

    endpoint = parse_endpoint(config.model)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    runs = _runs(config)

    def ask(client: httpx.Client, problem: Problem) -> list[Answer]:
        messages = build_messages(problem.code, config.prompt_style)
        answers = []
        for greedy, run in runs:
            replies = chat_answers(
                client, endpoint, messages, max_tokens=config.max_new_tokens, seed=config.seed, **run
            )
            answers += [Answer(a.text, greedy, a.prompt_tokens, a.completion_tokens, a.finish_reason) for a in replies]
        return answers

    with (
        httpx.Client(headers=headers, timeout=DEFAULT_TIMEOUT_S) as client,
        ThreadPoolExecutor(max_workers=config.batch_size) as pool,
    ):
        futures = {p.id: pool.submit(ask, client, p) for p in problems}
        try:
            return {
                pid: future.result()
                for pid, future in tqdm(futures.items(), desc="generate", unit="problem", disable=not progress)
            }
        except EndpointError as exc:
            for future in futures.values():
                future.cancel()
            raise EvalInputError(str(exc)) from None


# ---------------------------------------------------------------- run


def run_eval(config: EvalConfig, *, progress: bool = True, api_key: str | None = None) -> EvalReport:
    """Generate (or read) the samples, verify each, and compute the metrics. ``api_key`` is the
    bearer token of an ``openai:`` endpoint (never recorded in the report)."""
    start = time.perf_counter()
    problems = load_problems(config.problems)
    if config.answers is not None:
        answers = load_answers(config.answers, [p.id for p in problems])
        k_values = _answer_k_values(config, answers)
        samples = {pid: _answer_samples(a) for pid, a in answers.items()}
    else:
        k_values = config.k_values
        samples = _generate_samples(config, problems, progress, api_key)
    settings = config.verify_settings()
    rows: list[ProblemRow] = []
    records: list[SampleRecord] = []
    with tqdm(total=len(problems), desc=f"verify ({config.tier.value})", unit="problem", disable=not progress) as bar:
        for problem in problems:
            row, scored = score_problem(problem, samples[problem.id], settings, config.cache_dir, config.cache)
            rows.append(row)
            records += scored
            bar.update(1)
    return EvalReport(
        config=config,
        aggregate=aggregate(rows, config.tier, k_values),
        problems=rows,
        samples=records,
        elapsed_s=time.perf_counter() - start,
    )


def _answer_samples(answers: ProblemAnswers) -> list[Answer]:
    """The greedy answer first (when given), then the i.i.d. ones."""
    first = [] if answers.greedy is None else [Answer(answers.greedy, greedy=True)]
    return first + [Answer(text) for text in answers.sampled]


def _answer_k_values(config: EvalConfig, answers: dict[str, ProblemAnswers]) -> list[int]:
    """The k of pass@k over given answers: ``config.k``, or 1 and the fewest i.i.d. answers
    of a problem that has some; every such problem needs at least max(k) of them."""
    counts = {pid: len(a.sampled) for pid, a in answers.items() if a.sampled}
    if not counts:
        return []
    fewest = min(counts.values())
    k_values = sorted(set(config.k)) if config.k is not None else sorted({1, fewest})
    if k_values[-1] > fewest:
        short = min(counts, key=counts.get)
        raise EvalInputError(
            f"k: pass@{k_values[-1]} needs at least {k_values[-1]} i.i.d. answers per problem; "
            f"problem {short!r} has {fewest}"
        )
    return k_values
