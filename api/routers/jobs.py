"""``/v1/fine_tuning/jobs``: create (idempotent), list, retrieve, cancel, events, checkpoints and
per-step metrics. The API only writes rows and enqueues; workers move jobs along."""

from __future__ import annotations

import math
import time
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query
from sqlalchemy import func, select, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from api.deps import OwnerDep, SessionDep, SettingsDep, run_read
from api.errors import APIError, bad_request
from api.queries import cursor_anchor, keyset_rows, list_page, named_file, owned_or_404
from api.schemas.common import ListPage
from api.schemas.jobs import (
    CheckpointObject,
    JobCreate,
    JobEventObject,
    JobObject,
    JobProgress,
    MetricPoint,
    MetricSeries,
    SelfTrainingRequest,
    method_view,
    openai_hyperparameters,
    resolve_spec,
)
from cuset_core.evaluation.inputs import EvalInputError
from cuset_core.evaluation.problems import DEMO_HELD_OUT, DEMO_PROBLEMS, load_problems
from cuset_core.improve.keep import shared_problems
from cuset_core.models import ModelNotFoundError, ModelOptionError, check_load_options, resolve_model
from cuset_core.training.config import Hyperparameters
from cuset_core.training.tracking import missing_packages
from db.errors import ErrorCode
from db.ids import new_id
from db.model_specs import checkpoint_folder, checkpoint_name, tuned_job
from db.models import Checkpoint, Job, JobEvent, JobMetric
from db.settings import Settings
from db.statuses import JOB_ACTIVE, JOB_FINAL, JobStatus
from service.dispatch import send_validate_job_files
from service.jobs import add_event, cancel

router = APIRouter(prefix="/fine_tuning/jobs", tags=["fine-tuning"])

Limit = Annotated[int, Query(ge=1, le=100)]


def job_object(job: Job) -> JobObject:
    """The API view of a job row."""
    percent = round(100 * job.step / job.total_steps, 1) if job.total_steps else None
    running = job.status == JobStatus.RUNNING
    finish = job.estimated_finish if running and not job.cancel_requested else None
    return JobObject(
        id=job.id,
        created_at=int(job.created_at),
        finished_at=int(job.finished_at) if job.finished_at else None,
        model=job.model,
        fine_tuned_model=job.fine_tuned_model,
        status=JobStatus.CANCELLING if running and job.cancel_requested else job.status,
        validation_file=job.validation_file,
        training_file=job.training_file,
        hyperparameters=openai_hyperparameters(job.spec),
        trained_tokens=job.trained_tokens,
        error=job.error,
        seed=job.spec.seed,
        metadata=job.user_metadata,
        method=method_view(job.spec, job.problems_file),
        estimated_finish=None if finish is None else int(finish),
        progress=JobProgress(
            step=job.step,
            total_steps=job.total_steps,
            percent=percent,
            eta_s=None if finish is None else max(0.0, round(finish - time.time(), 1)),
        ),
        user_provided_suffix=job.suffix,
        prompt_style=job.spec.prompt_style,
        result_files=job.result_files or [],
        integrations=job.spec.integrations,
    )


def _owned_job(session: Session, owner: str, job_id: str) -> Job:
    return owned_or_404(session, Job, job_id, owner, "fine-tuning job")


