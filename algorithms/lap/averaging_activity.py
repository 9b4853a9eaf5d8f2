"""The averaging activity of one rank in LAP-SGD / LPP-SGD (runs in the rank's main process).

Each check all-reduces (MAX) the 4 counters [done, -last_averaged_at, -finished, failed], so every
rank learns max_j minibatches_j, min_j last_averaged_at_j, whether all ranks' workers have finished and
whether any failed, and all ranks take the same decision from the same numbers. A round is due when
max(minibatches) - min(last_averaged_at) >= avg_freq, avg_freq = 1 before `pre_post_steps` node
minibatches (counted by the agreed max), `averaging_freq` after; both count minibatches (LPP-SGD's
code documented its flag as seconds, but it counted minibatches). A round runs through
pycomm.LayerwiseAverager: per layer s = snapshot(x), a = allreduce_avg(s), x += a - s, applied as
each layer's all-reduce finishes while the workers keep training (through the codec, if one is given).
The counters always travel exactly."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch

import pycomm


@dataclass(frozen=True)
class AveragingPolicy:
    averaging_freq: int
    pre_post_steps: int

    def freq_at(self, node_steps: int) -> int:
        return 1 if node_steps < self.pre_post_steps else self.averaging_freq

    def due(self, max_done: int, min_last: int) -> bool:
        return max_done - min_last >= self.freq_at(max_done)


@dataclass(frozen=True)
class Agreement:
    """What every rank learns from one check (identical on all ranks)."""

    max_done: int
    min_last: int
    all_finished: bool
    any_failed: bool


def layers_of(model: torch.nn.Module) -> list[list[torch.Tensor]]:
    """The model's averaging units: per module, its own parameters and floating-point buffers."""
    layers = []
    for module in model.modules():
        tensors = [p.data for p in module.parameters(recurse=False)]
        tensors += [b for b in module.buffers(recurse=False) if b.is_floating_point()]
        if tensors:
            layers.append(tensors)
    return layers


class RankAveraging:
    """Counter agreement and layer-wise averaging rounds of one rank, on one communicator."""

    def __init__(self, comm: Any, layers: list[list[torch.Tensor]], policy: AveragingPolicy, codec: Any = None):
        self.comm = comm
        self.policy = policy
        self.averager = pycomm.LayerwiseAverager(layers, comm, codec=codec)
        self.device = layers[0][0].device  # the counters travel where the model lives (NCCL: GPU only)
        self.in_flight = False
        self.rounds = 0
        self.bytes = 0
        self.seconds = 0.0

    def agree(self, done: int, last: int, finished: bool, failed: bool) -> Agreement:
        t0 = time.perf_counter()
        counters = torch.tensor([done, -last, -int(finished), int(failed)], dtype=torch.int64, device=self.device)
        self.comm.allreduce(counters, op=pycomm.MAX)
        self.seconds += time.perf_counter() - t0
        self.bytes += counters.numel() * counters.element_size()
        top, neg_last, neg_finished, failed_any = counters.tolist()
        return Agreement(top, -neg_last, neg_finished == -1, failed_any == 1)  # max(-f) = -1 iff all f = 1

    def start_round(self) -> None:
        """Snapshot every layer and launch its all-reduce; returns at once."""
        assert not self.in_flight, "a round is already in flight"
        t0 = time.perf_counter()
        self.bytes += self.averager.next_round_bytes()
        self.averager.start()
        self.in_flight = True
        self.rounds += 1
        self.seconds += time.perf_counter() - t0

    def poll_round(self) -> bool:
        """Apply the layers whose all-reduce finished; True when the round is complete."""
        if self.in_flight:
            self.averager.poll()
            self.in_flight = bool(self.averager.pending)
        return not self.in_flight
