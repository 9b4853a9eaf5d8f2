"""Bytes a ZeRO rank holds, counted from the live tensors (each storage once): what the memory formulas
(DDP 16 Psi, stage 1 (4 + 12/N) Psi, stage 2 (2 + 14/N) Psi, stage 3 16 Psi / N for Adam) are checked
against."""

from __future__ import annotations

from typing import Any, Iterable

import torch

from algorithms.grad_markers import real_grad


def storage_bytes(tensors: Iterable[Any], seen: set[int]) -> int:
    """Bytes of the tensors' storages not counted yet (`seen` holds the counted storages' addresses)."""
    total = 0
    for t in tensors:
        if not torch.is_tensor(t) or t.numel() == 0:
            continue
        storage = t.untyped_storage()
        key = storage.data_ptr()
        if key not in seen:
            seen.add(key)
            total += storage.nbytes()
    return total


def optimizer_tensors(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    return [v for state in optimizer.state.values() for v in state.values() if torch.is_tensor(v)]


def count(opt: Any) -> dict[str, int]:
    seen: set[int] = set()
    params = storage_bytes(list(opt.params) + opt.parameter_buffers(), seen)
    grads = storage_bytes([real_grad(p) for p in opt.params] + opt.gradient_buffers(), seen)
    state = storage_bytes(
        [g.master for g in opt.groups] + optimizer_tensors(opt.shard_optimizer) + optimizer_tensors(opt.optimizer), seen
    )
    return {"params": params, "grads": grads, "optimizer": state, "total": params + grads + state}
