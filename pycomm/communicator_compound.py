"""The compound ops of pycomm.Communicator: many tensors in one call (the coalesced all-reduce and
broadcast, ZeRO's reduce-scatter / all-gather over flat shards) and the quantized all-reduce. Their logic
is in pycomm/fusion.py, flat_shards.py and quantized.py; here each call is checked and sent there.
pycomm/communicator.py holds the single-tensor ops and point to point, and mixes this class in, so
`pycomm.Communicator` stays one class."""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import torch

from pycomm import flat_shards, fusion, quantized
from pycomm._validate import check_bool
from pycomm.ops import SUM, ReduceOp
from pycomm.work import Work


class CompoundOps:
    """The compound ops, as methods of Communicator (which defines `_peer`)."""

    _peer: Callable[[object, str, str], int]

    # ---- coalesced and quantized ops (logic in pycomm/fusion.py, flat_shards.py, quantized.py) ----
    # The convention of every op (docs/api.md): op=SUM, async_op=False (a Work when True), codec= a codec
    # instance or name. The tensors (and op, root) are positional; every option is keyword-only, in one
    # order: bucket_bytes, wire_dtype, codec, error_feedback, async_op.
    def allreduce_coalesced(
        self,
        tensors: Sequence[torch.Tensor],
        op: ReduceOp = SUM,
        *,
        bucket_bytes: int | None = None,
        wire_dtype: Optional[torch.dtype] = None,
        codec: Any = None,
        async_op: bool = False,
    ) -> Optional[Work]:
        """All-reduces many tensors in place: small ones through fused buckets (grouped by dtype; floating
        tensors travel as wire_dtype when given), large host tensors where they lie; async_op=True returns a
        Work whose wait() unpacks the results, async_op=False blocks (on the caller's thread where the
        transport allows) and returns None. bucket_bytes None: 4 MiB for host tensors (they stay in the
        last-level cache), 25 MiB (DDP's default) for GPU tensors. codec (floating tensors of one dtype and
        device): the tensors concatenated and all-reduced through allreduce_quantized. See pycomm/fusion.py."""
        if codec is not None:
            if wire_dtype is not None:
                raise ValueError(
                    "allreduce_coalesced: give a codec or a wire_dtype, not both (the codec decides the wire format)"
                )
            return quantized.allreduce_coalesced_encoded(self, tensors, op, codec, async_op)
        return fusion.allreduce_coalesced(self, tensors, op, bucket_bytes, wire_dtype, async_op)

    def broadcast_coalesced(
        self,
        tensors: Sequence[torch.Tensor],
        root: int = 0,
        *,
        bucket_bytes: int | None = None,
        codec: Any = None,
        async_op: bool = False,
    ) -> Optional[Work]:
        """Broadcasts many tensors (any dtypes) from `root` in place through flat buckets per dtype (large
        host tensors where they lie); async_op=False: blocking, returns None. codec must be None: a
        broadcast copies the root's values exactly (ValueError otherwise)."""
        _no_codec(
            codec,
            "broadcast_coalesced",
            "a broadcast copies the root's values exactly; a lossy codec would give every other rank different values",
        )
        root = self._peer(root, "broadcast_coalesced", "root")
        return fusion.broadcast_coalesced(self, tensors, root, bucket_bytes, async_op)

    def reduce_scatter_coalesced(
        self,
        shards: torch.Tensor,
        tensors: Sequence[torch.Tensor],
        op: ReduceOp = SUM,
        *,
        bucket_bytes: int | None = None,
        wire_dtype: Optional[torch.dtype] = None,
        codec: Any = None,
        async_op: bool = False,
    ) -> Optional[Work]:
        """`shards` (one flat tensor of pycomm.flat_shard_numel(tensors, size) elements) = this rank's shard
        of the reduction over ranks of the tensors' zero-padded concatenation (ZeRO's gradient shard).
        Tensors share one dtype; floating ones travel as wire_dtype, or through `codec` (e.g. "int8" or
        pycomm.Int8Codec(): int8 all-to-all, fp32 accumulation). See pycomm/flat_shards.py."""
        async_op = _async(async_op, "reduce_scatter_coalesced")
        work = flat_shards.reduce_scatter_coalesced(self, shards, tensors, op, bucket_bytes, wire_dtype, codec)
        return _waited(work, async_op)

    def allgather_coalesced(
        self,
        tensors: Sequence[torch.Tensor],
        shards: torch.Tensor,
        *,
        bucket_bytes: int | None = None,
        wire_dtype: Optional[torch.dtype] = None,
        codec: Any = None,
        async_op: bool = False,
    ) -> Optional[Work]:
        """The inverse layout: every rank's `shards` (flat, pycomm.flat_shard_numel(tensors, size) elements)
        gathered and written into `tensors` (ZeRO's parameters from their shards); padding is dropped."""
        async_op = _async(async_op, "allgather_coalesced")
        work = flat_shards.allgather_coalesced(self, tensors, shards, bucket_bytes, wire_dtype, codec)
        return _waited(work, async_op)

    def allreduce_quantized(
        self,
        tensor: torch.Tensor,
        op: ReduceOp = SUM,
        *,
        codec: Any = None,
        error_feedback: Any = None,
        async_op: bool = False,
    ) -> Optional[Work]:
        """All-reduces floating `tensor` in place with a codec (default pycomm.Int8Codec(block=256); a name
        such as "int8" or "1bit" is accepted) in the reduce-scatter pattern; error_feedback: None, a
        pycomm.ErrorFeedback or a residual."""
        async_op = _async(async_op, "allreduce_quantized")
        return _waited(quantized.allreduce_quantized(self, tensor, op, codec, error_feedback), async_op)


def _async(async_op: object, what: str) -> bool:
    return check_bool(async_op, f"{what}: async_op")


def _waited(work: Work, async_op: bool) -> Optional[Work]:
    """`work` for async_op=True; waited, None for async_op=False (compound ops that run on a Work)."""
    if async_op:
        return work
    work.wait()
    return None


def _no_codec(codec: object, what: str, why: str) -> None:
    if codec is not None:
        raise ValueError(f"{what}: codec must be None ({why}), got {codec!r}")
