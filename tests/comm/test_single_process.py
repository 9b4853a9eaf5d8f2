"""One process, no mpirun: the local transport's ops really move data, the runtime's error paths,
and init's backend choice. Fresh interpreters where process-wide state matters."""

from __future__ import annotations

import gc
import subprocess
import sys
import threading
import time
import weakref
from typing import Callable, Optional

import pytest
import torch

import pycomm
from pycomm import backends, communicator
from pycomm._build import core
from pycomm.communicator import Communicator
from pycomm.launch_env import LaunchEnv
from tests.launch import ROOT, worker_env


def local() -> Communicator:
    return Communicator(core().local_transport(), "local")


def run_python(code: str, env: dict | None = None) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in worker_env(env).items() if not k.startswith(("OMPI_", "PMI", "SLURM_"))}
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=clean, capture_output=True, text=True, timeout=180
    )


def test_allreduce_fast_path_checks_like_the_full_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """An all-reduce of a plain host tensor, blocking or async, takes Communicator.allreduce's fast path
    (counted: it skips check_tensor); a Parameter (a Tensor subclass) takes the full one, blocking or
    async: same results, same errors."""
    c = local()
    full_checks = []
    check = communicator.check_tensor
    monkeypatch.setattr(communicator, "check_tensor", lambda *a, **k: (full_checks.append(a), check(*a, **k))[1])

    def outcome(t: torch.Tensor, op: pycomm.ReduceOp, bucket: int, how: str) -> tuple:
        if how.endswith("parameter") and t.dtype.is_floating_point:
            t = torch.nn.Parameter(t, requires_grad=False)
        try:
            work = c.allreduce(t, op=op, async_op=how.startswith("async"), bucket=bucket)
            assert (work is None) == (not how.startswith("async"))
            if work is not None:
                work.wait()
            return ("ok", t.tolist())
        except (TypeError, ValueError) as e:
            return (type(e).__name__, str(e))

    cases = [
        (pycomm.SUM, -1, lambda: torch.arange(6.0)),
        (pycomm.AVG, 3, lambda: torch.arange(6.0).view(2, 3)),
        (pycomm.AVG, -1, lambda: torch.arange(6)),  # AVG of ints
        (pycomm.SUM, -1, lambda: torch.arange(12.0)[::2]),  # non-contiguous
        (pycomm.SUM, -1, lambda: torch.zeros(0)),
        (pycomm.SUM, -2, lambda: torch.arange(6.0)),  # bucket out of range
        (pycomm.SUM, -1, lambda: torch.zeros(3, dtype=torch.bool)),
    ]  # a dtype pycomm has no code for
    kinds, checked = [], {}
    for op, bucket, make in cases:
        got = {}
        for how in ("fast", "async", "parameter", "async parameter"):
            before = len(full_checks)
            got[how] = outcome(make(), op, bucket, how)
            checked[(len(kinds), how)] = len(full_checks) > before
        assert all(g == got["fast"] for g in got.values()), (op, bucket, got)
        kinds.append(got["fast"][0])
    assert kinds == ["ok", "ok", "TypeError", "ValueError", "ok", "ValueError", "TypeError"]
    # valid plain tensors skip the full checks, blocking or async; a Parameter always takes them
    for (i, how), took_full in checked.items():
        if kinds[i] == "ok" and cases[i][2]().dtype.is_floating_point:
            assert took_full == how.endswith("parameter"), (i, how)


def test_dropped_async_works_keep_their_tensors_until_the_op_completes() -> None:
    """A Work dropped at once must not free the tensor its op writes (the communicator holds it until
    the op completes); completed ops' tensors are let go by later submits, so a loop of async ops
    holds a bounded number of them."""
    c = local()
    got = torch.zeros(4)
    c.irecv(got, 0, tag=9)  # stays in flight until the send below; its Work is dropped
    pending = weakref.ref(got)
    del got
    refs = []
    for i in range(100):
        t = torch.full((4,), float(i))
        c.allreduce(t, op=pycomm.SUM, async_op=True)  # dropped too
        refs.append(weakref.ref(t))
        del t
        assert pending() is not None, f"the pending receive's tensor was freed after {i + 1} more submits"
    c.send(torch.arange(4.0), 0, tag=9)
    deadline = time.monotonic() + 60
    while pending() is not None or any(r() is not None for r in refs):
        assert time.monotonic() < deadline, "completed ops' tensors still held after 60 s of later submits"
        c.allreduce(torch.zeros(1), op=pycomm.SUM, async_op=True)
        gc.collect()


