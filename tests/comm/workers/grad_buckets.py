"""Worker: pycomm.GradientBuckets on real ranks. A small MLP's gradients after backward: all-reduce mode
gives every rank the mean (exact for fp32 up to rounding, bf16 wire within its rounding), reduce-scatter
mode gives each rank its padded flat shard of each bucket's mean (and frees the full gradients when
asked); no_sync accumulates without communicating. The reference is computed by every rank from every
rank's batch."""

from __future__ import annotations

import torch
import torch.nn.functional as F

import pycomm
from tests.comm.workers.fusion_common import world


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3))


def batch(rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(17 + rank)
    return torch.randn(6, 5, generator=g), torch.randint(0, 3, (6,), generator=g)


def local_grads(m: torch.nn.Module, rank: int) -> list[torch.Tensor]:
    x, y = batch(rank)
    return [g.detach() for g in torch.autograd.grad(F.cross_entropy(m(x), y), list(m.parameters()))]


def mean_grads(m: torch.nn.Module, size: int) -> list[torch.Tensor]:
    per_rank = [local_grads(m, r) for r in range(size)]
    return [sum(gs) / size for gs in zip(*per_rank)]


def check_allreduce(comm: pycomm.Communicator, wire: torch.dtype | None, tol: float) -> None:
    m = model()
    buckets = pycomm.GradientBuckets(m.parameters(), comm=comm, bucket_bytes=100, wire_dtype=wire)
    assert len(buckets.buckets) >= 3, len(buckets.buckets)
    x, y = batch(comm.rank)
    F.cross_entropy(m(x), y).backward()
    assert buckets.launched == len(buckets.buckets)
    for p, want in zip(m.parameters(), mean_grads(m, comm.size)):
        assert float((p.grad - want).abs().max()) <= tol, (wire, float((p.grad - want).abs().max()))
    buckets.reset()
    buckets.remove_hooks()


def check_reduce_scatter(comm: pycomm.Communicator, free_grads: bool) -> None:
    m = model()
    buckets = pycomm.GradientBuckets(
        m.parameters(), comm=comm, mode="reduce_scatter", bucket_bytes=100, free_grads=free_grads
    )
    want = dict(zip(m.parameters(), mean_grads(m, comm.size)))
    x, y = batch(comm.rank)
    F.cross_entropy(m(x), y).backward()
    for b in buckets.buckets:
        flat = torch.cat([want[p].reshape(-1) for p in b.params])
        flat = F.pad(flat, (0, comm.size * b.shard.numel() - flat.numel()))
        mine = flat[comm.rank * b.shard.numel() : (comm.rank + 1) * b.shard.numel()]
        assert torch.allclose(b.shard, mine, atol=1e-6), (b.index, b.shard, mine)
        assert all((p.grad is None) == free_grads for p in b.params), "free_grads"
    buckets.reset()
    buckets.remove_hooks()


def check_no_sync(comm: pycomm.Communicator) -> None:
    m = model()
    buckets = pycomm.GradientBuckets(m.parameters(), comm=comm, bucket_bytes=100)
    x, y = batch(comm.rank)
    with buckets.no_sync():
        F.cross_entropy(m(x), y).backward()
    assert buckets.launched == 0 and not buckets.pending, "no_sync communicated"
    F.cross_entropy(m(x), y).backward()
    for p, want in zip(m.parameters(), mean_grads(m, comm.size)):
        assert torch.allclose(p.grad, 2 * want, atol=1e-6), "accumulated gradient"
    buckets.remove_hooks()


def main() -> None:
    torch.set_num_threads(1)
    comm = world()
    check_allreduce(comm, None, 1e-6)
    check_allreduce(comm, torch.bfloat16, 2e-2)
    check_reduce_scatter(comm, free_grads=False)
    check_reduce_scatter(comm, free_grads=True)
    check_no_sync(comm)
    try:
        pycomm.GradientBuckets([torch.zeros(1, requires_grad=True)], comm=comm, mode="allgather")
        raise AssertionError("mode='allgather' was accepted")
    except ValueError as e:
        assert "mode must be one of allreduce, reduce_scatter" in str(e), e
    print(f"rank {comm.rank} grad buckets ok", flush=True)


if __name__ == "__main__":
    main()
