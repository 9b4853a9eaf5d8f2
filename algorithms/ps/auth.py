"""Who may speak to a rank of a fault-tolerant run: only a holder of the run's secret.

Every message carries, as its last frame, an HMAC-SHA256 under the run's secret over a direction tag, the
rank of the ROUTER end of the connection (the server or ssp peer that listens) and every other frame,
each prefixed by its length. A message whose MAC does not check is dropped before its header is parsed
and nothing is answered: a peer without the secret learns nothing, not even why.

Replay: each socket signs as a session of its own (a random id) and numbers its messages; both travel
in the signed header. A receiving socket takes a session's messages only with increasing numbers, so a
recorded message is refused by the socket that took it. The tag and the ROUTER's rank are signed too, so a
reply cannot be sent back as a request, nor a message for one server replayed to another. Not covered: a
session the receiver has not seen (a server restarted from its checkpoint forgets the sessions; a worker's
new socket after a reconnect), and denial of service (docs/security.md)."""

from __future__ import annotations

import hashlib
import hmac
import itertools
import secrets
from typing import Any, Sequence

MAC_BYTES = hashlib.sha256().digest_size
TO_ROUTER, TO_DEALER = b"to-router", b"to-dealer"


def new_secret() -> str:
    """A fresh secret for one run (256 random bits, hex)."""
    return secrets.token_hex(32)


class Seal:
    """One socket's signing: `sign` what it sends, `verify` and `fresh` what it receives. `router_rank`
    is the rank of the listening end of this socket's connections (its own rank for a ROUTER)."""

    def __init__(self, secret: str, router_rank: int, is_router: bool) -> None:
        if not secret:
            raise ValueError("a fault-tolerant run's sockets need the run's secret (PYCOMM_PS_SECRET); got none")
        self._key = secret.encode()
        self._context = str(router_rank).encode()
        self._out, self._in = (TO_DEALER, TO_ROUTER) if is_router else (TO_ROUTER, TO_DEALER)
        self.session = secrets.token_hex(8)
        self._numbers = itertools.count()
        self._last: dict[str, int] = {}  # per session heard from: the number of its last message taken

    def stamp(self) -> dict[str, Any]:
        """The session and number of the next message sent (into its signed header)."""
        return {"session": self.session, "seq": next(self._numbers)}

    def sign(self, frames: Sequence[Any]) -> list[Any]:
        return [*frames, self._mac(self._out, frames)]

    def verify(self, frames: Sequence[bytes]) -> list[bytes] | None:
        """The frames without their MAC, None when it does not check (no secret, wrong secret, altered)."""
        if len(frames) < 2 or len(frames[-1]) != MAC_BYTES:
            return None
        body = list(frames[:-1])
        return body if hmac.compare_digest(self._mac(self._in, body), bytes(frames[-1])) else None

    def fresh(self, stamp: Any) -> bool:
        """Whether a verified message's (session, number) comes after the last one taken from that session
        (records it when so): False for a replay or a stamp that is not a (str, int) pair."""
        if not isinstance(stamp, dict):
            return False
        session, seq = stamp.get("session"), stamp.get("seq")
        if not isinstance(session, str) or type(seq) is not int or seq <= self._last.get(session, -1):
            return False
        self._last[session] = seq
        return True

    def _mac(self, tag: bytes, frames: Sequence[Any]) -> bytes:
        h = hmac.new(self._key, tag + b"\0" + self._context + b"\0", hashlib.sha256)
        for f in frames:
            view = memoryview(f).cast("B")
            h.update(len(view).to_bytes(8, "big"))
            h.update(view)
        return h.digest()
