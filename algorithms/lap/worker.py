"""One Hogwild worker of LAP-SGD / LPP-SGD: trains the rank's shared model lock-free.

The worker samples its own minibatches (own sampler and seed), keeps its own momentum buffers and
applies `p -= lr * d_p` in place on the shared parameters without any lock. In LPP-SGD, from node
minibatch `prepassm_steps` on it alternates a full step with a partitioned step that back-propagates
into (and updates) only its own block of parameters. `run_worker` is the process entry point."""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys
import traceback
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import torch
from torch.utils.data import TensorDataset, default_collate

from algorithms.lap.shared import MomentumState, SharedCounters


@dataclass(frozen=True)
class GroupHyper:
    """The SGD hyper-parameters of one param group (the learning rate is shared and changes)."""

    momentum: float
    dampening: float
    weight_decay: float
    nesterov: bool


@dataclass
class WorkerSpec:
    worker: int
    model: torch.nn.Module
    loss_fn: Callable[[Any, Any], torch.Tensor]
    dataset: Any  # map-style dataset of (input, target), or with batch(indices)
    shard: torch.Tensor  # int64 indices of this rank's share of the dataset
    batch_size: int
    seed: int
    device: torch.device
    groups: list[GroupHyper]
    group_of: list[int]  # param index -> group index
    momentum: MomentumState
    counters: SharedCounters
    block: tuple[int, int] | None  # LPP: this worker's [start, stop); None for LAP
    prepassm_steps: int
    threads: int
    errors: Any  # ctx.SimpleQueue: (worker, traceback) on failure
    max_grad_norm: float | None = None  # clip this step's gradients to this total norm (None: no clipping)


def fetch(dataset: Any, indices: torch.Tensor) -> Any:
    """One minibatch: `dataset.batch(indices)` when the dataset offers it (apps' datasets), a TensorDataset
    by indexing its tensors, any other map-style dataset item by item through default_collate."""
    if callable(getattr(dataset, "batch", None)):
        return dataset.batch(indices)
    if isinstance(dataset, TensorDataset):
        return tuple(t[indices] for t in dataset.tensors)
    return default_collate([dataset[i] for i in indices.tolist()])


def batches(dataset: Any, shard: torch.Tensor, batch_size: int, seed: int) -> Iterator[Any]:
    """Endless minibatches of the rank's shard (dataset indices), reshuffled every pass by this worker's
    own generator; the last batch of a pass may be smaller."""
    gen = torch.Generator().manual_seed(seed)
    while True:
        order = shard[torch.randperm(len(shard), generator=gen)]
        for start in range(0, len(order), batch_size):
            yield fetch(dataset, order[start : start + batch_size])


def clip_to_norm(grads: tuple[torch.Tensor, ...], max_norm: float) -> tuple[torch.Tensor, ...]:
    """The gradients scaled to total 2-norm at most max_norm (clip_grad_norm_'s rule, on tensors that are
    not any parameter's .grad)."""
    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    return tuple(g * coef for g in grads)


def to_device(x: Any, device: torch.device) -> Any:
    if isinstance(x, torch.Tensor):
        return x.to(device, non_blocking=True)
    if isinstance(x, (list, tuple)):
        return type(x)(to_device(v, device) for v in x)
    return x


