"""The application factory: ``create_app(settings)``; ``uvicorn api.main:app`` serves the default."""

from __future__ import annotations

from typing import Any

from fastapi import Depends, FastAPI
from fastapi_offline import FastAPIOffline

from api.auth import KeyCache, RateLimiter
from api.deps import current_owner
from api.errors import ErrorResponse, install_error_handlers
from api.limits import BodySizeLimit
from api.routers import dashboard, evals, files, health, inference, jobs, models
from db.settings import Settings, get_settings

_ERROR_RESPONSES = {code: {"model": ErrorResponse} for code in (400, 404, 409, 413, 429, 500, 503)}


def create_app(settings: Settings | None = None) -> FastAPI:
    """The API with every router, the dashboard and the error handlers."""
    settings = settings or get_settings()
    settings.artifacts.mkdir(parents=True, exist_ok=True)
    # The API docs (/docs) serve Swagger UI from the package, not a CDN: the service often runs
    # where nothing outside the machine can be reached. No ReDoc: its page fetches a logo from its CDN.
    app = FastAPIOffline(
        redoc_url=None,
        title="CuSeT",
        version="0.1.0",
        summary="CUDA-Sensitive Instruction Tuning as a service: datasets, tuning jobs, kernel generation with verification.",
        responses=_ERROR_RESPONSES,
    )
    app.state.settings = settings
    app.state.key_cache = KeyCache()
    app.state.rate_limiter = RateLimiter(settings)
    install_error_handlers(app)
    app.add_middleware(BodySizeLimit, settings=settings)
    app.include_router(health.router)
    for domain in (files, jobs, models, inference, evals):
        # Every /v1 route needs a valid key, whether or not its handler asks who is calling.
        app.include_router(domain.router, prefix="/v1", dependencies=[Depends(current_owner)])
    app.include_router(dashboard.router)
    dashboard.mount_static(app)
    _document_validation_as_400(app)
    return app


def _document_validation_as_400(app: FastAPI) -> None:
    """Drop the 422 FastAPI documents for every route with parameters: the error handlers answer
    request validation with a 400 in the one error shape, which every route documents already."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        schema = app.openapi_schema
        if schema is None:
            schema = build()  # built once: FastAPI keeps it in app.openapi_schema
            for operations in schema["paths"].values():
                for operation in operations.values():
                    operation["responses"].pop("422", None)
            for name in ("HTTPValidationError", "ValidationError"):
                schema.get("components", {}).get("schemas", {}).pop(name, None)
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


def app_factory() -> FastAPI:
    """For ``uvicorn --factory api.main:app_factory``: settings from the environment."""
    return create_app()
