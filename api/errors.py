"""One error shape for every 4xx/5xx: ``{"error": {"message", "type", "param", "code"}}``.

Routers raise ``APIError`` (or its helpers); the handlers here turn it, FastAPI's validation
errors, unknown routes and unexpected exceptions into that shape.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from sqlalchemy.exc import DataError, DBAPIError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from starlette.exceptions import HTTPException as StarletteHTTPException

from db.errors import ErrorCode

log = logging.getLogger(__name__)

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    405: "invalid_request_error",
    409: "conflict_error",
    507: "server_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    503: "service_unavailable_error",
}


class ErrorBody(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: ErrorCode | None = None


class ErrorResponse(BaseModel):
    """The body of every error response."""

    error: ErrorBody


class APIError(Exception):
    """An error a user should see: HTTP status, a plain-words message, the offending field."""

    def __init__(self, status: int, message: str, *, code: ErrorCode | None = None, param: str | None = None):
        super().__init__(message)
        self.status, self.message, self.code, self.param = status, message, code, param


def not_found(kind: str, id_: str, param: str | None = None) -> APIError:
    """404 for an id this owner cannot see (unknown and foreign ids look the same)."""
    # A kind without its code fails here, loudly.
    code = ErrorCode(f"{kind.replace(' ', '_').replace('-', '_')}_not_found")
    return APIError(404, f"No {kind} found with id '{id_}'.", code=code, param=param)


def bad_request(message: str, *, param: str | None = None, code: ErrorCode = ErrorCode.INVALID_VALUE) -> APIError:
    return APIError(400, message, code=code, param=param)


def error_json(
    status: int,
    message: str,
    *,
    code: ErrorCode | None = None,
    param: str | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    """The error shape as a response."""
    body = {
        "error": {
            "message": message,
            "type": _TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error"),
            "param": param,
            "code": code,
        }
    }
    return JSONResponse(body, status_code=status, headers=headers)


def _field(loc: tuple) -> str | None:
    parts = [str(p) for p in loc if p not in ("body", "query", "path", "header", "form")]
    return ".".join(parts) or None


def install_error_handlers(app: FastAPI) -> None:
    """Register the handlers that give every error the one shape."""

    @app.exception_handler(APIError)
    async def _api_error(_request: Request, exc: APIError) -> JSONResponse:
        return error_json(exc.status, exc.message, code=exc.code, param=exc.param)

    # Request validation is a 400, as OpenAI answers it (FastAPI's default is 422), so a client
    # tells a bad request by one status whether a schema or a router's own check refused it.
    @app.exception_handler(RequestValidationError)
    async def _validation_error(_request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        first: dict[str, Any] = dict(errors[0]) if errors else {"loc": (), "msg": "invalid request"}
        if first.get("type") == "json_invalid":
            # Its loc is ("body", character offset): the body as a whole is at fault, not a field.
            offset = first.get("loc", ("body", 0))[-1]
            reason = (first.get("ctx") or {}).get("error", "JSON decode error")
            message = f"body: not valid JSON at character {offset}: {reason}"
            return error_json(400, message, code=ErrorCode.INVALID_REQUEST, param=None)
        param = _field(tuple(first.get("loc", ())))
        message = "; ".join(f"{_field(tuple(e.get('loc', ()))) or 'body'}: {e.get('msg')}" for e in errors[:5])
        return error_json(400, message, code=ErrorCode.INVALID_REQUEST, param=param)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = exc.detail if isinstance(exc.detail, str) else "request failed"
        code = {404: ErrorCode.NOT_FOUND, 405: ErrorCode.METHOD_NOT_ALLOWED}.get(exc.status_code)
        return error_json(exc.status_code, message, code=code, headers=getattr(exc, "headers", None))

    @app.exception_handler(OperationalError)
    async def _database_down(_request: Request, exc: OperationalError) -> JSONResponse:
        log.warning("database unavailable: %s", exc)
        return error_json(
            503,
            "The database is unavailable; retry shortly.",
            code=ErrorCode.DATABASE_UNAVAILABLE,
            headers={"Retry-After": "5"},
        )

    @app.exception_handler(DataError)
    async def _unstorable_value(_request: Request, exc: DataError) -> JSONResponse:
        # e.g. a NUL byte in an id: the database refuses the value, so it names nothing stored.
        return error_json(
            400,
            "A value in the request cannot be used (it holds characters the database refuses).",
            code=ErrorCode.INVALID_VALUE,
        )

    @app.exception_handler(PoolTimeoutError)
    async def _database_busy(_request: Request, exc: PoolTimeoutError) -> JSONResponse:
        return error_json(
            503, "The database is busy; retry shortly.", code=ErrorCode.DATABASE_BUSY, headers={"Retry-After": "1"}
        )

    @app.exception_handler(DBAPIError)
    async def _database_error(_request: Request, exc: DBAPIError) -> JSONResponse:
        if exc.connection_invalidated:
            return error_json(
                503,
                "The database connection was lost; retry shortly.",
                code=ErrorCode.DATABASE_UNAVAILABLE,
                headers={"Retry-After": "5"},
            )
        log.exception("database error")
        return error_json(500, "Internal server error.", code=ErrorCode.INTERNAL_ERROR)

    @app.exception_handler(Exception)
    async def _unexpected(_request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error", exc_info=exc)
        return error_json(500, "Internal server error.", code=ErrorCode.INTERNAL_ERROR)
