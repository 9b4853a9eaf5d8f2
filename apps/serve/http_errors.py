"""Every error the HTTP server answers, in one JSON shape per API: `{"error": message, "field": name}`
(SmolCluster's endpoints, the page's and every other path) and, under /v1, OpenAI's
`{"error": {"message", "type", "param", "code"}}`. This holds for what the app raises (BadRequest,
a failed validation, a body that is not JSON or not UTF-8) and for what the framework answers on
its own (404 unknown path, 405 wrong method, 413 body too large), so a client never meets
FastAPI's `{"detail": ...}`."""

from __future__ import annotations

import re
import sys
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

OPENAI_PREFIX = "/v1/"
OPENAI_TYPES = {
    400: "invalid_request_error",
    404: "invalid_request_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    422: "invalid_request_error",
    503: "service_unavailable",
    500: "server_error",
}


class BadRequest(ValueError):
    """A request the server refuses: `field` names what was wrong (or "server", "queue", ...)."""

    def __init__(self, field: str, message: str, status: int = 400, code: str | None = None):
        super().__init__(f"{field}: {message}")
        self.field, self.status, self.code = field, status, code


def is_openai(path: str) -> bool:
    return path.startswith(OPENAI_PREFIX)


def openai_error_body(status: int, message: str, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    return {
        "error": {
            "message": message,
            "type": OPENAI_TYPES.get(status, "invalid_request_error"),
            "param": param,
            "code": code,
        }
    }


def error_response(
    path: str,
    status: int,
    message: str,
    field: str | None = None,
    code: str | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    body = openai_error_body(status, message, field, code) if is_openai(path) else {"error": message, "field": field}
    return JSONResponse(body, status_code=status, headers=headers)


def _validation_field(error: dict[str, Any]) -> str:
    if error.get("type") == "json_invalid":
        return "body"
    loc = [str(p) for p in error.get("loc", ())]
    loc = loc[1:] if loc and loc[0] in ("body", "query", "path") else loc
    # a union's member names its type in the location (e.g. messages.0.content.str): not a field
    loc = [p for p in loc if not (p in ("str", "list[TextPart]", "function-after") or "[" in p)]
    return ".".join(loc) or "body"


def _json_content_type(request: Request) -> bool:
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


def _wrong_content_type(request: Request, exc: RequestValidationError) -> str | None:
    """FastAPI reads a body as JSON only under a JSON Content-Type; any other body fails validation as
    raw bytes, with a message about the body's type: name the header instead."""
    if isinstance(exc.body, (bytes, bytearray)) and exc.body and not _json_content_type(request):
        got = request.headers.get("content-type") or "no Content-Type header"
        return f"body: Content-Type must be application/json, got {got}"
    return None


def _unparsable(cause: BaseException | None) -> str:
    """Why a body could not be parsed at all (FastAPI's 400 keeps the reason only as the cause)."""
    if isinstance(cause, UnicodeDecodeError):
        return (
            f"body: not UTF-8 (byte 0x{cause.object[cause.start]:02x} at offset {cause.start}); expected a JSON "
            "object in UTF-8"
        )
    digits = re.search(r"value has (\d+) digits", str(cause)) if isinstance(cause, ValueError) else None
    if digits:  # Python refuses to convert longer decimal integers (sys.set_int_max_str_digits)
        return (
            f"body: an integer with {digits.group(1)} digits exceeds the limit of {sys.get_int_max_str_digits()} digits"
        )
    reason = f"{type(cause).__name__}: {cause}" if cause is not None else "it could not be parsed"
    return f"body: {reason}; expected a JSON object in UTF-8"


def install(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        first = errors[0] if errors else {"loc": (), "msg": "invalid request"}
        field = _validation_field(first)
        status = 400 if is_openai(request.url.path) else 422  # OpenAI answers a bad field with 400
        wrong_type = _wrong_content_type(request, exc)
        if wrong_type is not None:
            return error_response(request.url.path, 415, wrong_type, "body")
        return error_response(request.url.path, status, f"{field}: {first.get('msg')}", field)

    @app.exception_handler(BadRequest)
    async def bad(request: Request, exc: BadRequest) -> JSONResponse:
        return error_response(request.url.path, exc.status, str(exc), exc.field, exc.code)

    @app.exception_handler(StarletteHTTPException)
    async def http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        path = request.url.path
        field = None
        if exc.status_code == 404:
            message = f"no such endpoint: {request.method} {path}"
        elif exc.status_code == 405:
            allowed = {k.lower(): v for k, v in (exc.headers or {}).items()}.get("allow", "?")
            message = f"{request.method} is not allowed on {path} (allowed: {allowed})"
        elif exc.status_code == 413:  # apps.serve.body_limit: its message names the limit
            field, message = "body", str(exc.detail)
        elif exc.status_code == 400:  # FastAPI could not parse the body at all (e.g. not UTF-8)
            field, message = "body", _unparsable(exc.__cause__)
        else:
            message = str(exc.detail)
        return error_response(path, exc.status_code, message, field, headers=exc.headers)

    @app.exception_handler(Exception)
    async def crashed(request: Request, exc: Exception) -> JSONResponse:
        return error_response(request.url.path, 500, f"{type(exc).__name__}: {exc}")
