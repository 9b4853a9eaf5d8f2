"""Worker of tests/comm/test_torch_backend.py: torch.distributed code, unchanged, on backend "pycomm".

Cases (argv[1]): "ddp" (DDP on "pycomm" against DDP on gloo, bit for bit), "mismatch" (rank 0 all_reduce,
rank 1 broadcast: pycomm's MismatchError on both), "ops" (every supported op against its expected values),
"dead" (the last rank stops in the middle of DDP training; nothing catches the others' error)."""

from __future__ import annotations

import datetime
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import pycomm
from tests.comm.workers.torch_backend_models import batch, mlp, same, train

STEPS = 5
DEAD_AT = 2  # "dead": the step before whose backward the last rank stops


def ddp() -> None:
    gloo = dist.new_group(backend="gloo")
    before = pycomm.stats().get("allreduce", {}).get("calls", 0)
    on_pycomm = train(DDP(mlp(), bucket_cap_mb=0.001), STEPS)  # small buckets: several all-reduces per step
    calls = pycomm.stats()["allreduce"]["calls"] - before
    on_gloo = train(DDP(mlp(), process_group=gloo, bucket_cap_mb=0.001), STEPS)
    # 2 ranks: a sum of two is the same in any order, so bit for bit; more may add in another order
    same(on_pycomm, on_gloo, "DDP on pycomm vs gloo", exact=dist.get_world_size() == 2)
    assert calls >= STEPS, f"expected DDP's all-reduces to run through pycomm, saw {calls}"
    print(
        f"rank {dist.get_rank()}: ddp on pycomm == gloo after {STEPS} steps ({calls} pycomm all-reduces, "
        f"launcher {pycomm.runtime.launch_env().launcher}, transport {pycomm.world().backend})",
        flush=True,
    )


def dead() -> None:
    """The last rank stops for good (SIGSTOP: a hung or dead process that its launcher has not noticed) before
    step DEAD_AT's backward; the others' DDP all-reduce then ends in pycomm's StallError after PYCOMM_TIMEOUT,
    uncaught, so pycomm's fail-fast ends the job (the stopped rank with it) with the stall report."""
    model = DDP(mlp())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(2 * DEAD_AT):
        x, y = batch(step)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        if step == DEAD_AT and dist.get_rank() == dist.get_world_size() - 1:
            print(f"rank {dist.get_rank()}: stopping at step {step}", flush=True)
            os.kill(os.getpid(), signal.SIGSTOP)
        opt.zero_grad()
        loss.backward()
        opt.step()
    raise AssertionError("DDP went on past a stopped rank")


def mismatch() -> None:
    t = torch.ones(1000)
    try:
        if dist.get_rank() == 0:
            dist.all_reduce(t)
        else:
            dist.broadcast(t, 0)
    except pycomm.MismatchError as e:
        print(f"rank {dist.get_rank()}: MismatchError: {e}", flush=True)
    else:
        raise AssertionError("a mismatched collective under the pycomm backend raised nothing")


