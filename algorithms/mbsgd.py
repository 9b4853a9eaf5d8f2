"""MBSGD: synchronous mini-batch SGD, gradients averaged over ranks (the DDP baseline).

Gradients are averaged by pycomm.GradientBuckets: per-parameter hooks start a bucket's all-reduce as
soon as backward has produced its gradients, so communication overlaps the rest of backward (as DDP
does), and when backward finishes the rest are launched and all are waited for. The gradients are
final, averaged over ranks, when `loss.backward()` returns, so the user's code after it (gradient
clipping, GradScaler.unscale_, logging a gradient norm) reads and changes the averaged gradients and
`step()` applies exactly what it left. To accumulate gradients over several backward passes, run all
but the last inside `with opt.no_sync():`. With a codec, each bucket travels compressed with its own
error-feedback residual. `overlap_backward=False` starts every bucket only when backward has
finished (same results, no overlap: a floor for measuring the overlap)."""

from __future__ import annotations

from typing import Any

import pycomm
from algorithms import options as opts
from algorithms import traits
from algorithms.base import CommOptimizer
from algorithms.bucketed import BucketedGradients
from algorithms.registry import register


@register("mbsgd")
class MBSGD(BucketedGradients, CommOptimizer):
    state_layout = traits.IDENTICAL  # averaged gradients, same step everywhere
    algorithm_options: dict[str, Any] = {"overlap_backward": True}

    def _validate(self, config: dict[str, Any]) -> dict[str, Any]:
        config["overlap_backward"] = opts.flag("overlap_backward", config["overlap_backward"])
        return config

    def _setup(self) -> None:
        # through the channel, which counts this optimizer's bytes and keeps one residual per bucket
        self._buckets = pycomm.GradientBuckets(
            self.params,
            bucket_bytes=self.options["bucket_bytes"],
            overlap=self.options["overlap_backward"],
            launch=lambda b: self.channel.allreduce_async(b.grads(), key=f"bucket{b.index}"),
        )

    @property
    def launched_buckets(self) -> int:
        """How many of this step's gradient buckets have started their all-reduce (during backward, all
        of them once backward has finished)."""
        return self._buckets.launched

    @property
    def num_buckets(self) -> int:
        return len(self._buckets.buckets)

    def synchronize(self) -> None:
        """Finish averaging the gradients; afterwards every p.grad holds the mean over ranks. Backward
        calls it when it finishes; call it yourself only after gradients were produced outside
        backward's hooks (e.g. assigned to p.grad)."""
        self._buckets.synchronize()

    def _step(self, loss: float | None) -> None:
        self._buckets.synchronize()
        self.optimizer.step()
        self._buckets.reset()
