"""Runs one stage's action list (algorithms/pipeline/pipeline_schedules.py) for one training step.

Receives are posted where the list says (ahead of the compute that needs them), sends are asynchronous
and waited for at the end of the step, so this stage only ever waits for an input it is about to use.
It records what it did: the executed order of forwards and backwards, the most micro-batches whose
activations it held at once, and the seconds spent computing (for the wall-clock bubble)."""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Any, Callable, ContextManager, Optional, Sequence

import torch

from algorithms.pipeline.links import Link, PendingTensor
from algorithms.pipeline.pipeline_schedules import RECV_B, RECV_F, SEND_B, SEND_F, Action, B, F


@dataclass
class StepRecord:
    executed: list[Action] = field(default_factory=list)  # F and B actions in the order they ran
    peak_live: int = 0  # most (micro-batch, chunk) activations held at once
    compute_s: float = 0.0  # seconds inside forward and backward (not waiting for inputs)
    step_s: float = 0.0  # seconds of the whole step on this stage


@dataclass
class StageLinks:
    """The four links of one chunk of this stage; None at the ends of the pipeline."""

    fwd_in: Optional[Link] = None  # activations from the previous stage
    fwd_out: Optional[Link] = None  # activations to the next stage
    bwd_in: Optional[Link] = None  # gradients from the next stage
    bwd_out: Optional[Link] = None  # gradients to the previous stage


def run_stage(
    modules: Sequence[torch.nn.Module],
    actions: Sequence[Action],
    chunk_links: Sequence[StageLinks],
    microbatches: int,
    inputs: Optional[Sequence[torch.Tensor]],
    targets: Optional[Sequence[Any]],
    loss_fn: Optional[Callable[[Any, Any], torch.Tensor]],
    no_sync: Sequence[Callable[[], ContextManager[Any]]] = (),
) -> tuple[float, StepRecord]:
    """Run `actions` (modules[c] and chunk_links[c] serve the actions on chunk c); returns (this stage's
    share of the loss: the sum over micro-batches of loss / m on the last stage, 0.0 elsewhere; the
    record). Every backward but the last runs inside the `no_sync`
    contexts, so gradient hooks that communicate (data parallelism) fire once per step."""
    rec = StepRecord()
    t_step = time.perf_counter()
    Key = tuple[int, int]  # (micro-batch, chunk)
    pending_f: dict[Key, PendingTensor] = {}
    pending_b: dict[Key, PendingTensor] = {}
    held: dict[Key, tuple[Optional[torch.Tensor], torch.Tensor]] = {}  # -> (input, output or loss)
    grads_out: dict[Key, Optional[torch.Tensor]] = {}
    last_b = max((k for k, a in enumerate(actions) if a.kind == B), default=-1)
    loss_sum = 0.0
    for k, a in enumerate(actions):
        key, links = (a.mb, a.chunk), chunk_links[a.chunk]
        if a.kind == RECV_F:
            assert links.fwd_in is not None
            pending_f[key] = links.fwd_in.post_recv()
        elif a.kind == RECV_B:
            assert links.bwd_in is not None
            pending_b[key] = links.bwd_in.post_recv()
        elif a.kind == F:
            if links.fwd_in is None:
                assert inputs is not None
                x = inputs[a.mb]
            else:
                x = pending_f.pop(key).wait()
                if x.is_floating_point():
                    x.requires_grad_(True)
            t0 = time.perf_counter()
            out = modules[a.chunk](x)
            if links.fwd_out is None:  # the last stage: the loss of this micro-batch
                assert loss_fn is not None and targets is not None
                out = loss_fn(out, targets[a.mb]) / microbatches
                loss_sum += float(out.detach())
            rec.compute_s += time.perf_counter() - t0
            held[key] = (x if x.requires_grad else None, out)
            rec.peak_live = max(rec.peak_live, len(held))
            rec.executed.append(a)
        elif a.kind == SEND_F:
            assert links.fwd_out is not None
            links.fwd_out.send(held[key][1])
        elif a.kind == B:
            x, out = held.pop(key)
            grad = None if links.bwd_in is None else pending_b.pop(key).wait()
            t0 = time.perf_counter()
            with contextlib.ExitStack() as stack:
                if k != last_b:
                    for ctx in no_sync:
                        stack.enter_context(ctx())
                if out.requires_grad:
                    torch.autograd.backward(out, grad)
            rec.compute_s += time.perf_counter() - t0
            grads_out[key] = None if x is None else x.grad
            del x, out
            rec.executed.append(a)
        elif a.kind == SEND_B:
            assert links.bwd_out is not None
            g = grads_out.pop(key)
            if g is None:
                raise RuntimeError(
                    f"Pipeline: micro-batch {a.mb}'s input to this stage got no gradient; the stage "
                    f"input must be a floating tensor the stage's output depends on"
                )
            links.bwd_out.send(g)
        else:
            raise ValueError(f"Pipeline: unknown action {a!r}")
    for links in chunk_links:
        for link in (links.fwd_out, links.bwd_out):
            if link is not None:
                link.flush()
    rec.step_s = time.perf_counter() - t_step
    return loss_sum, rec