def _check_self_training(
    session: Session, settings: Settings, owner: str, body: JobCreate, request: SelfTrainingRequest
) -> None:
    """A self-training job samples answers for a problems file of the owner's, and never for a
    problem of the set its model will be measured on."""
    param = "method.self_training"
    if body.validation_file is not None:
        raise bad_request(
            "validation_file: a self-training job has no validation pass; each round's figures are its "
            "verified answers. Leave validation_file out.",
            param="validation_file",
        )
    if body.integrations:
        raise bad_request(
            "integrations: trackers are not available for self-training jobs; each round's figures are "
            "under /metrics and in the events.",
            param="integrations",
        )
    pool_file = named_file(session, owner, request.problems_file, {"problems"}, f"{param}.problems_file")
    pool_path = str(settings.artifacts / pool_file.path)
    if request.eval_problems is None:
        return
    target = request.eval_problems
    if target not in (DEMO_PROBLEMS, DEMO_HELD_OUT):
        target = str(
            settings.artifacts / named_file(session, owner, target, {"eval", "problems"}, f"{param}.eval_problems").path
        )
    try:
        pool = {p.id: p.code for p in load_problems(pool_path)}
        evaluation = {p.id: p.code for p in load_problems(target)}
    except EvalInputError as exc:
        raise bad_request(str(exc), param=f"{param}.eval_problems", code=ErrorCode.INVALID_EVAL_FILE) from None
    shared = shared_problems(pool, evaluation)
    if shared:
        named = ", ".join(f"{pool_id} (= {eval_id})" for pool_id, eval_id in shared[:5])
        raise bad_request(
            f"{len(shared)} problem(s) of {request.problems_file} are in the eval set {request.eval_problems}: "
            f"{named}; a model tuned on their answers would be measured on what it was trained on.",
            param=f"{param}.problems_file",
            code=ErrorCode.EVAL_SET_OVERLAP,
        )


def _check_model(session: Session, settings: Settings, owner: str, model: str) -> None:
    """404 unless ``model`` is a base model, one of the owner's fine-tuned models or kept
    checkpoints; 400 when it is a base model whose weights cannot be found now (a Hub repo id
    neither in the HF cache nor on a reachable Hub)."""
    if model in settings.base_models:
        try:
            resolve_model(settings.base_models[model])
        except ModelNotFoundError as exc:
            raise bad_request(
                f"Model '{model}' is configured but cannot be loaded: {exc}",
                param="model",
                code=ErrorCode.MODEL_NOT_AVAILABLE,
            ) from None
        return
    if tuned_job(session, owner, model) is None and checkpoint_folder(session, settings, owner, model) is None:
        known = ", ".join(sorted(settings.base_models))
        # 404 model_not_found, as chat, completions, evals and /v1/models answer an unknown model.
        raise APIError(
            404,
            f"Model '{model}' is not a base model ({known}), one of your fine-tuned models or one of your "
            "jobs' checkpoints still kept.",
            param="model",
            code=ErrorCode.MODEL_NOT_FOUND,
        )


def _check_load_options(settings: Settings, hp: Hyperparameters) -> None:
    """400 when the embedded worker (this machine) cannot load the model as asked, e.g. 4-bit
    weights without a GPU; with separate workers their training process reports it instead."""
    if not settings.embedded:
        return
    try:
        check_load_options(hp.dtype, hp.attn_implementation, hp.quantization)
    except ModelOptionError as exc:
        raise bad_request(
            f"hyperparameters.{exc.field}: {exc}",
            param=f"hyperparameters.{exc.field}",
            code=ErrorCode.UNSUPPORTED_ON_THIS_SERVER,
        ) from None


def _check_integrations(body: JobCreate) -> None:
    """A tracker the service's machines cannot run fails now, not after the job's queue wait."""
    missing = missing_packages(body.integrations or [])
    if missing:
        raise bad_request(
            f"Tracker not installed on this service ({'; '.join(missing)}); "
            "ask its operator, or leave that integration out.",
            param="integrations",
            code=ErrorCode.INTEGRATION_UNAVAILABLE,
        )


def _resolved(body: JobCreate) -> dict[str, Any]:
    """The row fields a request stands for; equal dicts mean the same request (idempotency)."""
    self_training = body.method.self_training if body.method else None
    return {
        "model": body.model,
        "training_file": body.training_file,
        "validation_file": body.validation_file,
        "problems_file": None if self_training is None else self_training.problems_file,
        "spec": resolve_spec(body),
        "suffix": body.suffix,
        "user_metadata": body.metadata,
    }


def _same_request(job: Job, fields: dict[str, Any]) -> bool:
    return all(getattr(job, name) == value for name, value in fields.items())


