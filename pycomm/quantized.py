"""Quantized all-reduce (`Communicator.allreduce_quantized`): the reduce-scatter pattern.

t is cut into N chunks of c elements (c a whole number of codec blocks; the tail is zero-padded).
Stage 1: every rank encodes the chunks of the other ranks and an all-to-all hands rank r every
rank's encoding of chunk r, which it decode-accumulates in fp32 onto its own chunk, taken exactly
(and scales by 1/N for AVG). Stage 2: rank r re-encodes its reduced chunk (on the CPU the reduction and
the re-encoding are one kernel pass per codec block, csrc/kernels/reduce_encode.h), an all-gather hands
everyone every reduced chunk, and each rank decodes them all into t (its own from the same encoding,
by the reduce kernel while it is in cache, so that every rank ends with the same bytes). Each rank sends about 2 (N-1)/N * wire_bytes(S): never an O(N S) all-gather of whole tensors.

Large tensors are cut into segments of PYCOMM_QUANTIZED_SEGMENT elements (default 1 Mi for host tensors
where `comm.oversubscribed` is False, else 4 Mi: _quantized_pipeline.default_segment; each a whole
number of chunks of whole codec blocks, so block boundaries do not move) and pipelined: segment k+1 is
encoded while segment k's all-to-all is in flight, and k's reduction and re-encoding overlap k-1's
all-gather. Every rank runs the same fixed schedule, so the collectives match without any handshake.
The overlap needs a core (or a GPU stream) free for the transfer: on a node whose cores are all busy
with ranks it gains nothing, and smaller segments then only add per-call costs. The segment layout
and the pipeline are pycomm/_quantized_pipeline.py.

Stage 2 needs stage 1's result, so the stages run on one helper thread per communicator over a
private duplicate of it: jobs run in submission order there, and the caller's own collectives on the
parent communicator can never interleave differently on different ranks. Each call is first matched as one op
on the parent communicator (in the caller's order), so ranks that disagree on it get a MismatchError
naming allreduce_quantized; errors from the helper thread name the call too."""

from __future__ import annotations

import concurrent.futures as cf
import threading
import weakref
from typing import Any

import torch

from pycomm import _dtypes, tracing
from pycomm._codec_wire import WireLayout, check_codec
from pycomm._quantized_phases import PhaseClock
from pycomm._quantized_pipeline import (
    Pipeline,
    Segment,
    chunk_numel,  # noqa: F401 (part of this module's interface: tests use it)
    default_segment,
    segments,
)
from pycomm._tensors import check_tensor, place_of
from pycomm._validate import check_bool
from pycomm.codecs import Codec, Int8Codec
from pycomm.errors import PycommError, named
from pycomm.fusion import CoalescedWork, check_tensor_list
from pycomm.ops import AVG, SUM, check_op
from pycomm.work import Work


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
            raise ValueError(
                f"allreduce_quantized: error_feedback: this ErrorFeedback holds residuals of a tensor of "
                f"{self.local.numel()} elements on {self.local.device} with {self.server.numel()} reduced-chunk "
                f"elements; this call has {numel} on {device} with {chunk} (the chunks depend on the world "
                f"size, the codec block and PYCOMM_QUANTIZED_SEGMENT). Use one ErrorFeedback per tensor"
            )
        return self.local, self.server

    def reset(self) -> None:
        self.local = self.server = None

    def state_dict(self) -> dict[str, torch.Tensor | None]:
        return {"local": self.local, "server": self.server}

    def load_state_dict(self, state: dict[str, torch.Tensor | None]) -> None:
        self.local, self.server = state["local"], state["server"]


class QuantizedWork(Work):
    """The pending result of `allreduce_quantized`; t must not be touched until wait() returns."""

    __slots__ = ("_future", "_describe")

    def __init__(
        self, future: cf.Future, describe: str
    ) -> None:  # Work.__init__ not called: no transport handle of its own
        self._future, self._describe = future, describe

    def is_completed(self) -> bool:
        return self._future.done()

    def wait(self) -> None:
        self._future.result()  # re-raises what the helper thread raised

    synchronize = wait

    @property
    def info(self) -> dict:
        return {"name": "allreduce_quantized", "describe": self._describe}


class _Engine:
    """The helper thread and private communicator of one parent communicator."""

    def __init__(self, comm: Any) -> None:
        self.comm = comm.split(0, comm.rank)  # same ranks, own queue and matching
        self.comm.name = f"{comm.name}.quantized"  # its row in traces
        self.threads = cf.ThreadPoolExecutor(1, thread_name_prefix="pycomm-quantized")


_ENGINES: "weakref.WeakKeyDictionary[Any, _Engine]" = weakref.WeakKeyDictionary()
_ENGINES_LOCK = threading.Lock()


def _engine(comm: Any) -> _Engine:
    """The engine of `comm`, made on first use (collective: the first quantized call of every rank)."""
    with _ENGINES_LOCK:
        engine = _ENGINES.get(comm)
        if engine is None:
            engine = _ENGINES[comm] = _Engine(comm)
        return engine


