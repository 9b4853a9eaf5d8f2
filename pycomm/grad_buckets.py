"""Gradients reduced bucket by bucket while backward runs: DDP's mechanism, for any reduction.

`GradientBuckets(params, comm=comm, mode="allreduce" | "reduce_scatter", ...)` registers a
post-accumulate-grad hook on every trainable parameter. Buckets hold parameters in reverse order (the
order backward usually produces their gradients), up to `bucket_bytes` each and of one dtype; a
bucket's reduction starts as soon as backward has produced all of its gradients, strictly in bucket
order, so every rank submits the same sequence of collectives. When backward finishes (a callback
queued on the autograd engine), the buckets backward left (parameters that got no gradient count as
zeros) are launched and all are waited for: the gradients are final when `loss.backward()` returns.

- mode "allreduce": every p.grad becomes the mean over ranks (through `wire_dtype`, or `codec` with an
  error-feedback residual per bucket).
- mode "reduce_scatter": each bucket's gradients are reduce-scattered into `bucket.shard`, this rank's
  padded flat shard of the bucket (pycomm.flat_shard_numel), which is what a ZeRO-2/3 rank steps;
  with `free_grads=True` the full gradients are dropped as soon as their bucket is packed.
- `overlap=False` starts no reduction during backward: all buckets are launched, in the same order, by
  the callback once backward has produced every gradient (the same collectives on the same values: the
  same results, without overlap; for measuring what overlap buys).
- `launch=` replaces the built-in reduction (a callable bucket -> object with wait()), e.g. to count
  bytes; it is called in bucket order with every p.grad of the bucket present.
Accumulate over several backward passes by running all but the last inside `with buckets.no_sync():`."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

import torch

from pycomm.flat_shards import flat_shard_numel
from pycomm.fusion import bucket_bytes_for
from pycomm.ops import AVG
from pycomm.quantized import ErrorFeedback

MODES = ("allreduce", "reduce_scatter")


@dataclass(eq=False)
class GradBucket:
    index: int
    params: list[torch.Tensor]
    shard: torch.Tensor | None = None  # reduce_scatter: this rank's shard of the reduced gradients
    ready: int = 0
    pending: Any = None
    residual: ErrorFeedback = field(default_factory=ErrorFeedback)

    def grads(self) -> list[torch.Tensor]:
        return [p.grad for p in self.params]


def plan(params: Sequence[torch.Tensor], bucket_bytes: int) -> list[list[torch.Tensor]]:
    """Trainable parameters in reverse order, cut into buckets of at most bucket_bytes (a larger tensor
    alone) and of one dtype each."""
    buckets: list[list[torch.Tensor]] = []
    size = 0
    for p in reversed([p for p in params if p.requires_grad]):
        nbytes = p.numel() * p.element_size()
        if not buckets or size + nbytes > bucket_bytes and size > 0 or buckets[-1][0].dtype != p.dtype:
            buckets.append([])
            size = 0
        buckets[-1].append(p)
        size += nbytes
    return buckets


class GradientBuckets:
    def __init__(
        self,
        params: Sequence[torch.Tensor],
        *,
        comm: Any = None,
        mode: str = "allreduce",
        bucket_bytes: int | None = None,
        op: Any = AVG,
        wire_dtype: torch.dtype | None = None,
        codec: Any = None,
        free_grads: bool = False,
        launch: Callable[[GradBucket], Any] | None = None,
        overlap: bool = True,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"GradientBuckets: mode must be one of {', '.join(MODES)}, got {mode!r}")
        if launch is None and comm is None:
            from pycomm.runtime import world

            comm = world()
        if free_grads and mode != "reduce_scatter":
            raise ValueError(
                "GradientBuckets: free_grads=True drops the full gradients, which only the "
                "reduce_scatter mode leaves unused"
            )
        if not isinstance(overlap, bool):
            raise TypeError(f"GradientBuckets: overlap must be True or False, got {overlap!r}")
        params = list(params)
        if any(not isinstance(p, torch.Tensor) for p in params):
            raise TypeError("GradientBuckets: params must be tensors (a model's parameters)")
        self.comm, self.mode, self.op, self.wire_dtype, self.codec = comm, mode, op, wire_dtype, codec
        self.free_grads, self.overlap = free_grads, overlap
        self._launch_fn = launch or self.reduce
        bucket_bytes = bucket_bytes_for(bucket_bytes, params, "GradientBuckets")
        self.buckets = [GradBucket(i, ps) for i, ps in enumerate(plan(params, bucket_bytes))]
        if mode == "reduce_scatter" and comm is not None:
            for b in self.buckets:
                b.shard = torch.zeros(
                    flat_shard_numel(b.params, comm.size), dtype=b.params[0].dtype, device=b.params[0].device
                )
        self._bucket_of = {p: b for b in self.buckets for p in b.params}
        self._next = 0
        self._syncing = True
        self._finalize_queued = False
        self._hooks = [p.register_post_accumulate_grad_hook(self._grad_ready) for b in self.buckets for p in b.params]

    # -- what the owner calls -------------------------------------------------------------------
    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """Backward passes inside accumulate gradients locally without communicating."""
        previous, self._syncing = self._syncing, False
        try:
            yield
        finally:
            self._syncing = previous

    @property
    def launched(self) -> int:
        """How many buckets of this step have started their reduction."""
        return self._next

    @property
    def pending(self) -> bool:
        return any(b.pending is not None for b in self.buckets)

    def synchronize(self) -> None:
        """Launch the buckets not launched yet and wait for all of them (backward does it when it ends)."""
        while self._next < len(self.buckets):
            self._launch(self.buckets[self._next])
        for b in self.buckets:
            if b.pending is not None:
                b.pending.wait()  # a finished reduction returns at once

    def reset(self) -> None:
        """Ready for the next step's backward (after the optimizer consumed the gradients)."""
        for b in self.buckets:
            b.ready, b.pending = 0, None
        self._next = 0

    def remove_hooks(self) -> None:
        for h in self._hooks:
            h.remove()
        self._hooks = []

    # -- hooks ------------------------------------------------------------------------------------
    def _grad_ready(self, p: torch.Tensor) -> None:
        if not self._syncing:
            return
        bucket = self._bucket_of[p]
        if bucket.pending is not None:
            raise RuntimeError(
                "a gradient was accumulated again after its bucket's reduction started: call "
                "step() (or zero_grad()) between backward passes, or use `with opt.no_sync():` "
                "for all but the last backward of an accumulation (or a second wrapper's hooks "
                "are still on these parameters: remove_hooks() on the old one)"
            )
        if not self._finalize_queued:
            # runs once this backward pass has finished, on the engine's thread, before backward() returns
            torch.autograd.Variable._execution_engine.queue_callback(self._finalize_backward)
            self._finalize_queued = True
        bucket.ready += 1
        while (
            self.overlap
            and self._next < len(self.buckets)
            and self.buckets[self._next].ready == len(self.buckets[self._next].params)
        ):
            self._launch(self.buckets[self._next])

    def _finalize_backward(self) -> None:
        self._finalize_queued = False
        self.synchronize()

    def _launch(self, bucket: GradBucket) -> None:
        for p in bucket.params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        bucket.pending = self._launch_fn(bucket)
        self._next += 1
        if self.free_grads:
            for p in bucket.params:  # packed into the send buffers already: the full gradients are spent
                p.grad = None

    def reduce(self, bucket: GradBucket) -> Any:
        """The default launch: the bucket's reduction of this mode over `comm` (a custom `launch` may
        call it, e.g. to count or time it)."""
        grads = bucket.grads()
        if self.mode == "reduce_scatter":
            return self.comm.reduce_scatter_coalesced(
                bucket.shard, grads, op=self.op, wire_dtype=self.wire_dtype, codec=self.codec, async_op=True
            )
        if self.codec is None:
            return self.comm.allreduce_coalesced(grads, op=self.op, wire_dtype=self.wire_dtype, async_op=True)
        return _QuantizedBucket(self.comm, grads, self.op, self.codec, bucket.residual)


class _QuantizedBucket:
    """A bucket through allreduce_quantized: flattened, reduced with its own residual, copied back."""

    def __init__(self, comm: Any, grads: list[torch.Tensor], op: Any, codec: Any, residual: ErrorFeedback) -> None:
        self.grads = grads
        self.flat = torch.cat([g.reshape(-1).float() for g in grads])
        self.work = comm.allreduce_quantized(self.flat, op=op, codec=codec, error_feedback=residual, async_op=True)

    def wait(self) -> None:
        if self.work is None:
            return
        self.work.wait()
        self.work = None
        for g, v in zip(self.grads, self.flat.split([g.numel() for g in self.grads])):
            g.copy_(v.view_as(g))
