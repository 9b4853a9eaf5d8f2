"""A worker's link to its server: requests with a reply timeout, reconnection, and resynchronisation
after a server restart (ZeroMQ guide's "Lazy Pirate" pattern: on silence, close the socket, open a new one
and ask again, so nothing queued for the dead server is delivered twice to its successor).

Each reply carries the server's incarnation (new at every start). A worker that finds a new incarnation
after a silence greets it again and adopts its parameters (the server resumed from its checkpoint); the
push that was in flight is dropped (it was computed on parameters the server no longer has)."""

from __future__ import annotations

import socket
import time
from typing import Any, Sequence

import torch

from algorithms.ps import wire
from algorithms.ps.wire import zmq


class ServerLostError(RuntimeError):
    """The server did not answer for server_timeout seconds."""


class WorkerRefusedError(ValueError):
    """The server refused this worker (e.g. another model's shapes); the server's reason is the text."""


class ServerLink:
    def __init__(
        self,
        ctx: zmq.Context,
        address: str,
        rank: int,
        signature: str,
        reply_timeout: float,
        server_timeout: float,
        secret: str,
        server: int = 0,
    ) -> None:
        self.ctx, self.address, self.rank, self.signature, self.server = ctx, address, rank, signature, server
        self._secret = secret
        self.step = 0  # the worker's step, said in each greeting (the server bounds its pushes' steps by it)
        self.reply_timeout, self.server_timeout = reply_timeout, server_timeout
        self.incarnation: str | None = None
        self.restarts = 0  # server restarts seen
        self.server_lost = False  # no answer for server_timeout: leaving does not wait for one either
        self.refused = False  # the server refused this worker: it waits for it no more
        self.sock = self._connect()

    def _connect(self) -> zmq.Socket:
        return wire.dealer(self.ctx, self.address, f"w-{self.rank}", self._secret, self.server)

    def hello(self) -> wire.Message:
        """Greet the server (retrying until it answers or server_timeout passes); returns its welcome."""
        deadline = time.monotonic() + self.server_timeout
        while True:
            wire.send(
                self.sock,
                "hello",
                {"rank": self.rank, "signature": self.signature, "step": self.step, "host": socket.gethostname()},
            )  # named by the server if lost
            reply = self._wait(("welcome", "error"), min(self.reply_timeout, max(0.1, deadline - time.monotonic())))
            if reply is not None:
                if reply.kind == "error":
                    self.refused = True
                    raise WorkerRefusedError(
                        f"server {self.server} at {self.address} refused worker {self.rank}: {reply.get('error')}"
                    )
                if self.incarnation is not None and reply.get("incarnation") != self.incarnation:
                    self.restarts += 1
                self.incarnation = reply.get("incarnation")
                return reply
            if time.monotonic() > deadline:
                self.server_lost = True
                raise ServerLostError(
                    f"rank {self.rank}: no answer from server {self.server} at {self.address} "
                    f"for {self.server_timeout:g} s (server_timeout)"
                )
            self._reconnect()

    def request(
        self, kind: str, header: dict[str, Any], tensors: Sequence[torch.Tensor], expect: tuple[str, ...]
    ) -> tuple[wire.Message, int]:
        """Send a request and return (the reply, bytes sent): `post` then `reply`."""
        sent = self.post(kind, header, tensors)
        reply, resent = self.reply(kind, header, tensors, expect)
        return reply, sent + resent

    def post(self, kind: str, header: dict[str, Any], tensors: Sequence[torch.Tensor]) -> int:
        """Send a request without waiting (its reply comes from `reply`, called with the same arguments);
        returns the bytes sent. A worker with several servers posts to all of them, then collects."""
        return wire.send(self.sock, kind, {**header, "rank": self.rank}, tensors)

    def reply(
        self, kind: str, header: dict[str, Any], tensors: Sequence[torch.Tensor], expect: tuple[str, ...]
    ) -> tuple[wire.Message, int]:
        """The reply to the request `post` sent, and the bytes sent again. After a silence of reply_timeout:
        reconnect and greet; if the same server answers, the request is sent again (the server drops a
        push it has already taken: pushes carry the worker's step), if a restarted one answers its welcome
        is returned (kind "welcome": the caller adopts its parameters)."""
        sent = 0
        while True:
            reply = self._wait(expect + ("error",), self.reply_timeout)
            if reply is not None:
                if reply.kind == "error" and reply.get("error") == "say hello first":
                    return self.hello(), sent  # a restarted server that has not met us yet
                if reply.kind == "error":
                    self.refused = True
                    raise WorkerRefusedError(
                        f"server {self.server} refused worker {self.rank}'s {kind}: {reply.get('error')}"
                    )
                return reply, sent
            before = self.incarnation
            self._reconnect()
            welcome = self.hello()
            if welcome.get("incarnation") != before:
                return welcome, sent
            sent += self.post(kind, header, tensors)

    def leave(self, kind: str, header: dict[str, Any]) -> bool:
        """Say goodbye ("bye") or pause ("pause") until the server confirms it ("released"), greeting a
        restarted server and saying it again: a goodbye that died with a killed server would leave its
        successor waiting for this worker, then counting it lost although it finished. False when no
        server answered within server_timeout (the goodbye was sent; whether it arrived is unknown)."""
        if self.server_lost or self.refused:
            self.send(kind, header)
            return self.refused  # a refused worker is not waited for: nothing to confirm
        try:
            while True:
                self.post(kind, header, [])
                reply, _ = self.reply(kind, header, [], expect=("released",))
                if reply.kind == "released":
                    return True
                # a restarted server's welcome: it has not heard this goodbye yet
        except ServerLostError:
            return False
        except WorkerRefusedError:  # refused on greeting a restarted server: it does not wait for us
            return True

    def send(self, kind: str, header: dict[str, Any]) -> None:
        """A message that expects no answer (goodbye)."""
        wire.send(self.sock, kind, {**header, "rank": self.rank})

    def _wait(self, kinds: tuple[str, ...], timeout: float) -> wire.Message | None:
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            if not self.sock.poll(int(left * 1000) + 1, zmq.POLLIN):
                continue
            try:
                _, msg = wire.recv(self.sock, routed=False)
            except wire.WireError:  # not from our server (unsigned, a replay) or malformed: never acted on
                continue
            if msg.kind in kinds:
                return msg
            # an answer to an earlier request (e.g. a welcome after a reconnect raced a late ack): skip it
        return None

    def _reconnect(self) -> None:
        self.sock.close(0)
        self.sock = self._connect()

    def close(self) -> None:
        self.sock.close(0)
