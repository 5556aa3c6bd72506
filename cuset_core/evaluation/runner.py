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
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from tqdm import tqdm

from cuset_core.evaluation.inputs import EvalInputError, ProblemAnswers
from cuset_core.evaluation.kernelbench_runs import kernelbench_number, load_kernelbench_run
from cuset_core.evaluation.metrics import Aggregate, ProblemRow, aggregate, problem_row, repaired_counts
from cuset_core.evaluation.settings import VerificationSettings
from cuset_core.generation.endpoint import is_endpoint_spec, parse_endpoint
from cuset_core.models import recorded_prompt_style
from cuset_core.verify.reference_pool import ReferencePool
from cuset_core.verify.result import VerifyResult
from cuset_core.verify.run import verify
from cuset_core.verify.settings import VerifySettings

DEMO_PROBLEMS = "demo"
DEMO_HELD_OUT = "demo:held-out"
MAX_REPAIR_ROUNDS = 10  # each round may decode again every sample that is still failing


class EvalEngineError(EvalInputError):
    """The endpoint that decodes the eval failed a request: ``url`` is the request's URL and
    ``status`` the HTTP status it answered (None: it could not be reached, or broke off)."""

    def __init__(self, message: str, *, url: str | None, status: int | None) -> None:
        super().__init__(message)
        self.url, self.status = url, status


class EvalConfig(VerificationSettings):
    """Everything that defines an evaluation run (the verification knobs of
    ``VerificationSettings``, then the source and decoding); recorded in its results."""

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
    prompt_style: Literal["kernelbench", "compact"] | None = Field(
        None, description="None: the style the adapter was tuned with (recorded beside it), else kernelbench"
    )
    seed: int = 0
    batch_size: int = Field(4, ge=1, description="problems per generation batch")
    repair_rounds: int = Field(
        0,
        ge=0,
        le=MAX_REPAIR_ROUNDS,
        description="R: times a failing sample (greedy or i.i.d.) is sent back to the model with its verifier "
        "error as a follow-up turn; the results then also give the figures within R repairs",
    )
    problem_ids: str | None = Field(
        None,
        description="the problems to keep, by KernelBench number or id: '1-10,19,23_Softmax'; None: all",
    )
    workers: int = Field(1, ge=1, le=64, description="problems verified at once (each check is its own sandbox)")
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
    def _default_prompt_style(self) -> EvalConfig:
        """An adapter is measured on the prompt it was tuned on unless a style is asked for."""
        if self.prompt_style is None:
            self.prompt_style = recorded_prompt_style(self.model) or "kernelbench"
        return self

    @model_validator(mode="after")
    def _one_source(self) -> EvalConfig:
        if self.model is None and self.answers is None:
            raise ValueError("give exactly one of model (to generate answers) or answers (to score them)")
        if self.model is not None and self.answers is not None and not self.repair_rounds:
            raise ValueError("give exactly one of model (to generate answers) or answers (to score them)")
        if self.repair_rounds and self.model is None:
            raise ValueError("repair_rounds: repairs need a model to send failing samples back to")
        if self.model is not None and is_endpoint_spec(self.model):
            parse_endpoint(self.model)
        generating = self.answers is None
        if generating and not self.greedy and self.samples == 0:
            raise ValueError("nothing to generate: turn greedy on or ask for samples >= 1")
        for k in self.k or []:
            if k < 1 or (generating and k > self.samples):
                raise ValueError(f"k={k}: pass@k needs 1 <= k <= samples ({self.samples} i.i.d. samples per problem)")
        return self

    @property
    def k_values(self) -> list[int]:
        """The k of pass@k when generating: ``k`` sorted, or 1 and ``samples``; [] without samples."""
        if self.k is not None:
            return sorted(set(self.k))
        return sorted({1, self.samples}) if self.samples else []


@dataclass(frozen=True)
class Problem:
    """One KernelBench-format problem."""

    id: str
    code: str