Call = Callable[[bool], tuple[Optional[pycomm.Work], torch.Tensor]]


def _fast_path_cases(c: Communicator, name: str) -> list[tuple[str, Call]]:
    """(label, call(async_op) -> (Work or None, result tensor)); each call makes fresh tensors. The
    first case is a plain float call; "parameter" is valid but not a plain tensor; the rest are invalid
    unless "ok"-looking (see the test's expectations)."""

    def f() -> torch.Tensor:
        return torch.arange(6.0)

    def z(n: int = 6, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.zeros(n, dtype=dtype)

    def bc(make: Callable[[], torch.Tensor], root: object) -> Call:
        def call(a: bool) -> tuple[Optional[pycomm.Work], torch.Tensor]:
            t = make()
            return c.broadcast(t, root, async_op=a), t

        return call

    def two(op_name: str, out: Callable[[], torch.Tensor], t: Callable[[], torch.Tensor], *extra: object) -> Call:
        def call(a: bool) -> tuple[Optional[pycomm.Work], torch.Tensor]:
            o = out()
            return getattr(c, op_name)(o, t(), *extra, async_op=a), o

        return call

    return {
        "broadcast": [
            ("float", bc(f, 0)),
            ("root 1 of 1 rank", bc(f, 1)),
            ("root True", bc(f, True)),
            ("non-contiguous", bc(lambda: torch.arange(12.0)[::2], 0)),
            ("bool", bc(lambda: z(3, torch.bool), 0)),
            ("empty", bc(lambda: z(0), 0)),
            ("parameter", bc(lambda: torch.nn.Parameter(f(), requires_grad=False), 0)),
            ("meta", bc(lambda: torch.zeros(3, device="meta"), 0)),
        ],
        "allgather": [
            ("float", two("allgather", z, f)),
            ("out too big", two("allgather", lambda: z(7), f)),
            ("dtypes differ", two("allgather", lambda: z(6, torch.float64), f)),
            ("int", two("allgather", lambda: z(6, torch.int64), lambda: f().long())),
            ("empty", two("allgather", lambda: z(0), lambda: z(0))),
        ],
        "reduce_scatter": [
            ("sum", two("reduce_scatter", z, f)),
            ("avg", two("reduce_scatter", z, f, pycomm.AVG)),
            ("avg of ints", two("reduce_scatter", lambda: z(6, torch.int64), lambda: f().long(), pycomm.AVG)),
            ("out too small", two("reduce_scatter", lambda: z(5), f)),
            ("op not an op", two("reduce_scatter", z, f, "sum")),
        ],
    }[name]


@pytest.mark.parametrize("name", ["broadcast", "allgather", "reduce_scatter"])
def test_blocking_fast_paths_check_like_the_full_path(name: str) -> None:
    """Blocking broadcast / all-gather / reduce-scatter of plain host tensors take one call into the core
    (counted here); async_op=True takes the full checks: same results, same errors, good and bad inputs."""
    c = local()
    one_call = getattr(c, f"_{name}_wait")
    taken = []
    setattr(c, f"_{name}_wait", lambda *args: (taken.append(args), one_call(*args)))

    def outcome(call: Call, async_op: bool) -> tuple:
        try:
            work, t = call(async_op)
            if work is not None:
                work.wait()
            return ("ok", t.tolist())
        except (TypeError, ValueError) as e:
            return (type(e).__name__, str(e))

    kinds = {}
    for label, call in _fast_path_cases(c, name):
        before = len(taken)
        fast, full = outcome(call, False), outcome(call, True)
        assert fast == full, (name, label, fast, full)
        kinds[label] = (fast[0], len(taken) > before)
    # valid plain calls take the one call; a Parameter and every invalid call take the full checks
    assert all(took == (kind == "ok" and label != "parameter") for label, (kind, took) in kinds.items()), kinds
    assert {kind for kind, _ in kinds.values()} & {"TypeError", "ValueError"}, kinds
    work, t = _fast_path_cases(c, name)[0][1](False)
    assert work is None and t.tolist() == torch.arange(6.0).tolist()  # one rank: every result is its own data


def test_local_ops_move_data():
    c = local()
    assert (c.rank, c.size, c.local_rank, c.local_size, c.backend) == (0, 1, 0, 1, "local")
    assert c.oversubscribed is None  # the one-rank transport keys nothing on it
    x = torch.arange(5, dtype=torch.float16)
    c.allreduce(x, op=pycomm.AVG)
    assert x.tolist() == [0, 1, 2, 3, 4]
    out = torch.zeros(5, dtype=torch.float16)
    c.allgather(out, x)
    assert out.tolist() == x.tolist()
    rs = torch.zeros(5, dtype=torch.float16)
    c.reduce_scatter(rs, x)
    assert rs.tolist() == x.tolist()
    a2a = torch.zeros(5, dtype=torch.float16)
    c.alltoall(a2a, x)
    assert a2a.tolist() == x.tolist()
    got = torch.zeros(3, dtype=torch.int64)
    w = c.irecv(got, 0, tag=4)  # posted before the send: completes when the send arrives
    assert not w.is_completed()
    c.send(torch.tensor([7, 8, 9]), 0, tag=4)
    w.wait()
    assert got.tolist() == [7, 8, 9]
    sub = c.split(3)
    assert sub.size == 1 and c.split(-1) is None
    c.barrier()


def test_local_blocking_ops_run_on_the_callers_thread():
    """With nothing queued, a blocking op of the local transport runs on the caller's thread (the queue
    thread's hand-off cost 15 us per small op); async ops still go through the queue, in order."""
    c = local()
    pycomm.stats(reset=True)
    x = torch.arange(4.0)
    for _ in range(5):
        c.allreduce(x, op=pycomm.SUM)
    c.broadcast(x)
    works = [c.allreduce(torch.full((2,), float(i)), op=pycomm.SUM, async_op=True) for i in range(3)]
    for w in works:
        w.wait()
    s = pycomm.stats()
    assert s["allreduce"]["calls"] == 8 and s["allreduce"]["inline_calls"] == 5, s["allreduce"]
    assert s["broadcast"]["inline_calls"] == 1, s["broadcast"]
    assert x.tolist() == [0.0, 1.0, 2.0, 3.0]


@pytest.mark.parametrize(
    "call, args, error, message",
    [
        ("allreduce_wait", (0, 1, 0, 0), TypeError, r"allreduce_wait takes 5 arguments \(4 given\)"),
        ("allreduce_wait", (0, 1, 0, 0, "-1"), TypeError, "allreduce_wait: argument 4 must be an int, not str"),
        ("allreduce_wait", (8, -1, 0, 0, -1), ValueError, "allreduce: tensor has a negative element count"),
        (
            "allreduce_wait",
            (0, 1, 0, 2**40, -1),
            OverflowError,
            "allreduce_wait: argument 3 is 1099511627776; expected a C int",
        ),
        ("allreduce_wait", (-8, 1, 0, 0, -1), OverflowError, "negative int to unsigned"),
        ("allreduce_wait", (0, 1, 0, 0, -1), ValueError, "allreduce: tensor has a null data pointer"),
        ("allreduce_wait", (None, 1, 0, 9, -1), TypeError, "allreduce_wait: argument 0 must be an int, not NoneType"),
        ("broadcast_wait", (0, 1, 99, 0), ValueError, "dtype"),
        ("reduce_scatter_wait", (0, 0, 0, 0, 0, 9), ValueError, "unknown reduce op 9; expected SUM, AVG, MAX or MIN"),
        ("allgather_wait", (0, 0, 0, 0, 0, 0), TypeError, r"allgather_wait takes 5 arguments \(6 given\)"),
    ],
)
def test_blocking_calls_refuse_bad_arguments(call: str, args: tuple, error: type, message: str) -> None:
    """The core's one-call blocking collectives (csrc/bindings/blocking_calls.cc, not dispatched by
    pybind11) check their arguments and raise what every binding raises, naming what was wrong."""
    fn = core().blocking_calls(core().local_transport())[call]
    with pytest.raises(error, match=message):
        fn(*args)


def test_blocking_calls_need_a_transport() -> None:
    with pytest.raises(TypeError):
        core().blocking_calls(None)
    with pytest.raises(TypeError):
        core().blocking_calls("world")


def test_local_ops_from_several_threads_and_queued_around_inline_ones() -> None:
    """On one local communicator: a blocking recv waits in one thread while another runs blocking
    all-reduces (on the caller's thread while the queue is idle, queued behind the pending recv
    otherwise) and a third sends; async ops submitted around blocking ones keep their order."""
    c = local()
    got = torch.zeros(3)
    errors: list[BaseException] = []

    def guarded(fn: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                fn()
            except BaseException as e:  # noqa: BLE001 - reported by the assertion below
                errors.append(e)

        return run

    receiver = threading.Thread(target=guarded(lambda: c.recv(got, 0, tag=3)))
    receiver.start()
    sums = [torch.full((2,), float(i)) for i in range(50)]
    reducer = threading.Thread(target=guarded(lambda: [c.allreduce(t, op=pycomm.SUM) for t in sums]))
    reducer.start()
    reducer.join(60)
    c.send(torch.tensor([1.0, 2.0, 3.0]), 0, tag=3)
    receiver.join(60)
    assert not receiver.is_alive() and not reducer.is_alive() and not errors, errors
    assert got.tolist() == [1.0, 2.0, 3.0]
    assert all(t.tolist() == [float(i)] * 2 for i, t in enumerate(sums))
    # async receive, blocking ops, then the send it waits for: everything completes, in order
    later = torch.zeros(2)
    w = c.irecv(later, 0, tag=4)
    x = torch.arange(4.0)
    out = torch.zeros(4)
    c.allreduce(x, op=pycomm.AVG)
    c.allgather(out, x)
    c.send(torch.tensor([5.0, 6.0]), 0, tag=4)
    w.wait()
    assert later.tolist() == [5.0, 6.0] and out.tolist() == x.tolist() == [0.0, 1.0, 2.0, 3.0]


def test_blocking_calls_raise_pycomm_errors_and_keep_their_transport() -> None:
    """A refused op raises the pycomm class through the fast call; the calls keep their transport alive
    after the caller dropped every other reference."""
    t = core().local_transport()
    calls = core().blocking_calls(t)
    del t
    gc.collect()
    x = torch.arange(3.0)
    calls["allreduce_wait"](x.data_ptr(), 3, 0, int(pycomm.SUM), -1)  # the transport is still there
    assert x.tolist() == [0.0, 1.0, 2.0]
    c = local()
    c.shutdown()
    with pytest.raises(pycomm.PycommError, match="shut down") as info:
        c._allreduce_wait(x.data_ptr(), 3, 0, int(pycomm.SUM), -1)
    assert type(info.value) is pycomm.PycommError


def test_local_recv_size_mismatch_breaks_the_communicator():
    c = local()
    c.isend(torch.zeros(4), 0, tag=1)
    with pytest.raises(pycomm.PycommError, match="16 bytes, the receive buffer 8"):
        c.recv(torch.zeros(2), 0, tag=1)
    with pytest.raises(pycomm.PycommError, match="is broken"):
        c.barrier()


def test_shutdown_communicator_refuses_ops():
    c = local()
    c.shutdown()
    with pytest.raises(pycomm.PycommError, match="shut down"):
        c.allreduce(torch.ones(2), op=pycomm.AVG)


def test_errors_are_pycomm_errors():
    assert issubclass(pycomm.StallError, pycomm.PycommError)
    assert issubclass(pycomm.MismatchError, pycomm.PycommError)
    assert issubclass(pycomm.PycommError, RuntimeError)


def test_auto_backend_rule():
    single = LaunchEnv(0, 1, 0, 1, "single")
    assert backends.choose_auto(single) in ("local", "nccl")
    if pycomm.build_info()["mpi"]:
        assert backends.choose_auto(LaunchEnv(0, 2, 0, 2, "openmpi")) in ("mpi", "nccl")
    assert backends.choose_auto(LaunchEnv(0, 2, 0, 2, "torchrun")) == "gloo"  # no MPI wire-up: gloo
    with pytest.raises(ValueError, match="backend must be one of"):
        backends.get("tcp")


def test_use_before_init_and_init_single_process():
    p = run_python(
        "import os, pycomm, torch\n"
        "try:\n    pycomm.world()\nexcept pycomm.PycommError as e:\n    print('before:', e)\n"
        "c = pycomm.init()\n"
        "t = torch.ones(3); c.allreduce(t, op=pycomm.SUM)\n"
        "assert pycomm.init() is c\n"
        "print('world:', c.backend, c.size, t.tolist())\n"
        "os.environ['PYCOMM_TIMEOUT'] = 'soon'\n"  # read again for each new communicator
        "try:\n    c.split(0)\nexcept pycomm.SettingError as e:\n    print('timeout:', e)\n"
        "del os.environ['PYCOMM_TIMEOUT']\n"
        "pycomm.finalize()\n"
        "try:\n    pycomm.world()\nexcept pycomm.PycommError as e:\n    print('after:', e)\n"
    )
    assert p.returncode == 0, p.stderr
    assert "before: pycomm.world(): pycomm is not initialised; call pycomm.init() first" in p.stdout
    assert "world: local 1 [1.0, 1.0, 1.0]" in p.stdout
    assert "timeout: PYCOMM_TIMEOUT='soon' is not valid: expected a number of seconds" in p.stdout
    assert "after:" in p.stdout and "finalize() was called" in p.stdout


def test_a_stall_names_the_oldest_op_in_flight():
    """A receive that never gets its send stalls: the StallError names the oldest op still in flight
    (an earlier receive, not the one waited for) and how many are, and the communicator is broken."""
    p = run_python(
        "import pycomm, torch\n"
        "c = pycomm.init()\n"
        "first = c.irecv(torch.zeros(2), 0, tag=1)\n"
        "c.allreduce(torch.ones(2), op=pycomm.AVG)\n"  # completes in between
        "second = c.irecv(torch.zeros(3), 0, tag=2)\n"
        "try:\n    second.wait()\nexcept pycomm.StallError as e:\n    print('stall:', e)\n"
        "try:\n    c.barrier()\nexcept pycomm.PycommError as e:\n    print('after:', e)\n",
        env={"PYCOMM_TIMEOUT": "1"},
    )
    assert p.returncode == 0, p.stderr
    stall = next(line for line in p.stdout.splitlines() if line.startswith("stall:"))
    assert "recv #2" in stall and "did not complete within PYCOMM_TIMEOUT=1 s" in stall, stall
    assert "oldest op in flight: recv #0 (" in stall and "(2 in flight)" in stall, stall
    assert "after:" in p.stdout and "is broken" in p.stdout


def test_multi_rank_local_backend_is_refused():
    with pytest.raises(pycomm.PycommError, match="backend 'local' runs a single process"):
        backends.get("local").create_world(LaunchEnv(0, 2, 0, 2, "torchrun"))


@pytest.mark.skipif(not pycomm.build_info()["mpi"], reason="no MPI in this build")
def test_mpi_singleton_under_plain_python():
    p = run_python(
        "import pycomm, torch\nfrom pycomm import backends, launch_env\n"
        "c = pycomm.init('mpi')\nt = torch.ones(2); c.allreduce(t, op=pycomm.AVG)\n"
        "print(c.backend, c.size, t.tolist())\n"
        "try:\n    backends.get('mpi').create_world(launch_env.LaunchEnv(1, 2, 1, 2, 'torchrun'))\n"
        "except pycomm.PycommError as e:\n    print('mismatch:', e)\n"
    )
    assert p.returncode == 0, p.stderr
    assert "mpi 1 [1.0, 1.0]" in p.stdout
    assert "mismatch:" in p.stdout and "MPI was not started by this launcher" in p.stdout
