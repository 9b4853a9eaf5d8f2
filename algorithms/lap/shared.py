"""State shared between a rank's main process and its Hogwild worker processes.

Only the node counters are locked (the algorithm is lock-free on the model): `claimed` hands out node
minibatch numbers so the budget is exact, `done` counts finished updates (what the averaging activity
compares across ranks); `stale` sums, per worker, the updates other workers applied between its read
of the model and its own update (Hogwild's staleness, which acts as extra momentum). The learning rates
are written by the main process and read by workers: the rates now (`lrs`), and where the schedule is a
function of the node minibatch number, the rates of each of the next LR_AHEAD minibatches (`lr_table`,
slot k % LR_AHEAD tagged with k), so that minibatch k uses exactly the rate of k whatever the main
process's polling delay."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

LR_AHEAD = 1024  # node minibatches whose rates the main process publishes ahead of the done counter


@dataclass
class SharedCounters:
    claimed: Any  # mp.Value('q'), locked: next node minibatch number to hand out
    done: Any  # mp.Value('q'), locked: node minibatches whose update has been applied
    target: Any  # mp.Value('q'): claimed stops here (the end of this train() call)
    per_worker: Any  # mp.Array('q', P): updates applied by each worker (one writer per slot)
    stale: Any  # mp.Array('q', P): each worker's summed staleness (one writer per slot)
    loss: Any  # mp.Array('d', P): each worker's latest training loss
    lrs: Any  # mp.Array('d', groups): current learning rate of each param group
    stop: Any  # mp.Event: the main process asks workers to stop early (a failure elsewhere)
    ready: Any  # mp.Value('q'), locked: workers set up and waiting for `go`
    go: Any  # mp.Event: all workers are ready; they start together (a fair start)
    lr_table: Any  # mp.Array('d', LR_AHEAD * groups): rates of node minibatch k in slot k % LR_AHEAD
    lr_tags: Any  # mp.Array('q', LR_AHEAD): which minibatch each slot holds (-1: none)
    more: Any  # mp.Condition: notified when `target` moves on (the next train() call) or on stop

    @classmethod
    def create(cls, ctx: Any, workers: int, groups: int, start: int, target: int) -> "SharedCounters":
        return cls(
            claimed=ctx.Value("q", start),
            done=ctx.Value("q", start),
            target=ctx.Value("q", target),
            per_worker=ctx.Array("q", workers, lock=False),
            stale=ctx.Array("q", workers, lock=False),
            loss=ctx.Array("d", workers, lock=False),
            lrs=ctx.Array("d", groups),
            stop=ctx.Event(),
            ready=ctx.Value("q", 0),
            go=ctx.Event(),
            lr_table=ctx.Array("d", LR_AHEAD * groups, lock=False),
            lr_tags=ctx.Array("q", [-1] * LR_AHEAD, lock=False),
            more=ctx.Condition(),
        )

    def publish_lrs(self, node_step: int, lrs: list[float]) -> None:
        """The rates of node minibatch `node_step` (the main process, ahead of the workers)."""
        slot, g = node_step % LR_AHEAD, len(lrs)
        self.lr_tags[slot] = -1
        self.lr_table[slot * g : (slot + 1) * g] = lrs
        self.lr_tags[slot] = node_step

    def lrs_for(self, node_step: int) -> list[float]:
        """The rates of node minibatch `node_step`: published ahead when they were, else the rates now."""
        slot, g = node_step % LR_AHEAD, len(self.lrs)
        if self.lr_tags[slot] == node_step:
            lrs = self.lr_table[slot * g : (slot + 1) * g]
            if self.lr_tags[slot] == node_step:  # not overwritten while read
                return list(lrs)
        return self.lrs[:]

    def wait_for_go(self) -> bool:
        """Report ready, then wait until the main process starts everyone (False: asked to stop)."""
        with self.ready.get_lock():
            self.ready.value += 1
        while not self.go.wait(0.05):
            if self.stop.is_set():
                return False
        return not self.stop.is_set()

    def claim(self) -> int | None:
        """The node minibatch number this worker computes next, or None when the budget is spent."""
        with self.claimed.get_lock():
            if self.claimed.value >= self.target.value:
                return None
            index = self.claimed.value
            self.claimed.value += 1
            return index

    def extend(self, target: int) -> None:
        """The main process starts the next train() call: claims go on up to `target`."""
        with self.more:
            self.target.value = target
            self.more.notify_all()

    def request_stop(self) -> None:
        with self.more:
            self.stop.set()
            self.more.notify_all()

    def wait_for_more(self) -> bool:
        """Between train() calls: sleep until the budget moves on (True) or the pool stops (False)."""
        with self.more:
            while not self.stop.is_set():
                if self.claimed.value < self.target.value:
                    return True
                self.more.wait(1.0)  # the timeout only bounds a missed wake-up
        return False

    def finish(self, worker: int, loss: float, read_at: int) -> None:
        """Worker `worker` applied an update whose gradient it computed on the model it read when `done`
        stood at `read_at`."""
        # the counters move before `done`: a reader that sees `done` reach the budget sees every count
        # (on a GPU the worker waits for its update's kernels first: what is counted has landed)
        with self.done.get_lock():
            self.per_worker[worker] += 1
            self.stale[worker] += self.done.value - read_at
            self.loss[worker] = loss
            self.done.value += 1


@dataclass
class MomentumState:
    """Each worker's own momentum buffers, allocated by the main process in shared (or GPU) memory so
    they outlive the worker processes and can be checkpointed. `ready[w, i]` says buffer i of worker w
    holds a value (torch's SGD starts a buffer as the first gradient, not as zero)."""

    buffers: list[list[torch.Tensor]]  # [worker][param]
    ready: torch.Tensor  # uint8 [workers, params], shared

    @classmethod
    def zeros(cls, params: list[torch.Tensor], workers: int) -> "MomentumState":
        buffers = [[torch.zeros_like(p, memory_format=torch.contiguous_format) for p in params] for _ in range(workers)]
        state = cls(buffers, torch.zeros(workers, len(params), dtype=torch.uint8))
        state.share_memory_()
        return state

    def share_memory_(self) -> None:
        for row in self.buffers:
            for b in row:
                b.share_memory_()
        self.ready.share_memory_()
