"""Point-to-point messages of the gloo transport: a header, then the payload.

Gloo aborts the whole process when a receive buffer does not fit the message, and its receives do not
say the size of what comes, so every message first sends a header (element count, dtype code, sender
rank, the sender's message number for this destination and tag, and the shape for send_tensor) in slot
2 * tag, then its payload in slot 2 * tag + 1. The receiver reads the header on a helper thread (from
one rank, or from any with gloo's recv_anysource), then receives the payload: into the caller's
tensor when it fits, else into a scratch tensor that is dropped (the wait raises MismatchError naming
both sides, the caller's tensor untouched); recv_tensor into a new buffer of the header's size.
Gloo hands one sender's payloads of one slot to the receives in the order they are posted, so the
payload receives are posted in the order of the sender's message numbers, whichever thread got
which header first."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

import torch

from pycomm._dtypes import CODES, DTYPES
from pycomm.errors import MismatchError
from pycomm.gloo.work import GlooWork

if TYPE_CHECKING:  # the transport imports this module
    from pycomm.gloo.transport import GlooTransport

ANY_SOURCE = -1
MAX_DIMS = 8
HEADER = 5 + MAX_DIMS  # int64: count, dtype code, sender rank, message number, ndim (-1: no shape), shape
MAX_TAG = (1 << 30) - 1  # both slots of a tag fit gloo's 32-bit tag


def header_slot(tag: int) -> int:
    return 2 * tag


def payload_slot(tag: int) -> int:
    return 2 * tag + 1


class Ordering:
    """Per transport: message numbers of sends per (dst, tag), and the next payload receive to post per
    (sender, tag)."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._sent: dict[tuple[int, int], int] = {}
        self._posted: dict[tuple[int, int], int] = {}

    def next_send(self, dst: int, tag: int) -> int:
        with self._lock:
            n = self._sent.get((dst, tag), 0)
            self._sent[(dst, tag)] = n + 1
            return n

    def post_in_order(self, sender: int, tag: int, number: int, post: Callable[[], Any]) -> Any:
        """post() once every earlier message of `sender` on `tag` has had its payload receive posted."""
        with self._lock:
            self._lock.wait_for(lambda: self._posted.get((sender, tag), 0) == number)
            try:
                return post()
            finally:
                self._posted[(sender, tag)] = number + 1
                self._lock.notify_all()


def send(
    transport: GlooTransport,
    pg: Any,
    info: dict,
    payload: torch.Tensor,
    dst: int,
    tag: int,
    shape: Optional[Sequence[int]] = None,
) -> GlooWork:
    dims = list(shape) if shape is not None else []
    number = transport.p2p_order.next_send(dst, tag)
    header = torch.tensor(
        [payload.numel(), CODES[payload.dtype], transport.rank, number, len(dims) if shape is not None else -1]
        + dims
        + [0] * (MAX_DIMS - len(dims)),
        dtype=torch.int64,
    )
    works = [pg.send([header], dst, header_slot(tag))]
    if payload.numel():
        works.append(pg.send([payload], dst, payload_slot(tag)))

    def wait_sent() -> None:
        for w in works:
            w.wait()

    return on_thread(transport, info, wait_sent, f"send-{dst}-{tag}", keep=(header, payload))


def _receive(
    transport: GlooTransport, pg: Any, src: int, tag: int, buffer_for: Callable[[int, torch.dtype], torch.Tensor]
) -> tuple:
    """Header, then payload into buffer_for(count, dtype); returns (sender, count, code, shape, buffer)."""
    header = torch.empty(HEADER, dtype=torch.int64)
    if src == ANY_SOURCE:
        pg.recv_anysource([header], header_slot(tag)).wait()
    else:
        pg.recv([header], src, header_slot(tag)).wait()
    count, code, sender, number, ndim, *dims = header.tolist()
    buffer = buffer_for(count, DTYPES.get(code, torch.uint8))
    work = transport.p2p_order.post_in_order(
        sender, tag, number, lambda: pg.recv([buffer], sender, payload_slot(tag)) if count else None
    )
    if work is not None:
        work.wait()
    return sender, count, code, (tuple(dims[:ndim]) if ndim >= 0 else None), buffer


def recv(transport: GlooTransport, pg: Any, info: dict, target: torch.Tensor, src: int, tag: int) -> GlooWork:
    """Receives into `target`; the work's `received` names the sender (src may be ANY_SOURCE)."""
    got: list[tuple] = []

    def receive() -> None:
        def buffer_for(count: int, dtype: torch.dtype) -> torch.Tensor:
            fits = count == target.numel() and dtype == target.dtype
            return target if fits else torch.empty(count, dtype=dtype)

        got.append(_receive(transport, pg, src, tag, buffer_for))

    def finish(work: GlooWork) -> None:
        sender, count, code, shape, buffer = got[0]
        work.received = (sender, tag, code, count, None, None)
        if buffer is not target:
            dtype = str(DTYPES.get(code, f"code {code}")).replace("torch.", "")
            raise MismatchError(
                f"{info['describe']} on rank {transport.rank} (backend 'gloo') matched rank {sender}'s "
                f"send of {count} x {dtype}, but this recv's tensor holds {target.numel()} x "
                f"{info['dtype']}: counts and dtypes must match; the payload was dropped and the "
                f"tensor left untouched"
            )

    return on_thread(transport, info, receive, f"recv-{src}-{tag}", keep=(target,), finish=finish)


def recv_new(transport: GlooTransport, pg: Any, info: dict, src: int, tag: int) -> GlooWork:
    """Receives a message of any size into a new buffer; `received` = (source, tag, dtype code, count,
    shape or None, buffer) as pycomm.p2p.received_tensor reads it."""
    got: list[tuple] = []

    def receive() -> None:
        got.append(_receive(transport, pg, src, tag, lambda count, dtype: torch.empty(count, dtype=dtype)))

    def finish(work: GlooWork) -> None:
        sender, count, code, shape, buffer = got[0]
        info["bytes"] = buffer.numel() * buffer.element_size()  # counted in pycomm.stats() once settled
        work.received = (sender, tag, code, count, shape, buffer.view(torch.uint8).numpy())

    return on_thread(transport, info, receive, f"recv-{src}-{tag}", keep=(), finish=finish)


def on_thread(
    transport: GlooTransport,
    info: dict,
    run: Callable[[], None],
    name: str,
    keep: tuple,
    finish: Optional[Callable[[GlooWork], None]] = None,
) -> GlooWork:
    """`run` (gloo's blocking p2p waits) on a helper thread; the work completes when it returns, and its
    wait raises what `run` raised, then what `finish(work)` raises."""
    done = threading.Event()
    raised: list[BaseException] = []

    def body() -> None:
        try:
            run()
        except BaseException as e:  # raised by the waiting caller, with the op named
            raised.append(e)
        finally:
            done.set()

    def settle() -> None:
        thread.join()  # its frame holds gloo works: gone before this op counts as complete
        if raised:
            raise raised[0]
        if finish is not None:
            finish(work)

    thread = threading.Thread(target=body, name=f"pycomm-gloo-{name}", daemon=True)
    work = GlooWork(transport, info, keep=keep, done=done, finish=settle)
    thread.start()
    return work
