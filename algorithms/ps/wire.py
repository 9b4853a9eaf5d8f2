"""The messages of the fault-tolerant layer (parameter servers, ssp) over ZeroMQ.

A message is one multipart ZeroMQ message: a JSON header frame (its `kind`, the sender's rank, and
whatever the kind needs: model version, step, the model's shape signature, the codec) and one frame
per tensor (raw bytes, dtype and shape in the header). ROUTER sockets receive and answer; DEALER
sockets send requests. ZeroMQ keeps reconnecting a DEALER to an address whose peer died, so a restarted
server is reached again without the workers doing anything, and a peer's death is seen by nobody but
through silence (see liveness.py), never as a crash of the survivors.

Why ZeroMQ (pyzmq): a maintained, widely deployed messaging library; a dead peer costs a closed TCP
connection, not the job (MPI's job model aborts every rank when one exits); automatic reconnection;
multipart messages carry tensors without copies into one buffer.

Every message is signed with the run's secret and numbered (auth.py); `recv` refuses one that is not
(Unauthenticated) before reading it, and a malformed one (WireError): the receiver drops both, answering
nothing."""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch

try:
    import zmq
except ImportError:  # the algorithms still register; building one raises require_zmq()'s error
    zmq = None  # type: ignore[assignment]

from algorithms.ps.auth import Seal

INSTALL = "pip install pyzmq==27.3.0 (or pip install '.[ps]' in the pycomm checkout)"

# the kinds of message: a worker's greeting and the server's answers, gradients, parameter pulls,
# liveness, a worker's goodbye or pause (preempted: it comes back with --resume) and the server's receipt of
# it, and a refusal
KINDS = ("hello", "welcome", "push", "ack", "pull", "params", "heartbeat", "bye", "pause", "released", "error", "grad")

_DTYPES = {
    str(d): d
    for d in (
        torch.float32,
        torch.float64,
        torch.float16,
        torch.bfloat16,
        torch.int8,
        torch.uint8,
        torch.int32,
        torch.int64,
    )
}


def require_zmq() -> None:
    if zmq is None:
        raise ImportError(f"the fault-tolerant algorithms (asyncps, syncps, ssp) need pyzmq: {INSTALL}")


class WireError(RuntimeError):
    """A malformed message, or a peer that refused ours (its reason in the text)."""


class Unauthenticated(WireError):
    """A message not signed with the run's secret, or one already taken (a replay)."""


if zmq is not None:

    class Socket(zmq.Socket):
        """A ZeroMQ socket that signs what it sends and checks what it receives (auth.Seal)."""

        seal: Seal | None = None

    class Context(zmq.Context):
        """A ZeroMQ context that holds its sockets strongly until destroy() closes them. pyzmq's holds them
        weakly: when an optimizer and its sockets become garbage together, the socket leaves that set before
        the optimizer's finalizer (liveness.release) destroys the context, unclosed, and ZeroMQ's term then
        waits for it for ever (a hang in the garbage collector, seen in the test suite)."""

        _owned: list | None = None

        def _add_socket(self, socket: Any) -> None:
            super()._add_socket(socket)
            self._owned = [s for s in self._owned or [] if not s.closed] + [socket]  # closed ones let go

        def destroy(self, linger: int | None = None) -> None:
            for sock in self._owned or []:
                if not sock.closed:
                    sock.close(linger)
            self._owned = []
            super().destroy(linger)


def signature(tensors: Sequence[torch.Tensor]) -> str:
    """A short checksum of the tensors' shapes and dtypes: two processes with different models (or
    optimizers over different parameters) have different signatures."""
    text = ";".join(f"{tuple(t.shape)}:{t.dtype}" for t in tensors)
    return hashlib.sha1(text.encode()).hexdigest()[:16]


@dataclass
class Message:
    kind: str
    header: dict[str, Any]
    tensors: list[torch.Tensor] = field(default_factory=list)
    nbytes: int = 0  # on the wire, header included

    def get(self, key: str, default: Any = None) -> Any:
        return self.header.get(key, default)


def _raw(t: torch.Tensor) -> memoryview:
    flat = t.detach().reshape(-1).contiguous().cpu()
    return memoryview(flat.view(torch.uint8).numpy()) if flat.numel() else memoryview(b"")


def pack(kind: str, header: dict[str, Any], tensors: Sequence[torch.Tensor] = ()) -> list[Any]:
    if kind not in KINDS:
        raise ValueError(f"message kind must be one of {', '.join(KINDS)}, got {kind!r}")
    meta = [[str(t.dtype), list(t.shape)] for t in tensors]
    return [json.dumps({**header, "kind": kind, "tensors": meta}).encode(), *(_raw(t) for t in tensors)]