def _expect(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    assert torch.equal(got, want), f"{what}: got {got.tolist()}, want {want.tolist()}"


def _unequal_all_to_all(rank: int, size: int) -> None:
    """Rank r sends (r + j) % 3 rows of two (some none) to rank j, and all_to_all's tensors of r + j + 1 elements."""
    sends = [(rank + j) % 3 for j in range(size)]
    receives = [(i + rank) % 3 for i in range(size)]
    inp = torch.cat([torch.full((n, 2), 100.0 * rank + j) for j, n in enumerate(sends)])
    out = torch.empty(sum(receives), 2)
    dist.all_to_all_single(out, inp, receives, sends)
    _expect(
        out,
        torch.cat([torch.full((n, 2), 100.0 * i + rank) for i, n in enumerate(receives)]),
        "all_to_all_single with unequal splits",
    )
    outs = [torch.empty(i + rank + 1) for i in range(size)]
    dist.all_to_all(outs, [torch.full((rank + j + 1,), 10.0 * rank + j) for j in range(size)])
    _expect(
        torch.cat(outs),
        torch.cat([torch.full((i + rank + 1,), 10.0 * i + rank) for i in range(size)]),
        "all_to_all with unequal tensors",
    )


def ops() -> None:
    rank, size = dist.get_rank(), dist.get_world_size()
    ranks = torch.arange(size, dtype=torch.float32)
    for op, want in (
        (dist.ReduceOp.SUM, ranks.sum() + size),
        (dist.ReduceOp.AVG, ranks.mean() + 1),
        (dist.ReduceOp.MIN, torch.tensor(1.0)),
        (dist.ReduceOp.MAX, torch.tensor(size - 1.0 + 1)),
        (dist.ReduceOp.PRODUCT, (ranks + 1).prod()),
    ):
        t = torch.full((3,), rank + 1.0)
        dist.all_reduce(t, op=op)
        _expect(t, want.expand(3), f"all_reduce {op}")
    bits = torch.tensor([1 << rank, 3], dtype=torch.int64)
    dist.all_reduce(bits, op=dist.ReduceOp.BOR)
    _expect(bits, torch.tensor([(1 << size) - 1, 3]), "all_reduce BOR")
    strided = torch.full((4, 2), float(rank)).t()  # non-contiguous: staged and copied back
    dist.all_reduce(strided)
    _expect(strided, torch.full((2, 4), ranks.sum().item()), "all_reduce of a non-contiguous tensor")
    b = torch.full((5,), float(rank))
    dist.broadcast(b, src=size - 1)
    _expect(b, torch.full((5,), size - 1.0), "broadcast")
    outs = [torch.empty(2) for _ in range(size)]
    dist.all_gather(outs, torch.full((2,), float(rank)))
    _expect(torch.stack(outs), ranks.repeat_interleave(2).view(size, 2), "all_gather")
    flat = torch.empty(2 * size)
    dist.all_gather_single(flat, torch.full((2,), float(rank)))
    _expect(flat, ranks.repeat_interleave(2), "all_gather_single")
    rs = torch.empty(2)
    dist.reduce_scatter_single(rs, torch.arange(2.0 * size))
    _expect(rs, torch.arange(2.0 * size)[2 * rank : 2 * rank + 2] * size, "reduce_scatter_single")
    rl = torch.empty(2)
    dist.reduce_scatter(rl, [torch.full((2,), float(r)) for r in range(size)])
    _expect(rl, torch.full((2,), float(rank * size)), "reduce_scatter")
    a2a = torch.empty(size)
    dist.all_to_all_single(a2a, torch.full((size,), float(rank)))
    _expect(a2a, ranks, "all_to_all_single")
    a2l = [torch.empty(1) for _ in range(size)]
    dist.all_to_all(a2l, [torch.tensor([10.0 * rank + r]) for r in range(size)])
    _expect(torch.cat(a2l), 10 * ranks + rank, "all_to_all")
    _unequal_all_to_all(rank, size)
    dist.barrier()
    peer = (rank + 1) % size
    got = torch.empty(3)
    reqs = dist.batch_isend_irecv(
        [dist.P2POp(dist.isend, torch.full((3,), float(rank)), peer), dist.P2POp(dist.irecv, got, (rank - 1) % size)]
    )
    for r in reqs:
        r.wait()
    _expect(got, torch.full((3,), float((rank - 1) % size)), "batch_isend_irecv")
    work = dist.all_reduce(torch.ones(2), async_op=True)
    assert work.wait(timeout=datetime.timedelta(seconds=120)) is True
    late = torch.ones(2)
    if rank == 0:  # rank 1 joins 3 s late: a bounded wait gives up naming the op, the op itself completes later
        work = dist.all_reduce(late, async_op=True)
        try:
            work.wait(timeout=datetime.timedelta(seconds=0.5))
        except TimeoutError as e:
            assert "allreduce" in str(e), e
        else:
            raise AssertionError("wait(timeout=0.5 s) returned before the late rank joined")
        work.wait()
    else:
        time.sleep(3)
        dist.all_reduce(late)
    _expect(late, torch.full((2,), float(size)), "all_reduce after a timed-out wait")
    fut = dist.all_reduce(torch.ones(2), async_op=True).get_future()
    _expect(fut.wait()[0], torch.full((2,), float(size)), "get_future")
    for call, name in (
        (lambda: dist.all_reduce(torch.ones(1), op=dist._make_nccl_premul_sum(2.0)), "PREMUL_SUM"),
        (lambda: dist.reduce(torch.ones(1), dst=0), "reduce"),
    ):
        try:
            call()
        except NotImplementedError as e:
            assert name in str(e), e
        else:
            raise AssertionError(f"{name}: expected NotImplementedError naming it")
    assert dist.get_backend() == "pycomm"
    print(f"rank {rank}: ops passed", flush=True)


if __name__ == "__main__":
    dist.init_process_group("pycomm")
    {"ddp": ddp, "mismatch": mismatch, "ops": ops, "dead": dead}[sys.argv[1]]()
    if sys.argv[1] != "mismatch":
        dist.destroy_process_group()
