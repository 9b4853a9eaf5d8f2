"""ZeRO stages 1 and 2 (Rajbhandari et al., SC 2020): every rank keeps the whole model, each steps only
its shard of the flat parameters with the wrapped optimizer's rule (fp32 master and optimizer state
for the shard only), then the parameters are all-gathered from the shards.

- zero1: gradients averaged over all ranks during backward (pycomm.GradientBuckets, all-reduce per
  bucket), so p.grad is the full mean gradient after backward (torch's clip_grad_norm_ works too);
  each rank takes its shard of it.
- zero2: gradients reduce-scattered per bucket during backward; each rank keeps only its gradient
  shard (the full gradients are freed as soon as their bucket is packed). Clip with
  `opt.clip_grad_norm_(max_norm)`; until the step p.grad is a marker on which torch's clip raises.
The flat groups are GradientBuckets' buckets, so a bucket's reduce-scatter lands in exactly the
shard its master steps. On a Mesh with dp_replicate > 1 (or `hybrid=True`: within a node, replicated across
nodes) zero2 reduce-scatters in the shard group, then all-reduces the shard across the replicas.

zero1 takes `staleness_bound` K (default 0: the above): with K >= 1 step t's reduction is left in flight
and step t - K is completed at the end of step t (algorithms/zero/delayed.py), so a gradient misses the
K latest updates and ranks run up to K steps apart."""

from __future__ import annotations

from typing import Any

import torch

import pycomm
from algorithms import clipping
from algorithms import options as opts
from algorithms.bucketed import BucketedGradients
from algorithms.registry import register
from algorithms.zero.delayed import DelayedSteps
from algorithms.zero.sharded import ZeroOptimizer


class _GatheredStage(BucketedGradients, ZeroOptimizer):
    """Stages whose ranks hold the whole model: after the step, all-gather it from the masters."""

    @torch.no_grad()
    def _publish(self) -> None:
        works = []
        for g in self.groups:
            dtype = g.params[0].dtype
            shard = g.master if dtype == torch.float32 else g.master.to(dtype)
            works.append(self._allgather_shard([p.data for p in g.params], shard))
        for w in works:
            w.wait()

    def _synchronize(self) -> None:
        self._buckets.synchronize()

    def _end_step(self) -> None:
        self._buckets.reset()


