"""The progress thread's behaviour, read from /proc on real ranks (tests/comm/test_progress_thread.py):
it is named `pycomm-progress`; idle, it sleeps (its CPU time over a second stays near zero); waiting
for a peer that is late to an async all-reduce, it stops polling after a short while instead of
holding a core, and the all-reduce still completes with the right sum once the peer comes. CPU times
are the kernel's per-thread schedstat counters (nanoseconds on a CPU). Run under mpirun with 2 ranks."""

from __future__ import annotations

import glob
import time

import torch

import pycomm

LATE_S = 1.5


def progress_threads() -> list[str]:
    """/proc paths of this process's threads named pycomm-progress."""
    out = []
    for task in glob.glob("/proc/self/task/*"):
        try:
            if open(f"{task}/comm").read().strip() == "pycomm-progress":
                out.append(task)
        except OSError:
            continue
    return out


def cpu_seconds(tasks: list[str]) -> float:
    return sum(int(open(f"{t}/schedstat").read().split()[0]) for t in tasks) / 1e9


def main() -> None:
    comm = pycomm.init()
    t = torch.ones(1024)
    comm.allreduce(t, op=pycomm.AVG, async_op=True).wait()  # through the queue: its thread is up and has run
    deadline = time.monotonic() + 10  # the thread names itself once it runs: on a loaded
    while not (threads := progress_threads()) and time.monotonic() < deadline:  # machine, maybe later
        time.sleep(0.05)
    assert len(threads) >= 1, "no thread named pycomm-progress in /proc/self/task"

    before = cpu_seconds(threads)
    time.sleep(1.0)
    idle = cpu_seconds(threads) - before
    assert idle < 0.05, f"the idle progress thread used {idle:.3f} s of CPU in 1 s"

    comm.barrier()
    x = torch.full((1 << 18,), float(comm.rank + 1))  # 1 MiB: polled by the progress thread
    before = cpu_seconds(threads)
    if comm.rank == 1:
        time.sleep(LATE_S)  # rank 0's all-reduce waits for this rank meanwhile
    work = comm.allreduce(x, op=pycomm.SUM, async_op=True)
    work.wait()
    waited = cpu_seconds(threads) - before
    assert torch.all(x == sum(range(1, comm.size + 1))), "wrong sum after a late peer"
    if comm.rank == 0:
        assert waited < 0.3 * LATE_S, f"the progress thread used {waited:.3f} s of CPU waiting {LATE_S} s for a peer"
    print(f"rank {comm.rank}: progress thread idle {idle:.4f} s, waiting {waited:.4f} s of CPU", flush=True)


if __name__ == "__main__":
    main()
