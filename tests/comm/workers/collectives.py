"""Every op of pycomm.Communicator against a numpy reference on real ranks, for every dtype and sizes
0, 1, odd and larger; async ops in flight; overlap; split / split_by_node / from_mpi4py; bad input.
Run under mpirun (or srun --mpi=pmix) with any number of ranks:
`python -m tests.comm.workers.collectives [backend] [--launcher openmpi|slurm|...] [--device cuda]`; --launcher
makes the worker assert that pycomm.init() read that launcher's environment (tests/comm/test_srun.py uses it);
--device cuda runs every op's checks on CUDA tensors (rank r on GPU r mod the GPUs it sees) instead of host
ones (tests/comm/test_mpi_cuda.py)."""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import torch

import pycomm
from tests.comm.workers.common import ALL, FLOATS, INTS, as_np, assert_close, rank_input

SIZES = [0, 1, 7, 1000, 70_001]
checks = 0
DEVICE = torch.device("cpu")  # where the ops' tensors live (--device)


def ok() -> None:
    global checks
    checks += 1


def inputs(comm, numel, dtype, case):
    """Every rank's input, on DEVICE (each rank computes the reference from all of them)."""
    return [rank_input(r, numel, dtype, case).to(DEVICE) for r in range(comm.size)]


def allreduce_case(comm, dtype: torch.dtype, numel: int, op) -> None:
    xs = inputs(comm, numel, dtype, f"ar{numel}{op}")
    stack = np.stack([as_np(x) for x in xs]) if numel else np.zeros((comm.size, 0))
    want = {
        pycomm.SUM: stack.sum(0),
        pycomm.AVG: stack.sum(0) / comm.size,
        pycomm.MAX: stack.max(0),
        pycomm.MIN: stack.min(0),
    }[op]
    t = xs[comm.rank].clone()
    comm.allreduce(t, op=op)
    exact = op != pycomm.AVG or comm.size in (1, 2, 4)
    assert_close(t, want, f"allreduce {op.name}", exact=exact)
    ok()


def check_allreduce(comm) -> None:
    for dtype in FLOATS + INTS + [torch.int8]:
        for numel in SIZES:
            for op in (pycomm.SUM, pycomm.AVG, pycomm.MAX, pycomm.MIN):
                if op == pycomm.AVG and not dtype.is_floating_point:
                    continue
                if dtype == torch.int8 and op == pycomm.SUM:
                    continue  # sums of small ints may overflow int8; MAX/MIN cover the dtype
                allreduce_case(comm, dtype, numel, op)


# From this many bytes the MPI transport's blocking all-reduce is its own ring
# (csrc/transport/mpi/ring_allreduce.h); +3 elements make the ring's segments uneven.
RING_BYTES = 32 << 20


