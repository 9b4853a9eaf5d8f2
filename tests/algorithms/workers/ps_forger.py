"""A forged peer of a fault-tolerant run, in a process of its own: it speaks ZeroMQ to a running server or ssp
rank at ADDRESS (rank TARGET) and prints, as one JSON line, what came back to each of its messages.

    python -m tests.algorithms.workers.ps_forger server ADDRESS TARGET AS_RANK
    python -m tests.algorithms.workers.ps_forger ssp ADDRESS TARGET AS_RANK STEP

Without the run's secret (`unsigned`): a 15-byte JSON message, JSON that is not an object, garbage bytes, and
a well-formed hello signed with a wrong secret. With the secret (PYCOMM_PS_SECRET in the environment, as a
real rank has it): a signed frame that is not an object, and messages whose content is implausible: a
server gets a hello from rank 7 (no worker), a hello as worker AS_RANK, a push of NaN, one of step 10^9 and one
of the wrong size; an ssp rank gets, as rank AS_RANK, a NaN gradient of step STEP and one of step 10^9."""

from __future__ import annotations

import json
import os
import socket
import sys
import time

import torch
import zmq

from algorithms.ps import wire
from algorithms.ps.auth import Seal
from tests.algorithms.problem import make_model

ANSWER_S = 3.0  # how long to listen for an answer a server would give at once
SSP_ANSWER_S = 0.5  # an ssp rank answers nothing ever: listen briefly, so all arrive while the run is under way


def answers_each(socks: list[zmq.Socket], seconds: float = ANSWER_S, first: bool = False) -> list[list[list[bytes]]]:
    """Per socket, every raw multipart message that comes back within `seconds` (the sockets listened to
    together, so n silent peers cost one window, not n); first: stop at the first message (an answer
    expected: what comes after it is not read anyway)."""
    got: list[list[list[bytes]]] = [[] for _ in socks]
    poller = zmq.Poller()
    for sock in socks:
        poller.register(sock, zmq.POLLIN)
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        for sock, _ in poller.poll(int(left * 1000) + 1):
            got[socks.index(sock)].append(sock.recv_multipart())
        if first and any(got):
            break
    return got


def answers(sock: zmq.Socket, seconds: float = ANSWER_S, first: bool = False) -> list[list[bytes]]:
    """Every raw multipart message that comes back within `seconds` (first: up to the first)."""
    return answers_each([sock], seconds, first)[0]


def wait_listening(address: str, seconds: float = 120.0) -> None:
    """Until the target accepts TCP connections (a message sent before would wait in this process's queue)."""
    host, port = wire.split_address(address)
    deadline = time.monotonic() + seconds
    while True:
        try:
            socket.create_connection((host, port), timeout=1.0).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def raw_dealer(ctx: zmq.Context, address: str) -> zmq.Socket:
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 2000)
    sock.connect(f"tcp://{address}")
    return sock


def send_unsigned(ctx: zmq.Context, address: str, target: int, as_rank: int, signature: str) -> dict[str, zmq.Socket]:
    """Messages without the run's secret, each from a socket of its own (the test expects no answer)."""
    wrong = Seal("w" * 64, target, is_router=False)
    hello = wire.pack("hello", {"rank": as_rank, "signature": signature, "step": 0, "auth": wrong.stamp()})
    cases = {
        "json15": [b'"fifteen bytes"'],
        "not_an_object": [b"[1, 2, 3]"],
        "garbage": [os.urandom(64)],
        "wrong_secret_hello": wrong.sign(hello),
    }
    socks = {name: raw_dealer(ctx, address) for name in cases}
    for name, frames in cases.items():
        socks[name].send_multipart(frames)
    return socks


def readable(got: list[list[bytes]]) -> list[list[str]]:
    return [[bytes(f).decode("latin-1") for f in m] for m in got]


def unsigned(
    ctx: zmq.Context, address: str, target: int, as_rank: int, signature: str, listen: float = ANSWER_S
) -> dict[str, list]:
    """Messages without the run's secret; what came back to each (the test expects nothing)."""
    socks = send_unsigned(ctx, address, target, as_rank, signature)
    got = answers_each(list(socks.values()), listen)
    for sock in socks.values():
        sock.close()
    return {name: readable(msgs) for name, msgs in zip(socks, got)}


