"""Liveness (the process answers) and readiness (database and broker reachable, and no worker's
verifier broken), with what each worker found about the verification sandbox (at start and again
while it runs) and whether each inference engine answers."""

from __future__ import annotations

import asyncio

import httpx
from fastapi import APIRouter
from fastapi.responses import JSONResponse
from kombu import Connection
from sqlalchemy import text

from api.deps import SettingsDep
from api.errors import error_json
from db.engine_routes import EngineRoute
from db.errors import ErrorCode
from db.session import engine_for
from db.settings import Settings
from db.worker_status import sandbox_states
from service.engine_routing import base_engine_routes

router = APIRouter(tags=["health"])

ENGINE_CHECK_S = 2.0


@router.get("/healthz", summary="The process is up")
def healthz() -> dict:
    return {"status": "ok"}


def _check_database(url: str) -> None:
    with engine_for(url).connect() as connection:
        connection.execute(text("SELECT 1"))


def _check_broker(url: str) -> None:
    with Connection(url, connect_timeout=2) as connection:
        connection.ensure_connection(max_retries=1, timeout=2)


async def _engine_state(client: httpx.AsyncClient, route: EngineRoute) -> dict:
    """Whether the engine lists its models (``GET URL/models``), with the reason when not."""
    state = {"url": route.url, "model": route.model}
    try:
        response = await client.get(f"{route.url}/models", headers=route.headers())
    except httpx.HTTPError as exc:
        return state | {"status": "unreachable", "detail": f"{type(exc).__name__}: {exc}"}
    if response.status_code != 200:
        return state | {"status": "unreachable", "detail": f"GET /models answered {response.status_code}"}
    return state | {"status": "reachable"}


async def _engine_states(settings: Settings) -> dict[str, dict]:
    """Per base model served by an engine, that engine's state (checked concurrently)."""
    routes = base_engine_routes(settings)
    async with httpx.AsyncClient(timeout=ENGINE_CHECK_S) as client:
        states = await asyncio.gather(*(_engine_state(client, route) for route in routes.values()))
    return dict(zip(routes, states))


@router.get(
    "/readyz",
    summary="Database and broker are reachable; the workers' sandbox isolation and tier-2 side",
    responses={503: {"description": "a dependency is down, or a worker's tier 2 cannot run; the error names it"}},
)
async def readyz(settings: SettingsDep) -> JSONResponse:
    for name, check, url in (
        ("database", _check_database, settings.resolved_database_url),
        ("broker", _check_broker, settings.resolved_broker_url),
    ):
        try:
            await asyncio.wait_for(asyncio.to_thread(check, url), timeout=5)
        except Exception as exc:  # noqa: BLE001 - any failure means not ready
            return error_json(
                503, f"{name} unreachable: {type(exc).__name__}", code=ErrorCode(f"{name}_unavailable"), param=name
            )
    # Verification is one service among several: a worker whose sandbox refuses (tiers 1-3 then
    # answer every candidate with the reason) is reported here, not made a readiness failure.
    # It makes the service "degraded" (still 200: everything else works), with the reason.
    sandbox = await asyncio.to_thread(sandbox_states, settings)
    # Likewise an engine: only the models it serves fail while it is down.
    engines = await _engine_states(settings)
    reasons = [
        f"worker {name}: the verification sandbox refuses candidates ({entry.get('reason') or 'no reason given'}); "
        "tiers 1-3 answer every candidate with that reason (docs/deploy.md)"
        for name, entry in sandbox.items()
        if entry.get("state") == "refusing"
    ]
    # But a worker whose sandbox isolates and yet cannot run tier 2's side (its interpreter does
    # not start there, torch does not import) would answer every candidate, the reference's own
    # too, with internal_error, which reads as the model's failure: the service is not ready.
    broken = [
        f"worker {name}: the verifier is broken, tier 2 cannot run ({entry.get('reason') or 'no reason given'}); "
        "every tier-2 check would end in internal_error (docs/deploy.md)"
        for name, entry in sandbox.items()
        if entry.get("state") == "not ready"
    ]
    body: dict[str, object] = {
        "status": "not ready" if broken else "degraded" if reasons else "ready",
        "database": "ok",
        "broker": "ok",
        "sandbox": sandbox,
        "engines": engines,
    }
    if broken or reasons:
        body["reasons"] = broken + reasons
    if not broken:
        return JSONResponse(body)
    error = {"message": "; ".join(broken), "type": "service_unavailable_error", "param": "sandbox"}
    return JSONResponse(body | {"error": error | {"code": "verifier_unavailable"}}, status_code=503)
