"""Which cuset_core model spec a service model id names: a configured base model, an adapter the
project ships (by its name), the adapter folder of the owner's succeeded job that produced a
fine-tuned model, or a checkpoint of one of the owner's jobs (``<its model name>:ckpt-step-N``);
and which engine, if any, decodes it (shared by api/ and worker/)."""

from __future__ import annotations

import re
from pathlib import Path

from sqlalchemy import Select, select
from sqlalchemy.orm import Session

from cuset_core.adapters import available_adapters
from db.engine_routes import EngineRoute, base_engine_routes
from db.models import Checkpoint, Job
from db.settings import Settings
from db.statuses import JobStatus


def succeeded_tuned_jobs(owner: str) -> Select[tuple[Job]]:
    """The owner's succeeded jobs that produced a fine-tuned model: the models they may use."""
    return select(Job).where(Job.owner == owner, Job.status == JobStatus.SUCCEEDED, Job.fine_tuned_model.is_not(None))


def tuned_job(session: Session, owner: str, model_id: str) -> Job | None:
    """The owner's succeeded job that produced the fine-tuned model ``model_id``, if any."""
    return session.scalars(succeeded_tuned_jobs(owner).where(Job.fine_tuned_model == model_id)).first()


def model_spec_for(session: Session, settings: Settings, owner: str, model_id: str) -> str | None:
    """The spec ``model_id`` names for ``owner``, or None when it names nothing they may use."""
    if model_id in settings.base_models:
        return settings.base_models[model_id]
    if settings.shipped_adapters and model_id in available_adapters():
        return model_id  # every owner may use them; their weights are part of the installation
    job = tuned_job(session, owner, model_id)
    if job is not None and job.output_dir:
        return str(settings.artifacts / job.output_dir)
    checkpoint = checkpoint_folder(session, settings, owner, model_id)
    return None if checkpoint is None else str(checkpoint)


CHECKPOINT_NAME = re.compile(r"^(?P<model>ft:.+):ckpt-step-(?P<step>\d+)$")


def checkpoint_folder(session: Session, settings: Settings, owner: str, model_id: str) -> Path | None:
    """The folder of the checkpoint ``model_id`` names (``<the job's model name>:ckpt-step-N``, as
    the checkpoints list shows it) when it is the owner's and still on disk; a job's checkpoints
    are models whatever the job's status (a cancelled job's included)."""
    match = CHECKPOINT_NAME.match(model_id)
    if match is None:
        return None
    job = session.get(Job, match["model"].rsplit(":", 1)[-1])
    if job is None or job.owner != owner or job.tuned_model_name != match["model"]:
        return None
    row = session.scalar(select(Checkpoint).where(Checkpoint.job_id == job.id, Checkpoint.step == int(match["step"])))
    if row is None:
        return None
    folder = settings.artifacts / row.path  # an absolute path stays itself
    return folder if folder.is_dir() else None


def engine_route_for(session: Session, settings: Settings, owner: str, model_id: str) -> EngineRoute | None:
    """The engine that decodes ``model_id`` for ``owner``: its base model's engine, addressing a
    tuned adapter by its fine-tuned model id (vLLM's ``--lora-modules`` name); None when the
    model decodes in the worker."""
    if not settings.inference_engines:
        return None
    if model_id in settings.base_models:
        return base_engine_routes(settings).get(model_id)
    job = tuned_job(session, owner, model_id)
    route = None if job is None else base_engine_routes(settings).get(job.model)
    return None if route is None else route.model_copy(update={"model": model_id})