def signed(ctx: zmq.Context, address: str, target: int, name: str = "") -> zmq.Socket:
    """A socket signing with the run's secret; `name` tells apart several (a router drops a second
    connection that shows an identity already connected)."""
    return wire.dealer(ctx, address, f"forger-{os.getpid()}{name}", os.environ["PYCOMM_PS_SECRET"], target)


def header(sock: zmq.Socket, got: list[list[bytes]]) -> dict | None:
    """The first signed answer among `got` (its header), None when nothing came."""
    if not got:
        return None
    msg = wire.unpack(sock.seal.verify(got[0]))
    return {"kind": msg.kind, **msg.header}


def reply(sock: zmq.Socket) -> dict | None:
    """The one signed answer that comes back (its header), None when nothing does."""
    return header(sock, answers(sock, first=True))


def to_server(ctx: zmq.Context, address: str, target: int, as_rank: int) -> dict:
    model = make_model(seed=1)
    signature = wire.signature(list(model.parameters()))
    # every message that must get no answer at all from a socket of its own, all heard in one window
    silent = send_unsigned(ctx, address, target, as_rank, signature)
    not_an_object, stranger = signed(ctx, address, target, "-not-an-object"), signed(ctx, address, target, "-rank-7")
    not_an_object.send_multipart(not_an_object.seal.sign([b'"a string"']))  # signed, but not a JSON object
    wire.send(stranger, "hello", {"rank": 7, "signature": signature, "step": 0})
    *got, got_not_an_object, got_stranger = answers_each([*silent.values(), not_an_object, stranger])
    out: dict = {"unsigned": {name: readable(msgs) for name, msgs in zip(silent, got)}}
    out["signed_not_an_object"] = got_not_an_object != []
    out["unknown_rank_hello"] = header(stranger, got_stranger)
    for s in [*silent.values(), not_an_object, stranger]:
        s.close()
    sock = signed(ctx, address, target)
    wire.send(sock, "hello", {"rank": as_rank, "signature": signature, "step": 0})
    out["hello"] = reply(sock)
    numel = sum(p.numel() for p in model.parameters())
    push = {"rank": as_rank, "codec": None, "version": 0, "lrs": [0.1], "loss": 1.0, "pull": True, "stop": False}
    wire.send(sock, "push", {**push, "step": 0}, [torch.full((numel,), float("nan"))])
    out["nan_push"] = reply(sock)
    wire.send(sock, "push", {**push, "step": 10**9}, [torch.zeros(numel)])
    out["far_step_push"] = reply(sock)
    wire.send(sock, "push", {**push, "step": 0}, [torch.zeros(numel + 5)])
    out["wrong_size_push"] = reply(sock)
    sock.close()
    return out


def to_ssp(ctx: zmq.Context, address: str, target: int, as_rank: int, step: int) -> dict:
    model = make_model(seed=1)
    numel = sum(p.numel() for p in model.parameters())
    out: dict = {
        "unsigned": unsigned(ctx, address, target, as_rank, wire.signature(list(model.parameters())), SSP_ANSWER_S)
    }
    sock = signed(ctx, address, target)
    sock.send_multipart(sock.seal.sign([b"[]"]))
    grad = {"rank": as_rank, "codec": None, "staleness": 0}
    wire.send(sock, "grad", {**grad, "step": step}, [torch.full((numel,), float("nan"))])
    wire.send(sock, "grad", {**grad, "step": 10**9}, [torch.zeros(numel)])
    out["signed_answers"] = len(answers(sock, SSP_ANSWER_S))
    sock.close()
    return out


def main() -> None:
    mode, address, target, as_rank = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    wait_listening(address)
    ctx = zmq.Context()
    out = (
        to_server(ctx, address, target, as_rank)
        if mode == "server"
        else to_ssp(ctx, address, target, as_rank, int(sys.argv[5]))
    )
    ctx.destroy(linger=2000)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