class SampleRecord(BaseModel):
    """One scored attempt: the answer text, generation facts when generated, and its result.
    ``greedy`` marks the problem's greedy sample (index 0 when there is one) and its repairs.
    A repair (round r >= 1) answers the follow-up turn showing attempt ``repair_of`` (of round
    r - 1) and its verifier error; repairs follow a problem's drawn samples, in rounds."""

    problem_id: str
    index: int
    greedy: bool = False
    answer: str
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    finish_reason: str | None = None
    result: VerifyResult
    round: int = Field(0, description="0 for a drawn or given sample, r for the r-th repair of one")
    repair_of: int | None = Field(None, description="index of the failed attempt this one repairs")


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


def select_problems(problems: list[Problem], selection: str | None) -> list[Problem]:
    """The problems ``selection`` names, in their order: comma-separated KernelBench numbers
    (``19``), ranges of them (``1-10``) and ids (``23_Softmax``); all when None.
    ``EvalInputError`` for a part that names no problem, so a typo never silently shrinks a run."""
    if selection is None:
        return problems
    numbers: set[int] = set()
    ids: set[str] = set()
    for part in (part.strip() for part in selection.split(",")):
        bounds = part.split("-")
        if len(bounds) == 2 and all(bound.strip().isdigit() for bound in bounds):
            numbers.update(range(int(bounds[0]), int(bounds[1]) + 1))
        elif part.isdigit():
            numbers.add(int(part))
        elif part:
            ids.add(part)
    chosen = [p for p in problems if p.id in ids or kernelbench_number(p.id) in numbers]
    unknown = sorted(ids - {p.id for p in chosen})
    if unknown or not chosen:
        named = f"{', '.join(unknown)} " if unknown else ""
        raise EvalInputError(f"problem_ids: {named or repr(selection) + ' '}names no problem of the set")
    return chosen


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


def load_answers(path: Path, problem_ids: list[str]) -> dict[str, ProblemAnswers]:
    """Answers per problem id, from a JSONL file or a KernelBench run folder; every id must name a
    problem of the set, and a problem has at most one greedy answer."""
    if path.is_dir():
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


Conversation = list[dict]


@dataclass(frozen=True)
class Run:
    """One decoding run: ``n`` answers per conversation at ``temperature`` (0: greedy)."""

    greedy: bool
    n: int
    temperature: float
    top_p: float

    def sampling(self) -> dict[str, Any]:
        return dict(n=self.n, temperature=self.temperature, top_p=self.top_p)


# The answers to each conversation of a batch, in order, for one run (``seed``: the run's seed).
Decode = Callable[[list[Conversation], Run, int], list[list[Answer]]]


def _runs(config: EvalConfig) -> list[Run]:
    """The decoding runs per problem, greedy first."""
    runs: list[Run] = []
    if config.greedy:
        runs.append(_repair_run(config, greedy=True))
    if config.samples:
        runs.append(Run(False, config.samples, config.temperature, config.top_p))
    return runs


def _repair_run(config: EvalConfig, *, greedy: bool) -> Run:
    """One answer per conversation, greedy or at the i.i.d. samples' temperature."""
    return Run(True, 1, 0.0, 1.0) if greedy else Run(False, 1, config.temperature, config.top_p)


def model_decoder(model, tokenizer, config: EvalConfig) -> Decode:
    """Answers from a model loaded in this process, one ``sampling.generate`` batch per call."""
    from cuset_core.generation.sampling import generate

    def decode(conversations: list[Conversation], run: Run, seed: int) -> list[list[Answer]]:
        generated = generate(
            model, tokenizer, conversations, max_new_tokens=config.max_new_tokens, seed=seed, **run.sampling()
        )
        return [
            [Answer(g.text, run.greedy, g.prompt_tokens, g.completion_tokens, g.finish_reason) for g in texts]
            for texts in generated
        ]

    return decode


