"""ZeRO stages 1 and 2 (Rajbhandari et al., SC 2020): every rank keeps the whole model, each steps only
its shard of the flat parameters with the wrapped optimizer's rule (fp32 master and optimizer state
for the shard only), then the parameters are all-gathered from the shards.

- zero1: gradients averaged over all ranks during backward (pycomm.GradientBuckets, all-reduce per
  bucket), so p.grad is the full mean gradient after backward (torch's clip_grad_norm_ works too);
  each rank takes its shard of it.
- zero2: gradients reduce-scattered per bucket during backward; each rank keeps only its gradient
  shard (the full gradients are freed as soon as their bucket is packed). Clip with
  `opt.clip_grad_norm_(max_norm)`.
The flat groups are GradientBuckets' buckets, so a bucket's reduce-scatter lands in exactly the
shard its master steps. `hybrid=True` shards within a node and keeps the shards replicated across
nodes (zero2: reduce-scatter in the node, then all-reduce the shard across nodes)."""
from __future__ import annotations


import torch

import pycomm
from algorithms.bucketed import BucketedGradients
from algorithms.registry import register
from algorithms.zero.sharded import ZeroOptimizer


class _GatheredStage(BucketedGradients, ZeroOptimizer):
    """Stages whose ranks hold the whole model: after the step, all-gather it from the masters."""

    @torch.no_grad()
    def _publish(self) -> None:
        works = []
        for g in self.groups:
            dtype = g.params[0].dtype
            shard = g.master if dtype == torch.float32 else g.master.to(dtype)
            works.append(self.shard_comm.allgather_coalesced([p.data for p in g.params], shard,
                                                             bucket_bytes=self.options["bucket_bytes"],
                                                             codec=self.options["codec"]))
        for w in works:
            w.wait()

    def _synchronize(self) -> None:
        self._buckets.synchronize()

    def _end_step(self) -> None:
        self._buckets.reset()



@register("zero1")
class ZeRO1(_GatheredStage):
    def _plan_groups(self) -> list[list[torch.Tensor]]:
        dtype = self.params[0].dtype
        self._buckets = pycomm.GradientBuckets(self.params, comm=self.comm, mode="allreduce",
                                               bucket_bytes=self.options["bucket_bytes"], wire_dtype=self._wire(dtype),
                                               codec=self.options["codec"])
        return [b.params for b in self._buckets.buckets]

    def _gradient_shard(self, index: int) -> torch.Tensor:
        g = self.groups[index]
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in g.params]
        return g.assemble([g.piece_of_full(grad, i) for i, grad in enumerate(grads)])


@register("zero2")
class ZeRO2(_GatheredStage):
    def _plan_groups(self) -> list[list[torch.Tensor]]:
        dtype = self.params[0].dtype
        hybrid = self.replica_comm is not None
        self._buckets = pycomm.GradientBuckets(
            self.params, comm=self.shard_comm, mode="reduce_scatter", bucket_bytes=self.options["bucket_bytes"],
            wire_dtype=self._wire(dtype), codec=self.options["codec"], free_grads=True,
            launch=self._reduce_scatter if hybrid else None)
        return [b.params for b in self._buckets.buckets]

    def _gradient_shard(self, index: int) -> torch.Tensor:
        return self._buckets.buckets[index].shard.float()   # the shard itself when fp32

    def gradient_buffers(self) -> list[torch.Tensor]:
        return [b.shard for b in self._buckets.buckets]
