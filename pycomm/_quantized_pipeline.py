"""The segment layout and the two-stage pipeline of `allreduce_quantized` (pycomm/quantized.py), run on
its helper thread: every segment's encode and all-to-all (stage 1), reduce, re-encode and all-gather
(stage 2), and decode into t. Each stage is one fused kernel pass over the gradient per rank; a rank's
own reduced chunk is decoded into t by the reduce kernel itself, from the encoding still in cache
(what the all-gather hands back for it, so the bytes are the same), and the all-gather's decode skips it."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any, Iterator

import torch

from pycomm import settings
from pycomm._buffers import POOL
from pycomm._codec_wire import WireLayout
from pycomm._quantized_phases import PhaseClock
from pycomm.codecs import Codec
from pycomm.ops import AVG


def chunk_numel(numel: int, size: int, block: int) -> int:
    """Elements per rank's chunk: ceil(numel / size) rounded up to whole codec blocks."""
    per_rank = -(-numel // size)
    return -(-per_rank // block) * block


# Default elements per segment. Host ranks with a core each overlap the codec with the wire best in
# smaller segments (2 ranks over the shaped 10 Gbit/s link, 64 MiB: int8 0.32-0.39x fp32 at 1 Mi against
# 0.36-0.41x at 4 Mi); where ranks share cores (4 ranks on 2) 1 Mi was slower, and a GPU stream overlaps
# whole 16 MiB stages.
SEGMENT_ON_OWN_CORES = 1 << 20
SEGMENT = 4 << 20


def default_segment(oversubscribed: bool | None, on_gpu: bool) -> int:
    """The segment when PYCOMM_QUANTIZED_SEGMENT is unset: `oversubscribed` is the communicator's agreed
    flag (None where its backend does not key on it), so every rank picks the same."""
    return SEGMENT_ON_OWN_CORES if oversubscribed is False and not on_gpu else SEGMENT


def segment_numel(size: int, block: int, default: int) -> int:
    """Elements of t per pipelined segment: PYCOMM_QUANTIZED_SEGMENT, else `default` (default_segment()),
    rounded up to size whole-block chunks."""
    chosen = settings.get("PYCOMM_QUANTIZED_SEGMENT")
    return size * chunk_numel(default if chosen is None else chosen, size, block)


@dataclass(frozen=True)
class Segment:
    lo: int  # t[lo:hi] is the segment; rank r reduces t[lo + r c : lo + (r+1) c] (clipped at hi)
    hi: int
    c: int  # elements per rank's chunk
    mine: int  # offset of this rank's chunk in the concatenation of its chunks (the server residual)


def segments(numel: int, size: int, block: int, default: int) -> list[Segment]:
    """t's pipelined segments; `default`: the segment when PYCOMM_QUANTIZED_SEGMENT is unset."""
    seg = segment_numel(size, block, default)
    out, mine = [], 0
    for lo in range(0, numel, seg):
        hi = min(lo + seg, numel)
        c = chunk_numel(hi - lo, size, block)
        out.append(Segment(lo, hi, c, mine))
        mine += c
    return out


class InFlight:
    """One segment between its stages: its wire layout, buffers, and the collective in flight."""

    def __init__(self, index: int, seg: Segment, wire: WireLayout) -> None:
        self.index, self.seg, self.wire = index, seg, wire
        self.send, self.recv = wire.buffer(), wire.buffer()
        self.scratch = POOL.take(seg.c, torch.float32, wire.device)  # padded chunk / accumulator
        self.work: Any = None
        self.own_decoded = False  # the reduce kernel already wrote my own chunk of t
        self.released = False

    def release(self) -> None:
        if not self.released:
            self.released = True
            POOL.give(self.scratch)
            self.wire.release(self.send)
            self.wire.release(self.recv)


class Pipeline:
    """Both stages of every segment, on the helper thread; `local` / `server` are the error-feedback
    residuals. At most three segments hold buffers: k's all-to-all, and k-1's and k-2's all-gathers."""

    def __init__(
        self,
        comm: Any,
        t: torch.Tensor,
        op: Any,
        codec: Codec,
        local: torch.Tensor | None,
        server: torch.Tensor | None,
        clock: PhaseClock,
    ) -> None:
        self.comm, self.flat, self.op, self.codec = comm, t.view(-1), op, codec
        self.local, self.server, self.clock = local, server, clock
        clock.comm = comm
        self.to_fp32_directly = t.dtype == torch.float32

    def run(self, segs: list[Segment]) -> None:
        exchanging: deque[InFlight] = deque()  # stage 1 in flight
        gathering: deque[InFlight] = deque()  # stage 2 in flight
        self.live: list[InFlight] = []  # every segment's buffers, released in the end
        try:
            for k, seg in enumerate(segs):
                exchanging.append(self._exchange(k, seg))
                if len(exchanging) > 1:
                    gathering.append(self._gather(exchanging.popleft()))
                if len(gathering) > 1:
                    self._finish(gathering.popleft())
            while exchanging:
                gathering.append(self._gather(exchanging.popleft()))
            while gathering:
                self._finish(gathering.popleft())
        finally:
            # After a failure (a stall breaks the communicator) a transfer still in flight may never
            # complete: waiting for it would add another PYCOMM_TIMEOUT. Its buffers stay with its
            # Work (kept by the communicator until it completes) and never go back to the pool.
            for f in self.live:
                if f.work is None or f.work.is_completed():
                    f.release()

    def _chunks(self, seg: Segment) -> Iterator[tuple[int, int, int]]:
        for r in range(self.comm.size):
            lo = seg.lo + r * seg.c
            yield r, min(lo, seg.hi), min(lo + seg.c, seg.hi)

    def _exchange(self, k: int, seg: Segment) -> InFlight:
        """Stage 1: encode the chunks the other ranks reduce and start the all-to-all."""
        f = InFlight(k, seg, WireLayout(self.codec, seg.c, self.comm.size, self.flat.device))
        self.live.append(f)
        local = self.local
        with self.clock(k, "encode"):
            for r, lo, hi in self._chunks(seg):
                if r == self.comm.rank:
                    continue
                x, res = _chunk(self.flat, local, lo, hi, seg.c, f.scratch)
                f.wire.encode_into(f.send, r, x, res)
                if local is not None and 0 < hi - lo < seg.c:
                    local[lo:hi].copy_(res[: hi - lo])
        f.work = self.comm.alltoall(f.recv, f.send, async_op=True)  # my own slot carries nothing
        return f

    def _gather(self, f: InFlight) -> InFlight:
        """Reduce my chunk (exact own part + every other rank's encoding), re-encode, start the all-gather."""
        with self.clock(f.index, "wire_alltoall"):
            f.work.wait()
        me, flat, local = self.comm.rank, self.flat, self.local
        with self.clock(f.index, "reduce_reencode"):
            _, lo, hi = next(x for x in self._chunks(f.seg) if x[0] == me)
            server = None if self.server is None else self.server[f.seg.mine : f.seg.mine + f.seg.c]
            f.own_decoded = f.wire.reduce_encode_into(
                f.send,
                0,
                flat[lo:hi],
                None if local is None else local[lo:hi],
                f.recv,
                [r for r in range(self.comm.size) if r != me],
                1.0 / self.comm.size if self.op == AVG else 1.0,
                f.scratch,
                server,
                decoded_out=flat[lo:hi],
            )
        f.work = self.comm.allgather(f.recv, f.wire.slot(f.send, 0), async_op=True)
        return f

    def _finish(self, f: InFlight) -> None:
        """Decode every reduced chunk into t (mine too, so every rank ends with the same bytes, unless the
        reduce kernel already decoded mine from the same encoding)."""
        with self.clock(f.index, "wire_allgather"):
            f.work.wait()
        f.work = None
        with self.clock(f.index, "decode"):
            for r, lo, hi in self._chunks(f.seg):
                if r == self.comm.rank and f.own_decoded:
                    continue
                if hi - lo == f.seg.c and self.to_fp32_directly:
                    f.wire.decode(f.recv, r, self.flat[lo:hi])
                elif hi > lo:
                    f.wire.decode(f.recv, r, f.scratch)
                    self.flat[lo:hi].copy_(f.scratch[: hi - lo])
        f.release()


def _chunk(
    flat: torch.Tensor, local: torch.Tensor | None, lo: int, hi: int, c: int, scratch: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor | None]:
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
