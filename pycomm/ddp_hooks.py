"""pycomm's codecs as DDP communication hooks: gradients all-reduced as int8, int4 or 1-bit (with error
feedback), as `DistributedDataParallel.register_comm_hook(state, hook)` takes them:

    from pycomm import ddp_hooks
    model.register_comm_hook(ddp_hooks.QuantizedState("int8"), ddp_hooks.quantized_allreduce)

On backend "pycomm" a bucket runs through the communicator's allreduce_quantized (the reduce-scatter
pattern: each rank sends about 2 (N-1)/N of the encoded size). On any other process group (gloo) each
rank encodes its bucket, the encodings are all-gathered with torch.distributed and every rank decodes and
averages them in rank order (so every rank ends with the same bytes). Gradients are averaged, as DDP's
own all-reduce does. `state.wire_bytes` / `state.raw_bytes` count the encoded and the fp32 bytes of the
buckets this rank reduced.

(No `from __future__ import annotations` here: DDP checks the hook's annotations as objects.)"""

from typing import Any, Callable, Optional

import torch
import torch.distributed as dist

from pycomm.codecs import Codec, OneBitCodec, resolve_codec
from pycomm.ops import AVG
from pycomm.quantized import ErrorFeedback
from pycomm.torch_backend.process_group import PycommProcessGroup
from pycomm.torch_backend.work import PycommWork

__all__ = ["QuantizedState", "quantized_allreduce"]


class QuantizedState:
    """The hook's state: `codec` (a pycomm codec or its name: "int8", "int4", "1bit"), the process group
    (None: DDP's default group) and error feedback (None: on for 1-bit, whose error is too large
    without it; off for int8 / int4). Residuals are kept per DDP bucket."""

    def __init__(
        self,
        codec: Any = "int8",
        process_group: Optional[dist.ProcessGroup] = None,
        error_feedback: Optional[bool] = None,
    ) -> None:
        self.codec: Codec = resolve_codec(codec, "QuantizedState: codec")
        if error_feedback is not None and not isinstance(error_feedback, bool):
            raise TypeError(f"QuantizedState: error_feedback must be None or a bool, got {error_feedback!r}")
        self.error_feedback = isinstance(self.codec, OneBitCodec) if error_feedback is None else error_feedback
        self.process_group = process_group
        # bucket index -> (its parameters, ErrorFeedback (pycomm) or residual tensor (other)); DDP rebuilds
        # its buckets after the first step, so a residual is kept only while its bucket holds the same parameters
        self.feedback: dict[int, tuple[tuple[int, ...], Any]] = {}
        self.wire_bytes = 0
        self.raw_bytes = 0

    def _count(self, numel: int) -> None:
        self.wire_bytes += self.codec.wire_bytes(numel)
        self.raw_bytes += 4 * numel


def quantized_allreduce(state: QuantizedState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP communication hook: the bucket's gradients averaged over the group through `state.codec`."""
    group = state.process_group if state.process_group is not None else dist.group.WORLD
    grads = bucket.buffer()
    if grads.dtype != torch.float32:
        raise TypeError(
            f"quantized_allreduce: DDP bucket {bucket.index()} holds {grads.dtype} gradients; the hook "
            f"encodes float32 ones"
        )
    state._count(grads.numel())
    key = (bucket.index(), tuple(id(p) for p in bucket.parameters()))
    if isinstance(group, PycommProcessGroup):
        return _on_pycomm(state, group, key, grads)
    return _on_torch_group(state, group, key, grads)


def _feedback(state: QuantizedState, key: tuple[int, tuple[int, ...]], make: Callable[[], Any]) -> Any:
    """The bucket's error-feedback state, new where the bucket is new or DDP re-bucketed its parameters (the old
    residual was laid out for other parameters: dropped, as at the start)."""
    index, params = key
    held = state.feedback.get(index)
    if held is None or held[0] != params:
        held = state.feedback[index] = (params, make())
    return held[1]


def _on_pycomm(
    state: QuantizedState, group: PycommProcessGroup, key: tuple[int, tuple[int, ...]], grads: torch.Tensor
) -> torch.futures.Future:
    feedback = _feedback(state, key, ErrorFeedback) if state.error_feedback else None
    work = group.comm.allreduce_quantized(grads, op=AVG, codec=state.codec, error_feedback=feedback, async_op=True)
    done = PycommWork("allreduce_quantized", [work], [grads], None, group._waiter)
    return done.get_future().then(lambda fut: fut.value()[0])


def _on_torch_group(
    state: QuantizedState, group: dist.ProcessGroup, key: tuple[int, tuple[int, ...]], grads: torch.Tensor
) -> torch.futures.Future:
    residual = None
    if state.error_feedback:
        residual = _feedback(state, key, lambda: torch.zeros_like(grads))
    enc = state.codec.encode(grads, residual=residual)
    data, scales = enc.data.view(torch.uint8), enc.scales.view(torch.uint8)
    mine = torch.cat([data, scales])
    size = dist.get_world_size(group)
    gathered = torch.empty(size * mine.numel(), dtype=torch.uint8)
    fut = dist.all_gather_single(gathered, mine, group=group, async_op=True).get_future()

    def decode(_: torch.futures.Future) -> torch.Tensor:
        acc = torch.zeros(grads.numel(), dtype=torch.float32)
        for row in gathered.view(size, -1):
            got = state.codec.empty(grads.numel())
            got.data.view(torch.uint8).copy_(row[: data.numel()])
            got.scales.view(torch.uint8).copy_(row[data.numel() :])
            state.codec.decode_accumulate(got, acc)
        grads.copy_(acc.div_(size))
        return grads

    return fut.then(decode)
