"""Worker of tests/comm/test_torch_backend_hooks.py: DDP with pycomm's quantized communication hooks
(pycomm/ddp_hooks.py) training the MNIST CNN on 2 ranks, on backend "pycomm" and on a gloo group, against
plain fp32 DDP and against algorithms' mbsgd with the same codec: the accuracy each reaches, the bytes the
hook counted, and that every rank ends with the same parameters. `rebuilt`: error feedback across DDP's
re-bucketing after the first step (2 MB of gradients: one bucket in the first step, then a first bucket of
1 MB and the rest), on both groups."""

from __future__ import annotations

import sys
from typing import Any, Optional

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import algorithms
import pycomm
from pycomm import ddp_hooks
from tests.algorithms.mnist import TinyCNN, accuracy, shard_batches, split

STEPS, BATCH = 60, 32
REBUILT_STEPS = 4


def _fit(model: torch.nn.Module, opt: Any) -> torch.nn.Module:
    (x, y), _ = DATA
    batches = shard_batches(len(y), dist.get_rank(), dist.get_world_size(), BATCH, epoch=0)[:STEPS]
    for idx in batches:
        opt.zero_grad()
        F.cross_entropy(model(x[idx]), y[idx]).backward()
        opt.step()
    return model


def trained(group: Optional[dist.ProcessGroup], state: Optional[ddp_hooks.QuantizedState]) -> float:
    torch.manual_seed(0)
    model = DDP(TinyCNN(), process_group=group)
    if state is not None:
        model.register_comm_hook(state, ddp_hooks.quantized_allreduce)
    _fit(model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9))
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    every = [torch.empty_like(flat) for _ in range(dist.get_world_size())]
    dist.all_gather(every, flat, group=group)
    assert all(torch.equal(every[0], e) for e in every), "ranks ended with different parameters"
    return accuracy(model.module, *DATA[1])


def mbsgd(codec: str) -> float:
    """algorithms' mbsgd with the same codec, model, data and optimizer: the accuracy the hook must match."""
    torch.manual_seed(0)
    model = TinyCNN()
    opt = algorithms.CommOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9), algorithm="mbsgd", model=model, codec=codec
    )
    return accuracy(_fit(model, opt), *DATA[1])


def rebuilt(group: Optional[dist.ProcessGroup], name: str) -> None:
    """1-bit with error feedback over steps before and after DDP re-buckets: the residuals follow the new
    buckets (they used to be kept per bucket index, and the first rebuilt bucket met the old one's residual)."""
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.Linear(512, 512)), process_group=group)
    state = ddp_hooks.QuantizedState("1bit", process_group=group)
    model.register_comm_hook(state, ddp_hooks.quantized_allreduce)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(dist.get_rank())
    for _ in range(REBUILT_STEPS):
        opt.zero_grad()
        model(torch.randn(8, 512, generator=g)).square().mean().backward()
        opt.step()
    assert len(state.feedback) == 2, f"{name}: expected 2 buckets after the rebuild, got {len(state.feedback)}"
    held = sum(fb.local.numel() if group is None else fb.numel() for _, fb in state.feedback.values())
    assert held == sum(p.numel() for p in model.parameters()), f"{name}: residuals of {held} elements"
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    every = [torch.empty_like(flat) for _ in range(dist.get_world_size())]
    dist.all_gather(every, flat, group=group)
    assert all(torch.equal(every[0], e) for e in every), f"{name}: ranks ended with different parameters"
    assert torch.isfinite(flat).all(), name
    print(f"rank {dist.get_rank()}: rebuilt buckets {name}: {len(state.feedback)} residuals, ranks agree", flush=True)


if __name__ == "__main__" and sys.argv[1:] == ["rebuilt"]:
    dist.init_process_group("pycomm")
    rebuilt(None, "pycomm")
    rebuilt(dist.new_group(backend="gloo"), "gloo")
    dist.destroy_process_group()
elif __name__ == "__main__":
    dist.init_process_group("pycomm")
    DATA = split()
    gloo = dist.new_group(backend="gloo")
    rank = dist.get_rank()
    fp32 = trained(None, None)
    results = {"fp32": fp32}
    for name, codec, group in (
        ("int8 pycomm", "int8", None),
        ("int8 gloo", "int8", gloo),
        ("int4 pycomm", "int4", None),
        ("1bit+ef pycomm", "1bit", None),
        ("1bit+ef gloo", "1bit", gloo),
    ):
        before = pycomm.stats().get("alltoall", {}).get("calls", 0)
        state = ddp_hooks.QuantizedState(codec, process_group=group)
        results[name] = trained(group, state)
        alltoalls = pycomm.stats().get("alltoall", {}).get("calls", 0) - before
        ratio = state.raw_bytes / state.wire_bytes
        print(
            f"rank {rank}: {name}: accuracy {results[name]:.3f} (fp32 {fp32:.3f}), fp32/wire bytes {ratio:.2f}, "
            f"{alltoalls} pycomm all-to-alls",
            flush=True,
        )
        assert state.raw_bytes > 0 and ratio > {"int8": 3.5, "int4": 6.5, "1bit": 20}[codec], (name, ratio)
        assert (alltoalls > 0) == (group is None), f"{name}: {alltoalls} pycomm all-to-alls"
    assert fp32 > 0.8, f"fp32 DDP reached only {fp32:.3f}"
    for name in ("int8 pycomm", "int8 gloo"):
        assert abs(results[name] - fp32) < 0.05, f"{name}: {results[name]:.3f} vs fp32 {fp32:.3f}"
    # int8: the same accuracy as mbsgd's; 1-bit: not worse. In this short run 1-bit lands far apart from run to
    # run layout: the gloo hook reached 0.65 while its first step's residual was added to the rebuilt bucket's
    # gradients in another parameter order; laid out right it reaches 0.47, beside mbsgd's 0.46
    for codec, names in (("int8", ("int8 pycomm", "int8 gloo")), ("1bit", ("1bit+ef pycomm", "1bit+ef gloo"))):
        reference = mbsgd(codec)
        print(f"rank {rank}: mbsgd with {codec}: accuracy {reference:.3f}", flush=True)
        for name in names:
            gap = results[name] - reference
            assert (abs(gap) if codec == "int8" else -gap) < 0.05, (
                f"{name}: {results[name]:.3f} vs mbsgd {reference:.3f}"
            )
    for name, floor in (("int4 pycomm", 0.6), ("1bit+ef pycomm", 0.4), ("1bit+ef gloo", 0.4)):  # chance: 0.1
        assert results[name] > floor, f"{name}: {results[name]:.3f}"
    print(f"rank {rank}: hooks passed", flush=True)
    dist.destroy_process_group()
