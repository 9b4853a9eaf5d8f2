"""Helpers of the LAP/LPP rank workers."""

from __future__ import annotations

import torch

import pycomm


def flat(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def same_on_all_ranks(comm, t: torch.Tensor) -> bool:
    """True when `t` is bitwise identical on every rank (MAX and MIN over ranks agree with it)."""
    hi, lo = t.clone(), t.clone()
    comm.allreduce(hi, op=pycomm.MAX)
    comm.allreduce(lo, op=pycomm.MIN)
    return bool(torch.equal(hi, t) and torch.equal(lo, t))


def gather_scalar(comm, value: float) -> list[float]:
    out = torch.empty(comm.size, dtype=torch.float64)
    comm.allgather(out, torch.tensor([value], dtype=torch.float64))
    return out.tolist()
