"""``/v1/evals``: evaluate a model over an eval file or the demo problems.

Creating an eval validates everything up front (model, problem source, limits), stores an
``Eval`` row ``queued`` and enqueues ``cuset.eval``: an infer worker generates the samples a
batch at a time, and cpu workers verify them (worker/tasks/evals.py), writing one ``EvalProblem``
row per finished problem, listed while the eval runs. Cancelling marks the row ``cancelled``;
generation stops before its next batch and verification records nothing more.
"""

from __future__ import annotations

import io
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Query, Response
from sqlalchemy import select
from sqlalchemy.orm import Session

from api.deps import OwnerDep, SessionDep, SettingsDep
from api.errors import APIError, bad_request
from api.queries import cursor_anchor, keyset_rows, list_page, named_file, owned_or_404
from api.routers.models import model_spec
from api.schemas.common import ListPage
from api.schemas.evals import EvalCreate, EvalObject, EvalProblemObject
from cuset_core.evaluation.compare import CompareInputError, Comparison, EvalRun, compare_runs
from cuset_core.evaluation.config import EvalConfig, EvalKnobs, impossible_draws
from cuset_core.evaluation.inputs import EvalInputError
from cuset_core.evaluation.problems import DEMO_PROBLEMS, load_problems, select_problems
from cuset_core.evaluation.report import write_run_layout
from cuset_core.evaluation.scoring import SampleRecord
from cuset_core.improve.keep import shared_problems
from db.errors import ErrorCode
from db.evals import EvalProgress, eval_run
from db.ids import new_id
from db.model_specs import tuned_job
from db.models import Eval, EvalProblem, File
from db.settings import Settings
from db.statuses import EvalStatus
from service.dispatch import send_eval

router = APIRouter(tags=["evals"])

LIMIT = Annotated[int, Query(ge=1, le=100, description="items per page")]


def _eval_file_path(session: Session, settings: Settings, owner: str, file_id: str) -> Path:
    """Where an eval file of ``owner`` lives; 400 naming ``eval_file`` when it is unusable."""
    file = named_file(session, owner, file_id, {"eval"}, "eval_file")
    if file.format != "jsonl":
        raise bad_request(
            f'File \'{file_id}\' is {file.format}; eval files are JSONL rows of {{"id", "problem"}}.',
            param="eval_file",
            code=ErrorCode.INVALID_FILE_FORMAT,
        )
    return settings.artifacts / file.path


def _check_limits(body: EvalCreate, settings: Settings) -> None:
    """400 naming the field when the request asks for draws that cannot be made (the core's
    reason) or for more than this server allows."""
    if body.samples > settings.max_samples_per_request:
        raise bad_request(f"samples must be at most {settings.max_samples_per_request}.", param="samples")
    if (refused := impossible_draws(body)) is not None:
        field, message = refused
        raise bad_request(message, param=field)
    asked = body.model_fields_set  # unset, the budget and the batch are held to the ceilings instead
    if "max_new_tokens" in asked and body.max_new_tokens > settings.max_generation_tokens:
        raise bad_request(f"max_tokens must be at most {settings.max_generation_tokens}.", param="max_tokens")
    if body.repair_rounds > settings.max_repair_rounds:
        raise bad_request(
            f"repair_rounds is {body.repair_rounds}; this server allows at most {settings.max_repair_rounds}.",
            param="repair_rounds",
        )
    if "batch_size" in asked and body.batch_size > settings.generation_batch_max:
        raise bad_request(f"batch_size must be at most {settings.generation_batch_max}.", param="batch_size")


def _knobs(body: EvalCreate, spec: str, source: str, settings: Settings) -> EvalKnobs:
    """Every knob this eval runs with: the request's, then for the rest what the core's
    EvalConfig gives the model ``spec`` names (a shipped adapter's card, the style an adapter was
    tuned on, the defaults), the token budget and the batch held to this server's ceilings."""
    run = EvalConfig.of(body.knobs(), model=spec, problems=source)
    ceilings = {"max_new_tokens": settings.max_generation_tokens, "batch_size": settings.generation_batch_max}
    held = {
        field: min(getattr(run, field), cap) for field, cap in ceilings.items() if field not in body.model_fields_set
    }
    return EvalKnobs(**run.model_dump(include=set(EvalKnobs.model_fields)) | held)


def _view(row: Eval) -> EvalObject:
    return EvalObject(
        id=row.id,
        model=row.model,
        status=row.status,
        eval_file=row.eval_file,
        problems=row.problems,
        config=row.config,
        progress=row.progress,
        aggregate=row.aggregate,
        created_at=int(row.created_at),
        finished_at=None if row.finished_at is None else int(row.finished_at),
        error=row.error,
    )


