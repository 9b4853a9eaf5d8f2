"""The request-body limit, as ASGI middleware in front of the app: a body announced larger than the
limit (Content-Length) is answered 413 at once, before a byte of it is read; a chunked body is
counted as it arrives and refused with 413 as soon as it passes the limit. Either way the answer is
the API's own JSON error (apps.serve.http_errors), and the server never holds more than the limit
of one body in memory."""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from apps.serve.http_errors import error_response


def too_large(max_bytes: int) -> str:
    return f"body: larger than this server's limit of {max_bytes} bytes (--max-body-bytes); refused before reading it"


class BodyLimit:
    def __init__(self, app: ASGIApp, max_bytes: int):
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        announced = dict(scope.get("headers", ())).get(b"content-length")
        try:
            length = int(announced) if announced is not None else None
        except ValueError:
            length = None
        if length is not None and length > self.max_bytes:
            response = error_response(
                scope["path"], 413, too_large(self.max_bytes), "body", headers={"Connection": "close"}
            )
            await response(scope, receive, send)
            return
        received = 0

        async def limited() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:  # the app's exception handler answers it (http_errors)
                    raise HTTPException(413, too_large(self.max_bytes))
            return message

        await self.app(scope, limited, send)
