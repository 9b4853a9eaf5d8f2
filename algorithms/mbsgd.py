"""MBSGD: synchronous mini-batch SGD, gradients averaged over ranks (the DDP baseline).

Gradients are averaged in buckets fed by per-parameter post-accumulate-grad hooks: a bucket's
all-reduce starts as soon as backward has produced all of its gradients, so communication overlaps
the rest of backward (as DDP does). When backward finishes (a callback queued on the autograd engine,
as DDP's), the buckets backward left are launched and all are waited for: the gradients are final,
averaged over ranks, when `loss.backward()` returns, so the user's code after it (gradient clipping,
GradScaler.unscale_, logging a gradient norm) reads and changes the averaged gradients and `step()`
applies exactly what it left. Buckets hold parameters in reverse registration order (the order
backward usually produces them) and launch strictly in bucket order, so every rank submits the same
sequence of all-reduces. Parameters that got no gradient are all-reduced as zeros. To accumulate gradients over several backward passes, run all
but the last inside `with opt.no_sync():`. With a codec, each bucket travels compressed with its own
error-feedback residual."""
from __future__ import annotations

import contextlib
from typing import Any, Iterator

import torch

from algorithms import traits
from algorithms.base import CommOptimizer
from algorithms.channel import Pending
from algorithms.registry import register


class _Bucket:
    def __init__(self, index: int, params: list[torch.Tensor]) -> None:
        self.index, self.params = index, params
        self.ready = 0
        self.pending: Pending | None = None


@register("mbsgd")
class MBSGD(CommOptimizer):
    state_layout = traits.IDENTICAL   # averaged gradients, same step everywhere
    algorithm_options: dict[str, Any] = {}

    def _setup(self) -> None:
        trainable = [p for p in reversed(self.params) if p.requires_grad]
        self._buckets: list[_Bucket] = []
        current: list[torch.Tensor] = []
        size = 0
        for p in trainable:
            current.append(p)
            size += p.numel() * p.element_size()
            if size >= self.options["bucket_bytes"]:
                self._buckets.append(_Bucket(len(self._buckets), current))
                current, size = [], 0
        if current:
            self._buckets.append(_Bucket(len(self._buckets), current))
        self._bucket_of = {p: b for b in self._buckets for p in b.params}
        self._next_launch = 0
        self._syncing = True
        self._finalize_queued = False
        self._hooks = [p.register_post_accumulate_grad_hook(self._grad_ready) for p in trainable]

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """Backward passes inside accumulate gradients locally without communicating."""
        previous, self._syncing = self._syncing, False
        try:
            yield
        finally:
            self._syncing = previous

    def _grad_ready(self, p: torch.Tensor) -> None:
        if not self._syncing:
            return
        bucket = self._bucket_of[p]
        if bucket.pending is not None:
            raise RuntimeError("a gradient was accumulated again after its bucket's all-reduce started: call "
                               "step() (or zero_grad()) between backward passes, or use `with opt.no_sync():` "
                               "for all but the last backward of an accumulation")
        if not self._finalize_queued:
            # runs once this backward pass has finished, on the engine's thread, before backward() returns
            torch.autograd.Variable._execution_engine.queue_callback(self._finalize_backward)
            self._finalize_queued = True
        bucket.ready += 1
        while self._next_launch < len(self._buckets) and \
                self._buckets[self._next_launch].ready == len(self._buckets[self._next_launch].params):
            self._launch(self._buckets[self._next_launch])

    def _launch(self, bucket: _Bucket) -> None:
        for p in bucket.params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        bucket.pending = self.channel.allreduce_async([p.grad for p in bucket.params], key=f"bucket{bucket.index}")
        self._next_launch += 1

    @property
    def launched_buckets(self) -> int:
        """How many of this step's gradient buckets have started their all-reduce (during backward, all
        of them once backward has finished)."""
        return self._next_launch

    @property
    def num_buckets(self) -> int:
        return len(self._buckets)

    def _finalize_backward(self) -> None:
        self._finalize_queued = False
        self.synchronize()

    def synchronize(self) -> None:
        """Finish averaging the gradients (launching buckets backward left); afterwards every p.grad
        holds the mean over ranks. Backward calls it when it finishes; call it yourself only after
        gradients were produced outside backward's hooks."""
        while self._next_launch < len(self._buckets):
            self._launch(self._buckets[self._next_launch])
        for bucket in self._buckets:
            if bucket.pending is not None:
                bucket.pending.wait()   # a finished Pending returns at once

    def _reset(self) -> None:
        for bucket in self._buckets:
            bucket.ready, bucket.pending = 0, None
        self._next_launch = 0

    def _step(self, loss: float | None) -> None:
        self.synchronize()
        self.optimizer.step()
        self._reset()

    def zero_grad(self, set_to_none: bool = True) -> None:
        if any(b.pending is not None for b in self._buckets):
            self.synchronize()
            self._reset()
        super().zero_grad(set_to_none)

    def remove_hooks(self) -> None:
        """Detach this optimizer from the parameters' gradient hooks (e.g. before wrapping them again)."""
        for h in self._hooks:
            h.remove()
        self._hooks = []