def _check_residual(error_feedback: Any, t: torch.Tensor) -> None:
    if error_feedback is None or isinstance(error_feedback, ErrorFeedback):
        return
    what = "allreduce_quantized: error_feedback"
    if not isinstance(error_feedback, torch.Tensor):
        raise TypeError(
            f"{what}: expected None, a pycomm.ErrorFeedback or a float32 residual tensor, "
            f"got {type(error_feedback).__name__}"
        )
    check_tensor(error_feedback, what, (torch.float32,))
    if error_feedback.numel() != t.numel() or error_feedback.device != t.device:
        raise ValueError(
            f"{what}: residual must have the tensor's {t.numel()} elements on {t.device}, got "
            f"{error_feedback.numel()} on {error_feedback.device}"
        )


def allreduce_quantized(
    comm: Any, t: torch.Tensor, op: Any = AVG, codec: Codec | None = None, error_feedback: Any = None
) -> QuantizedWork:
    """All-reduce floating tensor t in place through `codec` (default pycomm.Int8Codec(block=256))."""
    what = "allreduce_quantized"
    check_tensor(t, f"{what}: tensor", _dtypes.FLOATING)
    place_of([t], f"{what}: tensor")
    op = check_op(op, what)
    if op not in (SUM, AVG):
        raise ValueError(
            f"{what}: op must be pycomm.SUM or pycomm.AVG (a quantized MAX/MIN is not meaningful), got {op.name}"
        )
    codec = check_codec(Int8Codec(block=256) if codec is None else codec, f"{what}: codec")
    _check_residual(error_feedback, t)
    segs = segments(t.numel(), comm.size, codec.block, default_segment(comm.oversubscribed, t.is_cuda))
    if isinstance(error_feedback, ErrorFeedback):
        local, server = error_feedback.buffers(t.numel(), sum(g.c for g in segs), t.device)
    else:
        local, server = error_feedback, None
    # Matched as one op on `comm`, in the caller's order (before the first call's split): a rank that
    # called anything else here gets a MismatchError naming allreduce_quantized, not an internal op.
    matching = comm._match(what, t.numel(), t.dtype, op)
    describe = f"allreduce_quantized ({t.numel()} x {t.dtype}, {codec!r}, op {op.name})"
    try:
        engine = _engine(comm)
    except PycommError as e:
        if matching is not None:  # a mismatch that broke the communicator under the first call's split
            try:
                matching.wait()
            except PycommError as mismatch:
                raise named(mismatch, describe) from e
        raise
    stream = torch.cuda.current_stream(t.device) if t.is_cuda else None
    span = None
    if tracing.ACTIVE:  # wire bytes: this rank's all-to-all and all-gather sends (one slot per other rank each)
        wire = sum(2 * (comm.size - 1) * WireLayout(codec, g.c, comm.size, t.device).slot_bytes for g in segs)
        span = tracing.span(
            what,
            comm,
            count=t.numel(),
            dtype=t.dtype,
            nbytes=t.numel() * t.element_size(),
            wire_bytes=wire,
            op=op,
            algorithm=f"{type(codec).__name__}",
        )
    future = engine.threads.submit(
        _run, engine.comm, t, op, codec, segs, local, server, stream, matching, describe, PhaseClock(), span
    )
    return QuantizedWork(future, describe)


def _run(
    comm: Any,
    t: torch.Tensor,
    op: Any,
    codec: Codec,
    segs: list[Segment],
    local: torch.Tensor | None,
    server: torch.Tensor | None,
    stream: Any,
    matching: Work | None,
    describe: str,
    clock: PhaseClock,
    span: tracing.SpanHandle | None = None,
) -> None:
    try:
        if matching is not None:
            matching.wait()
        if stream is not None:
            with torch.cuda.stream(stream):
                return Pipeline(comm, t, op, codec, local, server, clock).run(segs)
        return Pipeline(comm, t, op, codec, local, server, clock).run(segs)
    except PycommError as e:
        raise named(e, describe) from e
    finally:
        tracing.end(span)


class _CopyBack:
    """allreduce_coalesced_encoded's one bucket (fusion.CoalescedWork's interface): the flat all-reduce and
    the copy of its result back into the caller's tensors."""

    def __init__(self, work: Work, flat: torch.Tensor, tensors: list[torch.Tensor]) -> None:
        self.work, self._flat, self._tensors = work, flat, tensors

    def finish(self) -> None:
        self.work.wait()
        at = 0
        for t in self._tensors:
            t.copy_(self._flat[at : at + t.numel()].view_as(t))
            at += t.numel()


def allreduce_coalesced_encoded(comm: Any, tensors: Any, op: Any, codec: Any, async_op: bool) -> Work | None:
    """allreduce_coalesced with a codec: floating tensors of one dtype and device, concatenated and all-reduced
    as one tensor through allreduce_quantized, then copied back."""
    what = "allreduce_coalesced"
    async_op = check_bool(async_op, f"{what}: async_op")
    group, _ = check_tensor_list(tensors, None, what)
    if any(t.dtype != group[0].dtype or t.device != group[0].device for t in group):
        raise TypeError(
            f"{what}: with a codec the tensors must share one dtype and device, got "
            f"{sorted({f'{t.dtype} on {t.device}' for t in group})}"
        )
    flat = torch.cat([t.reshape(-1) for t in group])
    work = CoalescedWork([_CopyBack(allreduce_quantized(comm, flat, op, codec), flat, group)], name=what)
    if async_op:
        return work
    work.wait()
    return None
