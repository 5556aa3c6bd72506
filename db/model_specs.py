"""Which cuset_core model spec a service model id names: a configured base model, an adapter the
project ships (by its name), the adapter folder of the owner's succeeded job that produced a
fine-tuned model, or a checkpoint of one of the owner's jobs (``<its model name>:ckpt-step-N``).
Which engine, if any, decodes it is service/engine_routing.py's."""

from __future__ import annotations

import re
from pathlib import Path

from sqlalchemy import Select, select
from sqlalchemy.orm import Session

from cuset_core.adapters import available_adapters
from db.models import Checkpoint, Job
from db.settings import Settings
from db.statuses import JobStatus


def succeeded_tuned_jobs(owner: str) -> Select[Job]:
    """The owner's succeeded jobs that produced a fine-tuned model: the models they may use."""
    return select(Job).where(Job.owner == owner, Job.status == JobStatus.SUCCEEDED, Job.fine_tuned_model.is_not(None))


def current_model_id(model_id: str) -> str:
    """A fine-tuned model id in today's form: ``ft:<base>:<job id>``, as a job without a suffix was
    named before migration 0010, gains its empty suffix part (``ft:<base>::<job id>``); any other
    id is itself. Ids users kept from before still name their model."""
    parts = model_id.split(":")
    return f"ft:{parts[1]}::{parts[2]}" if len(parts) == 3 and parts[0] == "ft" else model_id


def tuned_job(session: Session, owner: str, model_id: str) -> Job | None:
    """The owner's succeeded job that produced the fine-tuned model ``model_id``, if any."""
    names = {model_id, current_model_id(model_id)}
    return session.scalars(succeeded_tuned_jobs(owner).where(Job.fine_tuned_model.in_(names))).first()


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


def checkpoint_name(job: Job, step: int) -> str:
    """The model id of ``job``'s checkpoint at ``step``: ``<the job's model name>:ckpt-step-N``."""
    return f"{job.tuned_model_name}:ckpt-step-{step}"


def kept_checkpoints(session: Session, settings: Settings, owner: str) -> list[tuple[str, Checkpoint]]:
    """(model id, row) of every checkpoint of the owner's jobs still on disk, newest first: each
    is a model they may use, whatever its job's status."""
    rows = session.execute(
        select(Job, Checkpoint)
        .join(Checkpoint, Checkpoint.job_id == Job.id)
        .where(Job.owner == owner)
        .order_by(Checkpoint.created_at.desc(), Checkpoint.step.desc())
    ).all()
    return [(checkpoint_name(job, row.step), row) for job, row in rows if (settings.artifacts / row.path).is_dir()]


def kept_checkpoint(session: Session, settings: Settings, owner: str, model_id: str) -> tuple[str, Checkpoint] | None:
    """(its model id in today's form, its row) of the checkpoint ``model_id`` names
    (``<the job's model name>:ckpt-step-N``, as the checkpoints list shows it) when it is the
    owner's and still on disk; a job's checkpoints are models whatever the job's status (a
    cancelled job's included)."""
    match = CHECKPOINT_NAME.match(model_id)
    if match is None:
        return None
    job = session.get(Job, match["model"].rsplit(":", 1)[-1])
    if job is None or job.owner != owner or job.tuned_model_name != current_model_id(match["model"]):
        return None
    row = session.scalar(select(Checkpoint).where(Checkpoint.job_id == job.id, Checkpoint.step == int(match["step"])))
    if row is None or not (settings.artifacts / row.path).is_dir():  # an absolute path stays itself
        return None
    return checkpoint_name(job, row.step), row


def checkpoint_folder(session: Session, settings: Settings, owner: str, model_id: str) -> Path | None:
    """The folder of the owner's kept checkpoint ``model_id`` names, if any (``kept_checkpoint``)."""
    kept = kept_checkpoint(session, settings, owner, model_id)
    return None if kept is None else settings.artifacts / kept[1].path