def check_large_allreduce(comm) -> None:
    for dtype, op in (
        (torch.float32, pycomm.SUM),
        (torch.float32, pycomm.AVG),
        (torch.float16, pycomm.SUM),
        (torch.bfloat16, pycomm.MAX),
        (torch.int64, pycomm.MIN),
    ):
        allreduce_case(comm, dtype, RING_BYTES // dtype.itemsize + 3, op)


def check_broadcast(comm) -> None:
    for dtype in ALL:
        for numel in SIZES:
            root = comm.size - 1
            xs = inputs(comm, numel, dtype, f"bc{numel}")
            t = xs[comm.rank].clone()
            comm.broadcast(t, root=root)
            assert_close(t, as_np(xs[root]), "broadcast")
            ok()


def check_allgather(comm) -> None:
    for dtype in ALL:
        for numel in SIZES:
            xs = inputs(comm, numel, dtype, f"ag{numel}")
            out = torch.full((comm.size * numel,), 99, dtype=dtype, device=DEVICE)
            comm.allgather(out, xs[comm.rank])
            assert_close(out, np.concatenate([as_np(x) for x in xs]), "allgather")
            ok()


def check_reduce_scatter(comm) -> None:
    for dtype in FLOATS + INTS:
        for numel in SIZES:
            for op in (pycomm.SUM, pycomm.AVG, pycomm.MAX):
                if op == pycomm.AVG and not dtype.is_floating_point:
                    continue
                xs = inputs(comm, numel * comm.size, dtype, f"rs{numel}{op}")
                stack = np.stack([as_np(x) for x in xs])
                full = {pycomm.SUM: stack.sum(0), pycomm.AVG: stack.sum(0) / comm.size, pycomm.MAX: stack.max(0)}[op]
                out = torch.zeros(numel, dtype=dtype, device=DEVICE)
                comm.reduce_scatter(out, xs[comm.rank], op=op)
                exact = op != pycomm.AVG or comm.size in (1, 2, 4)
                assert_close(out, full[comm.rank * numel : (comm.rank + 1) * numel], f"reduce_scatter {op.name}", exact)
                ok()


def check_alltoall(comm) -> None:
    for dtype in ALL:
        for per in (0, 1, 5, 3001):
            xs = inputs(comm, per * comm.size, dtype, f"a2a{per}")
            out = torch.zeros(per * comm.size, dtype=dtype, device=DEVICE)
            comm.alltoall(out, xs[comm.rank])
            want = np.concatenate([as_np(xs[r])[comm.rank * per : (comm.rank + 1) * per] for r in range(comm.size)])
            assert_close(out, want, "alltoall")
            ok()


def check_p2p(comm) -> None:
    nxt, prv = (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size
    for dtype in ALL:
        for numel in SIZES:
            xs = inputs(comm, numel, dtype, f"p2p{numel}")
            got = torch.zeros(numel, dtype=dtype, device=DEVICE)
            # Both directions in flight at once: a rendezvous-sized isend must not block the irecv.
            rw = comm.irecv(got, prv, tag=7)
            sw = comm.isend(xs[comm.rank], nxt, tag=7)
            sw.wait()
            rw.wait()
            assert_close(got, as_np(xs[prv]), "isend/irecv ring")
            ok()
    # Blocking pair with tags out of order: tag 2 is received first although sent second.
    if comm.size >= 2 and comm.rank < 2:
        peer = 1 - comm.rank
        a, b = torch.full((3,), 1.0 + comm.rank, device=DEVICE), torch.full((300_000,), 5.0 + comm.rank, device=DEVICE)
        if comm.rank == 0:
            w1 = comm.isend(a, peer, tag=1)
            comm.send(b, peer, tag=2)
            w1.wait()
        else:
            ra, rb = torch.zeros(3, device=DEVICE), torch.zeros(300_000, device=DEVICE)
            comm.recv(rb, peer, tag=2)
            comm.recv(ra, peer, tag=1)
            assert ra[0] == 1.0 and rb[0] == 5.0 and rb[-1] == 5.0, (ra, rb[:3])
        ok()


def check_many_async(comm) -> None:
    works, tensors, wants = [], [], []
    for i in range(64):
        numel = (i * 997) % 5000
        xs = inputs(comm, numel, torch.float32, f"async{i}")
        t = xs[comm.rank].clone()
        tensors.append(t)
        wants.append(np.stack([as_np(x) for x in xs]).sum(0) if numel else np.zeros(0))
        works.append(comm.allreduce(t, op=pycomm.SUM, async_op=True))
    extra = comm.allgather(
        torch.zeros(comm.size, device=DEVICE), torch.tensor([float(comm.rank)], device=DEVICE), async_op=True
    )
    for w in reversed(works):  # waiting out of order is fine
        w.wait()
        assert w.is_completed()
    extra.wait()
    for t, want in zip(tensors, wants):
        assert_close(t, want, "async allreduce")
    ok()


def check_overlap(comm) -> None:
    """The main thread computes while a large all-reduce is in flight on the progress thread."""
    numel = 8 << 20  # 32 MiB of float32
    t = torch.full((numel,), float(comm.rank + 1))
    a = torch.randn(64, 64)
    steps_in_flight = 0
    work = comm.allreduce(t, op=pycomm.SUM, async_op=True)
    while not work.is_completed():
        a = torch.tanh(a @ a)  # compute (releases the GIL; the progress thread never needs it)
        steps_in_flight += 1
    work.wait()
    if comm.size > 1:
        assert steps_in_flight > 0, "the all-reduce completed before the main thread got to compute anything"
    want = comm.size * (comm.size + 1) / 2
    assert t[0].item() == want and t[-1].item() == want and bool((t == want).all()), t[:4]
    ok()


def check_split(comm) -> None:
    color = comm.rank % 2
    sub = comm.split(color, key=-comm.rank)  # reversed order inside each group
    members = [r for r in range(comm.size) if r % 2 == color]
    assert sub.size == len(members), (sub.size, members)
    assert sub.rank == sorted(members, reverse=True).index(comm.rank), (sub.rank, members)
    t = torch.tensor([float(comm.rank)])
    sub.allreduce(t, op=pycomm.SUM)
    assert t.item() == sum(members), (t, members)
    none = comm.split(-1 if comm.rank == 0 else 0)
    assert (none is None) == (comm.rank == 0)
    intra, inter = comm.split_by_node()
    # tests run on one node: everyone shares it
    assert intra.size == comm.size and inter.size == 1 and intra.rank == comm.rank, (intra, inter)
    assert comm.local_size == comm.size and comm.local_rank == comm.rank
    x = torch.ones(3)
    intra.allreduce(x, op=pycomm.SUM)
    inter.allreduce(x, op=pycomm.SUM)
    assert x.tolist() == [float(comm.size)] * 3
    ok()


def check_mpi4py(comm) -> None:
    from mpi4py import MPI

    c = pycomm.from_mpi4py(MPI.COMM_WORLD)
    assert (c.rank, c.size) == (comm.rank, comm.size)
    t = torch.tensor([1.0, float(comm.rank)])
    c.allreduce(t, op=pycomm.MAX)
    assert t.tolist() == [1.0, float(comm.size - 1)]
    sub4py = MPI.COMM_WORLD.Split(comm.rank % 2, comm.rank)
    sub = pycomm.from_mpi4py(sub4py)
    assert sub.size == sub4py.Get_size() and sub.rank == sub4py.Get_rank()
    u = torch.ones(2, dtype=torch.int64)
    sub.allreduce(u, op=pycomm.SUM)
    assert u.tolist() == [sub.size] * 2
    # the mpi4py communicator itself stays usable alongside
    assert MPI.COMM_WORLD.allreduce(1) == comm.size
    sub4py.Free()
    ok()


def check_gpu_tensors(comm) -> None:
    """CUDA/ROCm tensors through the MPI transport (pinned-memory staging, or GPU-aware MPI)."""
    dev = torch.device("cuda", comm.local_rank % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    for dtype in (torch.float32, torch.bfloat16, torch.int64):
        for numel in (0, 1, 70_001):
            xs = inputs(comm, numel, dtype, f"gpu{numel}")
            stack = np.stack([as_np(x) for x in xs]) if numel else np.zeros((comm.size, 0))
            t = xs[comm.rank].to(dev)
            comm.allreduce(t, op=pycomm.SUM)
            assert_close(t.cpu(), stack.sum(0), "gpu allreduce")
            out = torch.zeros(comm.size * numel, dtype=dtype, device=dev)
            comm.allgather(out, xs[comm.rank].to(dev))
            assert_close(out.cpu(), np.concatenate([as_np(x) for x in xs]), "gpu allgather")
            got = torch.zeros(numel, dtype=dtype, device=dev)
            rw = comm.irecv(got, (comm.rank - 1) % comm.size, tag=9)
            comm.isend(xs[comm.rank].to(dev), (comm.rank + 1) % comm.size, tag=9).wait()
            rw.wait()
            assert_close(got.cpu(), as_np(xs[(comm.rank - 1) % comm.size]), "gpu isend/irecv")
            ok()
    f = torch.full((1000,), float(comm.rank + 1), device=dev)
    comm.allreduce(f, op=pycomm.AVG)
    assert bool((f.cpu() == (comm.size + 1) / 2).all()), f[:4]
    ok()


def expect(exc, fragment: str, fn, *args, **kw) -> None:
    try:
        fn(*args, **kw)
    except exc as e:
        assert fragment in str(e), f"{exc.__name__} without {fragment!r}: {e}"
        ok()
        return
    raise AssertionError(f"expected {exc.__name__} containing {fragment!r}")


def check_bad_input(comm) -> None:
    n = comm.size
    nc = torch.zeros(4, 4).t()
    expect(ValueError, "contiguous", comm.allreduce, nc, op=pycomm.AVG)
    expect(TypeError, "dtype", comm.allreduce, torch.zeros(3, dtype=torch.complex64), op=pycomm.AVG)
    expect(TypeError, "torch.Tensor", comm.allreduce, [1.0, 2.0], op=pycomm.AVG)
    expect(TypeError, "AVG needs a floating", comm.allreduce, torch.zeros(3, dtype=torch.int32), op=pycomm.AVG)
    expect(ValueError, "op must be one of", comm.allreduce, torch.zeros(3), op=7)
    expect(ValueError, "op must be one of", comm.allreduce, torch.zeros(3), op="sum")
    expect(ValueError, "expected size * tensor.numel()", comm.allgather, torch.zeros(3 * n + 1), torch.zeros(3))
    expect(ValueError, "divisible", comm.reduce_scatter, torch.zeros(2), torch.zeros(2 * n + 1))
    expect(TypeError, "must match", comm.allgather, torch.zeros(n, dtype=torch.float64), torch.zeros(1))
    expect(ValueError, "divisible", comm.alltoall, torch.zeros(n + 1), torch.zeros(n + 1)) if n > 1 else ok()
    expect(ValueError, "dst must be a rank in", comm.isend, torch.zeros(1), n)
    expect(ValueError, "src must be a rank in", comm.irecv, torch.zeros(1), -2)  # -1 is pycomm.ANY_SOURCE
    expect(ValueError, "ANY_SOURCE (-1) is only for receives", comm.isend, torch.zeros(1), pycomm.ANY_SOURCE)
    expect(ValueError, "root must be a rank in", comm.broadcast, torch.zeros(1), root=n)
    expect(ValueError, "tag must be", comm.isend, torch.zeros(1), 0, tag=-3)
    expect(ValueError, "not supported", comm.allreduce, torch.zeros(3, device="meta"), op=pycomm.AVG)
    expect(TypeError, "color must be an int", comm.split, "a")
    # The communicator is still healthy after all of that (nothing reached the queue).
    t = torch.ones(1)
    comm.allreduce(t, op=pycomm.SUM)
    assert t.item() == n


def check_stats(comm) -> None:
    s = pycomm.stats()
    for op in ("allreduce", "broadcast", "allgather", "reduce_scatter", "alltoall", "send", "recv", "split"):
        assert s[op]["calls"] > 0, (op, s.get(op))
    assert s["allreduce"]["bytes"] > 0 and s["allreduce"]["seconds"] > 0
    assert (s["allreduce"]["busbw"] > 0) == (comm.size > 1), s["allreduce"]
    ok()


def check_launcher(comm, expected: str) -> None:
    """pycomm.init() took rank and size from `expected`'s environment, and they agree with the transport's."""
    env = pycomm.runtime.launch_env()
    assert env.launcher == expected, f"launched by {env.launcher!r}, expected {expected!r}: {env}"
    assert (env.rank, env.size) == (comm.rank, comm.size), (env, comm.rank, comm.size)
    print(f"rank {comm.rank}: launcher {env.launcher}", flush=True)
    ok()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("backend", nargs="?", default="auto")
    parser.add_argument("--launcher", help="assert that pycomm.init() detected this launcher")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="where the ops' tensors live")
    args = parser.parse_args()
    comm = pycomm.init(backend=args.backend)
    if args.device == "cuda":
        global DEVICE
        DEVICE = torch.device("cuda", comm.local_rank % torch.cuda.device_count())
        torch.cuda.set_device(DEVICE)
    t0 = time.perf_counter()
    if args.launcher:
        check_launcher(comm, args.launcher)
    for check in (
        check_allreduce,
        check_large_allreduce,
        check_broadcast,
        check_allgather,
        check_reduce_scatter,
        check_alltoall,
        check_p2p,
        check_many_async,
        check_overlap,
        check_split,
        check_bad_input,
        check_stats,
    ):
        check(comm)
    if pycomm.build_info()["mpi"] and comm.backend == "mpi":
        check_mpi4py(comm)
    info = pycomm.build_info()
    if torch.cuda.is_available() and (info["cuda"] or info["hip"]):
        check_gpu_tensors(comm)
    else:
        print(f"rank {comm.rank}: GPU tensor checks skipped (no GPU, or a CPU-only build)", flush=True)
    comm.barrier()
    print(f"rank {comm.rank}: op tensors on {DEVICE}", flush=True)
    print(
        f"rank {comm.rank}/{comm.size} ({comm.backend}): {checks} checks passed in {time.perf_counter() - t0:.1f} s",
        flush=True,
    )
    pycomm.finalize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
