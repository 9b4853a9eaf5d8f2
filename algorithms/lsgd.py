"""LSGD and LSGD+ (Teng et al., NeurIPS 2019; SDTL's interface).

Every comm_period steps the leader L is the rank with the lowest metric (ties: lowest rank):
`leader_metric="loss"` (default, the paper's) is the mean training loss over its last `leader_window`
steps; `"proxy"` is SDTL's score, an exponential moving average from 0 of the first-order decrease
estimate s <- 0.9 s + 0.1 sum <x_prev - x_now, g>, with x_now taken after the optimizer step and the
local pull (it needs no loss). SDTL picks a leader per parameter group; pycomm picks one leader for the
whole model from the sum over all groups. The leader's parameters are broadcast and
    LSGD:   x_i <- (1 - c_s) x_i + c_s x_L   (the leader unchanged); the centre becomes the new x_i
    LSGD+:  c = mean_j x_j; delta = c_s (x_L - c); c += delta; x_i <- (1 - c_s)(x_i + delta) + c_s c
With the loss metric, each step's loss comes through step(loss=...) or the closure's return value.

Multi-leader (`multi_leader=True`, LSGD only): the leader above is chosen within each node (the mesh's
dp_shard group: comm= is cut by node, pycomm.Mesh.across_nodes; a mesh= is taken as given) every
comm_period steps, and a global leader over all ranks every
`global_period` steps; when both are due in one step, both pulls use the parameters from before the
round: x <- x - c_s (x - x_local_leader) - global_pulling_strength (x - x_global_leader)."""

from __future__ import annotations

import collections
import math
from typing import Any

import torch

from algorithms import options as opts
from algorithms.base import clone_all, copy_into
from algorithms.channel import Channel
from algorithms.elastic import ElasticBase, elastic_
from algorithms.registry import register


class _LeaderBase(ElasticBase):
    algorithm_options: dict[str, Any] = {**ElasticBase.algorithm_options, "leader_metric": "loss", "leader_window": 10}

    def _validate(self, config: dict[str, Any]) -> dict[str, Any]:
        config = super()._validate(config)
        config["leader_metric"] = opts.choice("leader_metric", config["leader_metric"], ("loss", "proxy"))
        config["leader_window"] = opts.integer("leader_window", config["leader_window"], 1)
        return config

    def _setup(self) -> None:
        super()._setup()
        self.window: collections.deque[float] = collections.deque(maxlen=self.options["leader_window"])
        self._x_prev: list[torch.Tensor] | None = None
        self.proxy_score = 0.0
        self.leader = 0

    @property
    def _by_proxy(self) -> bool:
        return self.options["leader_metric"] == "proxy"

    def _before_step(self, loss: float | None) -> None:
        if self._by_proxy:
            self._x_prev = clone_all(self._x)
        elif loss is None:
            raise ValueError(
                f"{self.name} ranks workers by their training loss: call step(loss=loss) or "
                "step(closure) with a closure that returns the loss (or use leader_metric='proxy', "
                "which needs none)"
            )

    def _after_step(self, loss: float | None) -> None:
        if not self._by_proxy:
            assert loss is not None
            self.window.append(loss)

    def _after_pull(self) -> None:
        if not self._by_proxy:
            return
        moved = torch._foreach_sub(self._x_prev, self._x)
        inner = sum(float(torch.sum(d * p.grad)) for d, p in zip(moved, self.params) if p.grad is not None)
        self.proxy_score = 0.9 * self.proxy_score + 0.1 * inner
        self._x_prev = None

    def _metric(self) -> float:
        if self._by_proxy:
            value = self.proxy_score
        else:
            value = sum(self.window) / len(self.window) if self.window else math.inf
        return math.inf if math.isnan(value) else value

    def _leader_params(self, channel: Channel) -> tuple[int, list[torch.Tensor]]:
        """(leader rank in channel's communicator, a copy of the leader's parameters)."""
        scores = channel.allgather_scalar(self._metric())
        leader = min(range(len(scores)), key=lambda r: (scores[r], r))
        x_leader = clone_all(self._x)
        channel.broadcast(x_leader, root=leader)
        return leader, x_leader

    def _algorithm_state(self) -> dict[str, Any]:
        return {
            **super()._algorithm_state(),
            "window": list(self.window),
            "leader": self.leader,
            "proxy_score": self.proxy_score,
        }

    def _load_algorithm_state(self, state: dict[str, Any]) -> None:
        super()._load_algorithm_state(state)
        self.window.clear()
        self.window.extend(state["window"])
        self.leader = state["leader"]
        self.proxy_score = state.get("proxy_score", 0.0)  # absent in states written before it existed


