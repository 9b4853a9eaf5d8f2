"""Quantized all-reduce (`Communicator.allreduce_quantized`): the reduce-scatter pattern.

t is cut into N chunks of c elements (c a whole number of codec blocks; the tail is zero-padded).
Stage 1: every rank encodes its N chunks and an all-to-all hands rank r every rank's encoding of
chunk r, which it decode-accumulates in fp32 (and scales by 1/N for AVG). Stage 2: rank r re-encodes
its reduced chunk, an all-gather hands everyone every reduced chunk, and each rank decodes them into
t. Each rank sends about 2 (N-1)/N * wire_bytes(S): never an O(N S) all-gather of whole tensors.

Stage 2 needs stage 1's result, so the two stages run on one helper thread per communicator over a
private duplicate of it: jobs run in submission order there, and the caller's own collectives on the
parent communicator can never interleave differently on different ranks."""
from __future__ import annotations

import concurrent.futures as cf
import threading
from typing import Any

import torch

from pycomm import _dtypes
from pycomm._buffers import POOL
from pycomm.ops import AVG, SUM, check_op
from pycomm._tensors import check_tensor, place_of
from pycomm._codec_wire import WireLayout, check_codec
from pycomm.codecs import Codec, Int8Codec


class ErrorFeedback:
    """Error-feedback state of one tensor's quantized all-reduce: what compression lost, carried into
    the next call. `local` (t's size) is this rank's residual before stage 1; `server` (one chunk) is
    the residual of re-encoding the reduced chunk in stage 2, as in 1-bit Adam."""

    def __init__(self) -> None:
        self.local: torch.Tensor | None = None
        self.server: torch.Tensor | None = None

    def buffers(self, numel: int, chunk: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        if self.local is None:
            self.local = torch.zeros(numel, dtype=torch.float32, device=device)
            self.server = torch.zeros(chunk, dtype=torch.float32, device=device)
        if self.local.numel() != numel or self.server.numel() != chunk or self.local.device != device:
            raise ValueError(f"allreduce_quantized: error_feedback: this ErrorFeedback holds residuals of a tensor of {self.local.numel()} "
                             f"elements on {self.local.device}; use one ErrorFeedback per tensor (got {numel} on {device})")
        return self.local, self.server

    def reset(self) -> None:
        self.local = self.server = None

    def state_dict(self) -> dict[str, torch.Tensor | None]:
        return {"local": self.local, "server": self.server}

    def load_state_dict(self, state: dict[str, torch.Tensor | None]) -> None:
        self.local, self.server = state["local"], state["server"]


class QuantizedWork:
    """The pending result of `allreduce_quantized`; t must not be touched until wait() returns."""

    def __init__(self, future: cf.Future) -> None:
        self._future = future

    def is_completed(self) -> bool:
        return self._future.done()

    def wait(self) -> None:
        self._future.result()       # re-raises what the helper thread raised

    synchronize = wait


class _Engine:
    """The helper thread and private communicator of one parent communicator."""

    def __init__(self, comm: Any) -> None:
        self.comm = comm.split(0, comm.rank)       # same ranks, own queue and matching
        self.threads = cf.ThreadPoolExecutor(1, thread_name_prefix="pycomm-quantized")


_ENGINES: dict[int, tuple[Any, _Engine]] = {}
_ENGINES_LOCK = threading.Lock()


def _engine(comm: Any) -> _Engine:
    with _ENGINES_LOCK:
        known = _ENGINES.get(id(comm))
        if known is None or known[0] is not comm:
            known = (comm, _Engine(comm))
            _ENGINES[id(comm)] = known
        return known[1]


def chunk_numel(numel: int, size: int, block: int) -> int:
    """Elements per rank's chunk: ceil(numel / size) rounded up to whole codec blocks."""
    per_rank = -(-numel // size)
    return -(-per_rank // block) * block


def _check_residual(error_feedback: Any, t: torch.Tensor) -> None:
    if error_feedback is None or isinstance(error_feedback, ErrorFeedback):
        return
    what = "allreduce_quantized: error_feedback"
    if not isinstance(error_feedback, torch.Tensor):
        raise TypeError(f"{what}: expected None, a pycomm.ErrorFeedback or a float32 residual tensor, "
                        f"got {type(error_feedback).__name__}")
    check_tensor(error_feedback, what, (torch.float32,))
    if error_feedback.numel() != t.numel() or error_feedback.device != t.device:
        raise ValueError(f"{what}: residual must have t's {t.numel()} elements on {t.device}, got "
                         f"{error_feedback.numel()} on {error_feedback.device}")


def allreduce_quantized(comm: Any, t: torch.Tensor, op: Any = AVG, codec: Codec | None = None,
                        error_feedback: Any = None) -> QuantizedWork:
    """All-reduce floating tensor t in place through `codec` (default pycomm.Int8Codec(block=256))."""
    what = "allreduce_quantized"
    check_tensor(t, f"{what}: t", _dtypes.FLOATING)
    place_of([t], f"{what}: t")
    op = check_op(op, what)
    if op not in (SUM, AVG):
        raise ValueError(f"{what}: op must be pycomm.SUM or pycomm.AVG (a quantized MAX/MIN is not "
                         f"meaningful), got {op.name}")
    codec = check_codec(Int8Codec(block=256) if codec is None else codec, f"{what}: codec")
    _check_residual(error_feedback, t)
    c = chunk_numel(t.numel(), comm.size, codec.block)
    if isinstance(error_feedback, ErrorFeedback):
        local, server = error_feedback.buffers(t.numel(), c, t.device)
    else:
        local, server = error_feedback, None
    engine = _engine(comm)
    stream = torch.cuda.current_stream(t.device) if t.is_cuda else None
    return QuantizedWork(engine.threads.submit(_run, engine.comm, t, op, codec, c, local, server, stream))


def _run(comm: Any, t: torch.Tensor, op: Any, codec: Codec, c: int, local: torch.Tensor | None,
         server: torch.Tensor | None, stream: Any) -> None:
    if stream is not None:
        with torch.cuda.stream(stream):
            return _reduce(comm, t, op, codec, c, local, server)
    return _reduce(comm, t, op, codec, c, local, server)


def _reduce(comm: Any, t: torch.Tensor, op: Any, codec: Codec, c: int, local: torch.Tensor | None,
            server: torch.Tensor | None) -> None:
    """Both stages on the helper thread; `local` / `server` are the error-feedback residuals."""
    n, size = t.numel(), comm.size
    if n == 0:
        return
    flat = t.view(-1)
    wire = WireLayout(codec, c, size, t.device)
    send, recv = wire.buffer(), wire.buffer()
    scratch = POOL.take(c, torch.float32, t.device)       # zero-padded copy of a partial chunk
    try:
        for r in range(size):                               # stage 1: encode every chunk of mine
            lo, hi = r * c, min((r + 1) * c, n)
            x, res = _chunk(flat, local, lo, hi, c, scratch)
            wire.encode_into(send, r, x, res)
            if local is not None and hi - lo < c and hi > lo:
                local[lo:hi].copy_(res[: hi - lo])
        comm.alltoall(recv, send)
        acc = scratch
        acc.zero_()
        for r in range(size):                               # rank r's encoding of my chunk
            wire.decode_accumulate(recv, r, acc)
        if op == AVG:
            acc.mul_(1.0 / size)
        wire.encode_into(send, 0, acc, server)              # stage 2: my reduced chunk
        comm.allgather(recv, wire.slot(send, 0))
        for r in range(size):
            lo, hi = r * c, min((r + 1) * c, n)
            if hi - lo == c and t.dtype == torch.float32:
                wire.decode(recv, r, flat[lo:hi])
            elif hi > lo:
                wire.decode(recv, r, scratch)
                flat[lo:hi].copy_(scratch[: hi - lo])
    finally:
        POOL.give(scratch)
        wire.release(send)
        wire.release(recv)


def _chunk(flat: torch.Tensor, local: torch.Tensor | None, lo: int, hi: int, c: int,
           scratch: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Chunk [lo, hi) of t and of its residual, each exactly c elements (zero-padded copies when short)."""
    if hi - lo == c:
        return flat[lo:hi], (local[lo:hi] if local is not None else None)
    scratch.zero_()
    if hi > lo:
        scratch[: hi - lo].copy_(flat[lo:hi])
    res = None
    if local is not None:
        res = torch.zeros(c, dtype=torch.float32, device=flat.device)
        if hi > lo:
            res[: hi - lo].copy_(local[lo:hi])
    return scratch, res
