"""Request and response shapes of ``/v1/evals``: evaluate a model over a problem set."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from cuset_core.evaluation.config import EvalKnobs
from cuset_core.evaluation.metrics import Aggregate, ProblemRow
from cuset_core.evaluation.problems import DEMO_HELD_OUT, DEMO_PROBLEMS
from db.errors import ErrorInfo
from db.evals import EvalProgress, EvalSampleRecord
from db.statuses import EvalStatus


def _wire_name(field: str) -> str:
    """A knob's name in the request: ``max_new_tokens`` is ``max_tokens``, as in /v1/generate."""
    return "max_tokens" if field == "max_new_tokens" else field


class EvalCreate(EvalKnobs):
    """``POST /v1/evals``: a model, a problem source (an eval file or the demo set) and the core's
    evaluation knobs (``EvalKnobs``: each declared there once, with its default, bounds and meaning;
    ``max_new_tokens`` is called ``max_tokens`` here).

    Limits that depend on the service settings (``samples``, ``max_tokens``, ``batch_size``,
    ``repair_rounds``) are checked by the router; left unset, ``max_tokens`` and ``batch_size``
    are also held to them.
    """

    model_config = ConfigDict(extra="forbid", alias_generator=_wire_name)

    model: str = Field(min_length=1, description="a base model id or a fine_tuned_model of a succeeded job")
    eval_file: str | None = Field(None, description='id of a File with purpose "eval" ({"id", "problem"} JSONL rows)')
    problems: Literal[DEMO_PROBLEMS, DEMO_HELD_OUT] | None = Field(  # type: ignore[valid-type]
        None, description="the bundled demo set instead of a file"
    )

    def knobs(self) -> EvalKnobs:
        """The knobs this request set (the others are left to the adapter's card and the defaults)."""
        return EvalKnobs(**self.model_dump(include=set(EvalKnobs.model_fields), exclude_unset=True))


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
