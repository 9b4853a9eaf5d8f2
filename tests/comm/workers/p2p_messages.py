"""Point-to-point messages whose receiver does not know their shape, dtype or sender, on real ranks:
send_tensor / recv_tensor of many shapes and dtypes, receive from ANY_SOURCE, probe, two threads
receiving from ANY_SOURCE on one tag, tags at the transport's bound and past it, and bad input.
Run with 3 ranks under mpirun (MPI) or torchrun (gloo, where probe is refused naming the backend):
`python -m tests.comm.workers.p2p_messages`."""

from __future__ import annotations

import threading
import zlib
from typing import Callable

import torch

import pycomm
from tests.comm.workers.common import rank_input

checks: list[str] = []


def ok(what: str) -> None:
    checks.append(what)


def expect_raises(kind: type, words: tuple[str, ...], fn: Callable[[], object]) -> None:
    try:
        fn()
    except kind as e:
        missing = [w for w in words if w not in str(e)]
        assert not missing, f"{kind.__name__} without {missing}: {e}"
        return
    raise AssertionError(f"expected {kind.__name__} mentioning {words}")


# ---- shapes and dtypes a receiver does not know ------------------------------------------------
def case_tensor(sender: int, name: str) -> torch.Tensor:
    """The tensor rank `sender` sends for case `name` (non-contiguous ones on purpose)."""

    def values(numel: int, dtype: torch.dtype) -> torch.Tensor:
        return rank_input(sender, numel, dtype, name)

    if name == "scalar f64":
        return values(1, torch.float64).reshape(())
    if name == "empty i32":
        return torch.zeros((0, 5), dtype=torch.int32)
    if name == "8-d bf16":
        return values(16, torch.bfloat16).reshape(1, 2, 1, 2, 1, 2, 1, 2)
    if name == "transposed i64":
        return values(60, torch.int64).reshape(3, 4, 5).transpose(0, 2)
    if name == "strided f16":
        return values(40, torch.float16).reshape(8, 5)[::2, 1:]
    if name == "u8":
        return values(1000, torch.uint8)
    if name == "i8 column":
        return values(30, torch.int8).reshape(10, 3)[:, 1:2]
    if name == "f32 large":
        return values(300_000, torch.float32).reshape(300, 1000)
    raise KeyError(name)


CASES = ["scalar f64", "empty i32", "8-d bf16", "transposed i64", "strided f16", "u8", "i8 column", "f32 large"]


def same(got: torch.Tensor, want: torch.Tensor) -> bool:
    return got.dtype == want.dtype and got.shape == want.shape and torch.equal(got, want)


