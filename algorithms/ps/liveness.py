"""Who is alive: a peer is live while it has been heard from (any message, heartbeats included) within
`timeout` seconds. A worker's training step can take longer than the timeout, so every process sends
heartbeats from a thread of its own (its own socket: ZeroMQ sockets belong to one thread)."""

from __future__ import annotations

import threading
import time
from typing import Callable, Iterable

from algorithms.ps import wire
from algorithms.ps.wire import zmq


class Liveness:
    """Last-heard times of the expected peers; `expire()` returns the peers newly declared lost."""

    def __init__(self, timeout: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.timeout, self.clock = timeout, clock
        self.last: dict[int, float] = {}
        self.lost: dict[int, str] = {}  # peer -> why it was declared lost
        self.finished: set[int] = set()

    def heard(self, peer: int) -> None:
        if peer not in self.lost:
            self.last[peer] = self.clock()

    def expect(self, peers: Iterable[int]) -> None:
        """Peers that must appear within the timeout (counted from now), or be declared lost."""
        now = self.clock()
        for p in peers:
            self.last.setdefault(p, now)

    def finish(self, peer: int) -> None:
        """The peer said goodbye: it is neither live nor lost."""
        self.finished.add(peer)
        self.last.pop(peer, None)

    def revive(self, peer: int) -> None:
        """A lost peer spoke again (a restarted worker)."""
        self.lost.pop(peer, None)
        self.finished.discard(peer)
        self.heard(peer)

    @property
    def live(self) -> set[int]:
        return set(self.last)

    def expire(self) -> list[int]:
        now = self.clock()
        gone = sorted(p for p, t in self.last.items() if now - t > self.timeout)
        for p in gone:
            self.lost[p] = f"no message for {now - self.last.pop(p):.1f} s (worker_timeout={self.timeout:g} s)"
        return gone


class Heartbeat:
    """A daemon thread sending a heartbeat from `rank` to each peer ({rank: address}) every `interval`
    seconds, signed with the run's `secret`."""

    def __init__(self, ctx: zmq.Context, rank: int, peers: dict[int, str], interval: float, secret: str) -> None:
        self.ctx, self.rank, self.peers, self.interval, self._secret = ctx, rank, peers, interval, secret
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"pycomm-heartbeat-{rank}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        socks = [wire.dealer(self.ctx, a, f"hb-{self.rank}", self._secret, r) for r, a in self.peers.items()]
        for s in socks:
            s.setsockopt(zmq.SNDHWM, 4)  # heartbeats to a peer that is away are dropped, never queued
        try:
            while not self._stop.is_set():
                for s in socks:
                    try:
                        wire.send(s, "heartbeat", {"rank": self.rank}, block=False)
                    except zmq.Again:
                        pass  # the peer is away; its queue is full or it is gone
                self._stop.wait(self.interval)
        finally:
            for s in socks:
                s.close(0)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


LINGER_MS = 2000  # at close, what is queued (a goodbye, a refusal) gets this long to reach a live peer


def release(ctx: zmq.Context, heartbeats: list[Heartbeat]) -> None:
    """Stop the heartbeat threads, then close every socket of the context (queued messages get LINGER_MS
    to leave; a dead peer's are dropped after that). Registered with
    weakref.finalize, so it also runs when a process leaves through an exception: a ZeroMQ context with
    open sockets would otherwise hold the interpreter's exit forever."""
    for hb in heartbeats:
        hb.stop()
    ctx.destroy(linger=LINGER_MS)
