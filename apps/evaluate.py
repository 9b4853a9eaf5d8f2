"""Held-out evaluation: each rank scores a disjoint part of the eval set; sums are all-reduced."""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from apps.data.dataset import Dataset, iterate
from apps.dist import Dist
from apps.tasks import Result


@torch.no_grad()
def evaluate(
    model: nn.Module,
    task: Callable[..., Result],
    data: Dataset,
    dist: Dist,
    batch_size: int,
    device: torch.device,
    autocast_dtype: torch.dtype | None,
    has_accuracy: bool,
) -> dict[str, float | None]:
    was_training = model.training
    model.eval()
    mine = torch.arange(len(data))[dist.rank :: dist.size]
    chunks = list(mine.split(batch_size))
    # every rank runs as many forwards, since a model's forward may communicate (ZeRO-3 gathers each block):
    # a rank with fewer batches scores a batch again without counting it
    rounds = -(-(-(-len(data) // dist.size)) // batch_size)
    spare = chunks[-1:] if chunks else [torch.arange(min(1, len(data)))]
    loss_sum = correct = count = 0.0
    for i, batch in enumerate(iterate(data, chunks + spare * (rounds - len(chunks)))):
        batch = tuple(b.to(device) for b in batch)
        with torch.autocast(device.type, dtype=autocast_dtype or torch.float32, enabled=autocast_dtype is not None):
            r = task(model, batch)
        if i >= len(chunks):
            continue
        n = batch[0].shape[0]
        loss_sum, correct, count = loss_sum + float(r.loss) * n, correct + r.correct, count + r.count
    samples = float(len(mine))
    loss_sum, correct, count, samples = dist.allreduce_sum([loss_sum, correct, count, samples])
    model.train(was_training)
    return {"loss": loss_sum / max(samples, 1), "accuracy": correct / max(count, 1) if has_accuracy else None}