def _check_not_trained_on(
    session: Session, settings: Settings, owner: str, model: str, evaluation: dict[str, str]
) -> None:
    """400 when ``model``, or a model it was tuned from, was self-trained on answers to a problem
    of this eval: it would be measured on what it was trained on."""
    seen: set[str] = set()
    while (job := tuned_job(session, owner, model)) is not None and job.id not in seen:
        seen.add(job.id)
        pool_file = session.get(File, job.problems_file) if job.problems_file else None
        if pool_file is not None:
            pool = {p.id: p.code for p in load_problems(str(settings.artifacts / pool_file.path))}
            shared = shared_problems(pool, evaluation)
            if shared:
                named = ", ".join(f"{eval_id} (= {pool_id})" for pool_id, eval_id in shared[:5])
                raise bad_request(
                    f"Model '{model}' was self-trained (job {job.id}) on answers to {len(shared)} problem(s) of "
                    f"this eval: {named}; measure it on problems it never sampled.",
                    param="model",
                    code=ErrorCode.EVAL_SET_OVERLAP,
                )
        model = job.model


@router.post("/evals", response_model=EvalObject)
def create_eval(body: EvalCreate, session: SessionDep, settings: SettingsDep, owner: OwnerDep) -> EvalObject:
    """Queue an evaluation of ``model`` over an eval file or the demo problems."""
    if (body.eval_file is None) == (body.problems is None):
        raise bad_request(
            'Give exactly one of eval_file (a File id with purpose "eval") or problems ("demo" or "demo:held-out").',
            param="eval_file" if body.eval_file is None else "problems",
        )
    _check_limits(body, settings)
    spec = model_spec(session, settings, owner, body.model)  # 404 naming ``model`` when unknown
    if body.eval_file is not None:
        source = str(_eval_file_path(session, settings, owner, body.eval_file))
    else:
        source = body.problems or DEMO_PROBLEMS  # exactly one of the two is set (checked above)
    try:
        problems = load_problems(source)
    except (EvalInputError, OSError) as exc:
        reason = str(exc).replace(f"{settings.artifacts}/", "")  # no server paths in answers
        raise bad_request(
            f"The eval file cannot be read as problems: {reason}", param="eval_file", code=ErrorCode.INVALID_EVAL_FILE
        ) from None
    try:
        problems = select_problems(problems, body.problem_ids)
    except EvalInputError as exc:
        raise bad_request(str(exc).removeprefix("problem_ids: "), param="problem_ids") from None
    _check_not_trained_on(session, settings, owner, body.model, {p.id: p.code for p in problems})
    # The worker builds the same EvalConfig with the resolved model spec: it is built here first.
    knobs = _knobs(body, spec, source, settings)
    row = Eval(
        id=new_id("eval"),
        owner=owner,
        model=body.model,
        eval_file=body.eval_file,
        problems=body.problems,
        config=knobs,
        status=EvalStatus.QUEUED,
        progress=EvalProgress(done=0, total=len(problems)),
    )
    session.add(row)
    session.commit()
    send_eval(settings, row.id)
    return _view(row)


@router.get("/evals", response_model=ListPage[EvalObject])
def list_evals(
    session: SessionDep, owner: OwnerDep, after: str | None = None, limit: LIMIT = 20
) -> ListPage[EvalObject]:
    """This owner's evals, newest first; ``after`` is the last id of the previous page."""
    cursor = None
    if after is not None:
        anchor = cursor_anchor(
            session,
            select(Eval).where(Eval.id == after, Eval.owner == owner),
            f"No eval found with id '{after}'.",
            code=ErrorCode.EVAL_NOT_FOUND,
        )
        cursor = (anchor.created_at, anchor.id)
    rows = keyset_rows(session, select(Eval).where(Eval.owner == owner), (Eval.created_at, Eval.id), cursor, limit)
    return list_page(ListPage[EvalObject], rows, limit, _view)


def _finished_run(session: Session, owner: str, eval_id: str, param: str) -> EvalRun:
    """A succeeded eval of the owner as a comparison's side; 404/400 naming ``param`` otherwise."""
    row = owned_or_404(session, Eval, eval_id, owner, "eval", param=param)
    if row.status != EvalStatus.SUCCEEDED or not row.aggregate:
        raise bad_request(f"Eval '{eval_id}' is {row.status}; only succeeded evals are compared.", param=param)
    problems = session.execute(
        select(EvalProblem.problem_id, EvalProblem.samples)
        .where(EvalProblem.eval_id == eval_id, EvalProblem.recorded())
        .order_by(EvalProblem.problem_id)
    ).all()
    return eval_run(
        f"{eval_id} ({row.model})",
        row.aggregate.tier,
        row.aggregate.k_values,
        [(p.problem_id, p.samples or []) for p in problems],
    )