@register("lsgd")
class LSGD(_LeaderBase):
    algorithm_options: dict[str, Any] = {
        **_LeaderBase.algorithm_options,
        "multi_leader": False,
        "global_period": 16,
        "global_pulling_strength": 0.1,
    }

    def _validate(self, config: dict[str, Any]) -> dict[str, Any]:
        config = super()._validate(config)
        config["multi_leader"] = opts.flag("multi_leader", config["multi_leader"])
        config["global_period"] = opts.integer("global_period", config["global_period"], 1)
        config["global_pulling_strength"] = opts.fraction("global_pulling_strength", config["global_pulling_strength"])
        if config["codec"] is not None:
            raise opts.OptionError(
                "lsgd broadcasts the leader's parameters and all-reduces nothing, so a codec has "
                "nothing to compress; use lsgd+ (which averages) or codec=None"
            )
        return config

    def _mesh_for(self, comm: Any) -> Any:
        """comm= with multi_leader: local leaders within each node, the global one over all ranks."""
        import pycomm

        return pycomm.Mesh.across_nodes(comm) if self.options["multi_leader"] else pycomm.Mesh(comm)

    def _setup(self) -> None:
        super()._setup()
        self._node_channel: Channel | None = None
        if self.options["multi_leader"]:
            self._node_channel = Channel(
                self.mesh["dp_shard"], None, self.options["bucket_bytes"], self.channel.device, stats=self.channel.stats
            )

    def _communicate(self, round_due: bool) -> None:
        if self._node_channel is None:
            if round_due:
                self._round()
            return
        global_due = (self.steps + 1) % self.options["global_period"] == 0
        if round_due or global_due:
            self._pull_toward_leaders(local_due=round_due, global_due=global_due)

    def _round(self) -> None:
        self.leader, x_leader = self._leader_params(self.channel)
        if self.leader != self.comm.rank:
            elastic_(self._x, x_leader, self.options["dist_pulling_strength"])
        copy_into(self._centre, self._x)

    def _pull_toward_leaders(self, local_due: bool, global_due: bool) -> None:
        """Multi-leader: x <- x - c_s (x - x_local_leader) - global_pulling_strength (x - x_global_leader),
        the due terms only, all from the parameters before this round."""
        assert self._node_channel is not None
        pulls = []
        if local_due:
            leader, x_local = self._leader_params(self._node_channel)
            if leader != self._node_channel.comm.rank:
                pulls.append((self.options["dist_pulling_strength"], x_local))
        if global_due:
            self.leader, x_global = self._leader_params(self.channel)
            if self.leader != self.comm.rank:
                pulls.append((self.options["global_pulling_strength"], x_global))
        x_old = clone_all(self._x)
        for strength, x_l in pulls:
            torch._foreach_add_(self._x, torch._foreach_sub(x_old, x_l), alpha=-strength)
        copy_into(self._centre, self._x)


@register("lsgd+")
class LSGDPlus(_LeaderBase):
    def _round(self) -> None:
        c_s = self.options["dist_pulling_strength"]
        mean = self._mean_params()
        self.leader, x_leader = self._leader_params(self.channel)
        delta = torch._foreach_sub(x_leader, mean)
        torch._foreach_mul_(delta, c_s)
        copy_into(self._centre, mean)
        torch._foreach_add_(self._centre, delta)
        torch._foreach_add_(self._x, delta)
        elastic_(self._x, self._centre, c_s)