@register("zero1")
class ZeRO1(_GatheredStage):
    algorithm_options: dict[str, Any] = {**ZeroOptimizer.algorithm_options, "staleness_bound": 0}

    def _validate(self, config: dict[str, Any]) -> dict[str, Any]:
        config = super()._validate(config)
        config["staleness_bound"] = opts.integer("staleness_bound", config["staleness_bound"], 0)
        return config

    @property
    def _stale(self) -> bool:
        return self.options["staleness_bound"] > 0

    def _plan_groups(self) -> list[list[torch.Tensor]]:
        self._buckets = self._gradient_buckets(self.comm)
        return [b.params for b in self._buckets.buckets]

    def _gradient_buckets(self, comm: Any) -> pycomm.GradientBuckets:
        """Gradients all-reduced over `comm` (all of dp; only dp_shard under an outer method across replicas)."""
        dtype = self.params[0].dtype
        buckets = pycomm.GradientBuckets(
            self.params,
            comm=comm,
            mode="allreduce",
            bucket_bytes=self.options["bucket_bytes"],
            wire_dtype=self._wire(dtype),
            codec=self.options["codec"],
            launch=self._allreduce_bucket,
            overlap=self.options["overlap_backward"],
        )
        if self._stale:  # the reduction is issued at step() and left in flight, not during backward
            buckets.remove_hooks()
        return buckets

    def _allreduce_bucket(self, bucket: Any) -> Any:
        wire = self._wire(bucket.params[0].dtype)
        self._count(
            "dp_shard" if self._buckets.comm is self.shard_comm else "dp",
            self._buckets.comm,
            sum(self._wire_bytes(g.numel(), g.dtype, wire) for g in bucket.grads()),
        )
        return self._buckets.reduce(bucket)

    def hand_replicas_over(self) -> None:
        """As ZeroOptimizer's, and the gradients are all-reduced over the shard group only from now on."""
        super().hand_replicas_over()
        self._buckets.remove_hooks()
        plan = [b.params for b in self._buckets.buckets]
        self._buckets = self._gradient_buckets(self.shard_comm)
        assert [b.params for b in self._buckets.buckets] == plan  # the same buckets: the groups stay valid

    def _after_setup(self) -> None:
        self._delayed = DelayedSteps(self, self.options["staleness_bound"]) if self._stale else None

    def _step(self, loss: float | None) -> None:
        if self._delayed is None:
            super()._step(loss)
            return
        self._delayed.launch(self.steps)
        self._delayed.complete_through(self.steps - self.options["staleness_bound"])
        self._grad_shards_cache = None

    def synchronize(self) -> None:
        """With staleness_bound > 0: complete every step taken (the parameters then hold all updates)."""
        if self._delayed is not None:
            self._delayed.drain()

    def close(self) -> None:
        """End of training: complete the steps still in flight (staleness_bound > 0); idempotent."""
        self.synchronize()

    def clip_grad_norm_(
        self, max_norm: float, norm_type: float = 2.0, error_if_nonfinite: bool = False, foreach: bool | None = None
    ) -> torch.Tensor:
        """With staleness_bound > 0 this step's gradient is reduced K steps later: it is clipped by its
        global norm then, and what returns is the norm of the latest completed step (NaN before one)."""
        if self._delayed is None:
            return super().clip_grad_norm_(max_norm, norm_type, error_if_nonfinite, foreach)
        clipping.total_norm([], norm_type)  # a bad norm_type is refused now, not K steps later
        self._delayed.clip_next = (float(max_norm), norm_type, error_if_nonfinite, foreach)
        return self._delayed.last_norm

    def comm_stats(self) -> dict[str, Any]:
        """The channel's counters plus the staleness the gradients had (0 when staleness_bound is 0)."""
        stats = super().comm_stats()
        if self._delayed is None:
            return {**stats, "max_staleness": 0, "mean_staleness": 0.0}
        mine = self._delayed.stats.as_dict()
        return {**stats, **{k: mine[k] for k in ("max_staleness", "mean_staleness", "staleness_histogram")}}

    # checkpoints hold the parameters after every step taken: drain the in-flight steps first
    def full_state_dict(self) -> dict[str, Any]:
        self.synchronize()
        return super().full_state_dict()

    def full_model_state_dict(self) -> dict[str, Any]:
        self.synchronize()
        return super().full_model_state_dict()

    def sharded_state_dict(self) -> dict[str, Any]:
        self.synchronize()
        return super().sharded_state_dict()

    def save_sharded_state_dict(self, directory: Any) -> None:
        self.synchronize()
        super().save_sharded_state_dict(directory)

    def load_full_state_dict(self, full: dict[str, Any], steps: int | None = None) -> None:
        self.synchronize()
        super().load_full_state_dict(full, steps)
        self._restart_delay()

    def load_sharded_state_dict(self, shards: Any) -> None:
        self.synchronize()
        super().load_sharded_state_dict(shards)
        self._restart_delay()

    def _restart_delay(self) -> None:
        if self._delayed is not None:
            self._delayed.applied = self.steps

    def _algorithm_state(self) -> dict[str, Any]:
        self.synchronize()
        state = super()._algorithm_state()
        if self._delayed is not None:
            state["delayed"] = self._delayed.state_dict()
        return state

    def _load_algorithm_state(self, state: dict[str, Any]) -> None:
        self.synchronize()
        super()._load_algorithm_state(state)
        if self._delayed is not None:
            if "delayed" in state:
                self._delayed.load_state_dict(state["delayed"])
            else:
                self._restart_delay()

    def _gradient_shard(self, index: int) -> torch.Tensor:
        g = self.groups[index]
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in g.params]
        return g.assemble([g.piece_of_full(grad, i) for i, grad in enumerate(grads)])


@register("zero2")
class ZeRO2(_GatheredStage):
    def _plan_groups(self) -> list[list[torch.Tensor]]:
        dtype = self.params[0].dtype
        self._buckets = pycomm.GradientBuckets(
            self.params,
            comm=self.shard_comm,
            mode="reduce_scatter",
            bucket_bytes=self.options["bucket_bytes"],
            wire_dtype=self._wire(dtype),
            codec=self.options["codec"],
            free_grads=True,
            launch=self._reduce_scatter,
            overlap=self.options["overlap_backward"],
        )
        return [b.params for b in self._buckets.buckets]

    def _gradient_shard(self, index: int) -> torch.Tensor:
        return self._buckets.buckets[index].shard.float()  # the shard itself when fp32

    def gradient_buffers(self) -> list[torch.Tensor]:
        return [b.shard for b in self._buckets.buckets]
