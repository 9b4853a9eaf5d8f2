"""The NCCL/RCCL transport at world size 1 on a GPU (skipped without one, or without NCCL in the
build): every op on CUDA tensors against a torch reference, async Work with stream semantics,
split, stats, bad input, and pycomm.init(backend="nccl") through each way the id travels.

One GPU cannot hold two NCCL ranks, so multi-rank NCCL runs need a multi-GPU machine; the MPI
transport covers several ranks with CUDA tensors (tests/comm/test_collectives.py)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest
import torch

import pycomm
from pycomm import backends
from pycomm._build import core
from pycomm.communicator import Communicator
from tests.launch import ROOT, have_mpirun, mpirun, worker_env

HAVE_NCCL = pycomm.build_info()["nccl"]
HAVE_GPU = torch.cuda.is_available()


def needs_gpu(test):
    """A test that runs only on a GPU with an NCCL/RCCL build; marked gpu (scripts/gpu_check.sh runs them)."""
    skip = pytest.mark.skipif(not (HAVE_NCCL and HAVE_GPU), reason="needs a GPU and a build of pycomm with NCCL/RCCL")
    return pytest.mark.gpu(skip(test))


SECOND = 2_000_000_000  # torch.cuda._sleep cycles: about a second at the H100's ~2 GHz
DTYPES = [
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.int32,
    torch.int64,
    torch.int8,
    torch.uint8,
]
FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]


def test_build_info_matches_the_compiled_bindings():
    assert HAVE_NCCL == bool(core().have_nccl)
    if HAVE_NCCL:
        assert core().nccl_version().startswith("NCCL ")
        assert core().nccl_unique_id_bytes == 128


def test_nccl_backend_explains_why_it_cannot_run_here():
    if HAVE_NCCL and HAVE_GPU:
        pytest.skip("NCCL can run here")
    with pytest.raises(pycomm.PycommError, match="backend 'nccl' cannot be used") as e:
        backends.get("nccl")
    if not HAVE_NCCL:
        assert "has no NCCL; rebuild with NCCL_HOME or pip install nvidia-nccl-cu13" in str(
            e.value
        ) or "has no RCCL" in str(e.value)
    else:
        assert "no GPU is visible" in str(e.value)


def test_auto_does_not_pick_nccl_for_a_single_process():
    from pycomm.launch_env import LaunchEnv

    assert backends.choose_auto(LaunchEnv(0, 1, 0, 1, "single")) != "nccl"


# ---- on a GPU -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def comm():
    if not (HAVE_NCCL and HAVE_GPU):
        pytest.skip("needs a GPU and a build of pycomm with NCCL/RCCL")
    torch.cuda.set_device(0)
    c = Communicator(core().nccl_world(core().nccl_unique_id(), 0, 1, 0), "nccl-test")
    yield c
    c.shutdown()


def sample(dtype: torch.dtype, n: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator(device="cuda").manual_seed(seed)
    if dtype.is_floating_point:
        return torch.randn(n, generator=g, device="cuda").to(dtype)
    lo, hi = (0, 100) if dtype == torch.uint8 else (-50, 50)
    return torch.randint(lo, hi, (n,), generator=g, device="cuda").to(dtype)


@needs_gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [0, 1, 7, 4099])
def test_allreduce_every_op(comm, dtype, n):
    ops = [pycomm.SUM, pycomm.MAX, pycomm.MIN] + ([pycomm.AVG] if dtype.is_floating_point else [])
    for op in ops:
        t = sample(dtype, n, seed=n)
        ref = t.clone()  # one rank: the reduction of a single contribution is itself
        comm.allreduce(t, op=op)
        torch.testing.assert_close(t, ref, rtol=0, atol=0)
    assert comm.size == 1 and comm.rank == 0 and comm.backend == "nccl"


@needs_gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_broadcast_allgather_reduce_scatter_alltoall(comm, dtype):
    t = sample(dtype, 513, seed=1)
    ref = t.clone()
    comm.broadcast(t, root=0)
    torch.testing.assert_close(t, ref, rtol=0, atol=0)
    out = torch.zeros_like(t)
    comm.allgather(out, t)
    torch.testing.assert_close(out, ref, rtol=0, atol=0)
    out = torch.zeros_like(t)
    comm.reduce_scatter(out, t, op=pycomm.SUM)
    torch.testing.assert_close(out, ref, rtol=0, atol=0)
    out = torch.zeros_like(t)
    comm.alltoall(out, t)
    torch.testing.assert_close(out, ref, rtol=0, atol=0)


@needs_gpu
def test_ops_see_the_callers_latest_writes_and_results_follow_on_its_stream(comm):
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        x = torch.ones(1 << 22, device="cuda")
        for _ in range(50):  # a long chain of kernels on the caller's stream, still running at submit
            x.mul_(1.01)
        out = torch.empty_like(x)
        comm.allgather(out, x)  # the comm stream must wait for the chain
        out.add_(1)  # and this kernel must wait for the all-gather
        expected = x + 1
    side.synchronize()
    torch.testing.assert_close(out, expected)


@needs_gpu
def test_ops_and_wait_return_while_the_callers_stream_is_still_busy(comm):
    """Stream semantics, no host sync anywhere: with the caller's stream held by a kernel of about a second, a
    blocking all-reduce, an async one and its wait() all return while that kernel still runs; work queued on
    the stream after them sees their results."""
    stream = torch.cuda.current_stream()
    t = torch.ones(1 << 20, device="cuda")
    u = torch.full((1000,), 2.0, device="cuda")
    torch.cuda._sleep(SECOND)
    comm.allreduce(t, op=pycomm.SUM)
    work = comm.allreduce(u, op=pycomm.MAX, async_op=True)
    work.wait()
    t.mul_(3)  # after the all-reduce on this stream, which waited for it
    assert not stream.query(), "the host waited for the GPU: the stream was already idle"
    assert not work.is_completed(), "the all-reduce completed before the kernel it must wait for"
    stream.synchronize()
    assert work.is_completed() and bool((t == 3).all()) and bool((u == 2).all()), (t[:4], u[:4])


@needs_gpu
def test_quantized_allreduce_follows_the_callers_stream(comm):
    """allreduce_quantized runs on its helper thread, but on the caller's stream: it sees a write queued
    there behind half a second of work, and its result is there for what the stream runs next."""
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        x = torch.zeros(1 << 20, device="cuda")
        torch.cuda._sleep(SECOND // 2)
        x.add_(1.5)
        comm.allreduce_quantized(x, op=pycomm.SUM, async_op=True).wait()
        y = x * 2
    side.synchronize()
    torch.testing.assert_close(y, torch.full_like(y, 3.0), rtol=0, atol=3.0 / 254)


@needs_gpu
def test_async_work_completes_and_keeps_order(comm):
    tensors = [sample(torch.float32, 1 << 16, seed=i) for i in range(20)]
    refs = [t.clone() for t in tensors]
    works = [comm.allreduce(t, op=pycomm.MAX, async_op=True) for t in tensors]
    for w in works:
        w.wait()  # stream wait: no host sync; reading below on the current stream is ordered after it
    for t, r in zip(tensors, refs):
        torch.testing.assert_close(t, r)
    works[-1].synchronize()
    assert all(w.is_completed() for w in works)
    info = works[0].info
    assert info["name"] == "allreduce" and info["count"] == 1 << 16 and info["dtype"] == "float32"
    assert works[1].info["seq"] > info["seq"]


@needs_gpu
def test_send_recv_to_self_and_barrier(comm):
    t = sample(torch.bfloat16, 300, seed=3)
    r = torch.zeros_like(t)
    comm.send(t, 0, tag=5)  # staged: completes without its receive
    comm.recv(r, 0, tag=5)
    torch.testing.assert_close(r, t, rtol=0, atol=0)
    w1 = comm.isend(t, 0, tag=1)
    w2 = comm.irecv(r.zero_(), 0, tag=1)
    w1.wait()
    w2.wait()
    torch.testing.assert_close(r, t, rtol=0, atol=0)
    comm.barrier()
    with pytest.raises(pycomm.PycommError, match="no send to itself with that tag"):
        comm.recv(r, 0, tag=9)


@needs_gpu
def test_p2p_without_headers_is_refused_by_name_and_dup_works(comm):
    """NCCL has no any-source receive and no message header: the p2p extensions say so (pycomm/p2p.py);
    dup (a split) gives an independent communicator."""
    t = torch.ones(4, device="cuda")
    with pytest.raises(pycomm.PycommError, match="backend 'nccl' has no receive from any source"):
        comm.recv(t, pycomm.ANY_SOURCE)
    for name, call in (
        ("send_tensor", lambda: comm.send_tensor(t, 0)),
        ("recv_tensor", lambda: comm.recv_tensor(0)),
        ("probe", lambda: comm.probe(0, block=False)),
    ):
        with pytest.raises(pycomm.PycommError, match=f"{name}: backend 'nccl' does not support it"):
            call()
    d = comm.dup()
    x = torch.full((8,), 2.0, device="cuda")
    d.allreduce(x, op=pycomm.SUM)
    comm.allreduce(t, op=pycomm.SUM)
    torch.cuda.synchronize()
    assert x.tolist() == [2.0] * 8 and t.tolist() == [1.0] * 4 and d.backend == "nccl"
    d.shutdown()


@needs_gpu
@pytest.mark.parametrize("how", ["commsplit", "init"])
def test_split_and_split_by_node(comm, how, monkeypatch):
    if how == "init":
        monkeypatch.setenv("PYCOMM_NCCL_SPLIT", "init")
    sub = comm.split(3)
    assert sub is not None and sub.size == 1 and sub.backend == "nccl"
    t = sample(torch.float32, 100, seed=4)
    ref = t.clone()
    sub.allreduce(t, op=pycomm.SUM)
    torch.testing.assert_close(t, ref)
    sub.shutdown()
    assert comm.split(-1) is None
    intra, inter = comm.split_by_node()
    assert (intra.size, intra.rank, inter.size, comm.local_rank, comm.local_size) == (1, 0, 1, 0, 1)
    intra.shutdown()
    inter.shutdown()


@needs_gpu
def test_debug_mode_checks_ops(comm, monkeypatch):
    monkeypatch.setenv("PYCOMM_DEBUG", "1")
    t = sample(torch.float16, 64, seed=5)
    ref = t.clone()
    comm.allreduce(t, op=pycomm.AVG)
    torch.testing.assert_close(t, ref)


@needs_gpu
def test_stats_count_nccl_ops(comm):
    torch.cuda.synchronize()
    time.sleep(0.5)  # let the watchdog record the completions of earlier tests' ops first
    pycomm.stats(reset=True)
    t = sample(torch.float32, 1024, seed=6)
    comm.allreduce(t, op=pycomm.SUM, async_op=True).synchronize()
    deadline = time.monotonic() + 30
    while "allreduce" not in pycomm.stats() and time.monotonic() < deadline:
        time.sleep(0.01)  # the watchdog thread records an op once it sees it complete
    s = pycomm.stats()["allreduce"]
    assert s["calls"] == 1 and s["bytes"] == 4096 and s["seconds"] >= 0


@needs_gpu
def test_bad_input(comm):
    with pytest.raises(ValueError, match="host memory"):
        comm.allreduce(torch.ones(4), op=pycomm.AVG)
    with pytest.raises(ValueError, match="contiguous"):
        comm.allreduce(torch.ones(4, 4, device="cuda").t(), op=pycomm.AVG)
    with pytest.raises(TypeError, match="AVG needs a floating"):
        comm.allreduce(torch.ones(4, dtype=torch.int32, device="cuda"), op=pycomm.AVG)
    with pytest.raises(ValueError, match="root"):
        comm.broadcast(torch.ones(4, device="cuda"), root=1)
    with pytest.raises(ValueError, match="allgather"):
        comm.allgather(torch.ones(3, device="cuda"), torch.ones(4, device="cuda"))
    with pytest.raises(ValueError, match="dst"):
        comm.send(torch.ones(4, device="cuda"), 2)
    with pytest.raises(TypeError, match="dtype"):
        comm.allreduce(torch.ones(4, dtype=torch.complex64, device="cuda"), op=pycomm.AVG)
    with pytest.raises(ValueError, match="one device"):
        comm.allgather(torch.ones(4), torch.ones(4, device="cuda"))
    with pytest.raises(ValueError, match="reduce_scatter"):
        comm.reduce_scatter(torch.ones(3, device="cuda"), torch.ones(4, device="cuda"))
    t = torch.ones(4, device="cuda")
    comm.allreduce(t, op=pycomm.SUM)  # the communicator is unharmed by all of the above
    assert t.tolist() == [1.0] * 4
    with pytest.raises(ValueError, match="unique id must be 128 bytes"):
        core().nccl_world(b"short", 0, 1, 0)
    with pytest.raises(ValueError, match="device"):
        core().nccl_world(core().nccl_unique_id(), 0, 1, torch.cuda.device_count())


@needs_gpu
def test_ops_after_shutdown_raise():
    c = Communicator(core().nccl_world(core().nccl_unique_id(), 0, 1, 0), "short-lived")
    c.allreduce(torch.ones(8, device="cuda"), op=pycomm.AVG)
    c.shutdown()
    with pytest.raises(pycomm.PycommError, match="shut down"):
        c.allreduce(torch.ones(8, device="cuda"), op=pycomm.AVG)


@needs_gpu
@pytest.mark.parametrize("mode", ["host", "watchdog"])
def test_stall_raises_naming_the_op(mode):
    p = subprocess.run(
        [sys.executable, "-m", "tests.comm.workers.nccl_stall", mode],
        cwd=ROOT,
        env=worker_env({"PYCOMM_TIMEOUT": "2"}),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0 and "stall: allreduce #0" in p.stdout, p.stdout + p.stderr
    if mode == "watchdog":
        assert "pycomm: stall error" in p.stderr, p.stderr


@needs_gpu
@pytest.mark.parametrize("mode", ["exit", "shutdown"])
def test_abort_with_an_op_in_flight_does_not_wait_for_it(mode):
    """exit: pycomm.abort() ends the process at once although an all-reduce waits behind a kernel of ten
    minutes; shutdown: comm.shutdown() aborts the communicator after PYCOMM_TIMEOUT, the stuck op's
    synchronize() raises, and later ops are refused (tests/comm/workers/nccl_abort.py)."""
    p = subprocess.run(
        [sys.executable, "-m", "tests.comm.workers.nccl_abort", mode],
        cwd=ROOT,
        env=worker_env({"PYCOMM_TIMEOUT": "2"}),
        capture_output=True,
        text=True,
        timeout=240,
    )
    if mode == "exit":
        assert p.returncode == 3 and "deliberate abort with an op in flight" in p.stderr, p.stdout + p.stderr
    else:
        assert p.returncode == 0 and "shutdown: ok" in p.stdout, p.stdout + p.stderr


# ---- pycomm.init(backend="nccl") in fresh processes ------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_init_worker(extra_env: dict[str, str]) -> None:
    env = worker_env(extra_env)
    for key in ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID", "RANK", "WORLD_SIZE", "LOCAL_RANK"):
        if key not in extra_env:
            env.pop(key, None)
    p = subprocess.run(
        [sys.executable, "-m", "tests.comm.workers.nccl_init"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0 and "rank 0: ok" in p.stdout, p.stdout + p.stderr


@needs_gpu
def test_init_nccl_single_process():
    run_init_worker({})


@needs_gpu
def test_init_nccl_torchrun_style_exchanges_the_id_over_the_tcp_store():
    run_init_worker(
        {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    )


@needs_gpu
@pytest.mark.mpi
def test_init_nccl_under_mpirun_exchanges_the_id_over_mpi():
    if not pycomm.build_info()["mpi"] or not have_mpirun():
        pytest.skip("needs MPI")
    proc = mpirun(1, "tests.comm.workers.nccl_init", timeout=300)
    assert "rank 0: ok" in proc.stdout