def unpack(frames: Sequence[bytes]) -> Message:
    """A message from its frames; WireError (naming what is wrong) unless the header is a JSON object with
    a known kind, a rank that is an integer, and tensor descriptions that match the frames' sizes."""
    try:
        header = json.loads(frames[0])
    except (ValueError, IndexError, TypeError) as e:
        raise WireError(f"malformed message header ({e}): not a pycomm parameter-server peer?") from None
    if not isinstance(header, dict):
        raise WireError(f"message header must be a JSON object, got {type(header).__name__}")
    kind, meta = header.pop("kind", None), header.pop("tensors", None)
    if kind not in KINDS:
        raise WireError(f"message kind must be one of {', '.join(KINDS)}, got {kind!r}")
    if "rank" in header and not is_int(header["rank"]):
        raise WireError(f"{kind} message: rank must be an integer, got {header['rank']!r}")
    if not isinstance(meta, list) or len(meta) != len(frames) - 1:
        raise WireError(f"{kind} message must describe each of its {len(frames) - 1} tensor frames, got {meta!r:.80}")
    tensors = []
    for item, frame in zip(meta, frames[1:]):
        if (
            not isinstance(item, list)
            or len(item) != 2
            or item[0] not in _DTYPES
            or not isinstance(item[1], list)
            or not all(is_int(n) and n >= 0 for n in item[1])
        ):
            raise WireError(f"{kind} message: a tensor must be described as [dtype, [sizes]], got {item!r:.80}")
        dtype = _DTYPES[item[0]]
        if math.prod(item[1]) * dtype.itemsize != len(frame):
            raise WireError(f"{kind} message: a {item[0]} tensor of shape {item[1]} in a frame of {len(frame)} bytes")
        raw = torch.frombuffer(bytearray(frame), dtype=torch.uint8) if len(frame) else torch.empty(0, dtype=torch.uint8)
        tensors.append(raw.view(dtype).reshape(item[1]))
    return Message(kind, header, tensors, sum(len(f) for f in frames))


def is_int(value: Any) -> bool:
    """An integer in JSON (not a bool, which Python counts as one)."""
    return type(value) is int


def send(
    sock: zmq.Socket,
    kind: str,
    header: dict[str, Any],
    tensors: Sequence[torch.Tensor] = (),
    to: bytes | None = None,
    block: bool = True,
) -> int:
    """Send one message, signed and numbered by the socket's seal (to the peer `to` on a ROUTER); returns
    the bytes sent. block=False raises zmq.Again instead of waiting for a peer that is away."""
    frames = sock.seal.sign(pack(kind, {**header, "auth": sock.seal.stamp()}, tensors))
    sock.send_multipart(([to] if to is not None else []) + frames, flags=0 if block else zmq.NOBLOCK, copy=True)
    return sum(len(f) for f in frames)


def recv(sock: zmq.Socket, routed: bool) -> tuple[bytes | None, Message]:
    """One message; `routed` (a ROUTER) returns the sender's identity with it. Unauthenticated when it is
    not signed with the run's secret or was taken before (a replay), WireError when it is malformed."""
    frames = sock.recv_multipart()
    identity, frames = (frames[0], frames[1:]) if routed else (None, frames)
    body = sock.seal.verify(frames)
    if body is None:
        raise Unauthenticated("a message without a valid signature (not signed with this run's secret)")
    msg = unpack(body)
    if not sock.seal.fresh(msg.header.pop("auth", None)):
        raise Unauthenticated(f"a {msg.kind} message taken before (a replay) or without its number")
    return identity, msg


def router(
    ctx: zmq.Context, rank: int, secret: str, address: str | None = None, host: str = "127.0.0.1"
) -> tuple[zmq.Socket, str]:
    """Rank `rank`'s ROUTER bound at tcp://address (host:port), or at a free port of `host` when address is
    None; returns it with the address peers connect to. It signs and checks with `secret`."""
    sock = ctx.socket(zmq.ROUTER, socket_class=Socket)
    sock.seal = Seal(secret, rank, is_router=True)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.ROUTER_HANDOVER, 1)  # a reconnecting worker with the same identity takes over
    if address is None:
        port = sock.bind_to_random_port(f"tcp://{host}")
        return sock, f"{host}:{port}"
    host, port = split_address(address)
    try:
        sock.bind(f"tcp://{'*' if host in ('0.0.0.0', '*') else host}:{port}")
    except zmq.ZMQError as e:
        sock.close()
        raise WireError(
            f"cannot listen on {address} ({e}); is another server running there? choose another port"
        ) from None
    return sock, address


def dealer(ctx: zmq.Context, address: str, identity: str, secret: str, peer: int) -> zmq.Socket:
    """A DEALER connected to rank `peer` at tcp://address, signing and checking with `secret`."""
    sock = ctx.socket(zmq.DEALER, socket_class=Socket)
    sock.seal = Seal(secret, peer, is_router=False)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.IDENTITY, identity.encode())
    sock.setsockopt(zmq.RECONNECT_IVL, 100)
    sock.setsockopt(zmq.RECONNECT_IVL_MAX, 500)
    sock.connect(f"tcp://{address}")
    return sock


def split_address(address: str) -> tuple[str, int]:
    host, sep, port = str(address).rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"address must be HOST:PORT (e.g. 127.0.0.1:29600), got {address!r}")
    return host, int(port)


def host_address() -> str:
    """This machine's address as its peers on other machines reach it (its hostname's, else loopback)."""
    import socket

    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"
