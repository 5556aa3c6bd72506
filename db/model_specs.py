"""Which cuset_core model spec a service model id names: a configured base model, an adapter the
project ships (by its name), or the adapter folder of the owner's succeeded job that produced a
fine-tuned model (shared by api/ and worker/)."""

from __future__ import annotations

from sqlalchemy import Select, select
from sqlalchemy.orm import Session

from cuset_core.adapters import available_adapters
from db.models import Job
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
    if job is None or not job.output_dir:
        return None
    return str(settings.artifacts / job.output_dir)