@contextmanager
def _decoder(config: EvalConfig, api_key: str | None) -> Iterator[Decode]:
    """The configured model's ``Decode``: the model loaded for this run, or an ``openai:``
    endpoint (:func:`endpoint_decoder`)."""
    if is_endpoint_spec(config.model):
        with endpoint_decoder(config, api_key) as decode:
            yield decode
        return
    from cuset_core.models import inference_dtype, load_model, place_for_inference

    model, tokenizer = load_model(config.model, inference_dtype())
    # generation dominates an eval's time; the GPU is what it is for
    yield model_decoder(place_for_inference(model), tokenizer, config)


@contextmanager
def endpoint_decoder(config: EvalConfig, api_key: str | None, *, supports_n: bool = True) -> Iterator[Decode]:
    """Answers from the ``openai:`` endpoint that ``config.model`` names: one chat request per
    conversation, ``batch_size`` requests in flight (``supports_n`` off: one per answer, see
    ``chat_answers``); ``EvalEngineError`` naming the URL and the status when a request fails."""
    import httpx

    from cuset_core.generation.endpoint import DEFAULT_TIMEOUT_S, EndpointError, chat_answers

    endpoint = replace(parse_endpoint(config.model), supports_n=supports_n)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    with (
        httpx.Client(headers=headers, timeout=DEFAULT_TIMEOUT_S) as client,
        ThreadPoolExecutor(max_workers=config.batch_size) as pool,
    ):

        def decode(conversations: list[Conversation], run: Run, seed: int) -> list[list[Answer]]:
            futures = [
                pool.submit(
                    chat_answers, client, endpoint, m, max_tokens=config.max_new_tokens, seed=seed, **run.sampling()
                )
                for m in conversations
            ]
            try:
                replies = [future.result() for future in futures]
            except EndpointError as exc:
                for future in futures:
                    future.cancel()
                raise EvalEngineError(str(exc), url=exc.url, status=exc.status) from None
            return [
                [Answer(a.text, run.greedy, a.prompt_tokens, a.completion_tokens, a.finish_reason) for a in answers]
                for answers in replies
            ]

        yield decode


def _generate_samples(
    decode: Decode, config: EvalConfig, problems: list[Problem], progress: bool, on_progress: StageProgress
) -> dict[str, list[Answer]]:
    """:func:`answers_for` over the whole set, ``config.batch_size`` problems at a time."""
    batches = [problems[i : i + config.batch_size] for i in range(0, len(problems), config.batch_size)]
    out: dict[str, list[Answer]] = {}
    for batch in tqdm(batches, desc="generate", unit="batch", disable=not progress):
        out |= answers_for(decode, config, batch)
        on_progress("sampling", len(out), len(problems))
    return out


def answers_for(decode: Decode, config: EvalConfig, problems: list[Problem]) -> dict[str, list[Answer]]:
    """Per problem, the greedy answer (when ``config.greedy``) then ``config.samples`` i.i.d.
    answers at ``config.temperature``, in one batch over ``problems`` (callers pass
    ``config.batch_size`` problems at a time, in set order, so seeds match run to run)."""
    from cuset_core.generation.prompts import build_messages

    out: dict[str, list[Answer]] = {p.id: [] for p in problems}
    messages = [build_messages(p.code, config.prompt_style) for p in problems]
    for run in _runs(config):
        for problem, answers in zip(problems, decode(messages, run, config.seed)):
            out[problem.id].extend(answers)
    return out


def score_problem(
    problem: Problem, answers: list[Answer], settings: VerifySettings, cache_dir: Path | None, use_cache: bool
) -> tuple[ProblemRow, list[SampleRecord]]:
    """Verify every answer of one problem; its row (greedy and i.i.d. apart) and the samples.

    The answers share one reference run per tier (:class:`ReferencePool`): one secret input seed
    for the problem in this eval."""
    references = ReferencePool()
    records = [
        score_attempt(problem, index, sample, settings, cache_dir, use_cache, references=references)
        for index, sample in enumerate(answers)
    ]
    return row_of(problem.id, records), records


