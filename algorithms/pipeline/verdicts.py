"""Every rank learns, before any stage sends an activation, whether the ranks that read input (the first
stage reads x, the last y and loss_fn) accepted it; otherwise a rejected input on one stage would leave
the others waiting for activations that never come. The two end stages send their verdict straight to
every other stage of the pipeline (one point-to-point hop, cheaper than a collective on an
oversubscribed node); with replicas, one all-reduce over the stage's replicas joins the pipelines."""

from __future__ import annotations

from typing import Any, Callable, Optional, TypeVar

import torch

import pycomm

VERDICT_TAG = 3
T = TypeVar("T")


def agree(pipe: Any, rank: int, size: int, check: Callable[[], T]) -> T:
    """check() here; raise on every rank when it failed anywhere (the failing rank its own error, the
    others a ValueError naming it)."""
    failed: Optional[Exception] = None
    result: Any = None
    try:
        result = check()
    except (TypeError, ValueError) as e:
        failed = e
    mine = torch.tensor([rank if failed else size], dtype=torch.int64)
    worst = int(_exchange(pipe, mine)[0])
    if failed is not None:
        raise failed
    if worst < size:
        raise ValueError(
            f"Pipeline.train_step: rank {worst} rejected its input (its error names the argument); "
            f"no stage ran the step"
        )
    return result


def _exchange(pipe: Any, mine: torch.Tensor) -> torch.Tensor:
    comm, p, s = pipe.pipeline_comm, pipe.stages, pipe.stage
    ends = sorted({0, p - 1})
    verdict = mine.clone()
    if p > 1:
        sends = [comm.isend(mine, d, tag=VERDICT_TAG) for d in range(p) if s in ends and d != s]
        got = [torch.empty(1, dtype=torch.int64) for e in ends if e != s]
        for buf, w in zip(got, [comm.irecv(b, e, tag=VERDICT_TAG) for b, e in zip(got, [e for e in ends if e != s])]):
            w.wait()
            verdict = torch.minimum(verdict, buf)
        for w in sends:
            w.wait()
    if pipe.replicas > 1:
        pipe.replica_comm.allreduce(verdict, op=pycomm.MIN)
    return verdict