class HogwildWorker:
    """The update rule of one worker, usable in-process (unit tests) and inside a worker process."""

    def __init__(self, spec: WorkerSpec):
        self.spec = spec
        self.params = [p for p in spec.model.parameters() if p.requires_grad]
        self.buffers = spec.momentum.buffers[spec.worker]
        self.ready = spec.momentum.ready[spec.worker]
        self.partitioned_next = False  # LPP alternation: full, partitioned, full, ...

    def indices_for(self, node_step: int) -> range:
        """Which parameters this step back-propagates into and updates."""
        spec = self.spec
        if spec.block is None or node_step < spec.prepassm_steps:
            return range(len(self.params))
        partitioned, self.partitioned_next = self.partitioned_next, not self.partitioned_next
        return range(*spec.block) if partitioned else range(len(self.params))

    def step(self, batch: Any, node_step: int, lrs: list[float] | None = None) -> float:
        """One update for node minibatch `node_step`, at `lrs` (default: the rates published for it)."""
        if lrs is None:
            lrs = self.spec.counters.lrs_for(node_step)
        loss, chosen, grads = self.gradients(batch, node_step)
        self.apply(chosen, grads, lrs)
        return loss

    def gradients(self, batch: Any, node_step: int) -> tuple[float, range, tuple[torch.Tensor, ...]]:
        """The loss, which parameters this step updates, and their (clipped) gradients at the model now."""
        spec = self.spec
        inputs, target = to_device(batch, spec.device)
        loss = spec.loss_fn(spec.model(inputs), target)
        chosen = self.indices_for(node_step)
        grads = torch.autograd.grad(loss, [self.params[i] for i in chosen])
        if spec.max_grad_norm is not None:
            grads = clip_to_norm(grads, spec.max_grad_norm)
        return float(loss.detach()), chosen, grads

    def apply(self, chosen: range, grads: tuple[torch.Tensor, ...], lrs: list[float]) -> None:
        """The update of `gradients`' result (a staleness study may apply it after other workers' updates)."""
        with torch.no_grad():
            for i, g in zip(chosen, grads):
                self._apply(i, g, lrs[self.spec.group_of[i]])

    def _apply(self, i: int, grad: torch.Tensor, lr: float) -> None:
        """torch.optim.SGD's rule, with this worker's buffer, applied in place without a lock."""
        hp = self.spec.groups[self.spec.group_of[i]]
        p, d_p = self.params[i], grad
        if hp.weight_decay:
            d_p = d_p.add(p, alpha=hp.weight_decay)
        if hp.momentum:
            buf = self.buffers[i]
            if self.ready[i]:
                buf.mul_(hp.momentum).add_(d_p, alpha=1 - hp.dampening)
            else:
                buf.copy_(d_p)
                self.ready[i] = 1
            d_p = d_p.add(buf, alpha=hp.momentum) if hp.nesterov else buf
        p.add_(d_p, alpha=-lr)

    def run(self) -> None:
        spec, counters = self.spec, self.spec.counters
        spec.model.train()
        data = batches(spec.dataset, spec.shard, spec.batch_size, spec.seed)
        if not counters.wait_for_go():
            return
        while not counters.stop.is_set():
            node_step = counters.claim()
            if node_step is None:  # this train() call's budget is spent: wait for the next call
                if not counters.wait_for_more():
                    break
                continue
            lrs = counters.lrs_for(node_step)  # read at the claim, as the published code steps its schedule
            batch = next(data)
            read_at = counters.done.value  # the model this step's forward reads has these updates
            loss = self.step(batch, node_step, lrs)
            if spec.device.type == "cuda":
                # an update counted must have landed: the main process reads `done` to know the model
                # holds that many updates (averaging rounds, the final synchronous round, checkpoints),
                # and nothing orders its kernels after this process's stream
                torch.cuda.current_stream(spec.device).synchronize()
            counters.finish(spec.worker, loss, read_at)


def _die_with_rank() -> None:
    """End this worker when its rank's process dies (a kill -9 of the rank, a preemption's SIGKILL): Linux
    sends the worker SIGKILL then (under forkserver, when the fork server exits with the rank); before, a
    forked worker outlived its rank, waiting forever."""
    if sys.platform.startswith("linux"):
        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    # the rank died before the line above took effect (the rank, not os.getppid(): under forkserver the
    # parent is the fork server)
    rank = multiprocessing.parent_process()
    if rank is not None and not rank.is_alive():
        os._exit(1)


def run_worker(spec: WorkerSpec) -> None:
    """Process entry point: report any failure to the main process, which stops the run."""
    _die_with_rank()
    try:
        torch.set_num_threads(spec.threads)
        torch.manual_seed(spec.seed)
        if spec.device.type == "cuda":
            torch.cuda.set_device(spec.device)
        HogwildWorker(spec).run()
        if spec.device.type == "cuda":
            torch.cuda.synchronize(spec.device)
    except BaseException:
        spec.errors.put((spec.worker, traceback.format_exc()))
        raise SystemExit(1)
