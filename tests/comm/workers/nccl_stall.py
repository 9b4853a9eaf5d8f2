"""A provoked NCCL stall at world size 1 (run in its own process: the abort ends this CUDA context's
use for NCCL). The caller's stream is kept busy by a long sleep kernel, so the op, which must wait
for it, cannot finish within PYCOMM_TIMEOUT (2 s):
  host:     synchronize() raises StallError naming the op, its sequence number and sizes;
  watchdog: the op is only stream-waited; the watchdog aborts past the deadline, and the next
            pycomm call on the communicator raises StallError."""

from __future__ import annotations

import os
import sys
import time

import torch

import pycomm
from pycomm._build import core
from pycomm.communicator import Communicator

SLEEP_CYCLES = 20 * 2_000_000_000  # ~20 s at 2 GHz: far past the 2 s timeout


def main() -> None:
    mode = sys.argv[1]
    assert os.environ["PYCOMM_TIMEOUT"] == "2"
    torch.cuda.set_device(0)
    comm = Communicator(core().nccl_world(core().nccl_unique_id(), 0, 1, 0), "stall-test")
    t = torch.ones(1000, device="cuda")
    torch.cuda._sleep(SLEEP_CYCLES)
    if mode == "host":
        work = comm.allreduce(t, op=pycomm.SUM, async_op=True)
        try:
            work.synchronize()
        except pycomm.StallError as e:
            msg = str(e)
        else:
            raise AssertionError("synchronize() returned although the op could not complete")
    else:
        comm.allreduce(t, op=pycomm.SUM)  # stream semantics: returns at once
        time.sleep(6)
        try:
            comm.allreduce(t, op=pycomm.SUM)
        except pycomm.StallError as e:
            msg = str(e)
        else:
            raise AssertionError("the watchdog did not break the stalled communicator")
    assert "allreduce #0" in msg and "count 1000" in msg and "PYCOMM_TIMEOUT=2" in msg, msg
    print("stall:", msg, flush=True)
    os._exit(0)  # skip teardown of the aborted communicator while the sleep kernel still runs


if __name__ == "__main__":
    main()