def _replay(session: Session, owner: str, key: str, fields: dict[str, Any]) -> Job | None:
    """The job an earlier request with this Idempotency-Key created, or None; 409 when the
    key was used for a different request."""
    job = session.scalar(select(Job).where(Job.owner == owner, Job.idempotency_key == key))
    if job is not None and not _same_request(job, fields):
        raise APIError(
            409,
            "This Idempotency-Key was already used with a different request body.",
            code=ErrorCode.IDEMPOTENCY_KEY_REUSED,
            param="Idempotency-Key",
        )
    return job


def _check_active_jobs(session: Session, settings: Settings, owner: str) -> None:
    """429 when the owner already has ``max_concurrent_jobs`` unfinished jobs. On Postgres an
    advisory lock per owner (held until commit) makes concurrent creates count one at a time."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text("SELECT pg_advisory_xact_lock(hashtext(:owner))"), {"owner": owner})
    active = session.execute(
        select(func.count()).select_from(Job).where(Job.owner == owner, Job.status.in_(JOB_ACTIVE))
    ).scalar_one()
    if active >= settings.max_concurrent_jobs:
        raise APIError(
            429,
            f"You already have {active} unfinished tuning jobs (limit {settings.max_concurrent_jobs}); "
            "wait for one to finish or cancel one.",
            code=ErrorCode.CONCURRENT_JOBS_LIMIT,
        )


@router.post("", response_model=JobObject)
def create_job(
    body: JobCreate,
    session: SessionDep,
    settings: SettingsDep,
    owner: OwnerDep,
    idempotency_key: Annotated[str | None, Header(max_length=255)] = None,
) -> JobObject:
    """Validate the request, create the job (status ``validating_files``) and enqueue its file check."""
    fields = _resolved(body)
    if idempotency_key and (earlier := _replay(session, owner, idempotency_key, fields)):
        return job_object(earlier)
    _check_model(session, settings, owner, body.model)
    _check_load_options(settings, fields["spec"].hyperparameters)
    _check_integrations(body)
    for param, file_id in (("training_file", body.training_file), ("validation_file", body.validation_file)):
        if file_id is not None:
            named_file(session, owner, file_id, {"fine-tune"}, param)
    if body.method is not None and (self_training := body.method.self_training) is not None:
        _check_self_training(session, settings, owner, body, self_training)
    _check_active_jobs(session, settings, owner)
    job = Job(
        id=new_id("ftjob"),
        owner=owner,
        idempotency_key=idempotency_key,
        status=JobStatus.VALIDATING_FILES,
        created_at=time.time(),
        **fields,
    )
    session.add(job)
    try:
        session.flush()
    except IntegrityError:
        # A concurrent retry with the same key won the insert: answer with its job.
        session.rollback()
        earlier = _replay(session, owner, idempotency_key, fields) if idempotency_key else None
        if earlier is None:
            raise
        return job_object(earlier)
    add_event(session, job.id, "Job created")
    session.commit()
    send_validate_job_files(settings, job.id)
    return job_object(job)


@router.get("", response_model=ListPage[JobObject])
def list_jobs(
    session: SessionDep,
    owner: OwnerDep,
    after: str | None = None,
    limit: Limit = 20,
) -> ListPage[JobObject]:
    """This owner's jobs, newest first; ``after`` is the last id of the previous page."""
    query = select(Job).where(Job.owner == owner)
    cursor = None
    if after is not None:
        anchor = cursor_anchor(
            session,
            select(Job).where(Job.id == after, Job.owner == owner),
            f"No fine-tuning job found with id '{after}'.",
        )
        cursor = (anchor.created_at, anchor.id)
    rows = keyset_rows(session, query, (Job.created_at, Job.id), cursor, limit)
    return list_page(ListPage[JobObject], rows, limit, job_object)


@router.get("/{job_id}", response_model=JobObject)
async def retrieve_job(job_id: str, settings: SettingsDep, owner: OwnerDep) -> JobObject:
    # The API's hottest read (clients and the dashboard poll it): one thread hand-off, one
    # statement (bench/api_load.py).
    return await run_read(settings, lambda session: job_object(_owned_job(session, owner, job_id)))


