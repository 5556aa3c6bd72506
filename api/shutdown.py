"""The process-wide "the service is shutting down" flag. ``cuset serve`` sets it on the first
SIGINT/SIGTERM (before uvicorn waits for open connections); every request that waits on a
worker (a non-streamed answer, a stream being followed) checks it at least once a second and
ends: its generation is stopped through the same path as a client that left
(api/streaming.py), and the client gets a 503 ``shutting_down``. So open requests never hold
the stop back."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading

_SHUTTING_DOWN = threading.Event()


def begin() -> None:
    """Mark the service as shutting down (safe from a signal handler)."""
    _SHUTTING_DOWN.set()


def requested() -> bool:
    return _SHUTTING_DOWN.is_set()


def reset() -> None:
    """Clear the flag (a process that serves again, and tests)."""
    _SHUTTING_DOWN.clear()


class ShutdownGuard:
    """ASGI middleware: a request that uvicorn cancels at the end of its graceful shutdown
    (one still loading a tokenizer, say, before it waits on a worker) ends with a 503
    ``shutting_down`` when nothing was sent yet, and quietly otherwise, instead of a
    ``CancelledError`` traceback in the log. Only while the flag is set: any other
    cancellation propagates as usual."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking_send(message):
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except asyncio.CancelledError:
            if not requested():
                raise
            if not started:
                with contextlib.suppress(Exception):
                    await _send_unavailable(send)


async def _send_unavailable(send) -> None:
    body = json.dumps(
        {
            "error": {
                "message": "The service is shutting down; send the request again later.",
                "type": "server_error",
                "param": None,
                "code": "shutting_down",
            }
        }
    ).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 503, "headers": headers})
    await send({"type": "http.response.body", "body": body})