def score_attempt(
    problem: Problem,
    index: int,
    sample: Answer,
    settings: VerifySettings,
    cache_dir: Path | None,
    use_cache: bool,
    repair_of: SampleRecord | None = None,
    references: ReferencePool | None = None,
) -> SampleRecord:
    """``sample`` verified as attempt ``index`` of ``problem`` (a repair of ``repair_of`` when given),
    on the reference runs of ``references`` when given (the problem's other attempts')."""
    return SampleRecord(
        problem_id=problem.id,
        index=index,
        greedy=sample.greedy,
        answer=sample.answer,
        prompt_tokens=sample.prompt_tokens,
        completion_tokens=sample.completion_tokens,
        finish_reason=sample.finish_reason,
        result=verify(problem.code, sample.answer, settings, cache_dir, use_cache, references),
        round=0 if repair_of is None else repair_of.round + 1,
        repair_of=None if repair_of is None else repair_of.index,
    )


def row_of(problem_id: str, records: list[SampleRecord], repair_rounds: int = 0) -> ProblemRow:
    """A problem's row from its attempts: the plain counts over the drawn samples (round 0) and,
    with ``repair_rounds``, the counts over each drawn sample's chain of repairs."""
    drawn = [r for r in records if r.round == 0]
    greedy = next((r for r in drawn if r.greedy), None)
    row = problem_row(problem_id, [r.result for r in drawn if not r.greedy], None if greedy is None else greedy.result)
    if not repair_rounds:
        return row
    chains = {r.index: [r] for r in drawn}
    for record in records:  # a repair comes after the attempt it repairs
        if record.repair_of is not None:
            chains[record.index] = chains.pop(record.repair_of) + [record]
    sampled = [[r.result for r in chain] for chain in chains.values() if not chain[0].greedy]
    greedy_chain = next(([r.result for r in chain] for chain in chains.values() if chain[0].greedy), None)
    return row.model_copy(update={"repaired": repaired_counts(repair_rounds, sampled, greedy_chain)})


def repair_candidates(records: list[SampleRecord], round_: int) -> list[SampleRecord]:
    """The attempts that round ``round_`` repairs: those of round ``round_ - 1`` that failed in a
    repairable way (the rule ``/v1/generate`` uses), in record order."""
    from cuset_core.generation.prompts import repairable

    return [r for r in records if r.round == round_ - 1 and repairable(r.result)]


def repair_answers(
    decode: Decode,
    config: EvalConfig,
    problems: dict[str, Problem],
    attempts: list[SampleRecord],
    round_: int,
    progress: bool = False,
) -> list[Answer]:
    """One repair per attempt, in ``attempts``' order: the follow-up turn showing the attempt and
    its verifier error, decoded like its drawn sample (greedy, or at the i.i.d. temperature, seed
    ``seed + round_``), ``batch_size`` at a time, greedy attempts first. ``problems`` by id."""
    from cuset_core.generation.prompts import build_messages, repair_messages

    answers: dict[int, Answer] = {}
    for greedy in (True, False):
        todo = [(i, r) for i, r in enumerate(attempts) if r.greedy is greedy]
        batches = [todo[i : i + config.batch_size] for i in range(0, len(todo), config.batch_size)]
        for batch in tqdm(batches, desc=f"repair {round_}", unit="batch", disable=not progress):
            conversations = [
                repair_messages(build_messages(problems[r.problem_id].code, config.prompt_style), r.answer, r.result)
                for _, r in batch
            ]
            replies = decode(conversations, _repair_run(config, greedy=greedy), config.seed + round_)
            answers |= {i: reply[0] for (i, _), reply in zip(batch, replies)}
    return [answers[i] for i in range(len(attempts))]


def score_repairs(
    problem: Problem,
    records: list[SampleRecord],
    repairs: list[tuple[int, Answer]],
    settings: VerifySettings,
    cache_dir: Path | None,
    use_cache: bool,
) -> None:
    """Verify each ``(index, answer)`` of ``repairs`` as the repair of attempt ``index`` of
    ``records`` (one problem's attempts), on one shared reference run, and append it there."""
    references = ReferencePool()
    for index, answer in repairs:
        repaired = records[index]
        records.append(
            score_attempt(problem, len(records), answer, settings, cache_dir, use_cache, repaired, references)
        )


