"""Provoked faults on real ranks. `stall`: rank 1 skips a collective, rank 0 must get StallError
within PYCOMM_TIMEOUT (never hang) and its communicator must refuse later ops. `quantized_stall`: the
same with allreduce_quantized (after one that both ranks ran, so its helper communicator exists).
`missing_rank`: on 3+ ranks the last one sleeps instead of calling an all-reduce; the others' StallError
must name it (and only it) as the rank they wait for. `mismatch`: under PYCOMM_DEBUG=1 ranks submit all-reduces of different sizes and every rank must get
MismatchError naming both ops. `abort`: rank 1 calls pycomm.abort while rank 0 waits in an
all-reduce; the job must end at once with rank 1's exit code. Prints MARK lines the test checks."""

from __future__ import annotations

import os
import sys
import time

import torch

import pycomm
from tests.comm.workers.common import stall_without_last_rank


def stall(comm: pycomm.Communicator, quantized: bool = False) -> None:
    side = comm.split(0)  # a second communicator, to release rank 1 once rank 0 has its error
    x = torch.ones(1000)
    if quantized:
        comm.allreduce_quantized(
            torch.ones(1 << 16), op=pycomm.AVG, async_op=True
        ).wait()  # both ranks: the helper communicator exists
    else:
        comm.allreduce(x, op=pycomm.SUM)  # seq 1 (seq 0 was the split): everyone takes part
    if comm.rank == 0:
        t0 = time.perf_counter()
        try:
            if quantized:
                comm.allreduce_quantized(torch.ones(1 << 16), op=pycomm.AVG, async_op=True).wait()  # rank 1 never joins
            else:
                comm.allreduce(x, op=pycomm.SUM)  # seq 2: rank 1 never joins
        except pycomm.StallError as e:
            print(f"MARK stall after {time.perf_counter() - t0:.2f} s: {e}", flush=True)
        else:
            print("MARK no stall error", flush=True)
        try:
            comm.barrier()
        except pycomm.StallError:
            print("MARK a second StallError instead of a broken-communicator error", flush=True)
        except pycomm.PycommError as e:
            print(f"MARK broken: {e}", flush=True)
        side.send(torch.ones(1), 1)
        print("MARK rank 0 done", flush=True)
    else:
        flag = torch.zeros(1)
        w = side.irecv(flag, 0)
        while not w.is_completed():  # polling never raises: rank 1 just waits for rank 0's verdict
            time.sleep(0.05)
        print("MARK rank 1 done", flush=True)
    # The stalled all-reduce can never complete: leave without MPI_Finalize rather than wait for it.
    sys.stdout.flush()
    os._exit(0)


def missing_rank(comm: pycomm.Communicator) -> None:
    side = comm.split(0)  # seq 0; releases the sleeping rank once the others have their error
    x = torch.ones(1000)
    comm.allreduce(x, op=pycomm.SUM)  # seq 1: everyone takes part
    last = comm.size - 1
    # seq 2: the last rank never calls it
    stall_without_last_rank(side, last, comm.rank, lambda: comm.allreduce(x, op=pycomm.SUM), "")
    print(f"MARK rank {comm.rank} done", flush=True)
    sys.stdout.flush()
    # The first rank to leave without MPI_Finalize makes mpirun kill the rest: leave together, once
    # every rank has printed (a sender leaving at once could kill the last rank mid-poll).
    side.barrier()
    os._exit(0)  # the stalled all-reduce can never complete


def mismatch(comm: pycomm.Communicator) -> None:
    comm.allreduce(torch.ones(4), op=pycomm.SUM)  # matching ops pass the check
    t = torch.ones(10 + 2 * comm.rank)
    try:
        comm.allreduce(t, op=pycomm.SUM)
    except pycomm.MismatchError as e:
        print(f"MARK rank {comm.rank} mismatch: {e}", flush=True)
    else:
        print(f"MARK rank {comm.rank} no mismatch error", flush=True)
    try:
        comm.allreduce(torch.ones(4), op=pycomm.SUM)
    except pycomm.PycommError as e:
        print(f"MARK rank {comm.rank} broken: {e}", flush=True)
    pycomm.finalize()  # nothing is in flight: a clean exit


def abort(comm: pycomm.Communicator) -> None:
    comm.allreduce(torch.ones(4), op=pycomm.SUM)
    if comm.rank == 1:
        print(f"MARK rank 1 aborts at {time.time():.3f}", flush=True)
        pycomm.abort("MARK rank 1: lost its data", exit_code=5)
    comm.allreduce(torch.ones(4), op=pycomm.SUM)  # rank 1 never joins: only the abort ends this
    print("MARK rank 0 was not stopped", flush=True)


if __name__ == "__main__":
    world = pycomm.init(backend="mpi")
    {
        "stall": stall,
        "quantized_stall": lambda c: stall(c, quantized=True),
        "missing_rank": missing_rank,
        "mismatch": mismatch,
        "abort": abort,
    }[sys.argv[1]](world)
