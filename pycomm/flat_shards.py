"""Coalesced reduce-scatter and all-gather over padded flat shards: ZeRO's layout
(`Communicator.reduce_scatter_coalesced`, `Communicator.allgather_coalesced`).

Many tensors of one dtype are seen as one flat vector, their concatenation, zero-padded to size * S
elements with S = ceil(total / size) (`flat_shard_numel`). Rank r's shard is flat[r S : (r + 1) S].
- reduce_scatter_coalesced(shard, tensors): shard = rank r's part of the reduction over ranks of the
  flat vectors (the gradients of a ZeRO unit reduced into the shard its rank steps).
- allgather_coalesced(tensors, shard): every rank's shard, written back into the tensors (the
  parameters of a unit gathered from their shards). Padding is never written into a tensor.
Both cut the shard range into buckets of about bucket_bytes on the wire; bucket k of every rank
travels in one collective whose buffer is packed (and cast to wire_dtype, and pre-scaled by 1/size for
AVG) by one pass of the pack kernel straight from the tensors' memory, so no flat copy of the tensors
is ever made. All buckets are submitted at once; the returned Work finishes (unpacks) them in order.
When the tensors already lie one after another in one buffer and fill size * S exactly (ZeRO's flat
parameters and gradient buckets can be laid out so), there is nothing to pack: one collective reads or
writes that buffer in place (unless a wire_dtype or codec asks for a conversion).

With a codec (e.g. pycomm.Int8Codec) the reduce-scatter encodes the chunks other ranks reduce, hands
them over with one all-to-all and decode-accumulates in fp32 (each rank's own chunk taken exactly): what
DeepSpeed's ZeRO++ calls a quantized gradient reduce-scatter. The all-gather encodes each shard once and
decodes every rank's encoding, its own too, so all ranks end with the same bytes (quantized weights)."""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from pycomm import _dtypes, kernels, tracing
from pycomm._buffers import POOL
from pycomm._codec_wire import WireLayout, check_codec
from pycomm._tensors import check_tensor, place_of
from pycomm.fusion import WIRE_DTYPES, CoalescedWork, check_tensor_list, op_span
from pycomm.ops import AVG, SUM, check_op


