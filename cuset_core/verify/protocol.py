"""What the execution tiers (2: CPU runtime, 3: GPU) share around their sandboxed harnesses.

A tier writes a job folder (``problem.py``, ``candidate.py`` or ``candidate.cu``, ``job.json``),
runs its harness there as ``python -m <harness module> job.json`` in the sandbox, and reads back
``result.json``: the fields of an :class:`Outcome`, which are the tier's fields of a
``VerifyResult``. Parent side: :func:`write_job`, :func:`harness_env`, :func:`run_harness`,
:func:`result_from_run`. Harness side: :func:`read_job`, :class:`Outcome`, :class:`Decided`,
:func:`candidate_factory`, :func:`compare_outputs`, :func:`write_outcome`.

The harnesses import this module inside the sandbox, so it imports only the standard library
and light parts of ``cuset_core.verify`` at the top; torch is imported where it is used.
"""

from __future__ import annotations

import json
import math
import sys
import traceback
import types
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import cuset_core
from cuset_core.verify.result import Tier, Verdict, VerifyResult
from cuset_core.verify.sandbox import SandboxOutcome, describe, run_sandboxed
from cuset_core.verify.settings import SandboxLimits, VerifySettings

if TYPE_CHECKING:
    from cuset_core.verify.candidate import Candidate

INIT_SEED = 42  # KernelBench seeds weight initialisation with 42
INPUT_SEED_BASE = 1000  # trial i draws its inputs under seed INPUT_SEED_BASE + i
LOG_CHARS = 4000
RESULT_FILE = "result.json"
_RUNTIME_MESSAGE = "cuset runtime:"  # how the CPU runtime starts the line explaining an abort


@dataclass
class Outcome:
    """What a harness decided; the tier's fields of ``VerifyResult``."""

    verdict: str
    reason: str = ""
    log: str = ""
    unsupported_feature: str | None = None
    max_abs_diff: float | None = None
    mean_abs_diff: float | None = None
    trials: int = 0
    runtime_ms: float | None = None
    reference_ms: float | None = None
    speedup: float | None = None
    launches: dict[str, int] = field(default_factory=dict)
    timings_s: dict[str, float] = field(default_factory=dict)


class Decided(Exception):
    """Raised inside a harness protocol to stop at the first failure with its outcome."""

    def __init__(self, outcome: Outcome):
        super().__init__(outcome.reason)
        self.outcome = outcome


def tail(text: str) -> str:
    """The last ``LOG_CHARS`` characters of a log: where the explaining error usually is."""
    return text[-LOG_CHARS:]


# ---------------------------------------------------------------- parent side


def write_job(workdir: Path, problem_code: str, candidate: Candidate, settings: VerifySettings, **extra: Any) -> Path:
    """Write the problem, the candidate and ``job.json`` (common fields plus the tier's ``extra``)
    into ``workdir``; return the path of ``job.json``."""
    (workdir / "problem.py").write_text(problem_code)
    candidate_file = "candidate.cu" if candidate.kind == "cu" else "candidate.py"
    (workdir / candidate_file).write_text(candidate.code)
    job = {
        "problem": "problem.py",
        "candidate": candidate_file,
        "kind": candidate.kind,
        "seeds": settings.seeds,
        "atol": settings.atol,
        "rtol": settings.rtol,
        "result": RESULT_FILE,
        **extra,
    }
    path = workdir / "job.json"
    path.write_text(json.dumps(job))
    return path


def harness_env(**extra: str) -> dict[str, str]:
    """Environment of a harness process: ``cuset_core`` importable, no bytecode written, plus ``extra``."""
    return {
        "PYTHONPATH": str(Path(cuset_core.__file__).resolve().parent.parent),
        "PYTHONDONTWRITEBYTECODE": "1",
        **extra,
    }


def result_from_run(outcome: SandboxOutcome, result_path: Path, tier: Tier) -> VerifyResult:
    """The tier's result: the harness's ``result.json``, or why the harness left none."""
    base = {"tier": tier, "tiers_run": [tier]}
    if result_path.is_file():
        data = json.loads(result_path.read_text())
        return VerifyResult(verdict=Verdict(data.pop("verdict")), **base, **data)
    log = tail(outcome.stderr or outcome.stdout)
    harness = f"{tier.value.upper()} harness"
    if outcome.timed_out or outcome.limit_hit in ("wall", "cpu"):
        return VerifyResult(verdict=Verdict.TIMEOUT, reason=f"{harness} {describe(outcome)}", log=log, **base)
    runtime_line = next((line for line in log.splitlines() if line.startswith(_RUNTIME_MESSAGE)), None)
    reason = runtime_line or f"{harness} {describe(outcome)} without a result"
    return VerifyResult(verdict=Verdict.RUNTIME_ERROR, reason=reason, log=log, **base)


