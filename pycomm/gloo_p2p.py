"""Point-to-point messages of the gloo transport: a header, then the payload.

Gloo aborts the whole process when a receive buffer does not fit the message, so every message first
sends a header (element count, dtype code, sender rank) in slot 2 * tag and its payload in slot
2 * tag + 1. The receiver reads the header on a helper thread, then receives the payload into the
caller's tensor when it fits, else into a scratch tensor that is dropped (the wait raises
MismatchError naming both sides and the caller's tensor is left untouched). Gloo delivers one peer's
messages of one slot in order, and headers and payloads never share a slot, so a header is never
read as a payload."""
from __future__ import annotations

import threading
from typing import Any, Callable, Optional

import torch

from pycomm._dtypes import CODES
from pycomm.errors import MismatchError
from pycomm.gloo_transport import DTYPES, GlooTransport, GlooWork

HEADER = 3  # int64: count, dtype code, sender rank


def header_slot(tag: int) -> int:
    return 2 * tag


def payload_slot(tag: int) -> int:
    return 2 * tag + 1


def send(transport: GlooTransport, pg: Any, info: dict, payload: torch.Tensor, dst: int, tag: int) -> GlooWork:
    header = torch.tensor([payload.numel(), CODES[payload.dtype], transport.rank], dtype=torch.int64)
    works = [pg.send([header], dst, header_slot(tag))]
    if payload.numel():
        works.append(pg.send([payload], dst, payload_slot(tag)))

    def wait_sent() -> None:
        for w in works:
            w.wait()

    return on_thread(transport, info, wait_sent, f"send-{dst}-{tag}", keep=(header, payload))


def recv(transport: GlooTransport, pg: Any, info: dict, target: torch.Tensor, src: int, tag: int) -> GlooWork:
    """Receives into `target`; the payload's receive is posted once the header says what comes."""
    sent: list[tuple[int, int, int]] = []

    def receive() -> None:
        header = torch.empty(HEADER, dtype=torch.int64)
        pg.recv([header], src, header_slot(tag)).wait()
        count, code, sender = header.tolist()
        into = target
        if count != target.numel() or DTYPES.get(code) != target.dtype:
            sent.append((count, code, sender))
            into = torch.empty(count, dtype=DTYPES.get(code, torch.uint8))
        if count:
            pg.recv([into], sender, payload_slot(tag)).wait()

    def finish() -> None:
        if sent:
            count, code, sender = sent[0]
            dtype = str(DTYPES.get(code, f"code {code}")).replace("torch.", "")
            raise MismatchError(f"{info['describe']} on rank {transport.rank} (backend 'gloo') matched rank {sender}'s "
                                f"send of {count} x {dtype}, but this recv's tensor holds {target.numel()} x "
                                f"{info['dtype']}: counts and dtypes must match; the payload was dropped and the "
                                f"tensor left untouched")

    return on_thread(transport, info, receive, f"recv-{src}-{tag}", keep=(target,), finish=finish)


def on_thread(transport: GlooTransport, info: dict, run: Callable[[], None], name: str, keep: tuple,
              finish: Optional[Callable[[], None]] = None) -> GlooWork:
    """`run` (gloo's blocking p2p waits) on a helper thread; the work completes when it returns, and its
    wait raises what `run` raised, then what `finish` raises."""
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
            finish()

    thread = threading.Thread(target=body, name=f"pycomm-gloo-{name}", daemon=True)
    thread.start()
    return GlooWork(transport, info, keep=keep, done=done, finish=settle)
