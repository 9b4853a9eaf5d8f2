"""Worker (2 ranks): a plain script, as a user writes one, that fails on one rank. argv: MODE.
- raise: rank 1 raises ValueError before an all-gather that rank 0 waits in (pycomm's excepthook ends the job);
- left_in_flight: rank 1 starts an all-reduce and leaves without waiting for it while rank 0 sleeps past
  PYCOMM_TIMEOUT (the exit check ends the job when the op stalls)."""

from __future__ import annotations

import sys
import time

import torch

import pycomm


def main() -> None:
    mode = sys.argv[1]
    comm = pycomm.init()
    print(f"MARK rank {comm.rank} started", flush=True)
    if mode == "raise":
        if comm.rank == 1:
            raise ValueError("bad input on rank 1")
        comm.allgather(torch.zeros(2), torch.ones(1))
    elif mode == "left_in_flight":
        if comm.rank == 1:
            comm.allreduce(torch.ones(4), op=pycomm.SUM, async_op=True)
            return  # leaves without wait()
        time.sleep(120)
        comm.allreduce(torch.ones(4), op=pycomm.SUM)
    print(f"MARK rank {comm.rank} got past the collective", flush=True)


if __name__ == "__main__":
    main()
