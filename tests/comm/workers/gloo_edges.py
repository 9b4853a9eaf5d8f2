"""What the gloo transport does where it differs from MPI's, on 2 real ranks under torchrun: a recv
whose tensor does not fit its send raises MismatchError (gloo itself would abort the process) and the
communicator stays usable; GPU tensors are refused naming the backend; a collective one rank never
reaches raises StallError within PYCOMM_TIMEOUT naming the op, and later ops say the communicator is
unusable; a setting every rank must share, set on one rank only, refuses the new communicator on both.
Run: `torchrun --nproc-per-node 2 -m tests.comm.workers.gloo_edges` (PYCOMM_TIMEOUT small)."""

from __future__ import annotations

import os
import sys
import time

import torch

import pycomm


def expect(exc: type, fragments: tuple[str, ...], fn, *args, **kw) -> None:
    try:
        fn(*args, **kw)
    except exc as e:
        missing = [f for f in fragments if f not in str(e)]
        assert not missing, f"{exc.__name__} without {missing}: {e}"
        return
    raise AssertionError(f"expected {exc.__name__} containing {fragments}")


def main() -> int:
    comm = pycomm.init()
    assert comm.backend == "gloo", comm
    assert comm.oversubscribed is None, comm.oversubscribed  # gloo's schedules do not key on it
    peer = 1 - comm.rank
    # a recv that does not fit its send: MismatchError, tensor untouched, peers still in step
    if comm.rank == 0:
        comm.send(torch.arange(5.0), peer, tag=3)
        comm.send(torch.ones(2, dtype=torch.int64), peer, tag=4)
    else:
        small = torch.full((3,), -1.0)
        expect(
            pycomm.MismatchError,
            ("recv #", "rank 0's send of 5 x float32", "3 x float32", "gloo"),
            comm.recv,
            small,
            0,
            tag=3,
        )
        assert small.tolist() == [-1.0] * 3, small
        wrong_dtype = torch.zeros(2, dtype=torch.int32)
        expect(pycomm.MismatchError, ("2 x int64", "2 x int32"), comm.recv, wrong_dtype, 0, tag=4)
    t = torch.tensor([float(comm.rank + 1)])
    comm.allreduce(t, op=pycomm.SUM)
    assert t.item() == 3.0, t
    # isend/irecv complete by polling alone (gloo's own p2p works do not)
    rw = comm.irecv(got := torch.zeros(4), peer, tag=9)
    sw = comm.isend(torch.full((4,), float(comm.rank)), peer, tag=9)
    while not (rw.is_completed() and sw.is_completed()):
        pass
    rw.wait()
    sw.wait()
    assert got.tolist() == [float(peer)] * 4, got
    if torch.cuda.is_available():
        expect(
            pycomm.PycommError,
            ("backend 'gloo'", "CPU tensors only"),
            comm.allreduce,
            torch.ones(1, device="cuda"),
            op=pycomm.AVG,
        )
    # a setting every rank must share, set on rank 1 only: the split is refused on both ranks, then made
    if comm.rank == 1:
        os.environ["PYCOMM_QUANTIZED_SEGMENT"] = "4096"
    expect(
        pycomm.SettingError,
        (
            "PYCOMM_QUANTIZED_SEGMENT must be the same on every rank",
            "rank 0 has it unset",
            "rank 1 has PYCOMM_QUANTIZED_SEGMENT=4096",
        ),
        comm.split,
        0,
    )
    os.environ.pop("PYCOMM_QUANTIZED_SEGMENT", None)
    assert comm.split(0).size == 2
    # rank 1 never reaches this all-reduce: rank 0 stalls, and its communicator is unusable afterwards
    comm.barrier()
    if comm.rank == 0:
        expect(
            pycomm.StallError,
            ("allreduce #", "count 3", "op SUM", "rank 0 of 2", "gloo"),
            comm.allreduce,
            torch.ones(3),
            op=pycomm.SUM,
        )
        expect(pycomm.PycommError, ("unusable",), comm.barrier)
    else:
        time.sleep(pycomm._build.core().stall_timeout() + 3)  # alive (a dead peer is an error, not a stall)
    print(f"rank {comm.rank}: gloo edges ok", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
