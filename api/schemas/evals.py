"""Request and response shapes of ``/v1/evals``: evaluate a model over a problem set."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from cuset_core.evaluation.config import MAX_REPAIR_ROUNDS, EvalKnobs
from cuset_core.evaluation.metrics import Aggregate, ProblemRow
from cuset_core.evaluation.problems import DEMO_HELD_OUT, DEMO_PROBLEMS
from cuset_core.evaluation.settings import VerificationSettings
from db.errors import ErrorInfo
from db.evals import EvalProgress, EvalSampleRecord
from db.statuses import EvalStatus


class EvalCreate(VerificationSettings):
    """``POST /v1/evals``: a model, a problem source (an eval file or the demo set), decoding knobs and
    the verification knobs (``VerificationSettings``, the core's ``EvalConfig`` has the same).

    Limits that depend on the service settings (``samples``, ``max_tokens``, ``batch_size``,
    ``repair_rounds``) are checked by the router.
    """

    model_config = ConfigDict(extra="forbid")

    model: str = Field(min_length=1, description="a base model id or a fine_tuned_model of a succeeded job")
    eval_file: str | None = Field(None, description='id of a File with purpose "eval" ({"id", "problem"} JSONL rows)')
    problems: Literal[DEMO_PROBLEMS, DEMO_HELD_OUT] | None = Field(  # type: ignore[valid-type]
        None, description="the bundled demo set instead of a file"
    )
    problem_ids: str | None = Field(
        None,
        max_length=2000,
        description="only these problems of the set, by KernelBench number or id: '1-10,19,23_Softmax' "
        "(a KernelBench level uploaded as a file, say); default all",
    )
    greedy: bool = Field(True, description="draw one greedy sample per problem, apart: greedy compile@1, cpu_correct@1")
    samples: int = Field(0, ge=0, description="n: i.i.d. samples per problem at temperature, for pass@k")
    k: list[int] | None = Field(None, description="the k of pass@k (each 1..samples); default 1 and samples")
    temperature: float = Field(
        0.8,
        ge=0.0,
        le=2.0,
        description="of the i.i.d. samples; unset, a shipped adapter's card setting (cuset-ew-135m: 0.7), else 0.8",
    )
    top_p: float = Field(0.95, gt=0.0, le=1.0, description="unset: the adapter card's setting, else 0.95")
    max_tokens: int | None = Field(
        None,
        ge=1,
        description="new tokens per answer; default the adapter card's setting (cuset-ew-135m: 768), else "
        "min(1024, the service's ceiling)",
    )
    prompt_style: Literal["kernelbench", "compact"] | None = Field(
        None,
        description="the prompt format; default: the one the model was tuned with when it is an adapter that "
        "recorded it (a succeeded job's model, cuset-ew-135m: compact), else kernelbench",
    )
    seed: int = 0
    batch_size: int | None = Field(None, ge=1, description="problems generated together (progress advances per batch)")
    repair_rounds: int = Field(
        0,
        ge=0,
        le=MAX_REPAIR_ROUNDS,
        description="R: times a failing sample (greedy or i.i.d.) is sent back to the model with its verifier error "
        "as a follow-up turn; the aggregate then also has the figures within R repairs (``repaired``)",
    )


class EvalObject(BaseModel):
    """One evaluation; ``aggregate`` is the core's ``Aggregate`` once it has succeeded."""

    id: str
    object: Literal["eval"] = "eval"
    model: str
    status: EvalStatus
    eval_file: str | None = None
    problems: str | None = None
    config: EvalKnobs = Field(description="the core's evaluation knobs this run uses")
    progress: EvalProgress | None = None
    aggregate: Aggregate | None = Field(
        None,
        description="problems, samples, tier, k_values; greedy (problems, metrics compile@1, cpu_correct@1, "
        "correct@1, fast_<p>, verdicts) and sampled (pass@k from the i.i.d. samples: metrics compile@k ..., "
        "fast_p averaged over samples, verdicts), each null when no such sample was drawn; kernelbench (GPU "
        "tier: KernelBench's fast_p at p = 0, 0.5, 0.8, 1, 1.5, 2 over one scored sample per problem, "
        "geo_mean_speedup, and the same against torch.compile); verdicts (all samples); repaired (with "
        "repair_rounds: rounds, repairs, and the greedy and sampled blocks again within R repairs; else null)",
    )
    created_at: int = Field(description="Unix seconds")
    finished_at: int | None = Field(None, description="Unix seconds")
    error: ErrorInfo | None = None


class EvalProblemObject(BaseModel):
    """One problem of an eval: its counts (the core's ``ProblemRow``) and every sample."""

    id: str = Field(description="the problem id")
    object: Literal["eval.problem"] = "eval.problem"
    eval_id: str
    row: ProblemRow = Field(
        description="over the i.i.d. samples: n, compiled, cpu_correct, correct, fast, "
        "best_speedup, verdicts; greedy: the same over the greedy sample (or null); scored: the sample "
        "KernelBench scores (correct, speedup, compile_speedup, fast per p; or null); repaired: the counts "
        "within R repairs (or null)"
    )
    samples: list[EvalSampleRecord]
