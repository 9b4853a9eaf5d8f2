"""An NCCL communicator torn down while an all-reduce waits behind a kernel of ten minutes on the caller's
stream (run in its own process: the kernel outlives the test):
  exit:     pycomm.abort() must end the process with its exit code at once, the reason on stderr;
  shutdown: comm.shutdown() must return after PYCOMM_TIMEOUT (2 s) by aborting the communicator, the stuck
            op's synchronize() raise instead of waiting, and a later op be refused."""

from __future__ import annotations

import os
import sys

import torch

import pycomm

TEN_MINUTES = 600 * 2_000_000_000  # torch.cuda._sleep cycles at about 2 GHz


def main() -> None:
    mode = sys.argv[1]
    comm = pycomm.init(backend="nccl")
    t = torch.ones(1000, device="cuda")
    torch.cuda._sleep(TEN_MINUTES)
    work = comm.allreduce(t, op=pycomm.SUM, async_op=True)
    if mode == "exit":
        pycomm.abort("deliberate abort with an op in flight", exit_code=3)
    comm.shutdown()
    try:
        work.synchronize()
    except pycomm.PycommError as e:
        print("stuck op raised:", e, flush=True)
    else:
        raise AssertionError("synchronize() of an op behind a ten-minute kernel returned after the abort")
    try:
        comm.allreduce(t, op=pycomm.AVG)
    except pycomm.PycommError as e:
        assert "shut down" in str(e), e
    else:
        raise AssertionError("an op on a shut-down communicator was accepted")
    print("shutdown: ok", flush=True)
    os._exit(0)  # the ten-minute kernel still runs: skip the interpreter's teardown


if __name__ == "__main__":
    main()
