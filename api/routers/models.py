"""``/v1/models``: the served base models, the adapters the project ships, this owner's
fine-tuned models and their jobs' kept checkpoints (OpenAI shape): every id that chat serves.

A model id resolves to a cuset_core model spec (``model_spec``): a base id to its configured
spec, a shipped adapter's name to itself, a fine-tuned model name to its job's adapter folder
under the artifact root.
"""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter
from pydantic import BaseModel
from sqlalchemy.orm import Session

from api.deps import OwnerDep, SessionDep, SettingsDep
from api.errors import not_found
from cuset_core.adapters import available_adapters
from cuset_core.models import SourceKind, spec_kind
from db.model_specs import kept_checkpoint, kept_checkpoints, model_spec_for, succeeded_tuned_jobs, tuned_job
from db.models import Checkpoint, Job
from db.settings import Settings

router = APIRouter(tags=["models"])

BASE_OWNER = "cuset"


class ModelObject(BaseModel):
    """One model as OpenAI lists it; ``created`` in Unix seconds. ``source`` (ours) says where
    its weights come from: the bundled model, a GGUF file, a model folder, a Hugging Face repo
    id (``hub``) or, for a fine-tuned model, a LoRA ``adapter`` on its base; null when the
    configured spec names nothing loadable."""

    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str
    source: SourceKind | None = None


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelObject]


def _tuned_object(job: Job) -> ModelObject:
    return ModelObject(
        id=job.fine_tuned_model, created=int(job.finished_at or job.created_at), owned_by=job.owner, source="adapter"
    )


def _checkpoint_object(name: str, row: Checkpoint, owner: str) -> ModelObject:
    return ModelObject(id=name, created=int(row.created_at), owned_by=owner, source="adapter")


def _base_object(settings: Settings, model_id: str) -> ModelObject:
    # Base models are configuration, not rows: they have no creation time of their own.
    return ModelObject(id=model_id, created=0, owned_by=BASE_OWNER, source=spec_kind(settings.base_models[model_id]))


def _shipped_object(name: str) -> ModelObject:
    # Shipped with the package, like base models: no creation time of their own.
    return ModelObject(id=name, created=0, owned_by=BASE_OWNER, source="adapter")


def _shipped(settings: Settings) -> list[str]:
    return available_adapters() if settings.shipped_adapters else []


def model_spec(session: Session, settings: Settings, owner: str, model_id: str) -> str:
    """The cuset_core model spec ``model_id`` names for ``owner``; 404 (param ``model``) if none."""
    spec = model_spec_for(session, settings, owner, model_id)
    if spec is None:
        raise not_found("model", model_id, param="model")
    return spec


@router.get("/models", response_model=ModelList)
def list_models(session: SessionDep, settings: SettingsDep, owner: OwnerDep) -> ModelList:
    """Every base model, the shipped adapters present, this owner's succeeded fine-tuned models,
    newest first, then their jobs' checkpoints still kept, newest first."""
    jobs = session.scalars(succeeded_tuned_jobs(owner).order_by(Job.created_at.desc())).all()
    return ModelList(
        data=[_base_object(settings, i) for i in settings.base_models]
        + [_shipped_object(name) for name in _shipped(settings) if name not in settings.base_models]
        + [_tuned_object(j) for j in jobs]
        + [_checkpoint_object(name, row, owner) for name, row in kept_checkpoints(session, settings, owner)]
    )


@router.get("/models/{model_id}", response_model=ModelObject)
def retrieve_model(model_id: str, session: SessionDep, settings: SettingsDep, owner: OwnerDep) -> ModelObject:
    if model_id in settings.base_models:
        return _base_object(settings, model_id)
    if model_id in _shipped(settings):
        return _shipped_object(model_id)
    job = tuned_job(session, owner, model_id)
    if job is not None:
        return _tuned_object(job)
    kept = kept_checkpoint(session, settings, owner, model_id)
    if kept is not None:
        return _checkpoint_object(*kept, owner)
    raise not_found("model", model_id, param="model")
