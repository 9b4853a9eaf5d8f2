"""Bounds on what clients hold open, so that many slow or idle connections cannot take every file
descriptor of rank 0 (and with them /health and every request):

- at most `max_connections` open at once: one more is answered 503 and closed as soon as it is
  accepted (uvicorn's own limit_concurrency only refuses *requests*, so connections that never
  finish a request head would still pile up);
- a request head (request line and headers) must arrive within `header_timeout_s` of the
  connection's start, or of the first byte of its next request: a connection that sends half a
  header and waits is closed (uvicorn has no such timeout);
- uvicorn's keep-alive timeout and its bound on a request head's size.

Rank 0 checks at start that the process may open enough file descriptors for the limit."""

from __future__ import annotations

import asyncio
import json
import resource
from dataclasses import dataclass
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

# descriptors rank 0 needs besides its connections: MPI, torch, logs, the listening socket
RESERVED_FDS = 256
DEFAULT_MAX_CONNECTIONS = 1000
MIN_CONNECTIONS = 16


@dataclass(frozen=True)
class ConnectionLimits:
    max_connections: int
    header_timeout_s: float
    keep_alive_s: int
    max_header_bytes: int

    def uvicorn_options(self) -> dict[str, Any]:
        # uvicorn answers 503 to requests once its count reaches limit_concurrency: one above ours,
        # so that the connections we let in are served
        return {
            "http": guarded_protocol(self),
            "limit_concurrency": self.max_connections + 1,
            "timeout_keep_alive": self.keep_alive_s,
            "h11_max_incomplete_event_size": self.max_header_bytes,
        }


def ensure_descriptors(max_connections: int | None) -> int:
    """The connection limit to use (`None`: the default, lowered to what the hard limit on open files
    allows); raises the soft limit on open files as far as it needs (up to the hard one), or explains."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if max_connections is None:
        room = DEFAULT_MAX_CONNECTIONS if hard == resource.RLIM_INFINITY else hard - RESERVED_FDS
        max_connections = max(MIN_CONNECTIONS, min(DEFAULT_MAX_CONNECTIONS, room))
    need = max_connections + RESERVED_FDS
    if soft != resource.RLIM_INFINITY and soft < need:
        if hard != resource.RLIM_INFINITY and hard < need:
            raise ValueError(
                f"--limit-concurrency {max_connections} needs about {need} open files, but this "
                f"process may open at most {hard} (ulimit -Hn): lower --limit-concurrency to "
                f"{hard - RESERVED_FDS} or less, or raise the limit"
            )
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
    return max_connections


def _refusal(max_connections: int) -> bytes:
    body = json.dumps(
        {
            "error": f"the server has {max_connections} connections open, its limit (--limit-concurrency); retry later",
            "field": None,
        }
    ).encode()
    return (
        b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nconnection: close\r\n"
        b"retry-after: 1\r\ncontent-length: " + str(len(body)).encode() + b"\r\n\r\n" + body
    )


def guarded_protocol(limits: ConnectionLimits) -> type[H11Protocol]:
    refusal = _refusal(limits.max_connections)

    class Guarded(H11Protocol):
        header_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if len(self.connections) > limits.max_connections:
                self.logger.warning(
                    "refused a connection: %d open, the limit (--limit-concurrency)", limits.max_connections
                )
                transport.write(refusal)
                transport.close()
                return
            self._arm()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self._arm()  # (part of) a request head, not all of it yet
            else:
                self._disarm()  # the head is in: the request runs (or the connection ends)

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            if self.header_timer is None:
                self.header_timer = self.loop.call_later(limits.header_timeout_s, self._head_too_slow)

        def _disarm(self) -> None:
            if self.header_timer is not None:
                self.header_timer.cancel()
                self.header_timer = None

        def _head_too_slow(self) -> None:
            self.header_timer = None
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self.logger.warning(
                    "closed a connection that sent no whole request head within %g s (--header-timeout)",
                    limits.header_timeout_s,
                )
                self.transport.close()

    return Guarded