def flat_shard_numel(tensors: Sequence[torch.Tensor], size: int) -> int:
    """S: elements of one rank's shard of the tensors' padded concatenation over `size` ranks."""
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"flat_shard_numel: size must be a positive int, got {size!r}")
    return -(-sum(int(t.numel()) for t in tensors) // size)


@dataclass(frozen=True)
class FlatLayout:
    """Where each tensor lies in the flat vector, and which views cover a range of it."""

    starts: tuple[int, ...]  # flat offset of each tensor
    total: int
    shard: int  # S

    @staticmethod
    def of(tensors: Sequence[torch.Tensor], size: int) -> "FlatLayout":
        starts, at = [], 0
        for t in tensors:
            starts.append(at)
            at += t.numel()
        return FlatLayout(tuple(starts), at, -(-at // size))

    def cover(
        self, tensors: Sequence[torch.Tensor], lo: int, hi: int, at: int, views: list[torch.Tensor], offsets: list[int]
    ) -> None:
        """Append the views of flat[lo:hi] (clipped at the end of the data) and their offsets in a buffer
        where flat[lo] lies at `at`."""
        k = max(0, bisect.bisect_right(self.starts, lo) - 1)
        while k < len(tensors) and self.starts[k] < hi:
            t0 = self.starts[k]
            a, b = max(lo, t0), min(hi, t0 + tensors[k].numel())
            if b > a:
                views.append(tensors[k].view(-1)[a - t0 : b - t0])
                offsets.append(at + a - lo)
            k += 1


class _Bucket:
    """One collective in flight and what turns its result into the caller's tensors."""

    def __init__(self, work: Any, finish: Callable[[], None], buffers: list[torch.Tensor]) -> None:
        self.work, self._finish, self._buffers = work, finish, buffers

    def finish(self) -> None:
        self.work.wait()
        try:
            self._finish()
        finally:
            for b in self._buffers:
                POOL.give(b)
            self._buffers = []


def _check_group(tensors: object, bucket_bytes: object, what: str) -> tuple[list[torch.Tensor], int]:
    checked, bucket_bytes = check_tensor_list(tensors, bucket_bytes, what)
    if not checked:
        raise ValueError(f"{what}: tensors is empty; give at least one tensor")
    dtypes = {t.dtype for t in checked}
    if len(dtypes) > 1:
        raise TypeError(
            f"{what}: tensors must share one dtype (a flat shard has one), got "
            f"{sorted(str(d) for d in dtypes)}; call once per dtype"
        )
    return checked, bucket_bytes


def _check_shard(shard: object, tensors: list[torch.Tensor], layout: FlatLayout, what: str) -> torch.Tensor:
    shard = check_tensor(shard, f"{what}: shard")
    if shard.dtype != tensors[0].dtype:
        raise TypeError(f"{what}: shard has dtype {shard.dtype}, the tensors {tensors[0].dtype}; they must match")
    if shard.numel() != layout.shard:
        raise ValueError(
            f"{what}: shard has {shard.numel()} elements; expected ceil({layout.total} / size) = "
            f"{layout.shard} (pycomm.flat_shard_numel(tensors, comm.size))"
        )
    place_of([shard, *tensors], f"{what}: shard and tensors")
    return shard.view(-1)


def _check_options(wire_dtype: object, codec: object, dtype: torch.dtype, what: str) -> Any:
    if wire_dtype is not None and wire_dtype not in WIRE_DTYPES:
        names = ", ".join(str(d).replace("torch.", "") for d in WIRE_DTYPES)
        raise TypeError(f"{what}: wire_dtype must be None or one of {names}, got {wire_dtype!r}")
    if codec is None:
        return None
    if wire_dtype is not None:
        raise ValueError(f"{what}: give a codec or a wire_dtype, not both (the codec decides the wire format)")
    if dtype not in _dtypes.FLOATING:
        raise TypeError(f"{what}: a codec compresses floating tensors, got {dtype}")
    return check_codec(codec, f"{what}: codec")


def _consecutive_flat(
    group: list[torch.Tensor], layout: FlatLayout, size: int, shard: torch.Tensor
) -> torch.Tensor | None:
    """The tensors' flat vector as one tensor, when they lie one after another in one buffer (as ZeRO's
    flat parameters and gradient buckets do) and need no padding: then the collective reads or writes
    them where they are, with no pack or unpack. None otherwise, or when `shard` overlaps them."""
    if layout.total != size * layout.shard or layout.total == 0:
        return None
    first, item = group[0], group[0].element_size()
    base = first.data_ptr()
    if any(
        t.untyped_storage().data_ptr() != first.untyped_storage().data_ptr() or t.data_ptr() != base + start * item
        for t, start in zip(group, layout.starts)
    ):
        return None
    end = base + layout.total * item
    if shard.data_ptr() < end and base < shard.data_ptr() + shard.numel() * item:
        return None
    return torch.empty(0, dtype=first.dtype, device=first.device).set_(
        first.untyped_storage(), first.storage_offset(), (layout.total,)
    )


def _arguments(
    comm: Any, tensors: object, shard: object, bucket_bytes: object, wire_dtype: object, codec: object, what: str
) -> tuple[list[torch.Tensor], FlatLayout, torch.Tensor, Any, int]:
    """Checked (tensors, their layout over comm's ranks, the flat shard, the codec or None, bucket bytes)."""
    group, bucket_bytes = _check_group(tensors, bucket_bytes, what)
    layout = FlatLayout.of(group, comm.size)
    flat_shard = _check_shard(shard, group, layout, what)
    return group, layout, flat_shard, _check_options(wire_dtype, codec, group[0].dtype, what), bucket_bytes


def _ranges(shard: int, per_rank: int) -> list[tuple[int, int]]:
    return [(lo, min(lo + per_rank, shard)) for lo in range(0, shard, per_rank)]


def _per_rank_elements(bucket_bytes: int, size: int, item: int, block: int = 1) -> int:
    """Shard elements per bucket: bucket_bytes over all ranks' chunks, whole codec blocks, at least one."""
    n = max(1, bucket_bytes // (size * item))
    return max(block, n // block * block)


def _pack_chunks(
    tensors: list[torch.Tensor], layout: FlatLayout, size: int, lo: int, hi: int, buffer: torch.Tensor, scale: float
) -> None:
    """buffer[r c : (r + 1) c] = flat[r S + lo : r S + hi] for every rank r, zero where flat is padding."""
    c, views, offsets = hi - lo, [], []
    for r in range(size):
        layout.cover(tensors, r * layout.shard + lo, r * layout.shard + hi, r * c, views, offsets)
    if sum(v.numel() for v in views) < buffer.numel():
        buffer.zero_()
    if views:
        kernels.pack(views, buffer, offsets=offsets, scale=scale)


def _unpack_chunks(
    tensors: list[torch.Tensor], layout: FlatLayout, size: int, lo: int, hi: int, buffer: torch.Tensor
) -> None:
    c, views, offsets = hi - lo, [], []
    for r in range(size):
        layout.cover(tensors, r * layout.shard + lo, r * layout.shard + hi, r * c, views, offsets)
    if views:
        kernels.unpack(buffer, views, offsets=offsets)


def _traced(name: str, tensors: object, comm: Any, op: Any, run: Callable[[], CoalescedWork]) -> CoalescedWork:
    """run(), inside a span of the whole op while tracing (ended by the work's wait)."""
    span = op_span(comm, name, list(tensors), op=op) if tracing.ACTIVE and isinstance(tensors, (list, tuple)) else None
    try:
        work = run()
    except BaseException:
        tracing.end(span)
        raise
    work.span = span
    return work


def reduce_scatter_coalesced(
    comm: Any,
    shard: torch.Tensor,
    tensors: Sequence[torch.Tensor],
    op: Any = AVG,
    bucket_bytes: int | None = None,
    wire_dtype: torch.dtype | None = None,
    codec: Any = None,
) -> CoalescedWork:
    return _traced(
        "reduce_scatter_coalesced",
        tensors,
        comm,
        op,
        lambda: _reduce_scatter_coalesced(comm, shard, tensors, op, bucket_bytes, wire_dtype, codec),
    )


def allgather_coalesced(
    comm: Any,
    tensors: Sequence[torch.Tensor],
    shard: torch.Tensor,
    bucket_bytes: int | None = None,
    wire_dtype: torch.dtype | None = None,
    codec: Any = None,
) -> CoalescedWork:
    return _traced(
        "allgather_coalesced",
        tensors,
        comm,
        None,
        lambda: _allgather_coalesced(comm, tensors, shard, bucket_bytes, wire_dtype, codec),
    )


def _reduce_scatter_coalesced(
    comm: Any,
    shard: torch.Tensor,
    tensors: Sequence[torch.Tensor],
    op: Any,
    bucket_bytes: int | None,
    wire_dtype: torch.dtype | None,
    codec: Any,
) -> CoalescedWork:
    what = "reduce_scatter_coalesced"
    group, layout, flat_shard, codec, bucket_bytes = _arguments(
        comm, tensors, shard, bucket_bytes, wire_dtype, codec, what
    )
    op = check_op(op, what)
    dtype = group[0].dtype
    if op == AVG and dtype not in _dtypes.FLOATING:
        raise TypeError(f"{what}: op AVG needs floating tensors, got {dtype} (use SUM and divide)")
    if codec is not None:
        if op not in (SUM, AVG):
            raise ValueError(f"{what}: with a codec op must be pycomm.SUM or pycomm.AVG, got {op.name}")
        return _reduce_scatter_encoded(comm, flat_shard, group, layout, op, bucket_bytes, codec)
    wire = wire_dtype if wire_dtype is not None and dtype in _dtypes.FLOATING else dtype
    flat = _consecutive_flat(group, layout, comm.size, flat_shard) if wire == dtype else None
    if flat is not None:  # one collective straight from the tensors' buffer: nothing to stage
        return CoalescedWork(
            [_Bucket(comm.reduce_scatter(flat_shard, flat, op=op, async_op=True), lambda: None, [])], what
        )
    item = torch.empty((), dtype=wire).element_size()
    prescale = op == AVG  # AVG of floats: pre-scale by 1/size in the pack pass, then SUM
    buckets = []
    for lo, hi in _ranges(layout.shard, _per_rank_elements(bucket_bytes, comm.size, item)):
        buffer = POOL.take(comm.size * (hi - lo), wire, flat_shard.device)
        _pack_chunks(group, layout, comm.size, lo, hi, buffer, 1.0 / comm.size if prescale else 1.0)
        out = flat_shard[lo:hi] if wire == dtype else POOL.take(hi - lo, wire, flat_shard.device)
        work = comm.reduce_scatter(out, buffer, op=SUM if prescale else op, async_op=True)
        if wire == dtype:
            buckets.append(_Bucket(work, lambda: None, [buffer]))
        else:
            buckets.append(_Bucket(work, lambda dst=flat_shard[lo:hi], src=out: dst.copy_(src), [buffer, out]))
    return CoalescedWork(buckets, what)


def _reduce_scatter_encoded(
    comm: Any,
    flat_shard: torch.Tensor,
    group: list[torch.Tensor],
    layout: FlatLayout,
    op: Any,
    bucket_bytes: int,
    codec: Any,
) -> CoalescedWork:
    me, size, device = comm.rank, comm.size, flat_shard.device
    per_rank = _per_rank_elements(bucket_bytes, size, 1, codec.block)  # ~1 byte per element on the wire
    buckets = []
    for lo, hi in _ranges(layout.shard, per_rank):
        c = hi - lo
        values = POOL.take(size * c, torch.float32, device)
        _pack_chunks(group, layout, size, lo, hi, values, 1.0)
        wire = WireLayout(codec, c, size, device)
        send, recv = wire.buffer(), wire.buffer()
        for r in range(size):
            if r != me:
                wire.encode_into(send, r, values[r * c : (r + 1) * c], None)
        work = comm.alltoall(recv, send, async_op=True)  # my own slot carries nothing

        def finish(
            values: torch.Tensor = values,
            recv: torch.Tensor = recv,
            wire: WireLayout = wire,
            c: int = c,
            dst: torch.Tensor = flat_shard[lo:hi],
        ) -> None:
            acc = values[me * c : (me + 1) * c]  # my own chunk, exact
            for r in range(size):
                if r != me:
                    wire.decode_accumulate(recv, r, acc)
            dst.copy_(acc.mul_(1.0 / size) if op == AVG else acc)

        buckets.append(_Bucket(work, finish, [values, send, recv]))
    return CoalescedWork(buckets, "reduce_scatter_coalesced")


def _allgather_coalesced(
    comm: Any,
    tensors: Sequence[torch.Tensor],
    shard: torch.Tensor,
    bucket_bytes: int | None,
    wire_dtype: torch.dtype | None,
    codec: Any,
) -> CoalescedWork:
    what = "allgather_coalesced"
    group, layout, flat_shard, codec, bucket_bytes = _arguments(
        comm, tensors, shard, bucket_bytes, wire_dtype, codec, what
    )
    dtype = group[0].dtype
    size, device = comm.size, flat_shard.device
    buckets = []
    if codec is not None:
        for lo, hi in _ranges(layout.shard, _per_rank_elements(bucket_bytes, size, 1, codec.block)):
            c = hi - lo
            wire = WireLayout(codec, c, size, device)
            send, recv = wire.buffer(), wire.buffer()
            wire.encode_into(send, 0, flat_shard[lo:hi].float(), None)
            work = comm.allgather(recv, wire.slot(send, 0), async_op=True)

            def finish(recv: torch.Tensor = recv, wire: WireLayout = wire, lo: int = lo, hi: int = hi) -> None:
                values = POOL.take(size * (hi - lo), torch.float32, device)
                try:
                    for r in range(size):
                        wire.decode(recv, r, values[r * (hi - lo) : (r + 1) * (hi - lo)])
                    _unpack_chunks(group, layout, size, lo, hi, values)
                finally:
                    POOL.give(values)

            buckets.append(_Bucket(work, finish, [send, recv]))
        return CoalescedWork(buckets, what)
    wire_dt = wire_dtype if wire_dtype is not None and dtype in _dtypes.FLOATING else dtype
    flat = _consecutive_flat(group, layout, size, flat_shard) if wire_dt == dtype else None
    if flat is not None:  # gathered straight into the tensors' buffer: nothing to unpack
        return CoalescedWork([_Bucket(comm.allgather(flat, flat_shard, async_op=True), lambda: None, [])], what)
    item = torch.empty((), dtype=wire_dt).element_size()
    for lo, hi in _ranges(layout.shard, _per_rank_elements(bucket_bytes, size, item)):
        recv = POOL.take(size * (hi - lo), wire_dt, device)
        send = flat_shard[lo:hi]
        temps = [recv]
        if wire_dt != dtype:
            send = POOL.take(hi - lo, wire_dt, device).copy_(flat_shard[lo:hi])
            temps.append(send)
        work = comm.allgather(recv, send, async_op=True)
        buckets.append(
            _Bucket(work, lambda recv=recv, lo=lo, hi=hi: _unpack_chunks(group, layout, size, lo, hi, recv), temps)
        )
    return CoalescedWork(buckets, what)
