"""Engine routing: which inference engine, if any, decodes a model (``Settings.inference_engines``
names an engine per base model). A request stores the route it takes (``EngineRoute``, in
db/engine_routes.py); a worker or the eval runner follows it."""

from __future__ import annotations

from sqlalchemy.orm import Session

from db.engine_routes import EngineRoute
from db.model_specs import tuned_job
from db.settings import Settings


def base_engine_routes(settings: Settings) -> dict[str, EngineRoute]:
    """Per base model an engine serves, the route to the base model itself."""
    return {
        base: EngineRoute(
            url=engine.url, model=engine.model or base, api_key_env=engine.api_key_env, supports_n=engine.supports_n
        )
        for base, engine in settings.inference_engines.items()
    }


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