@router.get("/evals/compare", response_model=Comparison)
def compare_evals(
    session: SessionDep,
    owner: OwnerDep,
    a: Annotated[str, Query(description="the eval on side A (a succeeded eval id)")],
    b: Annotated[str, Query(description="the eval on side B, over the same problems")],
    resamples: Annotated[int, Query(ge=100, le=100_000)] = 10_000,
) -> Comparison:
    """A - B for every greedy and pass@k metric both evals report, each with its paired bootstrap
    95% interval over the problems (as ``cuset eval-compare``): an interval that excludes 0 is
    a difference the problems support."""
    run_a, run_b = _finished_run(session, owner, a, "a"), _finished_run(session, owner, b, "b")
    try:
        return compare_runs([run_a], [run_b], resamples=resamples)
    except CompareInputError as exc:
        raise bad_request(f"These evals cannot be compared: {exc}", param="b") from None


@router.get("/evals/{eval_id}", response_model=EvalObject)
def retrieve_eval(eval_id: str, session: SessionDep, owner: OwnerDep) -> EvalObject:
    """One eval: status, progress and (when finished) the aggregate metrics."""
    return _view(owned_or_404(session, Eval, eval_id, owner, "eval"))


@router.get(
    "/evals/{eval_id}/kernelbench_run",
    response_class=Response,
    summary="The eval's samples as a KernelBench run folder (a tar)",
    responses={200: {"content": {"application/x-tar": {}}}, 404: {"description": "unknown eval"}},
)
def eval_kernelbench_run(
    eval_id: str,
    session: SessionDep,
    owner: OwnerDep,
    level: Annotated[int, Query(ge=1, le=4, description="the KernelBench level the problems are from")],
) -> Response:
    """The eval's verified problems as KernelBench writes a run (``runs/<name>/``): one
    ``level_<L>_problem_<P>_sample_<S>_kernel.py`` per drawn sample and ``eval_results.json``, so
    KernelBench's own analysis scripts read the results. Problems whose id starts with no number
    (KernelBench's problem id, as in ``19_ReLU``) are left out."""
    row = owned_or_404(session, Eval, eval_id, owner, "eval")
    tier = row.config.tier
    samples = [
        SampleRecord(problem_id=problem_id, **sample.model_dump(exclude={"code"}))
        for problem_id, stored in session.execute(
            select(EvalProblem.problem_id, EvalProblem.samples)
            .where(EvalProblem.eval_id == eval_id, EvalProblem.recorded())
            .order_by(EvalProblem.problem_id)
        ).all()
        for sample in stored or []
    ]
    buffer = io.BytesIO()
    with tempfile.TemporaryDirectory() as folder, tarfile.open(fileobj=buffer, mode="w") as archive:
        write_run_layout(samples, level, tier, Path(folder) / eval_id)
        archive.add(Path(folder) / eval_id, arcname=eval_id)
    return Response(
        buffer.getvalue(),
        media_type="application/x-tar",
        headers={"Content-Disposition": f'attachment; filename="{eval_id}-kernelbench-run.tar"'},
    )


@router.get("/evals/{eval_id}/problems", response_model=ListPage[EvalProblemObject])
def list_eval_problems(
    eval_id: str, session: SessionDep, owner: OwnerDep, after: str | None = None, limit: LIMIT = 20
) -> ListPage[EvalProblemObject]:
    """The finished problems of an eval in problem-id order, each with its samples and verdicts;
    ``after`` is the last problem id of the previous page."""
    owned_or_404(session, Eval, eval_id, owner, "eval")
    rows = keyset_rows(
        session,
        select(EvalProblem).where(EvalProblem.eval_id == eval_id, EvalProblem.recorded()),
        (EvalProblem.problem_id,),
        None if after is None else (after,),
        limit,
        descending=False,
    )
    return list_page(
        ListPage[EvalProblemObject],
        rows,
        limit,
        lambda row: EvalProblemObject(id=row.problem_id, eval_id=row.eval_id, row=row.row, samples=row.samples),
    )


@router.post("/evals/{eval_id}/cancel", response_model=EvalObject)
def cancel_eval(eval_id: str, session: SessionDep, owner: OwnerDep) -> EvalObject:
    """Cancel a queued or running eval (the worker stops before its next batch); finished
    problems keep their rows. Cancelling a cancelled eval is a no-op."""
    row = owned_or_404(session, Eval, eval_id, owner, "eval", for_update=True)
    if row.status in (EvalStatus.QUEUED, EvalStatus.RUNNING):
        row.status, row.finished_at = EvalStatus.CANCELLED, time.time()
        session.commit()
    elif row.status != EvalStatus.CANCELLED:
        session.rollback()
        raise APIError(
            409, f"Eval '{eval_id}' already {row.status}; it cannot be cancelled.", code=ErrorCode.EVAL_NOT_CANCELLABLE
        )
    return _view(row)