def repair(
    decode: Decode,
    config: EvalConfig,
    problems: list[Problem],
    records: dict[str, list[SampleRecord]],
    settings: VerifySettings,
    progress: bool = False,
) -> None:
    """Append up to ``config.repair_rounds`` rounds of repairs to ``records`` (per problem id):
    in round r every attempt of round r - 1 that failed in a repairable way is sent back to the
    model (:func:`repair_answers`) and its repair verified."""
    by_id = {p.id: p for p in problems}
    for round_ in range(1, config.repair_rounds + 1):
        failed = [r for p in problems for r in repair_candidates(records[p.id], round_)]
        answers = repair_answers(decode, config, by_id, failed, round_, progress)
        for problem in problems:
            own = [(a.index, answer) for a, answer in zip(failed, answers) if a.problem_id == problem.id]
            score_repairs(problem, records[problem.id], own, settings, config.cache_dir, config.cache)


# ---------------------------------------------------------------- run


# Told ``(stage, problems done, problems in all)`` as an eval advances: stage "sampling" after each
# batch of problems is generated, "verifying" after each problem's samples are verified.
StageProgress = Callable[[str, int, int], None]


def _unheard(stage: str, done: int, total: int) -> None:
    """The default :data:`StageProgress`: nobody listens."""


def run_eval(
    config: EvalConfig,
    *,
    progress: bool = True,
    api_key: str | None = None,
    on_progress: StageProgress = _unheard,
) -> EvalReport:
    """Generate (or read) the samples, verify each, repair failing ones (``repair_rounds``), and
    compute the metrics. ``api_key`` is the bearer token of an ``openai:`` endpoint (never
    recorded in the report); ``on_progress`` hears each stage advance (a job's progress lines)."""
    start = time.perf_counter()
    every_problem = load_problems(config.problems)
    problems = select_problems(every_problem, config.problem_ids)
    if config.answers is not None:
        # Answers may cover problems the selection leaves out (a KernelBench run folder holds a whole level).
        chosen = {p.id for p in problems}
        answers = {
            pid: found
            for pid, found in load_answers(config.answers, [p.id for p in every_problem]).items()
            if pid in chosen
        }
        k_values = _answer_k_values(config, answers)
        samples = {pid: _answer_samples(a) for pid, a in answers.items()}
    else:
        k_values = config.k_values
    settings = config.verify_settings()
    with _decoder(config, api_key) if config.model is not None else nullcontext() as decode:
        if config.answers is None:
            samples = _generate_samples(decode, config, problems, progress, on_progress)
        records = _verify_all(problems, samples, settings, config, progress, on_progress)
        if config.repair_rounds:
            repair(decode, config, problems, records, settings, progress)
    rows = [row_of(p.id, records[p.id], config.repair_rounds) for p in problems]
    return EvalReport(
        config=config,
        aggregate=aggregate(rows, config.tier, k_values),
        problems=rows,
        samples=[record for p in problems for record in records[p.id]],
        elapsed_s=time.perf_counter() - start,
    )


def _verify_all(
    problems: list[Problem],
    samples: dict[str, list[Answer]],
    settings: VerifySettings,
    config: EvalConfig,
    progress: bool,
    on_progress: StageProgress,
) -> dict[str, list[SampleRecord]]:
    """Every problem's samples verified, ``config.workers`` problems at a time (each verification
    runs its own sandboxed processes, so threads are enough to keep the cores busy)."""
    records: dict[str, list[SampleRecord]] = {}
    bar = tqdm(total=len(problems), desc=f"verify ({config.tier.value})", unit="problem", disable=not progress)
    with bar, ThreadPoolExecutor(max_workers=config.workers) as pool:
        futures = {
            pool.submit(score_problem, problem, samples[problem.id], settings, config.cache_dir, config.cache): problem
            for problem in problems
        }
        for future in as_completed(futures):
            records[futures[future].id] = future.result()[1]
            bar.update()
            on_progress("verifying", len(records), len(problems))
    return records


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
