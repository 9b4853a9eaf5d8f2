"""Who may talk to the server, as ASGI middleware in front of the app (before the body limit, so a
refused request's body is never read):

- the API key (`--api-key`, or PYCOMM_SERVE_API_KEY): every request but GET /health (and the page's
  static files, which hold nothing secret) must carry `Authorization: Bearer <key>`, as OpenAI's
  clients send it; the key is compared in constant time, a missing or wrong one gets 401;
- the Host header, on a server bound to loopback: a browser page of another site that rebinds its
  own name to 127.0.0.1 (DNS rebinding) sends its own name as Host, so only localhost, 127.0.0.1 and
  [::1] (with or without a port) are answered; others get 400. A server bound elsewhere is reached
  under names this one cannot know, and is protected by its key."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress

from starlette.types import ASGIApp, Receive, Scope, Send

from apps.serve.http_errors import error_response

OPEN_PATHS = frozenset({"/health", "/", "/app.js"})
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


def is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_name(header: str) -> str:
    """The name in a Host header, without its port or brackets: "[::1]:8080" -> "::1"."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1 : header.find("]")] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def _digest(key: str | bytes) -> bytes:
    # compare fixed-length digests: the comparison's time says nothing about the key's length either
    return hashlib.sha256(key.encode() if isinstance(key, str) else key).digest()


class Access:
    def __init__(self, app: ASGIApp, api_key: str | None, check_host: bool):
        self.app, self.check_host = app, check_host
        self.key_digest = _digest(api_key) if api_key else None

    def _key_ok(self, headers: dict[bytes, bytes]) -> bool:
        scheme, _, given = headers.get(b"authorization", b"").partition(b" ")
        # always compare, also when the header is missing or malformed
        match = hmac.compare_digest(_digest(given.strip()), self.key_digest or b"")
        return match and scheme.lower() == b"bearer"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers", ()))
        path = scope["path"]
        host = headers.get(b"host")
        if self.check_host and host is not None and host_name(host.decode("latin-1")) not in LOOPBACK_NAMES:
            response = error_response(
                path,
                400,
                f"Host: {host.decode('latin-1')!r} is not a name of this server; "
                "bound to loopback it answers only localhost, 127.0.0.1 and [::1] (a "
                "guard against DNS rebinding)",
                "host",
                code="invalid_host",
            )
            await response(scope, receive, send)
            return
        authorized = self.key_digest is None or self._key_ok(headers)
        # GET /health answers everyone, but tells which processes serve only to a caller with the key
        scope.setdefault("state", {})["authorized"] = authorized
        if not authorized and path not in OPEN_PATHS:
            message = (
                "a missing or wrong API key: send the server's key (--api-key or PYCOMM_SERVE_API_KEY) as "
                "`Authorization: Bearer <key>`"
            )
            response = error_response(
                path, 401, message, "authorization", code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"}
            )
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)
