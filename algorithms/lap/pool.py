"""The P Hogwild worker processes of one rank, and the main process's view of them.

The pool lives as long as its optimizer: between train() calls the workers sleep on a condition, and
the next call with the same model, data and settings only moves the budget on (`begin`), so an app
that trains in segments (evaluating or checkpointing in between) pays the process start-up once.

CPU: the model is moved to shared memory (`model.share_memory()`), so every worker updates the same
storage. GPU: the model stays in GPU memory and the workers (which must be spawned) receive it through
CUDA IPC, torch.multiprocessing's default for CUDA tensors, so they too write one copy."""

from __future__ import annotations

import multiprocessing
import time
from typing import Any, Callable

import torch

from algorithms.lap.shared import MomentumState, SharedCounters
from algorithms.lap.worker import GroupHyper, WorkerSpec, run_worker

START_METHODS = ("spawn", "fork", "forkserver")


def worker_device(device: torch.device | str, model: torch.nn.Module) -> torch.device:
    """Where the workers run, with its index (torch.cuda.set_device in a worker needs one). A GPU named
    without an index ("cuda") is the one holding the model's parameters, which the workers map by CUDA IPC,
    else this process's current GPU."""
    device = torch.device(device)
    if device.type != "cuda":
        return device
    holding = {p.device for p in model.parameters() if p.is_cuda}
    if device.index is None:
        device = next(iter(holding)) if len(holding) == 1 else torch.device("cuda", torch.cuda.current_device())
    if holding and holding != {device}:
        raise ValueError(
            f"device: the workers would run on {device}, but the model's parameters are on "
            f"{', '.join(sorted(map(str, holding)))}; pass the device that holds them all"
        )
    return device


class WorkerPool:
    def __init__(
        self,
        *,
        model: torch.nn.Module,
        loss_fn: Callable[[Any, Any], torch.Tensor],
        dataset: Any,
        shard: torch.Tensor,
        batch_size: int,
        groups: list[GroupHyper],
        group_of: list[int],
        momentum: MomentumState,
        blocks: list[tuple[int, int]] | None,
        prepassm_steps: int,
        seeds: list[int],
        device: torch.device,
        start_method: str,
        threads: int,
        first_step: int,
        steps: int,
        max_grad_norm: float | None = None,
    ):
        if start_method not in START_METHODS:
            raise ValueError(f"start_method: expected one of {START_METHODS}, got {start_method!r}")
        if device.type == "cuda" and start_method != "spawn":
            raise ValueError(
                f"start_method: a model on {device} is shared by CUDA IPC, which needs 'spawn'; got {start_method!r}"
            )
        device = worker_device(device, model)
        workers = len(momentum.buffers)
        self.ctx = torch.multiprocessing.get_context(start_method)
        self.counters = SharedCounters.create(self.ctx, workers, len(groups), first_step, first_step + steps)
        self.errors = self.ctx.SimpleQueue()
        self.specs = [
            WorkerSpec(
                worker=w,
                model=model,
                loss_fn=loss_fn,
                dataset=dataset,
                shard=shard,
                batch_size=batch_size,
                seed=seeds[w],
                device=device,
                groups=groups,
                group_of=group_of,
                momentum=momentum,
                counters=self.counters,
                block=None if blocks is None else blocks[w],
                prepassm_steps=prepassm_steps,
                threads=threads,
                errors=self.errors,
                max_grad_norm=max_grad_norm,
            )
            for w in range(workers)
        ]
        self.procs: list[multiprocessing.process.BaseProcess] = []
        self.per_worker_at_begin = [0] * workers
        self.stale_at_begin = 0
        self.startup_seconds = 0.0  # spent starting the workers in the current call (0 when reused)

    def set_lrs(self, lrs: list[float]) -> None:
        self.counters.lrs[:] = lrs

    def publish_lrs(self, node_step: int, lrs: list[float]) -> None:
        self.counters.publish_lrs(node_step, lrs)

    def begin(self, target: int) -> None:
        """Train up to node minibatch `target`: start the workers on first use, else wake them."""
        self.per_worker_at_begin = list(self.counters.per_worker[:])
        self.stale_at_begin = sum(self.counters.stale[:])
        if not self.procs:
            t0 = time.monotonic()
            self.counters.target.value = target
            self.start()
            self.startup_seconds = time.monotonic() - t0
        else:
            self.startup_seconds = 0.0
            self.counters.extend(target)

    def alive(self) -> bool:
        """Started, not stopped, and every worker process still running (so it can take another call)."""
        return bool(self.procs) and not self.counters.stop.is_set() and all(p.exitcode is None for p in self.procs)

    def start(self, timeout: float = 300.0) -> None:
        """Start the workers and release them together once all are set up (spawn takes seconds)."""
        for spec in self.specs:
            proc = self.ctx.Process(target=run_worker, args=(spec,), name=f"lap-worker-{spec.worker}", daemon=True)
            proc.start()
            self.procs.append(proc)
        deadline = time.monotonic() + timeout
        while self.counters.ready.value < len(self.procs):
            failure = self.failure()
            if failure is not None or time.monotonic() > deadline:
                self.stop()
                self.join()
                raise RuntimeError(
                    failure
                    or f"LAP workers not ready after {timeout:.0f} s "
                    f"({self.counters.ready.value} of {len(self.procs)} ready)"
                )
            time.sleep(0.01)
        self.counters.go.set()

    def done(self) -> int:
        return self.counters.done.value

    def target(self) -> int:
        """The node minibatch count this train() call stops at."""
        return self.counters.target.value

    def per_worker(self) -> list[int]:
        """Updates each worker applied in the current call."""
        return [n - n0 for n, n0 in zip(self.counters.per_worker[:], self.per_worker_at_begin)]

    def staleness_sum(self) -> int:
        """Updates by other workers applied between a worker's read of the model and its own update,
        summed over the current call's updates (0 with one worker; about P - 1 per update when P workers
        run in parallel)."""
        return sum(self.counters.stale[:]) - self.stale_at_begin

    def mean_staleness(self) -> float:
        updates = sum(self.per_worker())
        return self.staleness_sum() / updates if updates else 0.0

    def losses(self) -> list[float]:
        return list(self.counters.loss[:])

    def finished(self) -> bool:
        """The current call's budget is applied (workers idle), or every worker has exited."""
        return self.counters.done.value >= self.counters.target.value or all(p.exitcode is not None for p in self.procs)

    def failure(self) -> str | None:
        """The first worker failure (its traceback, or how it died), else None."""
        if not self.errors.empty():
            worker, trace = self.errors.get()
            return f"LAP worker {worker} failed:\n{trace}"
        for p in self.procs:
            if p.exitcode not in (None, 0):
                return f"LAP worker process {p.name} (pid {p.pid}) died with exit code {p.exitcode}"
        return None

    def stop(self) -> None:
        self.counters.request_stop()

    def close(self) -> None:
        """Stop the workers and wait for them (idempotent)."""
        self.stop()
        self.join()

    def join(self, timeout: float = 60.0) -> None:
        for p in self.procs:
            p.join(timeout)
        for p in self.procs:
            if p.exitcode is None:  # stuck past the timeout: do not leave it running
                p.kill()
                p.join()