def run_harness(module: str, job: Path, tier: Tier, limits: SandboxLimits, env: dict[str, str]) -> VerifyResult:
    """Run ``python -m module job`` in the sandbox (work folder: the job's) and read its result;
    ``timings_s["<tier>_total"]`` is the harness's wall-clock seconds unless it reported one."""
    outcome = run_sandboxed([sys.executable, "-m", module, str(job)], workdir=job.parent, limits=limits, env=env)
    result = result_from_run(outcome, job.parent / RESULT_FILE, tier)
    result.timings_s.setdefault(f"{tier.value}_total", outcome.wall_s)
    return result


# ---------------------------------------------------------------- harness side


def read_job(argv: list[str]) -> tuple[dict[str, Any], Path]:
    """The job of a harness command line ``JOB_JSON`` and its work folder."""
    job_path = Path(argv[0]).resolve()
    return json.loads(job_path.read_text()), job_path.parent


def write_outcome(workdir: Path, job: dict[str, Any], outcome: Outcome) -> None:
    """Write ``outcome`` as the job's result file, atomically (a killed harness leaves none)."""
    partial = workdir / (job["result"] + ".tmp")
    partial.write_text(json.dumps(asdict(outcome)))
    partial.replace(workdir / job["result"])


def candidate_factory(
    kind: str, reference_module: types.ModuleType, built: Any, init_inputs: list[Any], source: str,
    device: Any = None,
) -> Callable[[], Any]:
    """A function that constructs the module under test (seed before calling it), moved to
    ``device`` when one is given; it raises ``Decided`` (``runtime_error``) when that fails.

    ``built`` is the imported candidate module for a Python candidate (it must define
    ``ModelNew``), or the built extension for a ``.cu`` candidate (its ``forward`` is bound to the
    reference ``Model``'s parameters; ``source`` is the ``.cu`` text the binding reads).
    """
    if kind == "cu":
        from cuset_core.verify.binding import BindingError, bind_extension

        n_inputs = len(reference_module.get_inputs())

        def construct() -> Any:
            try:
                return bind_extension(reference_module.Model, init_inputs, n_inputs, source, built.forward)
            except BindingError as exc:
                raise Decided(Outcome("runtime_error", f"cannot bind the .cu forward: {exc}")) from exc
    else:
        if not hasattr(built, "ModelNew"):
            raise Decided(Outcome("runtime_error", "the candidate defines no ModelNew"))

        def construct() -> Any:
            return built.ModelNew(*init_inputs)

    def guarded() -> Any:
        try:
            model = construct()
            return model if device is None else model.to(device)
        except Decided:
            raise
        except Exception as exc:  # noqa: BLE001 - a constructor crash decides the verdict
            raise Decided(Outcome("runtime_error", f"constructing ModelNew failed: {exc}",
                                  log=tail(traceback.format_exc()))) from exc

    return guarded


def flatten_outputs(output: Any) -> list[Any]:
    """A forward's result as a flat list: a tensor becomes ``[tensor]``, tuples/lists unpack."""
    if isinstance(output, (tuple, list)):
        return [item for element in output for item in flatten_outputs(element)]
    return [output]


def compare_outputs(reference: list[Any], candidate: list[Any], atol: float, rtol: float) -> Outcome:
    """A ``pass`` outcome with the worst differences when every output matches; else the first
    ``shape_mismatch``/``value_mismatch``."""
    import torch

    if len(reference) != len(candidate):
        return Outcome("shape_mismatch", f"expected {len(reference)} outputs, got {len(candidate)}")
    worst_max, worst_mean = 0.0, 0.0
    for index, (ref, new) in enumerate(zip(reference, candidate)):
        if not isinstance(new, torch.Tensor):
            return Outcome("shape_mismatch", f"output {index} is {type(new).__name__}, not a tensor")
        if tuple(ref.shape) != tuple(new.shape):
            return Outcome(
                "shape_mismatch", f"output {index}: expected shape {tuple(ref.shape)}, got {tuple(new.shape)}"
            )
        diff = (ref.detach().double() - new.detach().double()).abs()
        max_diff = float(diff.max()) if diff.numel() else 0.0
        mean_diff = float(diff.mean()) if diff.numel() else 0.0
        worst_max, worst_mean = max(worst_max, max_diff), max(worst_mean, mean_diff)
        if not torch.allclose(new.detach().to(ref.dtype), ref.detach(), atol=atol, rtol=rtol):
            return Outcome(
                "value_mismatch",
                f"output {index}: max abs diff {max_diff:.3g} exceeds atol {atol:g} / rtol {rtol:g}",
                max_abs_diff=max_diff if math.isfinite(max_diff) else None,
                mean_abs_diff=mean_diff if math.isfinite(mean_diff) else None,
            )
    return Outcome("pass", max_abs_diff=worst_max, mean_abs_diff=worst_mean)