def check_unknown_shapes(comm: pycomm.Communicator) -> None:
    """Every rank sends every case to its right neighbour (blocking and async alternately) and
    receives its left neighbour's by source, then rank 0 receives them all again by ANY_SOURCE."""
    right, left = (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size
    works = [comm.isend_tensor(case_tensor(comm.rank, c), right, tag=i) for i, c in enumerate(CASES)]
    for i, c in enumerate(CASES):
        got = comm.recv_tensor(left, tag=i) if i % 2 else comm.irecv_tensor(left, tag=i).wait()
        want = case_tensor(left, c)
        assert same(got.tensor, want), f"{c} from {left}: {got.tensor} vs {want}"
        assert (got.source, got.tag) == (left, i), (c, got.source, got.tag)
        assert got.tensor.device.type == "cpu" and got.tensor.is_contiguous()
    for w in works:
        w.wait()
    ok("unknown shapes and dtypes from a known source")


# ---- any source ----------------------------------------------------------------------------------
def check_any_source(comm: pycomm.Communicator) -> None:
    """Ranks 1 and 2 both send to rank 0, which receives from ANY_SOURCE and must learn who sent what;
    messages of one sender arrive in its order."""
    tag = 100
    if comm.rank == 0:
        got = [comm.recv_tensor(pycomm.ANY_SOURCE, tag) for _ in range(4)]
        by_source: dict[int, list[torch.Tensor]] = {}
        for m in got:
            by_source.setdefault(m.source, []).append(m.tensor)
        assert sorted(by_source) == [1, 2], sorted(by_source)
        for src, tensors in by_source.items():
            assert [t.tolist() for t in tensors] == [[src, k] * (src + k) for k in range(2)], (src, tensors)
        # fixed-buffer receives from any source return (recv) or expose (irecv's Work) the sender
        buf = torch.zeros(3)
        first = comm.recv(buf, pycomm.ANY_SOURCE, tag + 1)
        assert buf.tolist() == [float(first)] * 3, (first, buf)
        w = comm.irecv(buf2 := torch.zeros(3), pycomm.ANY_SOURCE, tag + 1)
        w.wait()
        assert {first, w.source} == {1, 2} and buf2.tolist() == [float(w.source)] * 3, (first, w.source, buf2)
    else:
        for k in range(2):
            comm.send_tensor(torch.tensor([comm.rank, k] * (comm.rank + k)), 0, tag)
        comm.send(torch.full((3,), float(comm.rank)), 0, tag + 1)
    ok("any-source receive returns the right sources")


# ---- probe ----------------------------------------------------------------------------------------
def check_probe(comm: pycomm.Communicator) -> None:
    if comm.rank == 0:
        m = comm.probe(1, pycomm.ANY_TAG)  # blocks until rank 1's message is there
        assert m == pycomm.Message(1, 200, (3, 4), torch.int32), m
        assert comm.probe(1, 200, block=False) == m  # still there: a probe receives nothing
        got = comm.recv_tensor(pycomm.ANY_SOURCE, 200)
        assert same(got.tensor, torch.arange(12, dtype=torch.int32).reshape(3, 4)) and got.source == 1
        assert comm.probe(1, 200, block=False) is None  # rank 1 sent one message on tag 200
        # the classic pattern: probe a plain send's size, allocate, receive into it
        m = comm.probe(2, 201)
        assert (m.source, m.tag, m.shape, m.dtype) == (2, 201, (7,), torch.float64), m
        buf = torch.empty(m.shape, dtype=m.dtype)
        assert comm.recv(buf, m.source, m.tag) == 2 and buf.tolist() == [2.5] * 7
    elif comm.rank == 1:
        comm.send_tensor(torch.arange(12, dtype=torch.int32).reshape(3, 4), 0, 200)
    elif comm.rank == 2:
        comm.send(torch.full((7,), 2.5, dtype=torch.float64), 0, 201)
    comm.barrier()
    ok("probe")


# ---- two threads receiving from ANY_SOURCE on one tag -------------------------------------------
PER_SENDER = 25


def numel_of(sender: int, i: int) -> int:
    return 1 + zlib.crc32(f"{sender}/{i}".encode()) % 3000  # sizes differ, so a stolen payload shows


def check_threads_any_source(comm: pycomm.Communicator) -> None:
    """Two threads of rank 0 receive from ANY_SOURCE on the same tag while ranks 1 and 2 send
    messages of different sizes: every message arrives whole, once, with its true source."""
    tag = 300
    if comm.rank != 0:
        works = [
            comm.isend_tensor(torch.full((numel_of(comm.rank, i),), comm.rank * 1000 + i, dtype=torch.int64), 0, tag)
            for i in range(PER_SENDER)
        ]
        for w in works:
            w.wait()
        comm.barrier()
        ok("sent to two receiving threads")
        return
    total = (comm.size - 1) * PER_SENDER
    got: list[tuple[int, torch.Tensor]] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def receive(count: int) -> None:
        try:
            for _ in range(count):
                m = comm.recv_tensor(pycomm.ANY_SOURCE, tag)
                with lock:
                    got.append((m.source, m.tensor))
        except BaseException as e:  # noqa: BLE001 - re-raised by the main thread
            errors.append(e)

    threads = [threading.Thread(target=receive, args=(n,)) for n in (total // 2, total - total // 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    seen = set()
    for source, t in got:
        value = int(t[0])
        sender, i = divmod(value, 1000)
        assert sender == source, f"message {value} came from {sender} but was reported from {source}"
        assert t.numel() == numel_of(sender, i) and bool((t == value).all()), f"message {value} corrupted"
        seen.add(value)
    assert len(seen) == total, f"{total - len(seen)} messages lost or duplicated"
    comm.barrier()
    ok("two threads receiving from ANY_SOURCE got whole messages")


# ---- tags -------------------------------------------------------------------------------------------
def check_tags(comm: pycomm.Communicator) -> None:
    if comm.backend == "mpi":
        from mpi4py import MPI  # the library's own bound, read independently of pycomm

    top = comm.max_tag
    if comm.backend == "mpi":
        assert top == MPI.COMM_WORLD.Get_attr(MPI.TAG_UB) and top >= 32767, (top, MPI.COMM_WORLD.Get_attr(MPI.TAG_UB))
    else:
        assert top >= 32767, top
    right, left = (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size
    w = comm.isend_tensor(torch.tensor([comm.rank, top]), right, tag=top)
    got = comm.recv_tensor(left, tag=top)
    assert got.tensor.tolist() == [left, top] and got.tag == top
    w.wait()
    buf = torch.zeros(2, dtype=torch.int64)
    w = comm.isend(torch.tensor([comm.rank, 0]), right, tag=top)
    assert comm.recv(buf, left, tag=top) == left and buf.tolist() == [left, 0]
    w.wait()
    for fn in (
        lambda: comm.send(torch.zeros(1), right, tag=top + 1),
        lambda: comm.isend_tensor(torch.zeros(1), right, tag=top + 1),
        lambda: comm.recv_tensor(left, tag=top + 1),
        *([lambda: comm.probe(left, top + 1, block=False)] if comm.backend != "gloo" else []),
    ):
        expect_raises(ValueError, ("tag", str(top)), fn)
    # pycomm's own traffic uses no user tag: a user message on tag 0 waits while the ring all-reduce
    # (private communicator, its own tag 0) moves 32 MiB, and both arrive intact.
    w = comm.isend_tensor(torch.tensor([comm.rank]), right, tag=0)
    x = torch.full((8 << 20,), float(comm.rank + 1))
    comm.allreduce(x, op=pycomm.SUM)
    assert bool((x == comm.size * (comm.size + 1) / 2).all())
    assert comm.recv_tensor(left, tag=0).tensor.tolist() == [left]
    w.wait()
    ok("tags at the bound work, past it are refused")


def check_probe_refused(comm: pycomm.Communicator) -> None:
    """gloo cannot look at a message without taking it: probe is refused naming the backend."""
    expect_raises(pycomm.PycommError, ("probe", "'gloo'"), lambda: comm.probe(pycomm.ANY_SOURCE, 0))
    ok("probe refused")


# ---- bad input -----------------------------------------------------------------------------------
def check_bad_input(comm: pycomm.Communicator) -> None:
    t = torch.zeros(2)
    expect_raises(ValueError, ("dst", "-2"), lambda: comm.send_tensor(t, -2))
    expect_raises(ValueError, ("dst", "ANY_SOURCE"), lambda: comm.send_tensor(t, pycomm.ANY_SOURCE))
    expect_raises(ValueError, ("dst", "ANY_SOURCE"), lambda: comm.isend(t, pycomm.ANY_SOURCE))
    expect_raises(ValueError, ("dst", str(comm.size)), lambda: comm.send_tensor(t, comm.size))
    expect_raises(ValueError, ("src", str(comm.size)), lambda: comm.recv_tensor(comm.size))
    expect_raises(ValueError, ("tag", "-1"), lambda: comm.send_tensor(t, 0, tag=-1))
    expect_raises(TypeError, ("tensor", "list"), lambda: comm.send_tensor([1.0, 2.0], 0))
    expect_raises(TypeError, ("tensor", "ndarray"), lambda: comm.isend_tensor(t.numpy(), 0))
    expect_raises(ValueError, ("9 dimensions", "at most 8"), lambda: comm.send_tensor(torch.zeros([1] * 9), 0))
    expect_raises(TypeError, ("tensor", "bool"), lambda: comm.send_tensor(torch.zeros(2, dtype=torch.bool), 0))
    expect_raises(TypeError, ("block",), lambda: comm.probe(0, 0, block="no"))
    comm.barrier()  # nothing above reached the transport: the communicator still works
    ok("bad input")


def main() -> None:
    pycomm.init()
    comm = pycomm.world()
    assert comm.size == 3, "run with 3 ranks"
    probes = check_probe if comm.backend != "gloo" else check_probe_refused
    for check in (
        check_unknown_shapes,
        check_any_source,
        probes,
        check_threads_any_source,
        check_tags,
        check_bad_input,
    ):
        check(comm)
    comm.barrier()
    print(f"rank {comm.rank}: {len(checks)} p2p checks passed", flush=True)
    pycomm.finalize()


if __name__ == "__main__":
    main()
