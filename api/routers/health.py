"""Liveness (the process answers) and readiness (database and broker reachable), with what each
worker found about the verification sandbox when it started."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from kombu import Connection
from sqlalchemy import text

from api.deps import SettingsDep
from api.errors import error_json
from db.session import engine_for
from db.worker_status import sandbox_states

router = APIRouter(tags=["health"])


@router.get("/healthz", summary="The process is up")
def healthz() -> dict:
    return {"status": "ok"}


def _check_database(url: str) -> None:
    with engine_for(url).connect() as connection:
        connection.execute(text("SELECT 1"))


def _check_broker(url: str) -> None:
    with Connection(url, connect_timeout=2) as connection:
        connection.ensure_connection(max_retries=1, timeout=2)


@router.get(
    "/readyz",
    summary="Database and broker are reachable; the workers' sandbox isolation",
    responses={503: {"description": "a dependency is down; the error names it"}},
)
async def readyz(settings: SettingsDep) -> JSONResponse:
    for name, check, url in (
        ("database", _check_database, settings.resolved_database_url),
        ("broker", _check_broker, settings.resolved_broker_url),
    ):
        try:
            await asyncio.wait_for(asyncio.to_thread(check, url), timeout=5)
        except Exception as exc:  # noqa: BLE001 - any failure means not ready
            return error_json(503, f"{name} unreachable: {type(exc).__name__}", code=f"{name}_unavailable", param=name)
    # Verification is one service among several: a worker whose sandbox refuses (tiers 1-3 then
    # answer every candidate with the reason) is reported here, not made a readiness failure.
    sandbox = await asyncio.to_thread(sandbox_states, settings)
    return JSONResponse({"status": "ready", "database": "ok", "broker": "ok", "sandbox": sandbox})
