"""Request body size limits, enforced while the body streams in (a client cannot make the server
buffer more than the limit, whatever Content-Length it claims)."""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from db.errors import ErrorCode
from db.settings import Settings

UPLOAD_PATH = "/v1/files"


class BodySizeLimit:
    """ASGI middleware: 413 in the error shape for bodies over the limit of their route
    (uploads: ``max_upload_mb``; everything else: ``max_request_mb``)."""

    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        self.app = app
        self.upload_limit = int(settings.max_upload_mb * 2**20)
        self.request_limit = int(settings.max_request_mb * 2**20)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS", "DELETE"):
            await self.app(scope, receive, send)
            return
        upload = scope["path"].rstrip("/") == UPLOAD_PATH
        # Multipart framing adds a little to the file itself; the files router enforces the exact limit.
        limit = self.upload_limit + 64 * 1024 if upload else self.request_limit
        declared = dict(scope.get("headers", [])).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            await self._reject(send, limit, upload)
            return
        seen = 0
        rejected = False

        async def counted_receive() -> Message:
            # Over the limit, answer 413 now and tell the app the client went away: raising here
            # would be caught by the app's body parser and turned into a generic 400.
            nonlocal seen, rejected
            if rejected:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    rejected = True
                    await self._reject(send, limit, upload)
                    return {"type": "http.disconnect"}
            return message

        async def guarded_send(message: Message) -> None:
            if not rejected:  # once the 413 is sent, nothing else may be
                await send(message)

        try:
            await self.app(scope, counted_receive, guarded_send)
        except Exception:
            if not rejected:
                raise
            # The app saw the disconnect we reported and gave up; the 413 has been sent.

    @staticmethod
    async def _reject(send: Send, limit: int, upload: bool) -> None:
        what = "upload" if upload else "request body"
        body = json.dumps(
            {
                "error": {
                    "message": f"The {what} is larger than the limit of {limit / 2**20:.1f} MiB.",
                    "type": "invalid_request_error",
                    "param": "file" if upload else None,
                    "code": ErrorCode.FILE_TOO_LARGE if upload else ErrorCode.REQUEST_TOO_LARGE,
                }
            }
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": body})