@router.post("/{job_id}/cancel", response_model=JobObject)
def cancel_job(job_id: str, session: SessionDep, owner: OwnerDep) -> JobObject:
    """Ask a job to stop. One not yet running is cancelled at once; a running one answers
    ``cancelling`` and its worker stops it within seconds (``cancel_grace_s`` after it hears: with
    a checkpoint when its step ends by then), then sets ``cancelled``."""
    job = _owned_job(session, owner, job_id)
    if job.status in JOB_FINAL:
        raise APIError(
            409,
            f"Job {job_id} is already {job.status} and cannot be cancelled.",
            code=ErrorCode.JOB_NOT_CANCELLABLE,
            param="job_id",
        )
    cancel(session, job_id)
    session.commit()
    session.refresh(job)
    return job_object(job)


def _event_object(event: JobEvent) -> JobEventObject:
    metrics = event.data is not None and "step" in event.data
    return JobEventObject(
        id=event.id,
        created_at=int(event.created_at),
        level=event.level,
        message=event.message,
        data=event.data,
        type="metrics" if metrics else "message",
    )


@router.get("/{job_id}/events", response_model=ListPage[JobEventObject])
def list_events(
    job_id: str,
    session: SessionDep,
    owner: OwnerDep,
    after: str | None = None,
    limit: Limit = 20,
) -> ListPage[JobEventObject]:
    """A job's events, newest first (as OpenAI lists them); ``after`` is an event id."""
    _owned_job(session, owner, job_id)
    cursor = None
    if after is not None:
        anchor = cursor_anchor(
            session,
            select(JobEvent).where(JobEvent.id == after, JobEvent.job_id == job_id),
            f"No event found with id '{after}' in job {job_id}.",
        )
        cursor = (anchor.seq, anchor.id)
    # The id breaks ties: the API and a worker can give two events the same seq.
    rows = keyset_rows(
        session, select(JobEvent).where(JobEvent.job_id == job_id), (JobEvent.seq, JobEvent.id), cursor, limit
    )
    return list_page(ListPage[JobEventObject], rows, limit, _event_object)


@router.get("/{job_id}/checkpoints", response_model=ListPage[CheckpointObject])
def list_checkpoints(
    job_id: str, session: SessionDep, owner: OwnerDep, after: str | None = None, limit: Limit = 10
) -> ListPage[CheckpointObject]:
    """A job's saved checkpoints, newest (highest step) first."""
    job = _owned_job(session, owner, job_id)
    cursor = None
    if after is not None:
        anchor = cursor_anchor(
            session,
            select(Checkpoint).where(Checkpoint.id == after, Checkpoint.job_id == job_id),
            f"No checkpoint found with id '{after}' in job {job_id}.",
        )
        cursor = (anchor.step,)
    # One checkpoint per step (uq_checkpoints_job_step): the step alone orders them.
    rows = keyset_rows(
        session, select(Checkpoint).where(Checkpoint.job_id == job_id), (Checkpoint.step,), cursor, limit
    )
    return list_page(
        ListPage[CheckpointObject],
        rows,
        limit,
        lambda row: CheckpointObject(
            id=row.id,
            created_at=int(row.created_at),
            step_number=row.step,
            fine_tuning_job_id=job_id,
            fine_tuned_model_checkpoint=checkpoint_name(job, row.step),
            metrics={"step": row.step, **(row.metrics or {})},
        ),
    )


@router.get("/{job_id}/metrics", response_model=MetricSeries)
def job_metrics(
    job_id: str,
    session: SessionDep,
    owner: OwnerDep,
    after_step: Annotated[int, Query(ge=-1)] = -1,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
) -> MetricSeries:
    """Per-step training metrics in step order, for charts; page with ``after_step``."""
    _owned_job(session, owner, job_id)
    rows = session.scalars(
        select(JobMetric)
        .where(JobMetric.job_id == job_id, JobMetric.step > after_step)
        .order_by(JobMetric.step)
        .limit(limit + 1)
    ).all()
    points = [
        MetricPoint(
            step=row.step,
            **{k: v for k, v in row.values.items() if not (isinstance(v, float) and not math.isfinite(v))},
        )
        for row in rows[:limit]
    ]
    return MetricSeries(job_id=job_id, data=points, has_more=len(rows) > limit)
